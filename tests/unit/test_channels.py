"""Channel devices: real mknod (root), owner = job uid, owner-only mode and root group,
the driver's channel count, channel0 left alone (and reported), checked directories."""

import os
import stat

import pytest

from imexctl.tray.channels import CHANNEL0_WARNING, apply_channel0_policy, channel0_warning, create_channel, list_channels, read_driver_params, read_major, remove_channels
from imexctl.rules.groups import ChannelError, channel_for_job
from tests.support.paths import UNSAFE, plant_unsafe_dir

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


@pytest.mark.parametrize("content, needle", [
    (b"Character devices:\n234 nvidia-caps-imex-\xff\n", "not ASCII text"),
    (b"Character devices:\n99999999999 nvidia-caps-imex-channels\n", "not registered"),
    (b"Character devices:\n4096 nvidia-caps-imex-channels\n", "out of range 1..4095"),
    (b"Character devices:\n0 nvidia-caps-imex-channels\n", "out of range 1..4095"),
    (b"Character devices:\n\xd9\xa3 nvidia-caps-imex-channels\n", "not ASCII text"),
])
def test_bad_proc_devices_is_a_channel_error(tmp_path, content, needle):
    """F-05: non-UTF-8 bytes and huge majors used to escape as UnicodeDecodeError /
    OverflowError (a traceback instead of an owned drain)."""
    path = tmp_path / "devices"
    path.write_bytes(content)
    with pytest.raises(ChannelError, match=needle):
        read_major(path)


def test_channel_count_comes_from_the_driver(tmp_path):
    params = tmp_path / "params"
    params.write_text("ResmanDebugLevel: 4294967295\nImexChannelCount: 16\n"
                      "CreateImexChannel0: 1\nDeviceFileMode: 438\n")
    got = read_driver_params(params)
    assert (got.channel_count, got.create_channel0, got.source) == (16, True, str(params))
    numbers = {channel_for_job(j, got.channel_count).number for j in range(0, 1000)}
    assert numbers == set(range(1, 16))  # never 0, never at or above the count
    absent = read_driver_params(tmp_path / "absent")
    assert (absent.channel_count, absent.create_channel0) == (2048, False)
    assert "absent" in absent.source
    params.write_text("ImexChannelCount: lots\n")
    with pytest.raises(ChannelError, match="is not a number"):
        read_driver_params(params)
    params.write_bytes(b"ImexChannelCount: \xff\n")
    with pytest.raises(ChannelError, match="not ASCII"):
        read_driver_params(params)
    for count in (0, 1):
        with pytest.raises(ChannelError, match=f"ImexChannelCount is {count}"):
            channel_for_job(5, count)


def test_channel_rule_never_uses_channel_zero():
    numbers = {channel_for_job(j).number for j in range(0, 5000)}
    assert 0 not in numbers and max(numbers) == 2047
    assert channel_for_job(41).number == 42 and channel_for_job(41).rule == "job-id"


@root_only
def test_create_is_owned_by_job_user_and_private(tmp_path):
    chdir = tmp_path / "channels"
    path = create_channel(chdir, 7, 234, uid=65534, mode=0o600)
    st = os.lstat(path)
    assert stat.S_ISCHR(st.st_mode) and os.major(st.st_rdev) == 234 and os.minor(st.st_rdev) == 7
    assert st.st_uid == 65534 and st.st_gid == 0 and stat.S_IMODE(st.st_mode) == 0o600
    assert stat.S_IMODE(os.stat(chdir).st_mode) == 0o755
    # idempotent for the same job, refused for another owner
    assert create_channel(chdir, 7, 234, 65534) == path
    assert os.lstat(path).st_ino == st.st_ino
    with pytest.raises(ChannelError, match="another job holds channel 7"):
        create_channel(chdir, 7, 234, 1000)
    assert list(list_channels(chdir)) == [7]
    assert remove_channels(chdir, {7}) == [7]
    assert not os.path.lexists(path) and os.listdir(chdir) == []


@root_only
def test_an_owned_node_with_a_foreign_group_or_loose_mode_is_made_again(tmp_path):
    """S-06: the re-run path compares the group too; a group that could open the node
    (a shared primary group, gid 100) never survives a prolog."""
    chdir = tmp_path / "channels"
    path = create_channel(chdir, 9, 234, 65534)
    os.chown(path, 65534, 100)
    os.chmod(path, 0o660)
    assert create_channel(chdir, 9, 234, 65534) == path
    st = os.lstat(path)
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (65534, 0, 0o600)


@pytest.mark.parametrize("mode", [0o640, 0o660, 0o604, 0o400, 0o200, 0o000, 0o4600])
def test_only_owner_read_write_modes_are_accepted(tmp_path, mode):
    """F-14/F-15: nothing for the group or others, and the owner can open it read-write."""
    with pytest.raises(ChannelError, match="use 0600"):
        create_channel(tmp_path / "ch", 3, 234, 65534, mode)
    assert not (tmp_path / "ch").exists()


def test_numbers_at_or_above_the_driver_count_are_refused(tmp_path):
    with pytest.raises(ChannelError, match=r"out of range 1..15 \(ImexChannelCount 16\)"):
        create_channel(tmp_path / "ch", 16, 234, 65534, count=16)
    with pytest.raises(ChannelError, match="out of range"):
        create_channel(tmp_path / "ch", 0, 234, 65534)
    with pytest.raises(ChannelError, match="major 99999999999 out of range"):
        create_channel(tmp_path / "ch", 3, 99999999999, 65534)


@root_only
def test_refuses_channel_dir_writable_by_others(tmp_path):
    chdir = tmp_path / "channels"
    chdir.mkdir()
    os.chmod(chdir, 0o777)
    with pytest.raises(OSError, match="writable by group or others"):
        create_channel(chdir, 3, 234, 0)


@root_only
def test_refuses_symlinked_channel_dir(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "channels").symlink_to(tmp_path / "real")
    with pytest.raises(OSError, match="symbolic link"):
        create_channel(tmp_path / "channels", 3, 234, 0)
    assert os.listdir(tmp_path / "real") == []


@root_only
def test_remove_all_takes_leftover_temp_nodes(tmp_path):
    chdir = tmp_path / "ch"
    create_channel(chdir, 2, 234, 0)
    os.mknod(chdir / ".channel9.deadbeef", stat.S_IFCHR | 0o600, os.makedev(234, 9))
    assert remove_channels(chdir) == [2]
    assert os.listdir(chdir) == []


def driver_channel0(chdir, mode=0o666):
    """What a driver loaded with NVreg_CreateImexChannel0=1 leaves: crw-rw-rw- root root."""
    chdir.mkdir(mode=0o755, exist_ok=True)
    os.mknod(chdir / "channel0", stat.S_IFCHR | mode, os.makedev(234, 0))
    os.chmod(chdir / "channel0", mode)


@root_only
def test_channel0_is_left_and_reported_unless_removal_is_asked(tmp_path):
    chdir = tmp_path / "ch"
    driver_channel0(chdir)
    create_channel(chdir, 5, 234, 65534)
    assert channel0_warning(chdir) == CHANNEL0_WARNING == \
        "channel0 is world-usable: jobs are not isolated"
    assert list(list_channels(chdir)) == [5]      # the driver's channel0 is no job's
    assert remove_channels(chdir) == [5]          # "remove all" still leaves channel0
    assert remove_channels(chdir, {0}) == []
    assert os.listdir(chdir) == ["channel0"]
    assert apply_channel0_policy(chdir, "keep") == CHANNEL0_WARNING
    assert os.listdir(chdir) == ["channel0"]
    assert apply_channel0_policy(chdir, "remove") is None
    assert os.listdir(chdir) == [] and channel0_warning(chdir) is None


@root_only
def test_a_root_only_channel0_is_not_reported(tmp_path):
    driver_channel0(tmp_path / "ch", 0o600)
    assert channel0_warning(tmp_path / "ch") is None


@root_only
@pytest.mark.parametrize("name", ["channel5\n", "channel007", "channel\u0663", "channel 9",
                                  "channel12345678"])
def test_only_canonical_channel_names_are_listed_or_removed(tmp_path, name):
    """F-19: such names used to be listed as channel5/7/3, unlinked under the canonical
    name (FileNotFoundError), and every epilog drained."""
    chdir = tmp_path / "ch"
    create_channel(chdir, 4, 234, 65534)
    os.mknod(chdir / name, stat.S_IFCHR | 0o600, os.makedev(234, 6))
    assert list(list_channels(chdir)) == [4]
    assert remove_channels(chdir) == [4]
    assert os.listdir(chdir) == [name]


@root_only
@pytest.mark.parametrize("plant", UNSAFE)
def test_listing_and_removal_refuse_an_unsafe_channel_dir(tmp_path, plant):
    """F-16: epilog and health listed and deleted through whatever channel_dir was."""
    victim = tmp_path / "victim"
    victim.mkdir()
    os.mknod(victim / "channel5", stat.S_IFCHR | 0o600, os.makedev(234, 5))
    chdir = plant_unsafe_dir(victim, tmp_path / "ch", plant)
    for action in (list_channels, remove_channels, channel0_warning):
        with pytest.raises(OSError, match="symbolic link|writable by group|owned by uid"):
            action(chdir)
    assert os.listdir(chdir) == ["channel5"]


def test_a_missing_channel_dir_has_no_channels(tmp_path):
    assert list_channels(tmp_path / "none") == {}
    assert remove_channels(tmp_path / "none") == []
    assert channel0_warning(tmp_path / "none") is None
