"""Text that others wrote (a process's argv, a job's name or paths) on its way to a
terminal, a log line or a Slurm reason: the one escaping rule (audit F4-8)."""

from __future__ import annotations


def printable(text: str) -> str:
    """``text`` with nothing a terminal or a log reader would act on: whitespace other
    than a space (newline, tab, line separators) becomes a space, and every other
    character that is not printable (``str.isprintable``: ESC, BEL and the other control
    characters, bidi overrides and other format characters) its escape, ``\\x1b`` or
    ``\\u202e``. Printable text comes back unchanged (one C-speed check)."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else " " if ch.isspace() else _escape(ch)
                   for ch in text)


def _escape(ch: str) -> str:
    code = ord(ch)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"
