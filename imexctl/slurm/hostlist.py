"""Slurm hostlist expressions, pure Python: ``tray[01-03,7],gpu5`` <-> names.

Order is Slurm's: left to right, ranges in the order written, and for several bracket
groups in one word (``a[1-2]b[3-4]``) the leftmost group varies slowest. Zero padding
is kept (the width of a range is the width of its low bound). Duplicates are kept,
as ``scontrol show hostnames`` keeps them. Anything outside Slurm's node-name charset
is refused, so an expanded name is always safe to pass on as one argv word.
"""

from __future__ import annotations

import re
from typing import Iterable

_NAME_CHARS = re.compile(r"[A-Za-z0-9._-]+")
_RANGE = re.compile(r"(\d+)(?:-(\d+))?")
MAX_HOSTS = 1_000_000  # a typo like [0-99999999] must not eat the memory of a prolog


def _split_top(expr: str) -> list[str]:
    """Split on commas that are not inside brackets."""
    words, depth, start = [], 0, 0
    for i, ch in enumerate(expr):
        if ch == "[":
            if depth:
                raise ValueError(f"hostlist {expr!r}: nested '[' at position {i}")
            depth = 1
        elif ch == "]":
            if not depth:
                raise ValueError(f"hostlist {expr!r}: ']' without '[' at position {i}")
            depth = 0
        elif ch == "," and not depth:
            words.append(expr[start:i])
            start = i + 1
    if depth:
        raise ValueError(f"hostlist {expr!r}: '[' is never closed")
    words.append(expr[start:])
    return words


def _range_values(expr: str, inner: str) -> list[str]:
    if not inner:
        raise ValueError(f"hostlist {expr!r}: empty brackets '[]'")
    out: list[str] = []
    for part in inner.split(","):
        m = _RANGE.fullmatch(part)
        if not m:
            raise ValueError(f"hostlist {expr!r}: bad range {part!r} in [{inner}] "
                             "(expected N or N-M with digits)")
        lo_s, hi_s = m.group(1), m.group(2)
        lo = int(lo_s)
        hi = int(hi_s) if hi_s is not None else lo
        if hi < lo:
            raise ValueError(f"hostlist {expr!r}: range {part!r} runs backwards")
        if hi - lo + 1 > MAX_HOSTS:
            raise ValueError(f"hostlist {expr!r}: range {part!r} is too large")
        width = len(lo_s)
        out.extend(f"{n:0{width}d}" for n in range(lo, hi + 1))
    return out


def _expand_word(expr: str, word: str) -> list[str]:
    if not word:
        raise ValueError(f"hostlist {expr!r}: empty name (stray comma?)")
    # pieces: literal text and bracket groups, alternating
    results = [""]
    pos = 0
    for m in re.finditer(r"\[([^\]]*)\]", word):
        literal = word[pos:m.start()]
        if literal and not _NAME_CHARS.fullmatch(literal):
            raise ValueError(f"hostlist {expr!r}: invalid characters in {literal!r}")
        values = _range_values(expr, m.group(1))
        if len(results) * len(values) > MAX_HOSTS:
            raise ValueError(f"hostlist {expr!r}: expands to too many names")
        results = [r + literal + v for r in results for v in values]
        pos = m.end()
    tail = word[pos:]
    if tail and not _NAME_CHARS.fullmatch(tail):
        raise ValueError(f"hostlist {expr!r}: invalid characters in {tail!r}")
    results = [r + tail for r in results]
    for name in results[:1]:
        if not name[0].isalnum():
            raise ValueError(f"hostlist {expr!r}: name {name!r} must start with a letter or digit")
    return results


def expand(expr: str) -> list[str]:
    """Expand a Slurm hostlist expression into node names, in Slurm's order.

    ``expand("tray[01-03,7],gpu5") == ["tray01", "tray02", "tray03", "tray7", "gpu5"]``.
    An empty (or all-blank) expression gives ``[]``. Raises ValueError naming the problem.
    """
    if not isinstance(expr, str):
        raise ValueError(f"hostlist must be a string, got {type(expr).__name__}")
    expr = expr.strip()
    if not expr:
        return []
    if any(ch.isspace() for ch in expr):
        raise ValueError(f"hostlist {expr!r}: contains whitespace")
    names: list[str] = []
    for word in _split_top(expr):
        names.extend(_expand_word(expr, word))
        if len(names) > MAX_HOSTS:
            raise ValueError(f"hostlist {expr!r}: expands to too many names")
    return names


_SUFFIX = re.compile(r"^(.*?)(\d+)$")


def compress(names: Iterable[str]) -> str:
    """A hostlist expression for ``names`` such that ``expand(compress(n)) == list(n)``.

    Adjacent names that share a prefix go into one bracket group; runs of consecutive
    numbers of the same width become ranges (``tray01,tray02,tray03,tray7`` ->
    ``tray[01-03,7]``). Order and duplicates are preserved.
    """
    groups: list[tuple[str, list[str]]] = []  # (prefix, [digit strings]) or (name, [])
    for name in names:
        if not isinstance(name, str) or not _NAME_CHARS.fullmatch(name):
            raise ValueError(f"invalid node name {name!r}")
        m = _SUFFIX.match(name)
        if not m or not m.group(1):
            groups.append((name, []))
            continue
        prefix, digits = m.group(1), m.group(2)
        if groups and groups[-1][1] and groups[-1][0] == prefix:
            groups[-1][1].append(digits)
        else:
            groups.append((prefix, [digits]))
    words = []
    for prefix, nums in groups:
        if not nums:
            words.append(prefix)
        elif len(nums) == 1:
            words.append(prefix + nums[0])
        else:
            words.append(f"{prefix}[{_ranges(nums)}]")
    return ",".join(words)


def _ranges(nums: list[str]) -> str:
    parts: list[list[str]] = []  # [lo, hi]
    for s in nums:
        if parts:
            lo, hi = parts[-1]
            nxt = int(hi) + 1
            if int(s) == nxt and f"{nxt:0{len(lo)}d}" == s:
                parts[-1][1] = s
                continue
        parts.append([s, s])
    return ",".join(lo if lo == hi else f"{lo}-{hi}" for lo, hi in parts)


__all__ = ["expand", "compress"]
