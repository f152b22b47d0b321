"""Fixtures shared by unit-test modules (their plain helpers are in tests/support/)."""

from __future__ import annotations

import random
import signal

import pytest

from imexctl.base import log
from tests.support.lifecycle import ctx_for, make_cfg, published
from tests.support.sim_daemon import sim_cfg
from tests.support.memory_slurm import job_record, MemorySlurm


@pytest.fixture
def slurm():
    """tray01..tray03 published in one clique, job 42 on tray01 and tray02."""
    s = MemorySlurm()
    s.add_nodes({"tray01": "127.0.0.1", "tray02": "127.0.0.2", "tray03": "127.0.0.3"})
    for n in ("tray01", "tray02", "tray03"):
        s.publish(n, published())
    s.jobs[42] = job_record(42, ("tray01", "tray02"))
    return s


@pytest.fixture
def job_id():
    return random.randrange(100_000, 900_000)  # ports derive from it: avoid parallel runs


@pytest.fixture
def sim_slurm(job_id):
    """For tests running the simulated daemon: tray01 and tray02 published, job ``job_id``
    on tray01."""
    s = MemorySlurm()
    s.add_nodes({"tray01": "127.0.0.1", "tray02": "127.0.0.2"})
    for n in ("tray01", "tray02"):
        s.publish(n, published())
    s.jobs[job_id] = job_record(job_id, ("tray01",))
    return s


@pytest.fixture
def world(tmp_path, sim_slurm, job_id):
    """(cfg, slurm, ctx): tray01 running the simulated daemon for policy 'all', logging to
    its log file, and the hook context of job ``job_id`` on tray01 alone."""
    cfg = sim_cfg(tmp_path, policy="all")
    log.setup_logging(cfg.paths.log_file, "info", "tray01", stderr=None)
    return cfg, sim_slurm, ctx_for(job_id, nodes="tray01")


@pytest.fixture
def config_file(tmp_path):
    """make_cfg(tmp_path)'s paths and fabric as an imexctl.toml, metrics' textfile_dir
    under tmp_path: for the real command line."""
    cfg = make_cfg(tmp_path)
    p = cfg.paths
    text = (f'[paths]\nstate_dir = "{p.state_dir}"\nrun_dir = "{p.run_dir}"\n'
            f'log_file = "{p.log_file}"\nchannel_dir = "{p.channel_dir}"\n'
            f'proc_devices = "{p.proc_devices}"\n'
            f'[fabric]\nsource = "file"\nfile = "{cfg.fabric.file}"\n'
            f'[metrics]\ntextfile_dir = "{tmp_path}/textfile"\n')
    (tmp_path / "imexctl.toml").write_text(text)
    return tmp_path / "imexctl.toml"


class Blocked(BaseException):
    """Raised by no_hang's alarm; a BaseException so no ``except OSError`` hides a hang."""


@pytest.fixture
def no_hang():
    """Turn a blocking open() into a failure instead of a hung test run."""
    def boom(*_):
        raise Blocked("blocked")  # not an OSError: code under test cannot swallow it
    old = signal.signal(signal.SIGALRM, boom)
    signal.alarm(5)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)
