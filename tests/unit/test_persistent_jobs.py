"""Issue 37: a job on a persistent tray (``imex.lifetime = "persistent"``).

The tray's persistent domain is brought up by ``imexctl recover`` (the simulated
nvidia-imex, for real); the node prolog then gives the job only its channel (channelN
owned by the job's uid, 0600), its facts for the TaskProlog and a record, and starts no
daemon; the epilog removes the channel, files and record and leaves the daemon running.
A persistent domain that does not serve drains the tray naming the prolog's step.
"""

from __future__ import annotations

import os
import signal
import stat

import psutil
import pytest

from imexctl.imex import launcher
from imexctl.lifecycle.epilog import run_epilog
from imexctl.lifecycle.prolog import run_prolog
from imexctl.lifecycle.taskprolog import task_lines
from imexctl.ops.health import run_checks
from imexctl.ops.recover import recover
from imexctl.ops.status import collect
from imexctl.tray.bootid import current_boot_id
from imexctl.cli.display import status_table
from imexctl.tray.ownership import DomainRecord, StateStore
from tests.support.sim_daemon import sim_cfg, sim_processes
from tests.support.persistent import channels, job, job_dirs, tray, up, world  # noqa: F401

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="channel mknod needs root")


def test_prolog_gives_the_job_a_channel_and_starts_no_daemon(tmp_path, up, job_id):
    cfg, slurm, pid = up
    ctx = job(slurm, job_id, 1234, "alice")
    assert run_prolog(cfg, slurm, ctx) == 0, StateStore(cfg.paths.state_dir).last_outcome()
    # the same one daemon: the persistent one
    assert [p.pid for p in sim_processes(tmp_path)] == [pid]
    record = StateStore(cfg.paths.state_dir).load()
    assert record.job_id == job_id and record.daemon is None and record.phase == "ready"
    assert record.channel is not None and record.channel > 0
    assert set(record.steps_ms) == {"context", "fabric", "allocation", "ownership",
                                    "persistent-ready", "claim", "channel"}
    st = channels(tmp_path)[f"channel{record.channel}"]
    assert stat.S_ISCHR(st.st_mode) and st.st_uid == 1234 and stat.S_IMODE(st.st_mode) == 0o600
    lines = task_lines(cfg, {"SLURM_JOB_ID": str(job_id)})
    assert f"export IMEX_CHANNEL={record.channel}" in lines
    assert "export IMEX_DOMAIN_STATE=UP" in lines
    assert not [c for c in slurm.calls if c[0] == "drain"]


def test_epilog_removes_the_channel_and_leaves_the_daemon(tmp_path, up, job_id):
    cfg, slurm, pid = up
    ctx = job(slurm, job_id, 1234, "alice")
    assert run_prolog(cfg, slurm, ctx) == 0
    assert run_epilog(cfg, slurm, ctx) == 0
    assert channels(tmp_path) == {} and job_dirs(tmp_path) == []
    assert StateStore(cfg.paths.state_dir).load() is None
    persistent = StateStore(cfg.paths.state_dir).load_persistent()
    assert persistent.phase == "ready" and persistent.daemon.pid == pid
    assert launcher.is_alive(persistent.daemon)
    assert [p.pid for p in sim_processes(tmp_path)] == [pid]
    assert os.path.exists(tmp_path / "run" / "persistent" / "config.cfg")
    assert not [c for c in slurm.calls if c[0] == "drain"]


def test_two_users_one_after_another_get_their_own_channels(tmp_path, up, job_id):
    cfg, slurm, pid = up
    first, second = job(slurm, job_id, 1234, "alice"), job(slurm, job_id + 1, 5678, "bob")
    assert run_prolog(cfg, slurm, first) == 0
    one = StateStore(cfg.paths.state_dir).load().channel
    assert {n: s.st_uid for n, s in channels(tmp_path).items()} == {f"channel{one}": 1234}
    assert run_epilog(cfg, slurm, first) == 0
    slurm.set_job(job_id, state="COMPLETED")
    assert run_prolog(cfg, slurm, second) == 0
    two = StateStore(cfg.paths.state_dir).load().channel
    assert {n: s.st_uid for n, s in channels(tmp_path).items()} == {f"channel{two}": 5678}
    assert f"export IMEX_CHANNEL={two}" in task_lines(cfg, {"SLURM_JOB_ID": str(job_id + 1)})
    assert run_epilog(cfg, slurm, second) == 0
    assert channels(tmp_path) == {} and [p.pid for p in sim_processes(tmp_path)] == [pid]


def test_a_running_jobs_channel_refuses_the_next_job_without_drain(tmp_path, up, job_id):
    cfg, slurm, pid = up
    assert run_prolog(cfg, slurm, job(slurm, job_id, 1234, "alice")) == 0
    other = job(slurm, job_id + 1, 5678, "bob")
    run_prolog(cfg, slurm, other)
    assert slurm.jobs[job_id + 1].state == "CANCELLED"
    assert f"held by running job {job_id}" in slurm.jobs[job_id + 1].admin_comment
    assert {s.st_uid for s in channels(tmp_path).values()} == {1234}
    assert not [c for c in slurm.calls if c[0] == "drain"]


def test_a_dead_persistent_daemon_drains_and_is_not_restarted(tmp_path, up, job_id):
    cfg, slurm, pid = up
    psutil.Process(pid).kill()
    psutil.Process(pid).wait(5)
    assert run_prolog(cfg, slurm, job(slurm, job_id, 1234, "alice")) == 1
    assert slurm.nodes_["tray1"].reason == \
        f"imexctl: prolog/persistent-ready: the persistent nvidia-imex (pid {pid}) is not running"
    assert sim_processes(tmp_path) == []
    assert channels(tmp_path) == {} and job_dirs(tmp_path) == []
    assert StateStore(cfg.paths.state_dir).load() is None


def test_a_hung_persistent_daemon_drains_naming_its_state(tmp_path, up, job_id):
    """A daemon alive but not answering ``-q`` READY (stopped here) is a node fault of the
    persistent-ready step; it is neither restarted nor stopped."""
    cfg, slurm, pid = up
    os.kill(pid, signal.SIGSTOP)
    try:
        assert run_prolog(cfg, slurm, job(slurm, job_id, 1234, "alice")) == 1
    finally:
        os.kill(pid, signal.SIGCONT)
    reason = slurm.nodes_["tray1"].reason
    assert reason.startswith(f"imexctl: prolog/persistent-ready: the persistent "
                             f"nvidia-imex (pid {pid}) is not READY (-q: UNAVAILABLE"), reason
    assert [p.pid for p in sim_processes(tmp_path)] == [pid]
    assert channels(tmp_path) == {} and job_dirs(tmp_path) == []


def test_no_persistent_domain_drains(tmp_path, job_id):
    cfg, slurm = tray(tmp_path, job_id), world()
    assert run_prolog(cfg, slurm, job(slurm, job_id, 1234, "alice")) == 1
    assert slurm.nodes_["tray1"].reason == ("imexctl: prolog/persistent-ready: no persistent "
                                            "IMEX domain on this tray (imexctl recover starts it)")
    assert sim_processes(tmp_path) == [] and channels(tmp_path) == {}


def test_health_keeps_a_running_jobs_channel_and_the_daemon(tmp_path, up, job_id):
    cfg, slurm, pid = up
    assert run_prolog(cfg, slurm, job(slurm, job_id, 1234, "alice")) == 0
    channel = StateStore(cfg.paths.state_dir).load().channel
    report = run_checks(cfg, slurm, boot_id=current_boot_id(cfg))
    assert report.problems == [], report.problems
    assert list(channels(tmp_path)) == [f"channel{channel}"]
    assert StateStore(cfg.paths.state_dir).load().job_id == job_id
    assert [p.pid for p in sim_processes(tmp_path)] == [pid]


def test_an_ended_jobs_channel_goes_and_the_daemon_and_its_persist_file_stay(
        tmp_path, up, job_id):
    """The job's epilog never ran (slurmd lost it): the next health finds the job ended
    and removes its channel, files and record, and nothing of the persistent domain: not
    its daemon, not the daemon's persist.dat (a per-job teardown removes it)."""
    cfg, slurm, pid = up
    assert run_prolog(cfg, slurm, job(slurm, job_id, 1234, "alice")) == 0
    persist = cfg.paths.imex_persist_file
    persist.parent.mkdir(parents=True, exist_ok=True)
    persist.write_text("persistent domain's importers\n")
    slurm.set_job(job_id, state="COMPLETED")
    run_checks(cfg, slurm, boot_id=current_boot_id(cfg))
    assert channels(tmp_path) == {} and job_dirs(tmp_path) == []
    assert StateStore(cfg.paths.state_dir).load() is None
    assert [p.pid for p in sim_processes(tmp_path)] == [pid]
    assert persist.read_text() == "persistent domain's importers\n"
    assert not [c for c in slurm.calls if c[0] == "drain"]


def test_status_of_a_running_job_on_a_persistent_tray_shows_the_domain_and_the_job(tmp_path, up, job_id):
    cfg, slurm, pid = up
    assert run_prolog(cfg, slurm, job(slurm, job_id, 1234, "alice")) == 0
    view = collect(cfg, live=True, slurm=slurm)
    # only tray1's daemon runs in this unit rack: its peers are the domain's one problem
    assert [p.split()[0] for p in view["problems"]] == ["tray2", "tray10"], view["problems"]
    assert view["state"] == "degraded"
    dom = view["domain"]
    assert dom["lifetime"] == "persistent" and dom["job_id"] == 0
    assert dom["daemon"]["pid"] == pid and dom["daemon"]["alive"]
    assert dom["local_state"] == "READY" and dom["domain_state"] in ("DEGRADED", "DOWN")
    record = StateStore(cfg.paths.state_dir).load()
    assert dom["jobs"] == [{"job_id": job_id, "user": "alice", "uid": 1234,
                            "channel": record.channel, "phase": "ready"}]
    assert view["channels_present"] == [record.channel]


def test_status_of_a_persistent_tray_without_a_job(tmp_path, up, job_id):
    cfg, slurm, pid = up
    view = collect(cfg, live=False, slurm=slurm)
    assert view["problems"] == [], view["problems"]
    assert view["state"] == "ready"
    assert view["domain"]["lifetime"] == "persistent" and view["domain"]["jobs"] == []
    assert view["domain"]["daemon"]["pid"] == pid
    assert "persistent" in status_table(view) and f"pid {pid}" in status_table(view)


def test_status_names_a_persistent_tray_whose_domain_is_not_up(tmp_path, job_id):
    cfg = tray(tmp_path, job_id)
    view = collect(cfg, live=False)
    assert view["domain"] is None
    assert any("no persistent domain is recorded" in p for p in view["problems"])


def test_status_of_a_job_tray_says_lifetime_job(tmp_path, job_id):
    cfg = sim_cfg(tmp_path)
    StateStore(cfg.paths.state_dir).save(DomainRecord(
        job_id=job_id, uid=1000, user="bob", nodes=["n1"], addresses=["127.0.0.1"],
        node_id=0, digest="d", server_port=1, cmd_port=2, channel=7, channel_rule="job-id",
        job_dir=str(tmp_path / "run" / "j"), phase="preparing"))
    view = collect(cfg, live=False)
    assert view["domain"]["lifetime"] == "job"
    assert view["domain"]["jobs"] == [{"job_id": job_id, "user": "bob", "uid": 1000,
                                       "channel": 7, "phase": "preparing"}]
