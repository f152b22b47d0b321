"""Every epilog step failing, with a real simulated domain: the other steps still run,
the drain names the failing step, and the record is kept (phase stuck) while the daemon
is not verified gone."""

from __future__ import annotations

import os
from imexctl.base.dataclass import replace

import pytest

from imexctl.lifecycle import epilog
from imexctl.lifecycle.epilog import run_epilog
from imexctl.errors import NodeFault
from imexctl.lifecycle.prolog import run_prolog
from imexctl.tray.ownership import StateStore
from tests.support.lifecycle import leftovers
from tests.support.sim_daemon import sim_processes

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="channel mknod needs root")
STEP_NAMES = [s.name for s in epilog.EPILOG_STEPS]


def test_steps_as_declared():
    assert STEP_NAMES == ["lock", "ownership", "stop-daemon", "ports", "channel", "files",
                          "record", "ledger"]


@pytest.mark.parametrize("exc,cause", [(NodeFault("injected"), "injected"),
                                       (KeyError("x"), "internal error: KeyError: 'x'")])
@pytest.mark.parametrize("name", STEP_NAMES)
def test_each_step_failing_still_runs_the_others(monkeypatch, tmp_path, world, name, exc,
                                                 cause):
    cfg, slurm, ctx = world
    assert run_prolog(cfg, slurm, ctx) == 0
    ran = []

    def wrap(step):
        def action(run):
            ran.append(step.name)
            step.action(run)
            if step.name == name:
                raise exc
        return replace(step, action=action)
    monkeypatch.setattr(epilog, "EPILOG_STEPS", [wrap(s) for s in epilog.EPILOG_STEPS])
    assert run_epilog(cfg, slurm, ctx) == 1
    assert ran == STEP_NAMES
    assert slurm.nodes_["tray01"].reason == f"imexctl: epilog/{name}: {cause}"
    assert sim_processes(tmp_path) == []
    left = leftovers(tmp_path)
    assert left["job_dirs"] == [] and left["channels"] == []
    record = StateStore(cfg.paths.state_dir).load()
    if name in ("stop-daemon", "ports"):  # the daemon is not verified gone: keep pointing
        assert record.phase == "stuck" and record.job_id == ctx.job_id
    else:
        assert record is None
