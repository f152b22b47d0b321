"""The reason imexctl writes on a Slurm node (a drain) or job (a refusal), defined once.

The grammar: ``imexctl: <hook>/<step>: <cause>``. ``<hook>`` is what ran (``prolog``,
``epilog``, ``health``, ...), ``<step>`` the step or check that failed (lowercase words
joined by ``-``), ``<cause>`` one line of text. A job's refusal (its AdminComment) is
``imexctl: <cause>``. Every text of ours starts with :data:`PREFIX`: that is how a drain
is told from an admin's or another tool's (``NodeRecord.ours``, ``resume_if_ours``).

Slurm keeps about :data:`MAX_LEN` characters of a node's reason, so every writer cuts
there. Every writer formats here and every reader (metrics, the expected state, cluster
status) parses here; ``tests/unit/slurm/test_reasons.py`` fails on a second definition
in ``imexctl/``. Like LBNL NHC's one helper that marks a node offline: a check or step
only says what failed, this module says how that reads in Slurm.
"""

from __future__ import annotations

import re

PREFIX = "imexctl:"          # every reason of ours starts with it
MAX_LEN = 250                # Slurm keeps a node's reason to about this many characters
_PARSE = re.escape(PREFIX) + r" ([a-z-]+)/([a-z-]+):(.*)"    # compiled by re at first use


def format(hook: str, step: str, cause: str) -> str:  # noqa: A001 - reasons.format
    """``imexctl: <hook>/<step>: <cause>``, not yet bounded (see :func:`bounded`)."""
    return f"{PREFIX} {hook}/{step}: {cause}"


def ours(text: str) -> str:
    """``imexctl: <text>``: a reason without a step (a job's refusal)."""
    return f"{PREFIX} {text}"


def hook_prefix(hook: str) -> str:
    """``imexctl: <hook>/``: what every reason of one hook starts with (health lifts only
    its own drains by it)."""
    return f"{PREFIX} {hook}/"


def bounded(text: str) -> str:
    """``text`` cut to what Slurm keeps."""
    return text[:MAX_LEN]


def one_line(text: str) -> str:
    """``text`` with its whitespace runs made one space, cut to what Slurm keeps."""
    return bounded(" ".join(text.split()))


def is_ours(reason: str | None) -> bool:
    return bool(reason) and str(reason).startswith(PREFIX)


def parse(reason: str | None) -> tuple[str, str, str] | None:
    """``(hook, step, cause)`` of ``imexctl: <hook>/<step>: <cause>``; None for any other
    text (someone else's reason, a refusal without a step)."""
    match = re.match(_PARSE, reason or "", re.DOTALL)
    if match is None:
        return None
    return match.group(1), match.group(2), match.group(3).removeprefix(" ")


__all__ = ["PREFIX", "MAX_LEN", "format", "ours", "hook_prefix", "bounded",
           "one_line", "is_ours", "parse"]
