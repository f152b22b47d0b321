"""Audit findings (findings/audit-2026-11.md) on the hooks, each with a real world:
files under tmp_path, the simulated daemon, the in-memory Slurm."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from imexctl.epilog import run_epilog
from imexctl.prolog import run_prolog
from imexctl.state import StateStore
from imexctl.teardown import job_dir
from tests.unit.test_lifecycle import CLEAN, leftovers
from tests.unit.test_lifecycle_daemon import job_id, sim_processes, slurm  # noqa: F401
from tests.unit.test_prolog_steps import world  # noqa: F401

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="channel mknod needs root")


def corrupt_record(cfg, content=b"{not json"):
    path = Path(cfg.paths.state_dir) / "domain.json"
    path.write_bytes(content)
    return path


# ---------------------------------------------------------------- F-03 corrupt record
def test_prolog_on_corrupt_record_drains_naming_ownership(world):  # noqa: F811
    cfg, slurm, ctx = world
    Path(cfg.paths.state_dir).mkdir(parents=True)
    path = corrupt_record(cfg)
    assert run_prolog(cfg, slurm, ctx) == 1
    reason = slurm.nodes_["tray01"].reason
    assert reason.startswith(f"imexctl: prolog/ownership: unreadable record {path}")
    assert path.read_bytes() == b"{not json"  # left for the admin, not overwritten
    assert slurm.jobs[ctx.job_id].state.startswith("RUNNING")  # Slurm requeues on exit 1


def test_epilog_on_corrupt_record_still_stops_the_daemon_by_its_argv(tmp_path, world):  # noqa: F811
    cfg, slurm, ctx = world
    assert run_prolog(cfg, slurm, ctx) == 0
    assert len(sim_processes(tmp_path)) == 1
    corrupt_record(cfg, b"[]")
    assert run_epilog(cfg, slurm, ctx) == 1
    assert slurm.nodes_["tray01"].reason.startswith(
        "imexctl: epilog/ownership: unreadable record")
    assert sim_processes(tmp_path) == []
    assert not job_dir(cfg, ctx.job_id).exists()


def test_status_shows_an_unreadable_record(world):  # noqa: F811
    from imexctl.status import collect
    cfg, _, _ = world
    Path(cfg.paths.state_dir).mkdir(parents=True)
    corrupt_record(cfg, b"\xff\xfe")
    out = collect(cfg)
    assert out["state"] == "unreadable" and "UnicodeDecodeError" in out["problems"][0]
