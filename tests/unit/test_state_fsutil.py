"""Ownership record and safe file handling."""

import json
import multiprocessing
import os
import time

import pytest

from imexctl.base.fsutil import UnsafePathError, atomic_write, ensure_secure_dir, read_json, remove_path
from imexctl.tray.ownership import DaemonIdentity, LockTimeout, StateStore
from tests.support.records import make_record


def test_record_round_trip(tmp_path):
    store = StateStore(tmp_path / "state")
    rec = make_record(daemon=DaemonIdentity(pid=10, create_time=1.5, exe="/bin/x"))
    store.save(rec)
    loaded = store.load()
    assert loaded.daemon.pid == 10 and loaded.nodes == ["tray01", "tray02"]
    raw = json.loads((tmp_path / "state/domain.json").read_text())
    assert raw["job_id"] == 7 and raw["phase"] == "preparing"
    store.clear()
    assert store.load() is None


def _hold_lock(path, ready):
    with StateStore(path).locked():
        ready.set()
        time.sleep(1.5)


def test_lock_excludes_other_processes(tmp_path):
    ready = multiprocessing.Event()
    proc = multiprocessing.Process(target=_hold_lock, args=(tmp_path, ready))
    proc.start()
    try:
        assert ready.wait(10)
        with pytest.raises(LockTimeout, match="held by another imexctl"):
            with StateStore(tmp_path).locked(timeout_s=0.3):
                pass
    finally:
        proc.join()
    with StateStore(tmp_path).locked(timeout_s=1):
        pass


def test_atomic_write_refuses_symlink(tmp_path):
    target = tmp_path / "victim"
    target.write_text("keep")
    (tmp_path / "link").symlink_to(target)
    with pytest.raises(UnsafePathError):
        atomic_write(tmp_path / "link", "evil")
    assert target.read_text() == "keep"
    atomic_write(tmp_path / "f", "one")
    atomic_write(tmp_path / "f", "two")
    assert (tmp_path / "f").read_text() == "two"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_read_json_does_not_follow_symlink(tmp_path):
    (tmp_path / "real.json").write_text("{}")
    (tmp_path / "link.json").symlink_to(tmp_path / "real.json")
    with pytest.raises(OSError):
        read_json(tmp_path / "link.json")
    assert read_json(tmp_path / "none.json") is None


def test_remove_path_removes_link_not_target(tmp_path):
    (tmp_path / "keep").mkdir()
    (tmp_path / "keep/file").write_text("x")
    (tmp_path / "tree").mkdir()
    (tmp_path / "tree/link").symlink_to(tmp_path / "keep")
    assert remove_path(tmp_path / "tree")
    assert (tmp_path / "keep/file").exists()
    assert remove_path(tmp_path / "tree") is False


def test_remove_path_removes_flat_and_nested_trees_without_following_links(tmp_path):
    (tmp_path / "keep").mkdir()
    (tmp_path / "keep/file").write_text("x")
    flat = tmp_path / "job-1"       # a job directory: files, a FIFO, a link to a directory
    flat.mkdir()
    (flat / "config.cfg").write_text("x")
    os.mkfifo(flat / "fifo")
    (flat / "link").symlink_to(tmp_path / "keep")
    nested = tmp_path / "job-2"
    (nested / "sub/deeper").mkdir(parents=True)
    (nested / "sub/deeper/link").symlink_to(tmp_path / "keep")
    (nested / "sub/file").write_text("x")
    assert remove_path(flat) and remove_path(nested)
    assert not flat.exists() and not nested.exists()
    assert (tmp_path / "keep/file").read_text() == "x"


def test_secure_dir_rejects_group_writable(tmp_path):
    d = tmp_path / "d"
    d.mkdir()
    os.chmod(d, 0o775)
    with pytest.raises(UnsafePathError, match="chmod go-w"):
        ensure_secure_dir(d)


def _good_record_json():
    from imexctl.base.dataclass import asdict
    return asdict(make_record(daemon=DaemonIdentity(pid=10, create_time=1.5, exe="/bin/x")))


@pytest.mark.parametrize("content", [
    b"{not json", b"\xff\xfe\x00binary", b"[]", b"{}", b'"a string"', b"42",
    b'{"job_id": 7}',                                        # fields missing
    json.dumps({**_good_record_json(), "job_id": "abc"}).encode(),
    json.dumps({**_good_record_json(), "nodes": "tray01"}).encode(),
    json.dumps({**_good_record_json(), "daemon": [1, 2]}).encode(),
    json.dumps({**_good_record_json(), "started_at": float("inf")}).encode(),
    b"[" * 100_000 + b"]" * 100_000,                         # nested too deep
], ids=["not-json", "binary", "list", "empty-object", "string", "number", "missing-fields",
        "job-id-str", "nodes-str", "daemon-list", "inf-time", "deep"])
def test_corrupt_record_is_unreadable_never_no_record(tmp_path, content):
    """F-03: a record that does not load is a finding (RecordUnreadable), never None."""
    from imexctl.tray.ownership import RecordUnreadable
    (tmp_path / "state").mkdir()
    (tmp_path / "state/domain.json").write_bytes(content)
    with pytest.raises(RecordUnreadable, match="unreadable record .*domain.json"):
        StateStore(tmp_path / "state").load()


def test_unknown_keys_are_ignored_also_under_daemon(tmp_path):
    """A record written by a newer or older imexctl still loads."""
    raw = _good_record_json()
    raw["future_key"] = 1
    raw["daemon"]["cgroup"] = "/system.slice/x"
    (tmp_path / "domain.json").write_text(json.dumps(raw))
    record = StateStore(tmp_path).load()
    assert record.daemon.pid == 10 and record.boot_id == ""


def test_old_record_without_boot_id_is_not_stamped_with_this_boot(tmp_path):
    raw = _good_record_json()
    del raw["boot_id"]
    (tmp_path / "domain.json").write_text(json.dumps(raw))
    assert StateStore(tmp_path).load().boot_id == ""


def test_state_files_that_are_fifos_are_refused_not_waited_on(tmp_path, no_hang):
    """F-20: a FIFO as domain.json (or the lock) blocked every hook forever."""
    from imexctl.tray.ownership import RecordUnreadable
    os.mkfifo(tmp_path / "domain.json")
    with pytest.raises(UnsafePathError, match="not a regular file"):
        read_json(tmp_path / "domain.json")
    with pytest.raises(RecordUnreadable, match="not a regular file"):
        StateStore(tmp_path).load()
    os.mkfifo(tmp_path / "lock")
    with pytest.raises(UnsafePathError):
        with StateStore(tmp_path).locked(timeout_s=1):
            pass


@pytest.mark.parametrize("content", [b"garbage", b"[]", b'{"finished_at": "x"}',
                                     b'{"finished_at": 1e999}', b'{"steps_ms": {"a": "b"}}'])
def test_unusable_last_outcome_is_none(tmp_path, content):
    """F-20: a corrupt last-outcome.json crashed 'imexctl status'."""
    (tmp_path / "last-outcome.json").write_bytes(content)
    assert StateStore(tmp_path).last_outcome() is None


def test_temp_files_of_killed_writers_are_swept(tmp_path):
    """F-22: '.domain.json.XXXXXXXX' left by a SIGKILL inside atomic_write stayed forever."""
    store = StateStore(tmp_path)
    (tmp_path / ".domain.json.k2j3h4g5").write_text("{")
    old = tmp_path / ".last-outcome.json.a1b2c3d4"
    old.write_text("{")
    os.utime(old, (time.time() - 3600, time.time() - 3600))
    (tmp_path / ".last-outcome.json.fresh123").write_text("{")  # a writer may be renaming it
    (tmp_path / ".unrelated").write_text("keep")
    with store.locked():
        removed = store.sweep_temp()
    assert sorted(removed) == [".domain.json.k2j3h4g5", ".last-outcome.json.a1b2c3d4"]
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == [
        ".last-outcome.json.fresh123", ".unrelated"]


def test_durable_writes_fsync_file_and_directory_and_hook_files_do_not(tmp_path, monkeypatch):
    """Only what must outlive a power loss pays for fsync (the channel table); the node's
    ownership record describes processes and devices a power loss removes anyway."""
    import os

    from imexctl.base import fsutil
    from imexctl.controller.channel_table import ChannelTable
    from imexctl.tray.ownership import DomainRecord, StateStore
    synced = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: synced.append(os.readlink(f"/proc/self/fd/{fd}"))
                        or real(fd))
    fsutil.atomic_write(tmp_path / "a", "x")
    assert synced[0].startswith(str(tmp_path / ".a.")) and synced[1] == str(tmp_path)
    synced.clear()
    fsutil.atomic_write(tmp_path / "b", "y", durable=False)
    assert synced == [] and (tmp_path / "b").read_text() == "y"
    store = StateStore(tmp_path / "state")
    store.dir.mkdir()
    store.save(DomainRecord(job_id=7, uid=1000, user="u", nodes=["tray01"],
                            addresses=["10.0.0.1"], node_id=0, digest="d", server_port=18500,
                            cmd_port=20500, channel=3, channel_rule="r", job_dir="/x"))
    assert synced == [] and store.load().job_id == 7
    ChannelTable(tmp_path / "ctld", count=16).allocate(7, ["u.1"], live_jobs=lambda: {7})
    assert any(p.startswith(str(tmp_path / "ctld")) for p in synced)
