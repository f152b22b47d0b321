"""Process and namespace helpers: find what lives in a tray by its network namespace.

Trays are anonymous network namespaces kept alive by their processes, so "everything in
tray X" is "every process whose /proc/PID/ns/net is X's inode". That is how kill and
tear-down stay exact: nothing outside the harness's own namespaces is ever signalled.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path


def netns_inode(pid: int) -> int | None:
    """The inode of a process's network namespace, or None when it is gone."""
    try:
        return os.stat(f"/proc/{pid}/ns/net").st_ino
    except OSError:
        return None


def is_alive(pid: int) -> bool:
    """True for a running process; zombies count as dead (PID 1 here reaps lazily)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def cmdline(pid: int) -> list[str]:
    """argv of a process (empty when gone or a kernel thread)."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [a.decode(errors="replace") for a in raw.split(b"\0") if a]


def all_pids() -> list[int]:
    return [int(d) for d in os.listdir("/proc") if d.isdigit()]


def pids_in_netns(inode: int) -> list[int]:
    """Live processes in the network namespace with this inode (never our own)."""
    me = os.getpid()
    return [p for p in all_pids() if p != me and netns_inode(p) == inode and is_alive(p)]


def read_pidfile(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def kill_netns(inode: int, sig: int = signal.SIGKILL, timeout: float = 5.0) -> bool:
    """Signal every process in a namespace until none is left; True when empty."""
    deadline = time.monotonic() + timeout
    while True:
        pids = pids_in_netns(inode)
        if not pids:
            return True
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)


def wait_gone(pids: list[int], timeout: float) -> bool:
    """Poll until none of pids is alive."""
    deadline = time.monotonic() + timeout
    while any(is_alive(p) for p in pids):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True
