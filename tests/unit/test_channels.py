"""Channel devices: real mknod (root), owner = job uid, least privilege, clean removal."""

import os
import stat

import pytest

from imexctl.channels import (ChannelError, channel_for_job, create_channel, list_channels,
                              read_major, remove_channels)

root_only = pytest.mark.skipif(os.geteuid() != 0 and os.environ.get("CI") != "true",
                               reason="mknod needs root")

PROC_DEVICES = """Character devices:
  1 mem
195 nvidia
234 nvidia-caps-imex-channels
509 nvidia-caps

Block devices:
  8 sd
234 nvidia-caps-imex-channels-fake-block
"""


def test_read_major(tmp_path):
    path = tmp_path / "devices"
    path.write_text(PROC_DEVICES)
    assert read_major(path) == 234
    path.write_text("Character devices:\n195 nvidia\n\nBlock devices:\n234 nvidia-caps-imex-channels\n")
    with pytest.raises(ChannelError, match="not registered"):
        read_major(path)
    with pytest.raises(ChannelError, match="cannot read"):
        read_major(tmp_path / "missing")


def test_channel_rule_never_uses_channel_zero():
    numbers = {channel_for_job(j).number for j in range(0, 5000)}
    assert 0 not in numbers and max(numbers) == 2047
    assert channel_for_job(41).number == 42 and channel_for_job(41).rule == "job-id"


@root_only
def test_create_is_owned_by_job_user_and_private(tmp_path):
    chdir = tmp_path / "channels"
    path = create_channel(chdir, 7, 234, uid=65534, gid=65534, mode=0o600)
    st = os.lstat(path)
    assert stat.S_ISCHR(st.st_mode) and os.major(st.st_rdev) == 234 and os.minor(st.st_rdev) == 7
    assert st.st_uid == 65534 and stat.S_IMODE(st.st_mode) == 0o600
    assert stat.S_IMODE(os.stat(chdir).st_mode) == 0o755
    # idempotent for the same job, refused for another owner
    assert create_channel(chdir, 7, 234, 65534, 65534, 0o600) == path
    with pytest.raises(ChannelError, match="another job holds channel 7"):
        create_channel(chdir, 7, 234, 1000, 1000, 0o600)
    assert list(list_channels(chdir)) == [7]
    assert remove_channels(chdir, {7}) == [7]
    assert not os.path.lexists(path) and os.listdir(chdir) == []


@root_only
def test_refuses_channel_dir_writable_by_others(tmp_path):
    chdir = tmp_path / "channels"
    chdir.mkdir()
    os.chmod(chdir, 0o777)
    with pytest.raises(OSError, match="writable by group or others"):
        create_channel(chdir, 3, 234, 0, 0, 0o600)


@root_only
def test_refuses_symlinked_channel_dir(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "channels").symlink_to(tmp_path / "real")
    with pytest.raises(OSError, match="symbolic link"):
        create_channel(tmp_path / "channels", 3, 234, 0, 0, 0o600)
    assert os.listdir(tmp_path / "real") == []


@root_only
def test_remove_all_takes_leftover_temp_nodes(tmp_path):
    chdir = tmp_path / "ch"
    create_channel(chdir, 2, 234, 0, 0, 0o600)
    os.mknod(chdir / ".channel9.deadbeef", stat.S_IFCHR | 0o600, os.makedev(234, 9))
    assert remove_channels(chdir) == [2]
    assert os.listdir(chdir) == []
