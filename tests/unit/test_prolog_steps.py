"""Every prolog step, failing and raising the unexpected, with the simulated daemon for
real: the drain reason names the step, everything made before is undone newest-first."""

from __future__ import annotations

import json
import os
from imexctl.base.dataclass import replace
from pathlib import Path

import pytest

from imexctl.lifecycle import prolog
from imexctl.errors import NodeFault
from imexctl.lifecycle.prolog import run_prolog
from imexctl.tray.ownership import StateStore
from tests.support.lifecycle import CLEAN, leftovers
from tests.support.sim_daemon import sim_processes

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="channel mknod needs root")
STEP_NAMES = [s.name for s in prolog.PROLOG_STEPS]


def inject_after(monkeypatch, name, exc):
    """Run step ``name`` for real, then raise ``exc`` (so its own creations are undone)."""
    def wrap(step):
        def action(run):
            step.action(run)
            raise exc
        return replace(step, action=action)
    monkeypatch.setattr(prolog, "PROLOG_STEPS",
                        [wrap(s) if s.name == name else s for s in prolog.PROLOG_STEPS])


def log_events(cfg, event):
    path = Path(cfg.paths.log_file)
    lines = [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []
    return [x for x in lines if x.get("event") == event]


def test_steps_as_declared():
    assert STEP_NAMES == ["context", "fabric", "allocation", "ownership", "render", "channel",
                          "start", "wait-ready", "record"]


@pytest.mark.parametrize("name", STEP_NAMES)
def test_each_step_failing_drains_naming_it_and_undoes(monkeypatch, tmp_path, world, name):
    cfg, slurm, ctx = world
    inject_after(monkeypatch, name, NodeFault("injected"))
    assert run_prolog(cfg, slurm, ctx) == 1
    assert slurm.nodes_["tray01"].reason == f"imexctl: prolog/{name}: injected"
    assert leftovers(tmp_path) == CLEAN and sim_processes(tmp_path) == []
    outcome = StateStore(cfg.paths.state_dir).last_outcome()
    assert outcome["result"] == "node-fault" and outcome["step"] == name


@pytest.mark.parametrize("name", STEP_NAMES)
def test_unexpected_exception_in_each_step_is_undone_and_drained(monkeypatch, tmp_path, world,
                                                                  name):
    cfg, slurm, ctx = world
    inject_after(monkeypatch, name, ZeroDivisionError("division by zero"))
    assert run_prolog(cfg, slurm, ctx) == 1
    assert slurm.nodes_["tray01"].reason == (
        f"imexctl: prolog/{name}: internal error: ZeroDivisionError: division by zero")
    assert leftovers(tmp_path) == CLEAN and sim_processes(tmp_path) == []


def test_undo_stops_the_daemon_first_then_channel_files_record(monkeypatch, tmp_path, world):
    cfg, slurm, ctx = world
    inject_after(monkeypatch, "record", NodeFault("injected"))
    assert run_prolog(cfg, slurm, ctx) == 1
    assert [x["undo"] for x in log_events(cfg, "undone")] == ["daemon", "channel", "files",
                                                              "record"]
    assert leftovers(tmp_path) == CLEAN and sim_processes(tmp_path) == []


def test_stuck_daemon_in_undo_keeps_record_as_stuck_and_drains(monkeypatch, tmp_path, world):
    """F-02a / issue 9: the stop result of the failed-prolog cleanup is checked."""
    from imexctl.imex import launcher
    cfg, slurm, ctx = world
    inject_after(monkeypatch, "wait-ready", NodeFault("injected"))
    real_stop = launcher.stop
    monkeypatch.setattr(launcher, "stop", lambda ident, grace: launcher.StopResult(
        "stuck", f"pid {ident.pid} survived SIGKILL (uninterruptible?)"))
    try:
        assert run_prolog(cfg, slurm, ctx) == 1
        reason = slurm.nodes_["tray01"].reason
        assert reason.startswith("imexctl: prolog/wait-ready: injected; undo daemon: "
                                 "daemon stuck: pid ")
        record = StateStore(cfg.paths.state_dir).load()
        assert record.phase == "stuck" and record.daemon is not None
        assert launcher.find_process(record.daemon) is not None  # still pointed at
    finally:
        monkeypatch.setattr(launcher, "stop", real_stop)
        for p in sim_processes(tmp_path):
            p.kill()


def test_record_carries_this_boots_id(tmp_path, world):
    cfg, slurm, ctx = world
    boot = tmp_path / "boot_id"
    boot.write_text("4f0b2c1e-aaaa-bbbb-cccc-000000000001\n")
    cfg = replace(cfg, paths=replace(cfg.paths, boot_id_file=boot))
    assert run_prolog(cfg, slurm, ctx) == 0
    try:
        raw = json.loads((Path(cfg.paths.state_dir) / "domain.json").read_text())
        assert raw["boot_id"] == "4f0b2c1e-aaaa-bbbb-cccc-000000000001"
    finally:
        from imexctl.lifecycle.epilog import run_epilog
        assert run_epilog(cfg, slurm, ctx) == 0
