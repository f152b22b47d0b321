"""Log file in the real daemon's line format.

    IMEX Log initializing at: 3/25/2025 10:41:54.950
    [Mar 25 2025 10:41:54] [INFO] [tid 38] IMEX version 570.00 is running ...

LOG_LEVEL: 0 off, 1 CRITICAL, 2 ERROR, 3 WARNING, 4 INFO (5 = DEBUG for the sim).
An empty or unopenable LOG_FILE_NAME logs to stderr, as the real daemon does.
The simulated daemon is one thread: the ``tid`` shown is its pid.
"""

from __future__ import annotations

import os
import sys
import time

LEVELS = {"CRITICAL": 1, "ERROR": 2, "WARNING": 3, "INFO": 4, "DEBUG": 5}


def stamp(t: float | None = None) -> str:
    """``M/D/YYYY HH:MM:SS.mmm`` (the ctl's timestamp format too)."""
    t = time.time() if t is None else t
    lt = time.localtime(t)
    ms = int((t % 1) * 1000)
    return (f"{lt.tm_mon}/{lt.tm_mday}/{lt.tm_year} "
            f"{lt.tm_hour:02d}:{lt.tm_min:02d}:{lt.tm_sec:02d}.{ms:03d}")


class ImexLog:
    def __init__(self, path: str = "", level: int = 4, append: bool = True):
        self.level = level
        self.stream = sys.stderr
        self.path = path
        warn = None
        if path and level > 0:
            try:
                self.stream = open(path, "a" if append else "w", buffering=1,
                                   encoding="utf-8")
            except OSError as exc:
                warn = f"failed to open IMEX log file {path}: {exc.strerror}"
        if level > 0:
            self._write(f"IMEX Log initializing at: {stamp()}\n")
        if warn:
            self.warning(warn)
            self.info("using stderr for IMEX logging")

    def _write(self, text: str) -> None:
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):
            pass

    def log(self, level: str, msg: str) -> None:
        if LEVELS[level] > self.level:
            return
        head = time.strftime("[%b %d %Y %H:%M:%S]")
        self._write(f"{head} [{level}] [tid {os.getpid()}] {msg}\n")

    def critical(self, msg: str) -> None:
        self.log("CRITICAL", msg)

    def error(self, msg: str) -> None:
        self.log("ERROR", msg)

    def warning(self, msg: str) -> None:
        self.log("WARNING", msg)

    def info(self, msg: str) -> None:
        self.log("INFO", msg)

    def debug(self, msg: str) -> None:
        self.log("DEBUG", msg)

    @property
    def to_stderr(self) -> bool:
        return self.stream is sys.stderr

