"""IMEX channel devices: the job's processes, and only theirs, can open its channel.

A channel is a char device ``channelN`` with the dynamic major of
``nvidia-caps-imex-channels`` and minor N. Channel 0 is reserved (drivers may create it
for everyone). The device is created under a temporary name in a root-only directory,
given its owner and mode, checked, and only then renamed into place, so no user ever
sees it with looser permissions.
"""

from __future__ import annotations

import os
import re
import stat
import uuid
from dataclasses import dataclass
from pathlib import Path

from imexctl.fsutil import ensure_secure_dir

DEVICE_NAME = "nvidia-caps-imex-channels"
CHANNEL_COUNT = 2048
CHANNEL_NAME = re.compile(r"^channel(\d{1,7})$")


class ChannelError(Exception):
    pass


@dataclass(frozen=True)
class ChannelChoice:
    number: int
    rule: str


def channel_for_job(job_id: int, count: int = CHANNEL_COUNT) -> ChannelChoice:
    """The one place that picks a job's channel; identical on every tray of the job.

    Rule ``job-id``: 1 + job_id mod (count-1), skipping reserved channel 0. Jobs whose ids
    differ by a multiple of count-1 collide; a cluster-side allocator replaces this rule.
    """
    return ChannelChoice(number=1 + job_id % (count - 1), rule="job-id")


def read_major(proc_devices: Path) -> int:
    """Major of nvidia-caps-imex-channels from the 'Character devices:' part of /proc/devices."""
    try:
        text = proc_devices.read_text()
    except OSError as exc:
        raise ChannelError(f"cannot read {proc_devices}: {exc.strerror}") from None
    in_chars = False
    for line in text.splitlines():
        if line.strip().endswith("devices:"):
            in_chars = line.strip() == "Character devices:"
            continue
        match = re.fullmatch(r"\s*(\d+)\s+(\S+)\s*", line)
        if in_chars and match and match.group(2) == DEVICE_NAME:
            return int(match.group(1))
    raise ChannelError(f"{DEVICE_NAME} not registered in {proc_devices} "
                       "(is the NVIDIA driver loaded with NVreg_ImexChannelCount > 0?)")


def channel_path(channel_dir: Path, number: int) -> Path:
    return channel_dir / f"channel{number}"


def create_channel(channel_dir: Path, number: int, major: int, uid: int, gid: int,
                   mode: int) -> Path:
    """Create channelN for one job; an existing node of another owner is an error."""
    if not 0 < number < (1 << 20):
        raise ChannelError(f"channel number {number} out of range 1..{(1 << 20) - 1}")
    ensure_secure_dir(channel_dir)
    final = channel_path(channel_dir, number)
    rdev = os.makedev(major, number)
    try:
        st = os.lstat(final)
    except FileNotFoundError:
        st = None
    if st is not None:
        if (stat.S_ISCHR(st.st_mode) and st.st_rdev == rdev and st.st_uid == uid
                and stat.S_IMODE(st.st_mode) == mode):
            return final  # idempotent: a re-run prolog of the same job
        raise ChannelError(f"{final} already exists (owner uid {st.st_uid}, "
                           f"mode {stat.S_IMODE(st.st_mode):04o}); another job holds channel "
                           f"{number}")
    tmp = channel_dir / f".channel{number}.{uuid.uuid4().hex[:8]}"
    os.mknod(tmp, stat.S_IFCHR | 0o600, rdev)
    try:
        os.chown(tmp, uid, gid, follow_symlinks=False)
        os.chmod(tmp, mode)
        check = os.lstat(tmp)
        if not stat.S_ISCHR(check.st_mode) or check.st_rdev != rdev or check.st_uid != uid:
            raise ChannelError(f"{tmp}: device node did not come out as created")
        os.rename(tmp, final)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return final


def list_channels(channel_dir: Path) -> dict[int, os.stat_result]:
    """Channel nodes present (including half-created temp names, keyed as negative)."""
    found: dict[int, os.stat_result] = {}
    try:
        names = os.listdir(channel_dir)
    except FileNotFoundError:
        return found
    for name in names:
        match = CHANNEL_NAME.match(name)
        if match:
            found[int(match.group(1))] = os.lstat(channel_dir / name)
    return found


def remove_channels(channel_dir: Path, numbers: set[int] | None = None) -> list[int]:
    """Remove the given channels (all when None) and leftover temp nodes; return removed."""
    removed = []
    for number in list_channels(channel_dir):
        if numbers is None or number in numbers:
            os.unlink(channel_path(channel_dir, number))
            removed.append(number)
    try:
        for name in os.listdir(channel_dir):
            if name.startswith(".channel"):
                os.unlink(channel_dir / name)
    except FileNotFoundError:
        pass
    return sorted(removed)
