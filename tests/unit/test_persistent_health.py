"""Issue 37: ``imexctl health`` keeps a tray's persistent IMEX domain (check ``persistent``).

A dead daemon, a daemon of an earlier boot and a live daemon that does not answer ``-q``
READY (with no job holding a channel here) are started anew: a repair, counted in
``imexctl_persistent_restarts_total``, no drain. A hung daemon while a job holds a channel
here drains naming the job and keeps the daemon; what cannot be started drains with
``imexctl: health/persistent: <why>``. The simulated nvidia-imex runs for real.
"""

from __future__ import annotations

import json
import os
import signal

import psutil
import pytest

from imexctl.base.dataclass import replace
from imexctl.imex import launcher
from imexctl.imex import persistent as domain_of
from imexctl.lifecycle.prolog import run_prolog
from imexctl.ops.health import run_checks
from imexctl.ops.health_checks import DRY_RUN
from imexctl.tray.bootid import current_boot_id
from imexctl.tray.ownership import StateStore
from tests.support.sim_daemon import sim_processes
from tests.support.persistent import channels, job, up  # noqa: F401 - fixture

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="channel mknod needs root")
OTHER_BOOT = "dddddddd-0000-0000-0000-000000000004"


@pytest.fixture(autouse=True)
def answer_fast(monkeypatch):
    monkeypatch.setattr(domain_of, "ANSWER_WITHIN_S", 1.0)


def daemon(cfg):
    return StateStore(cfg.paths.state_dir).load_persistent().daemon


def restarts(tmp_path):
    state = json.loads((tmp_path / "state" / "metrics" / "state.json").read_text())
    return state["counters"].get("imexctl_persistent_restarts_total")


def kill(pid):
    os.kill(pid, signal.SIGKILL)
    psutil.Process(pid).wait(5)


def test_a_dead_daemon_is_restarted_counted_and_not_drained(tmp_path, up):
    cfg, slurm, pid = up
    kill(pid)
    report = run_checks(cfg, slurm, boot_id=current_boot_id(cfg))
    assert report.problems == [] and report.drain == "none", report
    assert [r for r in report.repaired if r.startswith("restarted the persistent IMEX domain "
                                                       f"(its nvidia-imex (pid {pid}) was gone; "
                                                       "clique ")], report.repaired
    new = daemon(cfg)
    assert new.pid != pid and launcher.is_alive(new)
    assert [p.pid for p in sim_processes(tmp_path)] == [new.pid]
    assert StateStore(cfg.paths.state_dir).load_persistent().phase == "ready"
    assert restarts(tmp_path) == {"[]": 1}
    assert not [c for c in slurm.calls if c[0] == "drain"]


def test_a_rebooted_tray_is_brought_back_into_the_domain(tmp_path, up):
    cfg, slurm, pid = up
    kill(pid)                                 # the reboot took the daemon
    report = run_checks(cfg, slurm, boot_id=OTHER_BOOT)
    assert report.problems == [], report.problems
    assert any(r.startswith("restarted the persistent IMEX domain (this tray rebooted since "
                            "it last ran; ") for r in report.repaired), report.repaired
    record = StateStore(cfg.paths.state_dir).load_persistent()
    assert record.boot_id == OTHER_BOOT and record.phase == "ready"
    assert launcher.is_alive(record.daemon)


def test_a_hung_daemon_without_jobs_is_replaced(tmp_path, up):
    cfg, slurm, pid = up
    os.kill(pid, signal.SIGSTOP)              # alive, answers nothing
    report = run_checks(cfg, slurm, boot_id=current_boot_id(cfg))
    assert report.problems == [], report.problems
    assert any(r.startswith(f"restarted the persistent IMEX domain (the persistent nvidia-imex "
                            f"(pid {pid}) did not answer READY within 1s (-q: ")
               for r in report.repaired), report.repaired
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    assert launcher.is_alive(daemon(cfg))


def test_a_hung_daemon_with_a_job_holding_a_channel_drains_and_is_kept(tmp_path, up, job_id):
    cfg, slurm, pid = up
    assert run_prolog(cfg, slurm, job(slurm, job_id, 1234, "alice")) == 0
    channel = StateStore(cfg.paths.state_dir).load().channel
    os.kill(pid, signal.SIGSTOP)
    try:
        report = run_checks(cfg, slurm, boot_id=current_boot_id(cfg))
        assert slurm.nodes_["tray1"].reason == (
            f"imexctl: health/persistent: the persistent nvidia-imex (pid {pid}) did not "
            "answer READY within 1s (-q: UNAVAILABLE); not restarted while job "
            f"{job_id} holds channel{channel} here"), report
        assert [p.pid for p in sim_processes(tmp_path)] == [pid]
        assert list(channels(tmp_path)) == [f"channel{channel}"]
    finally:
        os.kill(pid, signal.SIGCONT)


def test_a_dead_daemon_under_a_running_job_is_restarted_and_the_job_keeps_its_channel(
        tmp_path, up, job_id):
    cfg, slurm, pid = up
    assert run_prolog(cfg, slurm, job(slurm, job_id, 1234, "alice")) == 0
    channel = StateStore(cfg.paths.state_dir).load().channel
    kill(pid)
    report = run_checks(cfg, slurm, boot_id=current_boot_id(cfg))
    assert report.problems == [], report.problems
    assert f"job {job_id}'s imports died with the persistent nvidia-imex; its channel stays " \
           "until the job ends" in report.notes
    assert launcher.is_alive(daemon(cfg))
    assert list(channels(tmp_path)) == [f"channel{channel}"]


def test_a_daemon_that_cannot_start_drains_naming_why(tmp_path, up):
    cfg, slurm, pid = up
    kill(pid)
    broken = replace(cfg, paths=replace(cfg.paths, imex_binary=tmp_path / "no-such-imex"))
    report = run_checks(broken, slurm, boot_id=current_boot_id(cfg))
    assert slurm.nodes_["tray1"].reason.startswith("imexctl: health/persistent: cannot execute "
                                                   f"{tmp_path}/no-such-imex"), report


def test_a_dry_run_says_it_would_restart_and_starts_nothing(tmp_path, up):
    cfg, slurm, pid = up
    kill(pid)
    report = run_checks(cfg, slurm, mode=DRY_RUN, boot_id=current_boot_id(cfg))
    assert any(w.startswith(f"persistent: restart the persistent IMEX domain (its "
                            f"nvidia-imex (pid {pid}) was gone; ") for w in report.would), \
        report.would
    assert sim_processes(tmp_path) == []


def test_a_ready_daemon_is_left_alone(tmp_path, up):
    cfg, slurm, pid = up
    report = run_checks(cfg, slurm, boot_id=current_boot_id(cfg))
    assert report.problems == [] and report.repaired == [], report
    assert [p.pid for p in sim_processes(tmp_path)] == [pid]


def test_a_daemon_ready_after_recover_stopped_waiting_is_recorded_ready(tmp_path, up):
    """recover gave up waiting (phase starting, which the prolog refuses); the daemon
    answers READY later: health records it ready, nothing restarted."""
    cfg, slurm, pid = up
    store = StateStore(cfg.paths.state_dir)
    record = store.load_persistent()
    record.phase = "starting"
    store.save_persistent(record)
    report = run_checks(cfg, slurm, boot_id=current_boot_id(cfg))
    assert report.problems == [], report.problems
    assert f"the persistent nvidia-imex (pid {pid}) is READY: recorded phase ready" \
        in report.repaired
    assert store.load_persistent().phase == "ready"
    assert [p.pid for p in sim_processes(tmp_path)] == [pid]


def test_a_hung_daemon_whose_members_changed_drains_naming_both(tmp_path, up):
    """Replacing it would change the clique's node list on this tray alone (the clique's
    daemons restart together): not restarted, drained, both said."""
    from tests.support.lifecycle import published
    cfg, slurm, pid = up
    slurm.publish("tray3", published(lifetime="persistent"))
    os.kill(pid, signal.SIGSTOP)
    try:
        run_checks(cfg, slurm, boot_id=current_boot_id(cfg))
        reason = slurm.nodes_["tray1"].reason
        assert reason.startswith(f"imexctl: health/persistent: the persistent nvidia-imex "
                                 f"(pid {pid}) did not answer READY within 1s"), reason
        assert "not restarted: the persistent domain's members changed" in reason, reason
        assert [p.pid for p in sim_processes(tmp_path)] == [pid]
    finally:
        os.kill(pid, signal.SIGCONT)
