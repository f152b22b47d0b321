"""A tray whose clock runs behind slurmctld's is named before its job's daemons refuse
each other's certificates (issue 36, audit S4-3): the controller's seal carries its
clock (MUNGE's ENCODE_TIME), which the node prolog compares with its own."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from imexctl.lifecycle.prolog import run_prolog
from imexctl.tray.ownership import StateStore
from tests.support.decision import NODES, record_for
from tests.support.lifecycle import CLEAN, ctx_for, leftovers, make_cfg, published
from tests.support.memory_slurm import MemorySlurm

JOB = 4242


def ctx():
    return ctx_for(JOB, nodes="tray[01-03]")


class TrayClock:
    """This tray's clock (the system boundary), ``behind_s`` behind the real one."""

    def __init__(self, behind_s: int):
        self.behind_s = behind_s

    def time(self) -> float:
        return time.time() - self.behind_s

    def __getattr__(self, name):
        return getattr(time, name)


def world(tmp_path, monkeypatch, ahead_s: int, **sections):
    from imexctl.base import log
    from imexctl.lifecycle import allocation

    key = tmp_path / "auth.key"
    key.write_bytes(os.urandom(64))
    key.chmod(0o600)
    cfg = make_cfg(tmp_path, policy={"mode": "all"}, **sections)
    log.setup_logging(cfg.paths.log_file, "info", "tray01", stderr=None)
    slurm = MemorySlurm()
    slurm.add_nodes({n: f"127.0.0.{i}" for i, n in enumerate(NODES, 1)})
    for n in NODES:
        slurm.publish(n, published(1))
    slurm.add_job(JOB, NODES, submit_time=int(time.time()) - 30)
    # sealed by a controller whose clock is ``ahead_s`` ahead of this tray's
    slurm.set_job(JOB, admin_comment=record_for(JOB, action="skip", note="test"))
    monkeypatch.setattr(allocation, "time", TrayClock(ahead_s))
    return cfg, slurm, key


def warnings(cfg):
    lines = Path(cfg.paths.log_file).read_text().splitlines()
    return [json.loads(x)["event"] for x in lines if json.loads(x).get("level") == "warning"]


def test_a_tray_far_behind_under_auth_is_drained_naming_its_clock(tmp_path, monkeypatch):
    cfg, slurm, key = world(tmp_path, monkeypatch, 900)
    cfg = make_cfg(tmp_path, policy={"mode": "all"},
                   imex={"auth": "job", "auth_secret_file": str(key), "auth_cluster": "unit"})
    assert run_prolog(cfg, slurm, ctx()) == 1
    node = slurm.nodes_["tray01"]
    assert node.drained
    assert node.reason.startswith("imexctl: prolog/allocation: this tray's clock is ")
    assert "s behind slurmctld's" in node.reason and "chrony/NTP" in node.reason
    assert slurm.jobs[JOB].state != "CANCELLED" and leftovers(tmp_path) == CLEAN
    assert StateStore(cfg.paths.state_dir).last_outcome()["step"] == "allocation"


def test_without_auth_a_clock_behind_is_a_warning_and_the_job_runs(tmp_path, monkeypatch):
    cfg, slurm, _ = world(tmp_path, monkeypatch, 900)
    assert run_prolog(cfg, slurm, ctx()) == 0
    assert not slurm.nodes_["tray01"].drained
    assert any("behind slurmctld's" in w for w in warnings(cfg))


@pytest.mark.parametrize("ahead_s", [0, 45, -3600])
def test_a_clock_in_step_or_ahead_says_nothing(tmp_path, monkeypatch, ahead_s):
    cfg, slurm, key = world(tmp_path, monkeypatch, ahead_s)
    cfg = make_cfg(tmp_path, policy={"mode": "all"},
                   imex={"auth": "job", "auth_secret_file": str(key), "auth_cluster": "unit"})
    assert run_prolog(cfg, slurm, ctx()) == 0
    assert not slurm.nodes_["tray01"].drained
    assert not any("behind" in w for w in warnings(cfg))
