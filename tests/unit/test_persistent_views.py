"""Issue 37: what doctor and the metrics say of a persistent tray: launcher, grace time,
auth, the record and the daemon agreeing, the clique's published lifetimes; the up/ready
gauges, jobs and restarts (simulated nvidia-imex, brought up by the real `imexctl recover`)."""

from __future__ import annotations

import os

import pytest

from imexctl.base.dataclass import replace
from imexctl.ops.doctor import FAIL, OK, WARN, check_persistent
from imexctl.ops.health import default_teardown
from imexctl.ops.recover import recover
from imexctl.tray.bootid import current_boot_id
from imexctl.tray.ownership import StateStore
from tests.support.lifecycle import published
from tests.support.persistent import job, tray, world
from tests.support.sim_daemon import sim_cfg, sim_processes

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the persistent domain needs root")


def by_check(findings):
    return {f.check: f for f in findings}


@pytest.fixture
def up(tmp_path, job_id):
    cfg, slurm = tray(tmp_path, job_id), world()
    assert recover(cfg, default_teardown(cfg), slurm,
                   current_boot=current_boot_id(cfg)).failures == []
    yield cfg, slurm
    for proc in sim_processes(tmp_path):
        proc.kill()


def test_a_healthy_persistent_tray_passes(up):
    cfg, slurm = up
    slurm.publish("tray3", published(lifetime="persistent"))   # world()'s job tray joins
    found = by_check(check_persistent(cfg, slurm))
    assert {k: f.level for k, f in found.items()} == {
        "persistent-launcher": OK, "persistent-grace": OK, "persistent-auth": OK,
        "persistent-record": OK, "persistent-clique": OK}, found
    assert "IMEX_NODE_DISCONNECTED_GRACE_TIME=300 s" in found["persistent-grace"].message
    assert "3 members" in found["persistent-record"].message


def test_a_dead_daemon_and_a_changed_node_list_are_named(up, tmp_path):
    cfg, slurm = up
    record = StateStore(cfg.paths.state_dir).load_persistent()
    for proc in sim_processes(tmp_path):
        proc.kill()
        proc.wait(5)
    nodes_cfg = tmp_path / "run" / "persistent" / "nodes_config.cfg"
    nodes_cfg.write_text(nodes_cfg.read_text() + "127.0.0.9\n")
    found = by_check(check_persistent(cfg, slurm))["persistent-record"]
    assert found.level == FAIL
    assert f"nvidia-imex pid {record.daemon.pid} is not running" in found.message
    assert "is not the node list the record names" in found.message


def test_a_leaking_grace_time_in_the_running_config_fails(up, tmp_path):
    cfg, slurm = up
    config = tmp_path / "run" / "persistent" / "config.cfg"
    config.write_text(config.read_text().replace("IMEX_NODE_DISCONNECTED_GRACE_TIME=300",
                                                 "IMEX_NODE_DISCONNECTED_GRACE_TIME=-1"))
    found = by_check(check_persistent(cfg, slurm))["persistent-grace"]
    assert found.level == FAIL and "DRA #1479" in found.message


def test_the_systemd_launcher_fails(tmp_path, job_id):
    cfg = tray(tmp_path, job_id)
    cfg = replace(cfg, imex=replace(cfg.imex, launcher="systemd"))
    found = by_check(check_persistent(cfg, None))
    assert found["persistent-launcher"].level == FAIL
    assert found["persistent-record"].level == WARN      # nothing recovered here
    assert found["persistent-clique"].level == WARN      # Slurm not asked


def test_auth_job_is_refused(tmp_path, job_id):
    from imexctl.config import AuthMode

    cfg = tray(tmp_path, job_id)
    cfg = replace(cfg, imex=replace(cfg.imex, auth=AuthMode.JOB))
    found = by_check(check_persistent(cfg, None))["persistent-auth"]
    assert found.level == FAIL and "the daemon outlives jobs" in found.message


def test_a_clique_whose_trays_disagree_fails_naming_both_sides(tmp_path, job_id):
    cfg, slurm = tray(tmp_path, job_id), world()
    slurm.publish("tray2", published(lifetime="job"))
    found = by_check(check_persistent(cfg, slurm))["persistent-clique"]
    assert found.level == FAIL
    assert "tray[1,10] persistent" in found.message and "tray[2-3] job" in found.message


def test_slurm_down_is_a_warning(tmp_path, job_id):
    class Down:
        def node_table(self, names=None, partition=None):
            raise OSError("slurmctld unreachable")

    found = by_check(check_persistent(tray(tmp_path, job_id), Down()))["persistent-clique"]
    assert found.level == WARN and "slurmctld unreachable" in found.message


def gauges(cfg, live=True):
    from imexctl.ops.metrics import render
    return {line.split()[0]: float(line.split()[1]) for line in render(cfg, live_fabric=live)
            .splitlines() if line.startswith("imexctl_persistent")}


def test_metrics_say_the_persistent_domain_is_up_and_ready_and_count_its_jobs(up, job_id):
    from imexctl.lifecycle.prolog import run_prolog
    from imexctl.ops import metrics

    cfg, slurm = up
    assert gauges(cfg) == {"imexctl_persistent_domain_up": 1,
                           "imexctl_persistent_domain_ready": 1,
                           "imexctl_persistent_domain_jobs": 0,
                           "imexctl_persistent_restarts_total": 0}
    assert run_prolog(cfg, slurm, job(slurm, job_id, 1234, "alice")) == 0
    metrics.count(cfg, "persistent_restarts")
    got = gauges(cfg, live=False)
    assert got["imexctl_persistent_domain_jobs"] == 1
    assert got["imexctl_persistent_restarts_total"] == 1


def test_metrics_say_a_dead_persistent_daemon_is_down(up, tmp_path):
    cfg, _ = up
    for proc in sim_processes(tmp_path):
        proc.kill()
        proc.wait(5)
    got = gauges(cfg)
    assert got["imexctl_persistent_domain_up"] == 0
    assert got["imexctl_persistent_domain_ready"] == 0


def test_a_job_tray_exports_no_persistent_series(tmp_path):
    assert gauges(sim_cfg(tmp_path)) == {}


def test_a_clique_whose_trays_publish_two_digests_fails_naming_each_side(tmp_path, job_id):
    cfg, slurm = tray(tmp_path, job_id), world()
    slurm.publish("tray3", published(lifetime="persistent"))
    for node, digest in (("tray1", "a" * 16), ("tray2", "a" * 16), ("tray10", "b" * 16)):
        slurm.publish(node, {**published(lifetime="persistent"), "domain": digest})
    # tray3 publishes no digest (its daemon is not READY): on neither side
    found = by_check(check_persistent(cfg, slurm))["persistent-clique"]
    assert found.level == FAIL
    assert f"tray[1-2] digest {'a' * 16}; tray10 digest {'b' * 16}" in found.message
    assert "imexctl maintain --node tray1 --membership" in found.fix
    slurm.publish("tray10", {**published(lifetime="persistent"), "domain": "a" * 16})
    assert by_check(check_persistent(cfg, slurm))["persistent-clique"].level != FAIL


def expected_now(cfg):
    from imexctl.ops.metrics import render
    from imexctl.ops.status import collect

    metric = [line for line in render(cfg, live_fabric=False).splitlines()
              if line.startswith("imexctl_imex_expected ")]
    return collect(cfg, live=False)["expected"], float(metric[0].split()[1])


def test_a_daemon_is_expected_on_a_persistent_tray_with_no_job_and_with_one(up, job_id):
    """status, the metric and the file agree: the persistent daemon runs without a job
    (recover writes idle, persistent), during one, and after its epilog."""
    from imexctl.lifecycle.epilog import run_epilog
    from imexctl.lifecycle.prolog import run_prolog
    from imexctl.ops.health import run_checks
    from imexctl.tray import expected

    cfg, slurm = up
    status, metric = expected_now(cfg)
    assert (status["state"], status["imex_expected"], status["persistent"], metric) == \
        ("idle", True, True, 1.0)
    ctx = job(slurm, job_id, 1234, "alice")
    assert run_prolog(cfg, slurm, ctx) == 0
    expected.after_hook(cfg, "prolog", job_id, 0.0)
    assert expected_now(cfg)[0]["imex_expected"] is True
    assert run_epilog(cfg, slurm, ctx) == 0
    expected.after_hook(cfg, "epilog", job_id, 0.0)
    status, metric = expected_now(cfg)
    assert (status["state"], status["imex_expected"], metric) == ("idle", True, 1.0)
    # without the file (tmpfs after a reboot, before recover): derived the same way
    expected.path_for(cfg).unlink()
    status = expected_now(cfg)[0]
    assert (status["source"], status["imex_expected"]) == ("derived", True)
    # switched to lifetime job: health rewrites the file, nothing is expected when idle
    job_cfg = replace(cfg, imex=replace(cfg.imex, lifetime=type(cfg.imex.lifetime)("job")))
    expected.write(cfg, expected.IDLE)
    run_checks(job_cfg, slurm)
    status, metric = expected_now(job_cfg)
    assert (status["imex_expected"], status["persistent"], metric) == (False, False, 0.0)
