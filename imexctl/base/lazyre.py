"""Regular expressions compiled on first use.

Every hook on every tray imports the modules that define imexctl's patterns, and a
module-level ``re.compile`` is paid by every process that imports the module, used or
not: 2-4.5 ms per hook on the reference machine (bench/startup.py), most of it for
patterns that hook never applies. :func:`lazy` returns a stand-in with the compiled
pattern's methods and attributes that compiles on its first use; errors in the pattern
itself are caught by the tests that import every module and use every pattern.
"""

from __future__ import annotations

import re

__all__ = ["LazyPattern", "lazy"]


class LazyPattern:
    """A ``re.Pattern`` compiled when one of its methods or attributes is first used.
    Pass :meth:`compiled` where a real ``re.Pattern`` is required (``re.sub(pat, ...)``)."""

    __slots__ = ("_source", "_flags", "_compiled")

    def __init__(self, source: str, flags: int = 0):
        self._source, self._flags = source, flags
        self._compiled: re.Pattern[str] | None = None

    def compiled(self) -> re.Pattern[str]:
        got = self._compiled
        if got is None:
            got = self._compiled = re.compile(self._source, self._flags)
        return got

    def __getattr__(self, name: str):  # match, fullmatch, search, sub, pattern, groups...
        return getattr(self.compiled(), name)

    def __repr__(self) -> str:
        return f"lazy({self._source!r})"


def lazy(source: str, flags: int = 0) -> LazyPattern:
    """``re.compile(source, flags)``, done when the pattern is first used."""
    return LazyPattern(source, flags)
