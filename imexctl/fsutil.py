"""Safe file handling for a root process: atomic writes, no symlink following.

imexctl runs as root in directories an attacker might try to influence, so every
write goes temp file + fsync + rename inside a directory we checked, and nothing is
ever opened or removed through a symbolic link.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator


class UnsafePathError(OSError):
    """A directory or file imexctl must not use (symlink, wrong owner, writable by others)."""


def ensure_secure_dir(path: Path, mode: int = 0o755) -> Path:
    """Create ``path`` (and parents) if missing; refuse it if others could tamper with it."""
    path = Path(path)
    path.mkdir(mode=mode, parents=True, exist_ok=True)
    check_secure_dir(path)
    return path


def check_secure_dir(path: Path) -> None:
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        raise UnsafePathError(f"{path} is a symbolic link; refusing to use it")
    if not stat.S_ISDIR(st.st_mode):
        raise UnsafePathError(f"{path} is not a directory")
    if st.st_uid != os.geteuid():
        raise UnsafePathError(
            f"{path} is owned by uid {st.st_uid}, not {os.geteuid()}; refusing to use it")
    if st.st_mode & 0o022:
        raise UnsafePathError(
            f"{path} is writable by group or others (mode {stat.S_IMODE(st.st_mode):04o}); "
            "fix with chmod go-w")


def atomic_write(path: Path, data: bytes | str, mode: int = 0o644) -> None:
    """Replace ``path`` atomically; a crash leaves the old or the new file, never half."""
    path = Path(path)
    if isinstance(data, str):
        data = data.encode()
    if path.is_symlink():
        raise UnsafePathError(f"{path} is a symbolic link; refusing to write through it")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        os.fchmod(fd, mode)
        os.write(fd, data)
        os.fsync(fd)
        os.close(fd)
        fd = -1
        os.replace(tmp, path)
        dfd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except BaseException:
        if fd >= 0:
            os.close(fd)
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def write_json(path: Path, value: Any, mode: int = 0o644) -> None:
    atomic_write(path, json.dumps(value, indent=2, sort_keys=True) + "\n", mode)


def read_json(path: Path) -> Any | None:
    """Read a JSON file without following a symlink; None when absent."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    with os.fdopen(fd, encoding="utf-8") as handle:
        return json.load(handle)


def remove_path(path: Path) -> bool:
    """Remove a file, device node, symlink (not its target) or directory tree. True if removed."""
    path = Path(path)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    if stat.S_ISDIR(st.st_mode):
        shutil.rmtree(path)  # fd-based on Linux: does not follow symlinks inside the tree
    else:
        os.unlink(path)
    return True


class LockBusy(OSError):
    """An exclusive lock was not obtained in time."""


@contextmanager
def exclusive_lock(path: Path, timeout_s: float, max_poll_s: float = 0.02) -> Iterator[None]:
    """Hold ``flock(LOCK_EX)`` on ``path`` (created 0600, never through a symlink).

    Polls with exponential back-off from 1 ms up to ``max_poll_s``, so many short
    critical sections (200 controller prologs at once) pass quickly; raises LockBusy
    naming the file after ``timeout_s``.
    """
    import fcntl

    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        deadline, delay = time.monotonic() + timeout_s, 0.001
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise LockBusy(f"{path} held by another imexctl for {timeout_s:g}s") from None
                time.sleep(delay)
                delay = min(delay * 2, max_poll_s)
        yield
    finally:
        os.close(fd)
