"""teardown_domain, the API the epilog, health and the prolog's stale-domain step share."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys

import pytest

from imexctl.tray.ownership import DaemonIdentity, StateStore
from imexctl.lifecycle.teardown import job_dir, teardown_domain
from tests.support.lifecycle import make_cfg
from tests.support.records import make_record


def test_verified_teardown_clears_the_record(tmp_path):
    cfg = make_cfg(tmp_path)
    store = StateStore(cfg.paths.state_dir)
    job_dir(cfg, 7).mkdir(parents=True)
    record = make_record(job_id=7, channel=None, job_dir=str(job_dir(cfg, 7)))
    store.save(record)
    report = teardown_domain(cfg, record, store)
    assert report.ok and report.failures == []
    assert list(report.timings) == ["stop-daemon", "ports", "channel", "files", "record"]
    assert store.load() is None and not job_dir(cfg, 7).exists()


def test_unverified_teardown_keeps_the_record_as_stuck(tmp_path, monkeypatch):
    from imexctl.imex import launcher
    cfg = make_cfg(tmp_path)
    store = StateStore(cfg.paths.state_dir)
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        import psutil
        ps = psutil.Process(sleeper.pid)
        ident = DaemonIdentity(pid=sleeper.pid, create_time=ps.create_time(), exe=ps.exe())
        record = make_record(job_id=7, channel=None, job_dir=str(job_dir(cfg, 7)), daemon=ident)
        store.save(record)
        monkeypatch.setattr(launcher, "stop_direct", lambda i, g: launcher.StopResult(
            "stuck", f"pid {i.pid} survived SIGKILL"))
        report = teardown_domain(cfg, record, store)
        assert not report.ok
        assert report.failures[0] == ("stop-daemon", f"daemon stuck: pid {sleeper.pid} "
                                                     "survived SIGKILL")
        kept = store.load()
        assert kept.phase == "stuck" and kept.daemon.pid == sleeper.pid
    finally:
        sleeper.kill()
        sleeper.wait()


@contextlib.contextmanager
def process_started_on(config, **popen):
    """A long-running process whose argv says ``-c <config>``, as a daemon's does."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "-c",
                             str(config)], cwd="/", **popen)
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root: only root processes count, and "
                                               "a decoy runs as another uid")
@pytest.mark.parametrize("uid,stopped", [(0, True), (65534, False)])
def test_daemon_found_by_its_argv_only_when_it_is_roots(tmp_path, uid, stopped):
    """A daemon whose pid never reached the record is found by its argv; a user's process
    with the same argv is never signalled."""
    cfg = make_cfg(tmp_path)
    store = StateStore(cfg.paths.state_dir)
    jdir = job_dir(cfg, 7)
    with process_started_on(jdir / "config.cfg", user=uid, group=uid) as proc:
        record = make_record(job_id=7, channel=None, job_dir=str(jdir))  # daemon: None
        store.save(record)
        assert teardown_domain(cfg, record, store).ok
        if stopped:
            assert proc.wait(timeout=10) is not None
        else:
            assert proc.poll() is None


def test_record_says_tearing_down_while_the_daemon_is_stopped(tmp_path, monkeypatch):
    """status during an epilog (or after one killed midway) reads phase tearing-down, not
    a ready domain whose daemon is gone; a record that cannot be marked still gets its
    daemon stopped."""
    from imexctl.imex import launcher
    cfg = make_cfg(tmp_path)
    store = StateStore(cfg.paths.state_dir)
    seen = []

    def stop(ident, grace):
        seen.append(store.load().phase)
        return launcher.StopResult("terminated", "")
    monkeypatch.setattr(launcher, "stop_direct", stop)
    monkeypatch.setattr(launcher, "is_alive", lambda ident: False)
    ident = DaemonIdentity(pid=999999, create_time=1.0, exe="/x")
    record = make_record(job_id=7, channel=None, job_dir=str(job_dir(cfg, 7)), daemon=ident,
                         phase="ready")
    store.save(record)
    assert teardown_domain(cfg, record, store).ok
    assert seen == ["tearing-down"] and store.load() is None

    store.save(record)
    monkeypatch.setattr(StateStore, "save", lambda self, rec: (_ for _ in ()).throw(
        OSError(28, "No space left on device")))
    seen.clear()
    assert teardown_domain(cfg, record, store).ok   # the record is cleared (unlink)
    assert seen == ["ready"]


def test_a_stuck_record_is_not_relabelled_while_retried(tmp_path, monkeypatch):
    from imexctl.imex import launcher
    cfg = make_cfg(tmp_path)
    store = StateStore(cfg.paths.state_dir)
    seen = []
    monkeypatch.setattr(launcher, "stop_direct", lambda i, g: (
        seen.append(store.load().phase), launcher.StopResult("stuck", "survived SIGKILL"))[1])
    record = make_record(job_id=7, channel=None, job_dir=str(job_dir(cfg, 7)), phase="stuck",
                         daemon=DaemonIdentity(pid=999999, create_time=1.0, exe="/x"))
    store.save(record)
    assert not teardown_domain(cfg, record, store).ok
    assert seen == ["stuck"] and store.load().phase == "stuck"
