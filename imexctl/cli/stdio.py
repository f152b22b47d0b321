"""stdout/stderr that can never change a command's outcome (audit F-21).

Both streams also escape what a terminal would act on (``base.text.printable``; a
newline stays one): a user's argv or job name printed by ``health`` or ``status`` cannot
clear the admin's screen or retitle the terminal (audit F4-8).

A hook's stderr may be a pipe whose reader has gone, or a closed descriptor. Writing to it
raises (EPIPE, EBADF) in the middle of a step, and what the interpreter cannot flush at exit
turns the exit code into 120, so Slurm would see neither the drain's exit code nor the
documented one. ``guarded()`` wraps both streams for one command: a write or flush that
fails points the stream's descriptor at /dev/null (the pending text is dropped there) and
the command goes on; on the way out both streams are flushed the same way, so the
interpreter's own flush at exit cannot fail.
"""

from __future__ import annotations

import os
import sys

from imexctl.base.text import printable

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, TextIO

_ERRORS = (OSError, ValueError)  # EPIPE/EBADF/ENOSPC; ValueError: the stream was closed


class SafeStream:
    """A text stream whose writes and flushes never raise; everything else is delegated."""

    def __init__(self, stream: TextIO):
        self._stream = stream
        self.broken = False

    def write(self, text: str) -> int:
        if not text.isprintable():      # a terminal acts on nothing users wrote (F4-8)
            text = "\n".join(map(printable, text.split("\n")))
        try:
            return self._stream.write(text)
        except _ERRORS:
            silence(self._stream)
            self.broken = True
            return len(text)

    def flush(self) -> None:
        if not flush_or_silence(self._stream):
            self.broken = True

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def flush_or_silence(stream: TextIO | None) -> bool:
    """Flush ``stream``; when that fails, send its descriptor to /dev/null. True when the
    flush went where the stream pointed."""
    if stream is None:
        return True
    try:
        stream.flush()
        return True
    except _ERRORS:
        silence(stream)
        return False


def silence(stream: TextIO) -> None:
    """Point ``stream``'s descriptor at /dev/null and drop what it still buffers there."""
    try:
        fd = stream.fileno()
        null = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(null, fd)
        finally:
            os.close(null)
        stream.flush()
    except Exception:  # noqa: BLE001 - no descriptor (captured stream) or closed: nothing to flush
        pass


class guarded:  # noqa: N801 - used as ``with guarded():``, like the function it was
    """``sys.stdout``/``sys.stderr`` as ``SafeStream``s for the block, flushed on the way out.

    A class, not ``@contextlib.contextmanager``: ``status --local`` loads no contextlib
    (tests/unit/test_lazy.py).
    """

    def __enter__(self) -> None:
        self.out, self.err = sys.stdout, sys.stderr
        # None: the descriptor was closed before Python started; print() would raise.
        out, err = self.out, self.err
        self.null: TextIO | None = None
        if out is None or err is None:
            self.null = null = open(os.devnull, "w")
            out, err = out or null, err or null
        sys.stdout = SafeStream(out)
        sys.stderr = SafeStream(err)

    def __exit__(self, *exc_info: object) -> None:
        sys.stdout, sys.stderr = self.out, self.err
        flush_or_silence(self.out)
        flush_or_silence(self.err)
        if self.null is not None:
            self.null.close()
