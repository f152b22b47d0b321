"""`imexctl health` decisions: fabric, published identity, stale domain, dead daemon,
leaked channels and job dirs; drain with health/ reasons, lift only its own drains."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from imexctl.fabric import simulated_tray, write_fabric_file
from imexctl.health import check
from imexctl.teardown import job_dir
from imexctl.state import DaemonIdentity, StateStore
from tests.unit.fakes import Job
from tests.unit.test_lifecycle import UUID, leftovers, make_cfg, published, slurm  # noqa: F401

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="mknod of a channel device needs root")


def test_healthy_idle_node(tmp_path, slurm, capsys):
    assert check(make_cfg(tmp_path), slurm) == 0
    assert "imexctl health: OK (tray01" in capsys.readouterr().out
    assert not [c for c in slurm.calls if c[0] == "drain"]


def test_unfit_fabric_drains_with_health_reason(tmp_path, slurm, capsys):
    cfg = make_cfg(tmp_path)
    write_fabric_file(tmp_path / "fabric.json", simulated_tray(UUID, 1, **{"2": {"health_mask": 0x1A6}}))
    assert check(cfg, slurm) == 1
    node = slurm.nodes_["tray01"]
    assert node.state == "IDLE+DRAIN"
    assert node.reason == "imexctl: health/fabric: GPU 2 fabric unhealthy (route_recovery=1)"
    assert "FAIL fabric" in capsys.readouterr().out


def test_report_only_does_not_drain(tmp_path, slurm):
    cfg = make_cfg(tmp_path)
    write_fabric_file(tmp_path / "fabric.json", simulated_tray(UUID, 1, **{"0": {"state": 1}}))
    assert check(cfg, slurm, drain=False) == 1
    assert slurm.nodes_["tray01"].state == "IDLE"


def test_health_lifts_only_its_own_drain(tmp_path, slurm):
    cfg = make_cfg(tmp_path)
    node = slurm.nodes_["tray01"]
    node.state, node.reason = "IDLE+DRAIN", "imexctl: prolog/wait-ready: local daemon DOWN"
    assert check(cfg, slurm) == 0
    assert node.state == "IDLE+DRAIN"  # a prolog drain waits for an admin
    node.reason = "imexctl: health/fabric: GPU 0 fabric state Not Started, not Completed"
    assert check(cfg, slurm) == 0
    assert node.state == "IDLE" and node.reason == ""


def test_changed_identity_is_republished(tmp_path, slurm, capsys):
    slurm.publish("tray01", published(clique=7))
    assert check(make_cfg(tmp_path), slurm) == 0
    assert json.loads(slurm.nodes_["tray01"].extra)["imex"]["clique_id"] == 1
    assert f"published identity {UUID}.1 (was {UUID}.7)" in capsys.readouterr().out


@needs_root
def test_stale_domain_and_leaks_are_repaired(tmp_path, slurm, capsys):
    from imexctl.channels import create_channel
    from tests.unit.test_state_fsutil import make_record
    cfg = make_cfg(tmp_path)
    job_dir(cfg, 41).mkdir(parents=True)
    job_dir(cfg, 40).mkdir(parents=True)
    create_channel(cfg.paths.channel_dir, 9, 234, 65534, 65534, 0o600)
    create_channel(cfg.paths.channel_dir, 3, 234, 65534, 65534, 0o600)
    StateStore(cfg.paths.state_dir).save(make_record(job_id=41, channel=9,
                                                     job_dir=str(job_dir(cfg, 41))))
    assert check(cfg, slurm) == 0  # job 41 is unknown to Slurm: stale
    out = capsys.readouterr().out
    assert "tore down stale domain of ended job 41" in out
    assert "removed leaked channel3" in out and "removed leftover" in out
    assert leftovers(tmp_path) == {"job_dirs": [], "channels": [], "record": False}


@needs_root
def test_running_jobs_domain_is_kept_but_dead_daemon_drains(tmp_path, slurm):
    from imexctl.channels import create_channel
    from tests.unit.test_state_fsutil import make_record
    cfg = make_cfg(tmp_path)
    slurm.jobs[41] = Job(41, ("tray01", "tray02"), state="RUNNING")
    job_dir(cfg, 41).mkdir(parents=True)
    create_channel(cfg.paths.channel_dir, 9, 234, 65534, 65534, 0o600)
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        import psutil
        ps = psutil.Process(proc.pid)
        daemon = DaemonIdentity(pid=proc.pid, create_time=ps.create_time(), exe=ps.exe())
        StateStore(cfg.paths.state_dir).save(make_record(
            job_id=41, channel=9, job_dir=str(job_dir(cfg, 41)), phase="ready", daemon=daemon))
        assert check(cfg, slurm) == 0
        assert leftovers(tmp_path) == {"job_dirs": ["job-41"], "channels": ["channel9"],
                                       "record": True}
    finally:
        proc.kill()
        proc.wait()
    assert check(cfg, slurm) == 1
    assert slurm.nodes_["tray01"].reason == (
        f"imexctl: health/domain: nvidia-imex of running job 41 (pid {proc.pid}) is gone")
    assert leftovers(tmp_path)["record"] is True  # the job's epilog cleans up, not health
