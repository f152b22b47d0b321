"""Logging: structlog JSON lines to a file plus one short human line on stderr.

Every event carries ``job_id``, ``node`` and ``step``; ``timed_step`` adds
``duration_ms`` so an admin can see where a slow prolog spent its time.
slurmd keeps a hook's stderr only in its own log, so the file is the record;
stderr is for the person running imexctl by hand.

Start-up cost: every hook on every tray pays for this module. ``import structlog`` runs
the package's ``__init__``, which loads every submodule, asyncio and ssl among them. We
use only structlog's processor chain (``BoundLoggerBase``) and its ``contextvars``, which
``imexctl.base.importing.structlog`` loads alone; the rest of the package is completed on
first use by anyone else.
"""

from __future__ import annotations

import json
import os
import stat
import sys
import time
from pathlib import Path

from imexctl import __version__
from imexctl.base import importing
from imexctl.base.text import printable

TYPE_CHECKING = False
if TYPE_CHECKING:
    from types import ModuleType, TracebackType
    from typing import Any, Protocol, TextIO

    class LogLine(Protocol):
        """One level of an :class:`EventLog`: an event name and its fields."""
        def __call__(self, event: str, **kw: object) -> None: ...

    class EventLog(Protocol):
        """What a part writes events through (:func:`get_logger`'s logger, or a stand-in
        bound to a job): an event name and its fields, at a level."""
        def debug(self, event: str, **kw: object) -> None: ...
        def info(self, event: str, **kw: object) -> None: ...
        def warning(self, event: str, **kw: object) -> None: ...
        def error(self, event: str, **kw: object) -> None: ...

    class Logger(EventLog, Protocol):
        """What :func:`get_logger` returns: structlog's bound logger with a level filter.
        An event's keys are its fields in the JSON line."""
        def critical(self, event: str, **kw: object) -> None: ...
        def exception(self, event: str, **kw: object) -> None: ...

LEVELS = {"debug": 10, "info": 20, "warning": 30, "error": 40, "critical": 50}
_SKIP_ON_STDERR = ("event", "level", "timestamp", "node", "job_id", "step")


def _structlog() -> ModuleType:
    """structlog's processor chain and ``contextvars`` (imexctl.base.importing.structlog)."""
    return importing.structlog()


def utc_timestamp(now: float | None = None) -> str:
    """ISO 8601 UTC with microseconds, e.g. 2026-11-23T15:30:00.123456Z (what
    ``datetime.isoformat`` gives, without importing datetime at every hook)."""
    now = time.time() if now is None else now
    whole = int(now)
    micro = min(999_999, round((now - whole) * 1_000_000))
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole)) + f".{micro:06d}Z"


SINKS = ("file", "syslog", "journal")
DEFAULT_SOCKETS = {"syslog": Path("/dev/log"), "journal": Path("/run/systemd/journal/socket")}
_SYSLOG_SEVERITY = {"debug": 7, "info": 6, "warning": 4, "error": 3, "critical": 2}
_FACILITY_DAEMON = 3


class _Datagrams:
    """syslog (RFC 3164, facility daemon, the event as JSON) or journald's native protocol
    (one ``IMEXCTL_<KEY>`` field per key, MESSAGE the human line) over a unix datagram
    socket; ``send`` is False when the socket could not take the event."""

    def __init__(self, kind: str, path: Path):
        import socket

        self.kind, self.path = kind, str(path)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)

    def send(self, method: str, event: dict[str, Any]) -> bool:
        severity = _SYSLOG_SEVERITY.get(method, 6)
        if self.kind == "syslog":
            line = json.dumps(event, default=str, sort_keys=True)
            data = f"<{_FACILITY_DAEMON * 8 + severity}>imexctl[{os.getpid()}]: {line}".encode()
        else:
            fields = {"MESSAGE": _human_line(event).rstrip("\n"), "PRIORITY": str(severity),
                      "SYSLOG_IDENTIFIER": "imexctl"}
            for key, value in event.items():
                name = "IMEXCTL_" + "".join(c if c.isalnum() else "_" for c in key.upper())
                fields[name[:64]] = value if isinstance(value, str) else json.dumps(value, default=str)
            data = b"".join(_journal_field(k, v) for k, v in fields.items())
        try:
            self.sock.sendto(data, self.path)
            return True
        except OSError:
            return False


def _journal_field(name: str, value: str) -> bytes:
    """One field of journald's native protocol: ``NAME=value\\n``, or for a value with a
    newline ``NAME\\n`` + its length (64-bit little endian) + value + ``\\n``."""
    raw = value.encode(errors="replace")
    if b"\n" not in raw:
        return name.encode() + b"=" + raw + b"\n"
    return name.encode() + b"\n" + len(raw).to_bytes(8, "little") + raw + b"\n"


class _Sinks:
    """Writes each event as JSON to the log file (or the syslog/journal socket) and a
    short line to stderr. Any may fail (disk full, stderr a pipe nobody reads): logging
    never replaces the real outcome."""

    def __init__(self, file: TextIO | None, stderr: TextIO | None, stderr_level: int,
                 drop: type[Exception], socket: _Datagrams | None = None):
        self.file = file
        self.stderr = stderr
        self.stderr_level = stderr_level
        self.drop = drop
        self.socket = socket

    def __call__(self, _logger: object, method: str, event: dict[str, Any]) -> str:
        event["level"] = method
        event["timestamp"] = utc_timestamp()
        sent = self.socket is not None and self.socket.send(method, event)
        if self.file is not None and not sent:
            try:
                self.file.write(json.dumps(event, default=str, sort_keys=True) + "\n")
                self.file.flush()
            except (OSError, ValueError):
                pass
        if self.stderr is not None and LEVELS.get(method, 20) >= self.stderr_level:
            try:
                self.stderr.write(_human_line(event))
                self.stderr.flush()
            except (OSError, ValueError):  # EPIPE, EBADF, a closed stream
                pass
        raise self.drop


def _human_line(event: dict[str, Any]) -> str:
    """One line for stderr and the journal's MESSAGE: what users wrote (a process's argv,
    a job's name) is escaped there (``base.text.printable``); the JSON sinks escape it
    themselves."""
    extras = " ".join(f"{k}={v}" for k, v in event.items() if k not in _SKIP_ON_STDERR)
    where = f" {event['step']}" if event.get("step") else ""
    job = f" job {event['job_id']}" if event.get("job_id") else ""
    msg = f"imexctl[{event.get('node') or '-'}]{job}{where}: {event.get('event')}"
    return printable(f"{msg}{' (' + extras + ')' if extras else ''}") + "\n"


class _State:
    processors: list[Any] = []
    min_level: int = LEVELS["info"]
    pending: tuple | None = None     # setup_logging(..., defer=True): done at first use


def _logger_class() -> type:
    if TYPE_CHECKING:
        from structlog._base import BoundLoggerBase
    else:
        BoundLoggerBase = _structlog()._base.BoundLoggerBase

    class Logger(BoundLoggerBase):
        """structlog's bound logger with a level filter and the usual level methods."""

        def _at(self, method: str, event: str, kw: dict[str, object]) -> None:
            if LEVELS[method] >= _State.min_level:
                self._proxy_to_logger(method, event, **kw)

        def debug(self, event: str, **kw: object) -> None:
            self._at("debug", event, kw)

        def info(self, event: str, **kw: object) -> None:
            self._at("info", event, kw)

        def warning(self, event: str, **kw: object) -> None:
            self._at("warning", event, kw)

        def error(self, event: str, **kw: object) -> None:
            self._at("error", event, kw)

        def critical(self, event: str, **kw: object) -> None:
            self._at("critical", event, kw)

        def exception(self, event: str, **kw: object) -> None:
            """``error`` with the traceback of the exception being handled."""
            import traceback
            self._at("error", event, {**kw, "exception": traceback.format_exc()})

        warn = warning
    return Logger


_LOGGER: list[type] = []


def open_log_file(log_file: Path, max_bytes: int = 0) -> TextIO:
    """Open the log for appending, safely in a directory others may reach (audit F-17):
    the directory must be ours (or root's), not a symlink and not writable by others;
    the file is opened without following a symlink and without blocking on a FIFO, and
    anything but a regular file is refused. A file of ``max_bytes`` or more is first
    renamed to ``<name>.1`` (one old generation kept), so churn never fills the disk."""
    from imexctl.base.fsutil import UnsafePathError

    parent = log_file.parent
    parent.mkdir(mode=0o755, parents=True, exist_ok=True)
    st = os.lstat(parent)
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        raise UnsafePathError(f"{parent} is not a directory (symbolic link?)")
    if st.st_uid not in (os.geteuid(), 0) or st.st_mode & 0o022:
        raise UnsafePathError(f"{parent} is owned by uid {st.st_uid} with mode "
                              f"{stat.S_IMODE(st.st_mode):04o}: others could plant files there")
    fd = os.open(log_file, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW
                 | os.O_NONBLOCK | os.O_CLOEXEC, 0o640)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UnsafePathError(f"{log_file} is not a regular file")
        rotated = bool(max_bytes) and st.st_size >= max_bytes and _rotate(fd, log_file, max_bytes)
        if not rotated:
            os.set_blocking(fd, True)
            return os.fdopen(fd, "a", encoding="utf-8")
    except BaseException:
        os.close(fd)
        raise
    os.close(fd)
    return open_log_file(log_file, 0)


def _rotate(fd: int, log_file: Path, max_bytes: int) -> bool:
    """Rename the full log to ``<name>.1`` (replacing the older generation). Hooks on one
    tray run concurrently: the rename happens under an exclusive lock on the open file and
    only if the path still names that same, still full file, so two hooks never rotate
    twice and lose a generation. Returns whether the path was renamed (by us)."""
    import fcntl

    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        try:
            now = os.lstat(log_file)
        except FileNotFoundError:
            return True  # another hook rotated it already: reopen creates a fresh file
        mine = os.fstat(fd)
        if (now.st_ino, now.st_dev) != (mine.st_ino, mine.st_dev):
            return True
        if mine.st_size < max_bytes:
            return False
        try:
            os.replace(log_file, log_file.with_name(log_file.name + ".1"))
        except OSError:  # e.g. <log>.1 is a directory: keep logging here, unrotated
            return False
        return True
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)


def setup_logging(log_file: Path | None, level: str = "info", node: str = "",
                  stderr: TextIO | None = sys.stderr, stderr_level: str = "warning",
                  max_bytes: int = 0, defer: bool = False,
                  fallback: Path | None = None, sink: str = "file",
                  socket_path: Path | None = None) -> None:
    """Configure logging once per process. A log file that cannot be used is not fatal:
    ``fallback`` is tried next (the controller hooks run as SlurmUser, who may not open
    root's log), then stderr alone. Every line carries imexctl's version. ``sink``
    "syslog" or "journal" sends the events to that socket (``socket_path``, else the
    usual one); the file still takes any line the socket could not.

    ``defer``: only when something logs (the first ``get_logger`` or ``bind``), for a
    command that usually logs nothing (``status``): structlog and the log file then cost
    it nothing."""
    _State.pending = None
    if defer:
        _State.pending = (log_file, level, node, stderr, stderr_level, max_bytes, False,
                          fallback, sink, socket_path)
        return
    handle: TextIO | None = None
    tried: list[str] = []
    for path in (log_file, fallback):
        if path is None or handle is not None:
            continue
        try:
            handle = open_log_file(path, max_bytes)
        except OSError as exc:
            tried.append(f"{path}: {exc.strerror or exc}")
    if tried and stderr is not None:
        try:
            stderr.write(f"imexctl: cannot open log file {'; '.join(tried)}; "
                         + ("logging to stderr only\n" if handle is None
                            else f"logging to {fallback}\n"))
        except (OSError, ValueError):
            pass
    sl = _structlog()
    _State.min_level = LEVELS.get(level, LEVELS["info"])
    _State.processors = [sl.contextvars.merge_contextvars,
                         _Sinks(handle, stderr, LEVELS.get(stderr_level, LEVELS["warning"]),
                                sl.exceptions.DropEvent, _datagrams(sink, socket_path))]
    sl.contextvars.clear_contextvars()
    sl.contextvars.bind_contextvars(node=node, pid=os.getpid(), version=__version__)


def _datagrams(sink: str, path: Path | None) -> _Datagrams | None:
    if sink not in ("syslog", "journal"):
        return None
    try:
        return _Datagrams(sink, path or DEFAULT_SOCKETS[sink])
    except OSError:
        return None     # no socket: the file takes every line


def configured() -> bool:
    """Whether ``setup_logging`` ran (or is pending): events reach the log, not only stderr."""
    return bool(_State.processors) or _State.pending is not None


def _set_up_now() -> None:
    if _State.pending is not None:
        setup_logging(*_State.pending)


def bind(**values: object) -> None:
    """Attach context (job_id, step, ...) to every later event of this process."""
    _set_up_now()
    _structlog().contextvars.bind_contextvars(**values)


def get_logger() -> Logger:
    """A bound logger; before ``setup_logging`` warnings and errors go to stderr only."""
    _set_up_now()
    if not _State.processors:
        setup_logging(None)
    if not _LOGGER:
        _LOGGER.append(_logger_class())
    return _LOGGER[0](None, _State.processors, {})


class timed_step:  # noqa: N801 - a context manager without contextlib (see stdio.guarded)
    """Run one named step: log start and end with duration_ms; record it in ``timings``."""

    def __init__(self, name: str, timings: dict[str, float] | None = None, **extra: object):
        self.name, self.timings, self.extra = name, timings, extra

    def __enter__(self) -> None:
        self.log = get_logger()
        self.bound = _structlog().contextvars.bound_contextvars(step=self.name)
        self.bound.__enter__()
        try:
            self.log.debug("step started", **self.extra)
        except BaseException as exc:   # the step never runs: unbind it as ``with`` would
            self.bound.__exit__(type(exc), exc, exc.__traceback__)
            raise
        self.start = time.monotonic()

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        ms = round((time.monotonic() - self.start) * 1000, 1)
        if self.timings is not None:
            self.timings[self.name] = ms
        try:
            if kind is None:
                self.log.info("step done", duration_ms=ms, **self.extra)
            else:
                self.log.warning("step failed", duration_ms=ms,
                                 error=str(exc) or kind.__name__)
        finally:
            self.bound.__exit__(kind, exc, tb)
