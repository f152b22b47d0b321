"""Slurm 26.05's health primitives (issue 28), read once each and honoured by `imexctl
health`; on older Slurm (no such variable or key) health behaves as before.

- SLURM_NODE_IS_HEALTHY (slurmd, 26.05.2+ with SlurmctldParameters=health_check_report;
  26.11 by default): "yes" means slurmctld holds the node neither down, drained, failing
  nor in maintenance, so a passing run has no drain to lift and asks Slurm nothing.
- HealthCheckTimeout (26.05+): the checks' deadline stays under it with a margin.
- HealthCheckNodeState=REBOOT_ONLY (26.05+): every run is a post-reboot run (slurmd sets
  no variable for it); the post-reboot checks run whatever [health] skip says."""

from __future__ import annotations

import json
import time

import pytest

from imexctl.lifecycle.teardown import job_dir
from imexctl.ops.health import run_checks
from imexctl.slurm.healthcheck import SlurmdFacts, budget_s, node_is_healthy, slurmd_facts
from imexctl.slurm.localconf import load
from imexctl.tray.ownership import StateStore
from tests.support.lifecycle import leftovers, make_cfg, write_slurm_conf
from tests.support.records import make_record

BOOT = "11111111-2222-3333-4444-555555555555"
HEALTH_DRAIN = "imexctl: health/fabric: an old finding"


@pytest.mark.parametrize("value, verdict", [("yes", True), ("no", False), (None, None),
                                            ("YES", None), ("", None), ("1", None)])
def test_slurm_node_is_healthy_is_yes_no_or_unknown(value, verdict):
    env = {} if value is None else {"SLURM_NODE_IS_HEALTHY": value}
    assert node_is_healthy(env) is verdict


def test_the_facts_come_from_slurm_conf_and_the_environment(tmp_path):
    cfg = make_cfg(tmp_path)
    assert slurmd_facts(cfg, env={}) == SlurmdFacts(conf=str(tmp_path / "slurm.conf"))
    write_slurm_conf(tmp_path, extra="HealthCheckProgram=/usr/sbin/imexctl-health\n"
                                     "HealthCheckTimeout=20\nHealthCheckNodeState=REBOOT_ONLY")
    facts = slurmd_facts(cfg, env={"SLURM_NODE_IS_HEALTHY": "no"})
    assert (facts.node_is_healthy, facts.timeout_s, facts.post_reboot) == (False, 20, True)
    assert facts.describe() == {"SLURM_NODE_IS_HEALTHY": "no", "HealthCheckTimeout": "20",
                                "HealthCheckNodeState": "REBOOT_ONLY"}
    # Slurm resets 0 (and what it cannot read) to its default, 60
    write_slurm_conf(tmp_path, extra="HealthCheckTimeout=0\nHealthCheckNodeState=IDLE,CYCLE")
    conf = load(tmp_path / "slurm.conf")
    assert (conf.health_check_timeout_s, conf.health_check_reboot_only) == (60, False)
    (tmp_path / "slurm.conf").unlink()     # no slurm.conf: the settings are unknown
    assert slurmd_facts(cfg, env={}).timeout_s is None


@pytest.mark.parametrize("limit, own, deadline", [
    (None, 60.0, 60.0),          # older Slurm: [health] timeout_s, as before
    (60, 60.0, 48.0), (20, 60.0, 15.0), (5, 60.0, 2.5), (300, 60.0, 60.0), (300, 500.0, 240.0)])
def test_the_deadline_stays_inside_health_check_timeout(tmp_path, limit, own, deadline):
    cfg = make_cfg(tmp_path, health={"timeout_s": own})
    assert budget_s(cfg, SlurmdFacts(timeout_s=limit)) == deadline


def test_the_watchdog_fires_inside_health_check_timeout(tmp_path, slurm):
    cfg = make_cfg(tmp_path)                     # [health] timeout_s = 60: Slurm's is less
    write_slurm_conf(tmp_path, extra="HealthCheckTimeout=4")
    StateStore(cfg.paths.state_dir).save(make_record(job_id=41, channel=None,
                                                     job_dir=str(job_dir(cfg, 41))))
    start = time.monotonic()
    report = run_checks(cfg, slurm, boot_id=BOOT, owner_alive=lambda record: time.sleep(30))
    assert time.monotonic() - start < 4
    assert report.budget_s == 2.0 and report.slurm_facts == {"HealthCheckTimeout": "4"}
    assert slurm.nodes_["tray01"].reason == ("imexctl: health/watchdog: checks still running "
                                             "after 2s (in stale-domain); later checks not run")


@pytest.mark.parametrize("env, lifted, asked", [
    ({}, True, True),                                   # older Slurm: as before
    ({"SLURM_NODE_IS_HEALTHY": "no"}, True, True),      # drained: ours is lifted
    ({"SLURM_NODE_IS_HEALTHY": "yes"}, False, False),   # nothing drained: nothing asked
])
def test_a_passing_run_lifts_its_drain_as_slurmctld_sees_the_node(tmp_path, slurm, monkeypatch,
                                                                  env, lifted, asked):
    monkeypatch.delenv("SLURM_NODE_IS_HEALTHY", raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    cfg = make_cfg(tmp_path)
    slurm.set_node("tray01", state="IDLE+DRAIN", reason=HEALTH_DRAIN)
    slurm.calls.clear()
    report = run_checks(cfg, slurm, boot_id=BOOT)
    assert report.exit_code == 0
    assert (report.drain == "resumed") is lifted
    assert any(c[0] == "resume_if_ours" for c in slurm.calls) is asked
    assert (slurm.nodes_["tray01"].state == "IDLE") is lifted


def test_a_failing_run_drains_whatever_slurm_node_is_healthy_says(tmp_path, slurm, monkeypatch):
    from tests.support.fabric import simulated_tray, write_fabric_file
    from tests.support.lifecycle import UUID
    monkeypatch.setenv("SLURM_NODE_IS_HEALTHY", "yes")
    cfg = make_cfg(tmp_path)
    write_fabric_file(tmp_path / "fabric.json",
                      simulated_tray(UUID, 1, **{"2": {"health_mask": 0x1A6}}))
    assert run_checks(cfg, slurm, boot_id=BOOT).drain == "drained"


def plant_old_boot(cfg, tmp_path):
    StateStore(cfg.paths.state_dir).save(make_record(job_id=41, channel=None,
                                                     job_dir=str(job_dir(cfg, 41))))
    raw = json.loads((tmp_path / "state" / "domain.json").read_text())
    raw["boot_id"] = "00000000-0000-0000-0000-000000000000"
    (tmp_path / "state" / "domain.json").write_text(json.dumps(raw))
    job_dir(cfg, 41).mkdir(parents=True)
    job_dir(cfg, 40).mkdir(parents=True)


@pytest.mark.parametrize("reboot_only", [False, True])
def test_reboot_only_runs_the_post_reboot_checks_whatever_skip_says(tmp_path, slurm,
                                                                    reboot_only):
    """Under HealthCheckNodeState=REBOOT_ONLY slurmd runs health only after a reboot Slurm
    issued: the boot-id check, the channel and job-dir sweeps run even when [health] skip
    lists them. Without it (older Slurm, other states) skip is honoured as before."""
    cfg = make_cfg(tmp_path, health={"skip": ["reboot", "channels", "job-dirs"]})
    if reboot_only:
        write_slurm_conf(tmp_path, extra="HealthCheckNodeState=REBOOT_ONLY")
    plant_old_boot(cfg, tmp_path)
    report = run_checks(cfg, slurm, boot_id=BOOT, owner_alive=lambda record: True)
    if reboot_only:
        assert report.skipped == []
        assert report.repaired == ["tore down the domain of job 41 left by an earlier boot",
                                   f"removed leftover {job_dir(cfg, 40)}"]
        assert leftovers(tmp_path) == {"job_dirs": [], "channels": [], "record": False}
        assert report.notes[0] == ("post-reboot run (HealthCheckNodeState=REBOOT_ONLY): "
                                   "reboot, channels, job-dirs run whatever [health] skip says")
    else:
        assert report.skipped == ["reboot", "channels", "job-dirs"]
        assert report.repaired == [] and leftovers(tmp_path)["record"] is True


def test_an_unreadable_slurm_conf_leaves_health_as_before(tmp_path, slurm):
    cfg = make_cfg(tmp_path)
    (tmp_path / "slurm.conf").write_text("Include /nonexistent/part.conf\nHealthCheckTimeout=4\n")
    facts = slurmd_facts(cfg, env={})
    assert facts.timeout_s is None or facts.timeout_s == 4     # Slurm's own rule decides
    (tmp_path / "slurm.conf").unlink()
    (tmp_path / "slurm.conf").mkdir()                            # not a file at all
    report = run_checks(cfg, slurm, boot_id=BOOT)
    assert report.exit_code == 0 and report.budget_s == cfg.health.timeout_s
