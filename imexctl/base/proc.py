"""Processes as Linux's /proc shows them: the few facts a daemon's identity needs.

The prolog records the daemon's pid, start time and executable; the epilog, health and
status check all three before they signal or report it. psutil reads the same files but
its import would be paid by every hook on every tray at every job start, so these are
the handful of reads it would make, with psutil's meaning: a start time is ``starttime
/ CLK_TCK + btime`` (records written by either agree), an executable is ``/proc/PID/exe``
without " (deleted)". Every function raises :class:`NoSuchProcess`
when the pid does not exist (or vanished meanwhile).
"""

from __future__ import annotations

import os

PROC = "/proc"
_CLK_TCK = os.sysconf("SC_CLK_TCK")
_boot_time: float | None = None


class NoSuchProcess(Exception):
    def __init__(self, pid: int):
        super().__init__(f"no process {pid}")
        self.pid = pid


def _read(pid: int, name: str) -> bytes:
    try:
        fd = os.open(f"{PROC}/{pid}/{name}", os.O_RDONLY | os.O_CLOEXEC)
    except (FileNotFoundError, ProcessLookupError):
        raise NoSuchProcess(pid) from None
    try:
        chunks = []
        while chunk := os.read(fd, 1 << 16):
            chunks.append(chunk)
        return b"".join(chunks)
    except ProcessLookupError:
        raise NoSuchProcess(pid) from None
    finally:
        os.close(fd)


def _stat(pid: int) -> list[bytes]:
    """``/proc/PID/stat`` after the command name (which may hold spaces and parentheses):
    item 0 is the state letter, item 19 the start time in clock ticks."""
    raw = _read(pid, "stat")
    return raw[raw.rfind(b")") + 2:].split()


def boot_time() -> float:
    """The kernel's boot time (``btime`` of /proc/stat), in seconds since the epoch."""
    global _boot_time
    if _boot_time is None:
        with open(f"{PROC}/stat", "rb") as handle:
            for line in handle:
                if line.startswith(b"btime "):
                    _boot_time = float(line.split()[1])
                    break
            else:
                raise OSError(f"{PROC}/stat has no btime line")
    return _boot_time


def create_time(pid: int) -> float:
    return int(_stat(pid)[19]) / _CLK_TCK + boot_time()


def state(pid: int) -> str:
    """The state letter: R, S, D, Z (zombie), T, ..."""
    return _stat(pid)[0].decode("ascii", "replace")


def session(pid: int) -> int:
    """The session id (item 3 after the command name): a daemon spawned in its own
    session keeps its pid as session id across ``exec``."""
    return int(_stat(pid)[3])


def parent(pid: int) -> int:
    return int(_stat(pid)[1])


def is_zombie(pid: int) -> bool:
    return state(pid) == "Z"


def exe(pid: int) -> str:
    """The executable's path; "" when it cannot be known (a zombie, a kernel thread, no
    permission)."""
    try:
        path = os.readlink(f"{PROC}/{pid}/exe")
    except PermissionError:
        return ""
    except (FileNotFoundError, ProcessLookupError):
        if not os.path.lexists(f"{PROC}/{pid}"):
            raise NoSuchProcess(pid) from None
        return ""
    path = path.split("\x00")[0]
    if path.endswith(" (deleted)") and not os.path.exists(path):
        path = path[: -len(" (deleted)")]
    return path


def cmdline(pid: int) -> list[str]:
    raw = _read(pid, "cmdline")
    return [os.fsdecode(a) for a in raw.rstrip(b"\x00").split(b"\x00")] if raw else []


def real_uid(pid: int) -> int:
    for line in _read(pid, "status").splitlines():
        if line.startswith(b"Uid:"):
            return int(line.split()[1])
    raise NoSuchProcess(pid)


def exists(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


__all__ = ["NoSuchProcess", "boot_time", "cmdline", "create_time", "exe", "exists",
           "is_zombie", "parent", "real_uid", "session", "state"]
