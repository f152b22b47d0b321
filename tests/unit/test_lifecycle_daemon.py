"""Lifecycle paths that need a running nvidia-imex, with the simulated daemon for real:
a one-tray domain up and torn down, a local daemon that never becomes READY (drain), a
peer that never comes (refuse the job, no drain) and a daemon that ignores SIGTERM."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import psutil
import pytest

from imexctl.lifecycle.epilog import run_epilog
from imexctl.lifecycle.prolog import run_prolog
from imexctl.tray.ownership import StateStore
from tests.support.lifecycle import CLEAN, ctx_for, leftovers
from tests.support.sim_daemon import sim_cfg, sim_processes
from tests.support.memory_slurm import job_record

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="channel mknod needs root")


def test_one_tray_domain_up_then_torn_down(tmp_path, sim_slurm, job_id):
    cfg = sim_cfg(tmp_path, policy="all")
    ctx = ctx_for(job_id, nodes="tray01")
    assert run_prolog(cfg, sim_slurm, ctx) == 0, StateStore(cfg.paths.state_dir).last_outcome()
    record = StateStore(cfg.paths.state_dir).load()
    assert record.phase == "ready" and record.job_id == job_id
    assert set(record.steps_ms) >= {"context", "fabric", "allocation", "ownership", "render",
                                    "channel", "start", "wait-ready"}
    assert psutil.Process(record.daemon.pid).is_running()
    assert leftovers(tmp_path)["channels"] == [f"channel{record.channel}"]
    assert run_epilog(cfg, sim_slurm, ctx) == 0
    assert leftovers(tmp_path) == CLEAN
    assert not psutil.pid_exists(record.daemon.pid) or \
        psutil.Process(record.daemon.pid).status() == psutil.STATUS_ZOMBIE
    assert not [c for c in sim_slurm.calls if c[0] == "drain"]


def test_local_daemon_never_ready_drains_and_undoes(tmp_path, sim_slurm, job_id):
    cfg = sim_cfg(tmp_path, faults={"never_ready": True}, policy="all")
    rc = run_prolog(cfg, sim_slurm, ctx_for(job_id, nodes="tray01"))
    assert rc == 1
    reason = sim_slurm.nodes_["tray01"].reason
    assert reason.startswith("imexctl: prolog/wait-ready: local daemon") and "after 4s" in reason
    assert leftovers(tmp_path) == CLEAN
    assert sim_processes(tmp_path) == []


def test_missing_peer_refuses_job_without_drain(tmp_path, sim_slurm, job_id):
    sim_slurm.jobs[job_id] = job_record(job_id, ("tray01", "tray02"))
    cfg = sim_cfg(tmp_path, ready_timeout_s=2)
    assert run_prolog(cfg, sim_slurm, ctx_for(job_id)) == 0
    job = sim_slurm.jobs[job_id]
    assert job.state == "CANCELLED"
    assert job.admin_comment.startswith("imexctl: IMEX domain") and "tray02" in job.admin_comment
    assert sim_slurm.nodes_["tray01"].state == "IDLE"
    assert leftovers(tmp_path) == CLEAN


def test_missing_peer_leaves_requeued_job_alone(tmp_path, sim_slurm, job_id):
    """Another tray's failed prolog already requeued the job: do not cancel it."""
    sim_slurm.jobs[job_id] = job_record(job_id, ("tray01", "tray02"), state="PENDING")
    cfg = sim_cfg(tmp_path, ready_timeout_s=2)
    assert run_prolog(cfg, sim_slurm, ctx_for(job_id)) == 0
    assert sim_slurm.jobs[job_id].state == "PENDING" and sim_slurm.jobs[job_id].admin_comment == ""
    assert leftovers(tmp_path) == CLEAN


def test_daemon_ignoring_sigterm_is_killed(tmp_path, sim_slurm, job_id):
    cfg = sim_cfg(tmp_path, faults={"hang_on_sigterm": True}, policy="all")
    ctx = ctx_for(job_id, nodes="tray01")
    assert run_prolog(cfg, sim_slurm, ctx) == 0
    assert run_epilog(cfg, sim_slurm, ctx) == 0
    assert leftovers(tmp_path) == CLEAN
    assert sim_processes(tmp_path) == []
    lines = [json.loads(x) for x in Path(cfg.paths.log_file).read_text().splitlines()] \
        if Path(cfg.paths.log_file).exists() else []
    assert not sim_slurm.nodes_["tray01"].reason
    stops = [x for x in lines if x.get("event") == "daemon stop"]
    assert not lines or stops[-1]["outcome"] == "killed"


def config_file(tmp_path, cfg) -> Path:
    """``cfg``'s settings from its file (here: the test's table) as a TOML file, for the
    real command line."""
    from imexctl.ops.settings import effective_settings

    sections: dict[str, list[str]] = {}
    for s in effective_settings(cfg):
        if s.origin == "file" and s.value is not None:
            section, key = s.key.split(".", 1)
            sections.setdefault(section, []).append(f"{key} = {json.dumps(s.value)}")
    path = tmp_path / "imexctl.toml"
    path.write_text("".join(f"[{name}]\n" + "\n".join(lines) + "\n"
                            for name, lines in sections.items()))
    return path


# What Slurm gives an Epilog on its kill paths (Slurm's source, 22.05 to 26.05): the resent
# terminate request (re_kill_job) carries no node list (tests/integration: terminate-resent);
# an abort of a job slurmctld no longer knows names only this tray, as uid 0 (root).
EPILOG_ENVS = {
    "resent-terminate": {"SLURM_JOB_UID": "65534", "SLURM_JOB_USER": "nobody"},
    "orphan-abort": {"SLURM_JOB_UID": "0", "SLURM_JOB_USER": "root", "SLURM_NODELIST": "tray01"},
}


@pytest.mark.parametrize("shape", list(EPILOG_ENVS))
def test_epilog_without_the_jobs_node_list_still_cleans_the_tray(tmp_path, sim_slurm, job_id,
                                                                  shape):
    """Before, an Epilog without a node list exited 2 and Slurm drained the tray (40 trays
    on a 72-tray run). Through the real command line, with each environment Slurm's kill
    paths give: exit 0, the daemon, channel, job directory and record gone, and the log
    says why when there was no list."""
    import subprocess

    cfg = sim_cfg(tmp_path, policy="all")
    ctx = ctx_for(job_id, nodes="tray01")
    assert run_prolog(cfg, sim_slurm, ctx) == 0
    daemon = StateStore(cfg.paths.state_dir).load().daemon.pid
    assert leftovers(tmp_path) != CLEAN and psutil.pid_exists(daemon)
    env = {"PATH": "/usr/bin:/bin", "IMEXCTL_CONFIG": str(config_file(tmp_path, cfg)),
           "SLURM_JOB_ID": str(job_id), "SLURMD_NODENAME": "tray01",
           "SLURM_SCRIPT_CONTEXT": "epilog_slurmd", **EPILOG_ENVS[shape]}
    proc = subprocess.run([sys.executable, "-m", "imexctl", "epilog"], env=env,
                          capture_output=True, text=True, timeout=60,
                          cwd=Path(__file__).resolve().parents[2])
    for p in sim_processes(tmp_path) if proc.returncode else ():
        p.kill()    # a failed epilog: leave no daemon behind
    assert proc.returncode == 0, proc.stderr
    assert leftovers(tmp_path) == CLEAN and sim_processes(tmp_path) == []
    assert not psutil.pid_exists(daemon) or psutil.Process(daemon).status() == "zombie"
    lines = [json.loads(x) for x in Path(cfg.paths.log_file).read_text().splitlines()]
    epilog = [x for x in lines if x.get("hook") == "epilog"]
    warned = any("no node list" in x["event"] and x["level"] == "warning" for x in epilog)
    assert warned == ("SLURM_NODELIST" not in env)
    assert any(x["event"] == "daemon stop" and x["pid"] == daemon for x in epilog)
