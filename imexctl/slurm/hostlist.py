"""Slurm hostlist expressions, pure Python: ``tray[01-03,7],gpu5`` <-> names.

Order is Slurm's: left to right, ranges in the order written, and for several bracket
groups in one word (``a[1-2]b[3-4]``) the leftmost group varies slowest. Zero padding
is kept (the width of a range is the width of its low bound). Duplicates are kept,
as ``scontrol show hostnames`` keeps them. Anything outside Slurm's node-name charset
is refused, so an expanded name is always safe to pass on as one argv word.
"""

from __future__ import annotations

import re


TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Iterable

_NAME_CHARS = r"[A-Za-z0-9._-]+"
_RANGE = r"([0-9]+)(?:-([0-9]+))?"
MAX_HOSTS = 1_000_000  # a typo like [0-99999999] must not eat the memory of a prolog
MAX_DIGITS = 18  # longer numbers are no node index (and int() of huge ones is slow)


def _split_top(text: str, expr: str) -> list[str]:
    """Split ``text`` on commas that are not inside brackets (``expr``: for messages)."""
    words, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "[":
            if depth:
                raise ValueError(f"hostlist {expr!r}: nested '[' at position {i}")
            depth = 1
        elif ch == "]":
            if not depth:
                raise ValueError(f"hostlist {expr!r}: ']' without '[' at position {i}")
            depth = 0
        elif ch == "," and not depth:
            words.append(text[start:i])
            start = i + 1
    if depth:
        raise ValueError(f"hostlist {expr!r}: '[' is never closed")
    words.append(text[start:])
    return words


Range = tuple[int, int, int]  # lo, hi, width


def _ranges_of(expr: str, inner: str) -> list[Range]:
    if not inner:
        raise ValueError(f"hostlist {expr!r}: empty brackets '[]'")
    out: list[Range] = []
    for part in inner.split(","):
        m = re.fullmatch(_RANGE, part)
        if not m:
            raise ValueError(f"hostlist {expr!r}: bad range {part!r} in [{inner}] "
                             "(expected N or N-M with digits)")
        lo_s, hi_s = m.group(1), m.group(2)
        lo = int(lo_s)
        hi = int(hi_s) if hi_s is not None else lo
        if hi < lo:
            raise ValueError(f"hostlist {expr!r}: range {part!r} runs backwards")
        out.append((lo, hi, len(lo_s)))
    return out


def _parse_word(expr: str, word: str) -> tuple[list[tuple[str, list[Range]]], str]:
    """A word as (literal, bracket ranges) pieces plus a tail; nothing expanded yet."""
    if not word:
        raise ValueError(f"hostlist {expr!r}: empty name (stray comma?)")
    pieces: list[tuple[str, list[Range]]] = []
    pos = 0
    for m in re.finditer(r"\[([^\]]*)\]", word):
        literal = word[pos:m.start()]
        if literal and not re.fullmatch(_NAME_CHARS, literal):
            raise ValueError(f"hostlist {expr!r}: invalid characters in {literal!r}")
        pieces.append((literal, _ranges_of(expr, m.group(1))))
        pos = m.end()
    tail = word[pos:]
    if tail and not re.fullmatch(_NAME_CHARS, tail):
        raise ValueError(f"hostlist {expr!r}: invalid characters in {tail!r}")
    first = pieces[0][0] if pieces else tail
    if first and not first[0].isalnum():
        raise ValueError(f"hostlist {expr!r}: name {first!r} must start with a letter or digit")
    return pieces, tail


def _count(pieces: list[tuple[str, list[Range]]]) -> int:
    """Names a word expands to, capped just past MAX_HOSTS (never builds anything)."""
    total = 1
    for _, ranges in pieces:
        size = 0
        for lo, hi, _ in ranges:
            size = min(size + hi - lo + 1, MAX_HOSTS + 1)
        total = min(total * size, MAX_HOSTS + 1)
    return total


def _build(pieces: list[tuple[str, list[Range]]], tail: str) -> list[str]:
    results = [""]
    for literal, ranges in pieces:
        values = [f"{n:0{width}d}" for lo, hi, width in ranges for n in range(lo, hi + 1)]
        results = [r + literal + v for r in results for v in values]
    return [r + tail for r in results]


def expand(expr: str) -> list[str]:
    """Expand a Slurm hostlist expression into node names, in Slurm's order.

    ``expand("tray[01-03,7],gpu5") == ["tray01", "tray02", "tray03", "tray7", "gpu5"]``.
    An empty (or all-blank) expression gives ``[]``. Raises ValueError naming the problem.
    The whole expression is parsed and its names counted before any is built, so an
    expression that would expand past MAX_HOSTS is refused in time linear in its length.
    """
    if not isinstance(expr, str):
        raise ValueError(f"hostlist must be a string, got {type(expr).__name__}")
    expr = expr.strip()
    if not expr:
        return []
    text, expr = expr, (expr if len(expr) <= 80 else f"{expr[:60]}...({len(expr)} chars)")
    if any(ch.isspace() for ch in text):
        raise ValueError(f"hostlist {expr!r}: contains whitespace")
    long_number = re.search(r"[0-9]{%d,}" % (MAX_DIGITS + 1), text)
    if long_number:
        raise ValueError(f"hostlist {expr!r}: a number has more than {MAX_DIGITS} digits")
    words = [_parse_word(expr, word) for word in _split_top(text, expr)]
    total = 0
    for pieces, _ in words:
        total += _count(pieces)
        if total > MAX_HOSTS:
            raise ValueError(f"hostlist {expr!r}: expands to too many names "
                             f"(more than {MAX_HOSTS})")
    names: list[str] = []
    for pieces, tail in words:
        names.extend(_build(pieces, tail))
    return names


_SUFFIX = r"^(.*?)(\d+)$"


def natural_key(name: str) -> tuple[tuple[int, int | str], ...]:
    """Sort key of natural node-name order: digit runs compare as numbers (``tray2`` before
    ``tray10``), the rest as text; names equal so (``tray02``, ``tray2``) by their text."""
    parts = re.split(r"([0-9]+)", name)
    return tuple((1, int(p)) if i % 2 else (0, p) for i, p in enumerate(parts)) + ((2, name),)


def compress(names: Iterable[str]) -> str:
    """A hostlist expression for ``names`` such that ``expand(compress(n)) == list(n)``.

    Adjacent names that share a prefix go into one bracket group; runs of consecutive
    numbers of the same width become ranges (``tray01,tray02,tray03,tray7`` ->
    ``tray[01-03,7]``). Order and duplicates are preserved.
    """
    groups: list[tuple[str, list[str]]] = []  # (prefix, [digit strings]) or (name, [])
    for name in names:
        if not isinstance(name, str) or not re.fullmatch(_NAME_CHARS, name):
            raise ValueError(f"invalid node name {name!r}")
        m = re.match(_SUFFIX, name)
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
