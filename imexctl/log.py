"""Logging: structlog JSON lines to a file plus one short human line on stderr.

Every event carries ``job_id``, ``node`` and ``step``; ``timed_step`` adds
``duration_ms`` so an admin can see where a slow prolog spent its time.
slurmd keeps a hook's stderr only in its own log, so the file is the record;
stderr is for the person running imexctl by hand.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, TextIO

import structlog

LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING,
          "error": logging.ERROR}


class _Sinks:
    """Writes each event as JSON to the log file and a short line to stderr."""

    def __init__(self, file: TextIO | None, stderr: TextIO | None, stderr_level: int):
        self.file = file
        self.stderr = stderr
        self.stderr_level = stderr_level

    def __call__(self, _logger: Any, method: str, event: dict[str, Any]) -> str:
        if self.file is not None:
            try:
                self.file.write(json.dumps(event, default=str, sort_keys=True) + "\n")
                self.file.flush()
            except OSError:
                pass
        level = LEVELS.get(event.get("level", "info"), logging.INFO)
        if self.stderr is not None and level >= self.stderr_level:
            extras = " ".join(
                f"{k}={v}" for k, v in event.items()
                if k not in ("event", "level", "timestamp", "node", "job_id", "step")
            )
            where = "/".join(str(event[k]) for k in ("step",) if event.get(k))
            prefix = f"imexctl[{event.get('node') or '-'}]"
            job = f" job {event['job_id']}" if event.get("job_id") else ""
            msg = f"{prefix}{job}{' ' + where if where else ''}: {event.get('event')}"
            self.stderr.write(f"{msg}{' (' + extras + ')' if extras else ''}\n")
            self.stderr.flush()
        raise structlog.DropEvent


def setup_logging(log_file: Path | None, level: str = "info", node: str = "",
                  stderr: TextIO | None = sys.stderr, stderr_level: str = "warning") -> None:
    """Configure structlog once per process. A log file that cannot be opened is not fatal."""
    handle: TextIO | None = None
    if log_file is not None:
        try:
            log_file.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
            fd = os.open(log_file, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW
                         | os.O_CLOEXEC, 0o640)
            handle = os.fdopen(fd, "a", encoding="utf-8")
        except OSError as exc:
            if stderr is not None:
                stderr.write(f"imexctl: cannot open log file {log_file}: {exc.strerror}; "
                             "logging to stderr only\n")
            handle = None
    min_level = LEVELS.get(level, logging.INFO)
    sink = _Sinks(handle, stderr, LEVELS.get(stderr_level, logging.WARNING))
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            sink,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(min_level),
        cache_logger_on_first_use=False,
    )
    structlog.contextvars.clear_contextvars()
    structlog.contextvars.bind_contextvars(node=node, pid=os.getpid())


def bind(**values: Any) -> None:
    """Attach context (job_id, step, ...) to every later event of this process."""
    structlog.contextvars.bind_contextvars(**values)


def get_logger() -> Any:
    return structlog.get_logger("imexctl")


@contextmanager
def timed_step(name: str, timings: dict[str, float] | None = None, **extra: Any) -> Iterator[None]:
    """Run one named step: log start and end with duration_ms; record it in ``timings``."""
    log = get_logger()
    start = time.monotonic()
    with structlog.contextvars.bound_contextvars(step=name):
        log.debug("step started", **extra)
        try:
            yield
        except BaseException as exc:
            ms = round((time.monotonic() - start) * 1000, 1)
            if timings is not None:
                timings[name] = ms
            log.warning("step failed", duration_ms=ms, error=str(exc) or type(exc).__name__)
            raise
        ms = round((time.monotonic() - start) * 1000, 1)
        if timings is not None:
            timings[name] = ms
        log.info("step done", duration_ms=ms, **extra)
