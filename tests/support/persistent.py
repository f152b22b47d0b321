"""A rack of persistent and job-lifetime trays in MemorySlurm (issue 37's unit tests), a
persistent tray running the simulated daemon (``tray``, the ``up`` fixture), and its
channels and job directories (the harness's helpers are in tests/support/harness.py)."""

from __future__ import annotations

import os

import pytest

from imexctl.base.dataclass import replace
from imexctl.ops.health import default_teardown
from imexctl.ops.recover import recover
from imexctl.tray.bootid import current_boot_id
from imexctl.tray.ownership import StateStore
from tests.support.lifecycle import UUID, ctx_for, published, write_slurm_conf
from tests.support.memory_slurm import MemorySlurm
from tests.support.sim_daemon import sim_cfg, sim_processes

OTHER_UUID = "5b1b3a1e-1c1a-4d0e-9a5e-000000000002"
ADDRS = {"tray1": "127.0.0.1", "tray2": "127.0.0.2", "tray10": "127.0.0.10",
         "tray3": "127.0.0.3", "tray4": "127.0.0.4", "tray5": "127.0.0.5"}


def world() -> MemorySlurm:
    """tray1, tray2, tray10: persistent in clique 1; tray3: job-lifetime in clique 1;
    tray4: persistent in clique 2; tray5: persistent in another cluster's clique 1."""
    s = MemorySlurm()
    s.add_nodes(ADDRS)
    for node in ("tray10", "tray2", "tray1"):
        s.publish(node, published(lifetime="persistent"))
    s.publish("tray3", published(lifetime="job"))
    s.publish("tray4", published(clique=2, lifetime="persistent"))
    s.publish("tray5", published(uuid=OTHER_UUID, lifetime="persistent"))
    return s


def tray(tmp_path, job_id, faults=None, **imex):
    """tray1 of world()'s persistent clique, every job wanting IMEX; ports from the job id
    so parallel runs do not meet."""
    write_slurm_conf(tmp_path, ADDRS)
    base = 10000 + job_id % 4000
    cfg = sim_cfg(tmp_path, faults=faults, policy="all", lifetime="persistent",
                  server_port_base=base, cmd_port_base=base + 5000, port_span=100, **imex)
    return replace(cfg, node="tray1")


@pytest.fixture
def up(tmp_path, job_id):
    """(cfg, slurm, daemon pid): the persistent domain recovered and READY."""
    cfg, slurm = tray(tmp_path, job_id), world()
    done = recover(cfg, default_teardown(cfg), slurm, current_boot=current_boot_id(cfg))
    assert done.failures == []
    record = StateStore(cfg.paths.state_dir).load_persistent()
    yield cfg, slurm, record.daemon.pid
    for proc in sim_processes(tmp_path):
        proc.kill()


def job(slurm, job_id, uid, user):
    slurm.add_job(job_id, ("tray1",))
    return ctx_for(job_id, node="tray1", nodes="tray1", uid=uid, user=user, gid=uid)


def channels(tmp_path):
    return {name: os.stat(tmp_path / "dev" / "channels" / name)
            for name in os.listdir(tmp_path / "dev" / "channels")}


def job_dirs(tmp_path):
    return sorted(set(os.listdir(tmp_path / "run")) - {"expected.json", "persistent"})
