"""IMEX channel devices: the job's processes, and only theirs, can open its channel.

A channel is a char device ``channelN`` with the dynamic major of
``nvidia-caps-imex-channels`` and minor N; the driver's open() checks nothing, so the
file mode is the whole access control. The driver registers only ``ImexChannelCount``
minors (``/proc/driver/nvidia/params``), so a node at or above that count cannot be
opened. Channel 0 is never handed out: a driver loaded with ``NVreg_CreateImexChannel0=1``
creates it world-usable, and imexctl leaves it (and reports it) unless the site asks for
its removal. A job's device is created under a temporary name in a checked root-only
directory, given its owner and an owner-only mode, checked, and only then renamed into
place, so no user ever sees it with looser permissions.

Unlinking a node does not revoke descriptors already open: channel isolation between
jobs that reuse a number relies on Slurm killing every process of the earlier job.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

from imexctl.base.fsutil import check_secure_dir, ensure_secure_dir, read_bytes
from imexctl.rules.groups import CHANNEL_COUNT, ChannelError
from imexctl.base.dataclass import dataclass

DEVICE_NAME = "nvidia-caps-imex-channels"
CHANNEL_NAME = r"channel([1-9][0-9]{0,6})"  # a job's: never 0 (matched as ASCII)
MAX_MAJOR = (1 << 12) - 1  # Linux dev_t: 12-bit major
CHANNEL0_WARNING = "channel0 is world-usable: jobs are not isolated"


@dataclass(frozen=True)
class DriverParams:
    """What the loaded driver says about channels (``/proc/driver/nvidia/params``)."""
    channel_count: int = CHANNEL_COUNT
    create_channel0: bool = False
    source: str = "driver default"  # the file read, or why the defaults are used


READ_LIMIT = 1 << 20


def _read_small(path: Path) -> bytes | None:
    """A kernel text file's bytes (None when absent), opened so that a FIFO, device or
    symlink planted in its place is refused instead of blocking the hook."""
    try:
        return read_bytes(path, READ_LIMIT)
    except (OSError, ValueError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        raise ChannelError(f"cannot read {path}: {why}") from None


def read_driver_params(path: Path) -> DriverParams:
    """ImexChannelCount and CreateImexChannel0. A missing file (no NVIDIA driver, as on
    simulated trays) gives the driver's defaults; an unreadable or garbled one is an error."""
    data = _read_small(path)
    if data is None:
        return DriverParams(source=f"{path} absent: driver defaults")
    try:
        text = data.decode("ascii")
    except UnicodeDecodeError:
        raise ChannelError(f"{path} is not ASCII text") from None
    values: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            values[key.strip()] = value.strip()
    count_text = values.get("ImexChannelCount")
    if count_text is None:  # a driver older than IMEX channels
        return DriverParams(source=f"{path} has no ImexChannelCount: driver defaults")
    if not re.fullmatch(r"[0-9]{1,7}", count_text, re.ASCII):
        raise ChannelError(f"{path}: ImexChannelCount {count_text!r} is not a number")
    return DriverParams(channel_count=int(count_text),
                        create_channel0=values.get("CreateImexChannel0", "0") not in ("0", ""),
                        source=str(path))


def read_major(proc_devices: Path) -> int:
    """Major of nvidia-caps-imex-channels from the 'Character devices:' part of /proc/devices."""
    data = _read_small(proc_devices)
    if data is None:
        raise ChannelError(f"cannot read {proc_devices}: No such file or directory")
    try:
        text = data.decode("ascii")
    except UnicodeDecodeError:
        raise ChannelError(f"{proc_devices} is not ASCII text") from None
    in_chars = False
    for line in text.splitlines():
        if line.strip().endswith("devices:"):
            in_chars = line.strip() == "Character devices:"
            continue
        match = re.fullmatch(r"\s*([0-9]{1,7})\s+(\S+)\s*", line, re.ASCII)
        if in_chars and match and match.group(2) == DEVICE_NAME:
            major = int(match.group(1))
            if not 0 < major <= MAX_MAJOR:
                raise ChannelError(f"{proc_devices}: major {major} of {DEVICE_NAME} is out "
                                   f"of range 1..{MAX_MAJOR}")
            return major
    raise ChannelError(f"{DEVICE_NAME} not registered in {proc_devices} "
                       "(is the NVIDIA driver loaded with NVreg_ImexChannelCount > 0?)")


def channel_path(channel_dir: Path, number: int) -> Path:
    return channel_dir / f"channel{number}"


def check_mode(mode: int) -> None:
    """Owner-only and usable by the owner: the group of a channel is never trusted (a
    job's primary group is commonly shared by every user)."""
    if mode & 0o077 or mode & 0o600 != 0o600 or mode & ~0o777:
        raise ChannelError(f"channel mode {mode:04o} is not owner-only read-write; use 0600")


def create_channel(channel_dir: Path, number: int, major: int, uid: int, mode: int = 0o600,
                   *, count: int = CHANNEL_COUNT) -> Path:
    """Create channelN for one job: owner ``uid``, group root, owner-only ``mode``.

    Idempotent for a re-run prolog of the same job; a node of another owner is an error;
    a node of this owner with another group, mode or device is made again.
    """
    if not 0 < number < count:
        raise ChannelError(f"channel number {number} out of range 1..{count - 1} "
                           f"(ImexChannelCount {count})")
    if not 0 < major <= MAX_MAJOR:
        raise ChannelError(f"device major {major} out of range 1..{MAX_MAJOR}")
    check_mode(mode)
    ensure_secure_dir(channel_dir)
    final = channel_path(channel_dir, number)
    rdev = os.makedev(major, number)
    try:
        st = os.lstat(final)
    except FileNotFoundError:
        st = None
    if st is not None:
        if stat.S_ISCHR(st.st_mode) and st.st_uid == uid:
            if (st.st_rdev == rdev and st.st_gid == 0
                    and stat.S_IMODE(st.st_mode) == mode):
                return final  # a re-run prolog of the same job
            os.unlink(final)  # ours, but not as we make it: never keep a looser node
        else:
            raise ChannelError(f"{final} already exists (owner uid {st.st_uid}, "
                               f"mode {stat.S_IMODE(st.st_mode):04o}); another job holds "
                               f"channel {number}")
    tmp = channel_dir / f".channel{number}.{os.urandom(4).hex()}"
    os.mknod(tmp, stat.S_IFCHR | 0o600, rdev)
    try:
        os.chown(tmp, uid, 0, follow_symlinks=False)
        os.chmod(tmp, mode)
        check = os.lstat(tmp)
        if (not stat.S_ISCHR(check.st_mode) or check.st_rdev != rdev or check.st_uid != uid
                or check.st_gid != 0 or stat.S_IMODE(check.st_mode) != mode):
            raise ChannelError(f"{tmp}: device node did not come out as created")
        os.rename(tmp, final)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return final


def tighten_channel(channel_dir: Path, number: int, uid: int, mode: int = 0o600) -> str | None:
    """Put a job's channel back to owner-only, group root, when its owner widened it (audit
    S3-1: the owner may ``chmod 0666`` or ``chgrp`` its own node, and the mode is the
    channel's whole access control). Returns what was found and restored, or None when the
    node is as made, absent, or not the job's (another uid's node is left to the sweeps)."""
    found = widened_channel(channel_dir, number, uid, mode)
    if found is None:
        return None
    path = channel_path(channel_dir, number)
    os.chown(path, uid, 0, follow_symlinks=False)
    os.chmod(path, mode)
    return f"{found}: restored to {mode:04o} group 0"


def widened_channel(channel_dir: Path, number: int, uid: int, mode: int = 0o600) -> str | None:
    """What :func:`tighten_channel` would restore (``channel9 of uid 1000 was mode 0666
    group 0``), or None; looks only."""
    check_mode(mode)
    check_secure_dir(channel_dir)   # only root can replace entries: no link can appear
    try:
        st = os.lstat(channel_path(channel_dir, number))
    except FileNotFoundError:
        return None
    if not stat.S_ISCHR(st.st_mode) or st.st_uid != uid:
        return None
    was, gid = stat.S_IMODE(st.st_mode), st.st_gid
    if not (was & 0o077 or was & ~0o777 or gid != 0):
        return None
    return f"channel{number} of uid {uid} was mode {was:04o} group {gid}"


def _names(channel_dir: Path) -> list[str]:
    """Entries of channel_dir after checking it (F-16: never list through a symlinked,
    foreign or writable directory); a missing directory has none."""
    try:
        check_secure_dir(channel_dir)
    except FileNotFoundError:
        return []
    try:
        return os.listdir(channel_dir)
    except FileNotFoundError:
        return []


def list_channels(channel_dir: Path) -> dict[int, os.stat_result]:
    """Job channel nodes present, keyed by number. channel0 is the driver's, never a job's,
    so it is not listed (see channel0_warning). Only canonical names (``channel7``, not
    ``channel007`` or ``channel7\\n``) count, so the number names the very entry listed."""
    found: dict[int, os.stat_result] = {}
    for name in _names(channel_dir):
        match = re.fullmatch(CHANNEL_NAME, name, re.ASCII)
        if match:
            try:
                found[int(match.group(1))] = os.lstat(channel_dir / name)
            except FileNotFoundError:
                continue
    return found


def remove_channels(channel_dir: Path, numbers: set[int] | None = None) -> list[int]:
    """Remove the given job channels (all listed when None) and leftover temp nodes;
    return the numbers removed. channel0 is never touched here."""
    removed = []
    for number in list_channels(channel_dir):
        if numbers is None or number in numbers:
            try:
                os.unlink(channel_path(channel_dir, number))
            except FileNotFoundError:
                continue
            removed.append(number)
    for name in _names(channel_dir):
        if name.startswith(".channel"):
            try:
                os.unlink(channel_dir / name)
            except FileNotFoundError:
                pass
    return sorted(removed)


def _channel0(channel_dir: Path) -> os.stat_result | None:
    if "channel0" not in _names(channel_dir):
        return None
    try:
        return os.lstat(channel_path(channel_dir, 0))
    except FileNotFoundError:
        return None


def channel0_warning(channel_dir: Path) -> str | None:
    """CHANNEL0_WARNING when channel0 exists and its group or everyone may open it (the
    driver makes it ``crw-rw-rw- root root``)."""
    st = _channel0(channel_dir)
    if st is not None and stat.S_ISCHR(st.st_mode) and st.st_mode & 0o066:
        return CHANNEL0_WARNING
    return None


def channel0_present(channel_dir: Path) -> bool:
    """Whether the driver's channel0 is there (what ``channels.channel0 = remove`` removes)."""
    return _channel0(channel_dir) is not None


def apply_channel0_policy(channel_dir: Path, policy: str) -> str | None:
    """``keep`` (default): leave the driver's channel0 and return the warning to report.
    ``remove``: remove it (it comes back only when the driver is reloaded)."""
    if policy == "remove":
        if _channel0(channel_dir) is not None:
            os.unlink(channel_path(channel_dir, 0))
        return None
    return channel0_warning(channel_dir)
