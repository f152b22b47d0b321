"""`imexctl health`: each named check, the runner (skip, watchdog, lock discipline), and
the drain rules (own drains only, never over another drain: audit F-01)."""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import time

import pytest

from imexctl.tray import expected
from imexctl.config import HEALTH_CHECKS, parse_config
from imexctl.errors import ConfigError
from tests.support.fabric import not_imex_tray, simulated_tray, write_fabric_file
from imexctl.cli.display import health_lines as render
from imexctl.ops.health import run_checks
from imexctl.ops.health_checks import CHECKS, check_name
from imexctl.lifecycle.teardown import job_dir
from imexctl.tray.ownership import DaemonIdentity, StateStore
from tests.support.health import mkchannel, needs_root
from tests.support.memory_slurm import MemorySlurm
from tests.support.lifecycle import UUID, leftovers, make_cfg, published
from tests.support.records import make_record
from tests.support.memory_slurm import job_record

BOOT = "11111111-2222-3333-4444-555555555555"


def health(cfg, slurm, **kw):
    kw.setdefault("boot_id", BOOT)
    return run_checks(cfg, slurm, **kw)


def drains(slurm):
    return [c for c in slurm.calls if c[0] == "drain"]


def test_check_names_are_the_function_names_config_accepts():
    assert tuple(check_name(fn) for fn in CHECKS) == HEALTH_CHECKS
    assert check_name(CHECKS[5]) == "stale-domain" and CHECKS[5].__name__ == "stale_domain"


def test_healthy_idle_node(tmp_path, slurm):
    cfg = make_cfg(tmp_path)
    report = health(cfg, slurm)
    assert report.exit_code == 0 and report.problems == []
    assert report.ran == list(HEALTH_CHECKS)
    assert render(report)[-1].startswith("imexctl health: OK (tray01, ")
    assert drains(slurm) == []
    assert expected.read(cfg).state == "idle"


def test_unfit_fabric_drains_with_health_reason(tmp_path, slurm):
    cfg = make_cfg(tmp_path)
    write_fabric_file(tmp_path / "fabric.json",
                      simulated_tray(UUID, 1, **{"2": {"health_mask": 0x1A6}}))
    report = health(cfg, slurm)
    assert report.exit_code == 1 and report.drain == "drained"
    node = slurm.nodes_["tray01"]
    assert node.state == "IDLE+DRAIN"
    assert node.reason == "imexctl: health/fabric: GPU 2 fabric unhealthy (route_recovery=TRUE)"
    assert "imexctl health: FAIL fabric: GPU 2 fabric unhealthy (route_recovery=TRUE)" \
        in render(report)
    assert "imexctl health: drained tray01: imexctl: health/fabric: GPU 2 fabric unhealthy " \
           "(route_recovery=TRUE)" in render(report)


@pytest.mark.parametrize("override, on_degraded, unfit", [
    ({"health_mask": 0x1A9}, "warn", False),       # degraded_bw=TRUE: the prolog runs jobs
    ({"health_mask": 0x1A9}, "drain", True),
    ({"health_summary": 2}, "warn", True),         # summary UNHEALTHY, mask healthy
    ({"health_summary": 3}, "warn", False),        # LIMITED_CAPACITY: degraded, warn
])
def test_health_judges_the_fabric_as_the_prolog_does(tmp_path, slurm, override, on_degraded,
                                                     unfit):
    """One rule (fabric.judge under fabric.on_degraded) for the prolog, health, status and
    metrics: health never drains a tray the prolog runs jobs on, nor passes one it refuses."""
    from imexctl.tray.fabric import judge
    cfg = make_cfg(tmp_path, fabric={"source": "file", "file": str(tmp_path / "fabric.json"),
                                     "on_degraded": on_degraded})
    gpus = simulated_tray(UUID, 1, **{"1": override})
    write_fabric_file(tmp_path / "fabric.json", gpus)
    assert (judge(gpus, on_degraded).kind == "unfit") == unfit    # what the prolog decides
    report = health(cfg, slurm)
    assert (report.exit_code == 1) == unfit
    assert bool(drains(slurm)) == unfit
    if not unfit:
        assert any("degraded" in n for n in report.notes)


@pytest.mark.parametrize("policy", ["warn", "drain"])
def test_fabric_manager_restart_is_a_note_not_a_drain(tmp_path, slurm, policy):
    """Fidelity N5: gfm_state=DISCONNECTED + partition_assigned=FALSE on every GPU (a
    fabric-manager restart, seen on every tray of the rack at once) never drains, under
    either fabric.on_fabric_manager; the note says what it is."""
    cfg = make_cfg(tmp_path, fabric={"source": "file", "file": str(tmp_path / "fabric.json"),
                                     "on_fabric_manager": policy})
    every_gpu = {str(i): {"health_mask": 0xA1AA} for i in range(4)}
    write_fabric_file(tmp_path / "fabric.json", simulated_tray(UUID, 1, **every_gpu))
    report = health(cfg, slurm)
    assert report.exit_code == 0 and drains(slurm) == []
    assert any(n.startswith("fabric manager not reachable on every GPU") for n in report.notes)
    # one GPU alone: a drain where the site asks for it
    write_fabric_file(tmp_path / "fabric.json",
                      simulated_tray(UUID, 1, **{"2": {"health_mask": 0x81AA}}))
    report = health(cfg, slurm)
    assert report.exit_code == (1 if policy == "drain" else 0)
    if policy == "drain":
        assert slurm.nodes_["tray01"].reason == (
            "imexctl: health/fabric: fabric manager not reachable: GPU 2 "
            "(gfm_state=DISCONNECTED) (fabric.on_fabric_manager = drain)")


def test_report_only_does_not_drain(tmp_path, slurm):
    cfg = make_cfg(tmp_path)
    write_fabric_file(tmp_path / "fabric.json", simulated_tray(UUID, 1, **{"0": {"state": 1}}))
    assert health(cfg, slurm, mode="no-drain").exit_code == 1
    assert slurm.nodes_["tray01"].state == "IDLE" and drains(slurm) == []


@pytest.mark.parametrize("reason", [
    "imexctl: epilog/stop-daemon: daemon stuck: pid 777 survived SIGKILL",
    "imexctl: prolog/wait-ready: local daemon DOWN after 60s",
    "bad DIMM, ticket 4711",
])
def test_another_drain_is_never_replaced_nor_lifted(tmp_path, slurm, reason):
    """Audit F-01 (r25): a fabric blip must not turn an epilog drain into a health drain
    that the next passing run lifts."""
    cfg = make_cfg(tmp_path)
    slurm.set_node("tray01", state="IDLE+DRAIN", reason=reason)
    write_fabric_file(tmp_path / "fabric.json", simulated_tray(UUID, 1, **{"0": {"state": 2}}))
    report = health(cfg, slurm)
    assert report.exit_code == 1 and drains(slurm) == []
    node = slurm.nodes_["tray01"]
    assert (node.state, node.reason) == ("IDLE+DRAIN", reason)
    assert f"imexctl health: tray01 is already drained ({reason}); that drain is kept" \
        in render(report)
    write_fabric_file(tmp_path / "fabric.json", simulated_tray(UUID, 1))
    report = health(cfg, slurm)
    assert report.exit_code == 0 and report.drain == "none"
    node = slurm.nodes_["tray01"]
    assert (node.state, node.reason) == ("IDLE+DRAIN", reason)


def test_own_drain_is_updated_and_then_lifted(tmp_path, slurm):
    cfg = make_cfg(tmp_path)
    slurm.set_node("tray01", state="IDLE+DRAIN",
                   reason="imexctl: health/domain: nvidia-imex of job 3 gone")
    write_fabric_file(tmp_path / "fabric.json", simulated_tray(UUID, 1, **{"0": {"state": 1}}))
    assert health(cfg, slurm).drain == "drained"
    assert slurm.nodes_["tray01"].reason == \
        "imexctl: health/fabric: GPU 0 fabric state Not Started, not Completed"
    write_fabric_file(tmp_path / "fabric.json", simulated_tray(UUID, 1))
    report = health(cfg, slurm)
    node = slurm.nodes_["tray01"]
    # Slurm keeps the reason after a RESUME: the state says the drain is gone
    assert report.drain == "resumed" and (node.state, node.reason) == (
        "IDLE", "imexctl: health/fabric: GPU 0 fabric state Not Started, not Completed")
    assert "imexctl health: resumed tray01 (its health drain is resolved)" in render(report)


def test_changed_identity_is_republished(tmp_path, slurm):
    slurm.publish("tray01", published(clique=7))
    report = health(make_cfg(tmp_path), slurm)
    assert report.exit_code == 0
    assert json.loads(slurm.nodes_["tray01"].extra)["imex"]["clique_id"] == 1
    assert f"imexctl health: repaired: published identity {UUID}.1 (was {UUID}.7)" \
        in render(report)


@needs_root
def test_non_json_extra_does_not_stop_the_domain_checks(tmp_path):
    """Audit F-12 (r07): republishing is best effort; the stale domain is still torn down."""
    s = MemorySlurm()   # the real Extra rule: a non-JSON Extra is refused
    s.add_nodes({"tray01": "127.0.0.1"})
    s.set_node("tray01", extra="rack=7 row=3")
    cfg = make_cfg(tmp_path)
    job_dir(cfg, 41).mkdir(parents=True)
    mkchannel(cfg, 9)
    StateStore(cfg.paths.state_dir).save(make_record(job_id=41, channel=9,
                                                     job_dir=str(job_dir(cfg, 41))))
    report = health(cfg, s)
    assert report.exit_code == 0, report.problems
    assert any("Extra is not a JSON object" in n for n in report.notes)
    assert "tore down stale domain of ended job 41" in report.repaired
    assert leftovers(tmp_path) == {"job_dirs": [], "channels": [],
                                   "record": False}
    assert s.nodes_["tray01"].extra == "rack=7 row=3"


@needs_root
def test_stale_domain_and_leaks_are_repaired(tmp_path, slurm):
    cfg = make_cfg(tmp_path)
    job_dir(cfg, 41).mkdir(parents=True)
    job_dir(cfg, 40).mkdir(parents=True)
    mkchannel(cfg, 9)
    mkchannel(cfg, 3)
    StateStore(cfg.paths.state_dir).save(make_record(job_id=41, channel=9,
                                                     job_dir=str(job_dir(cfg, 41))))
    report = health(cfg, slurm)  # job 41 is unknown to Slurm: stale
    assert report.exit_code == 0
    assert report.repaired == ["tore down stale domain of ended job 41",
                               "removed leaked channel3",
                               f"removed leftover {job_dir(cfg, 40)}"]
    assert leftovers(tmp_path) == {"job_dirs": [], "channels": [],
                                   "record": False}
    state = json.loads((tmp_path / "state" / "metrics" / "state.json").read_text())
    assert state["counters"]["imexctl_stale_domains_found_total"] == {"[]": 1}


def test_slurm_is_asked_about_the_owner_without_the_node_lock(tmp_path, slurm):
    """Audit S-04: a prolog arriving while health asks Slurm gets the lock at once."""
    cfg = make_cfg(tmp_path)
    StateStore(cfg.paths.state_dir).save(make_record(job_id=41, channel=None,
                                                     job_dir=str(job_dir(cfg, 41))))
    seen = []

    def owner_alive(record):
        fd = os.open(cfg.paths.state_dir / "lock", os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # raises if health held it
            seen.append(record.job_id)
        finally:
            os.close(fd)
        return True

    report = health(cfg, slurm, owner_alive=owner_alive)
    assert seen == [41] and report.exit_code == 0
    assert StateStore(cfg.paths.state_dir).load().job_id == 41


def test_slurm_that_cannot_tell_is_not_job_gone(tmp_path, slurm):
    cfg = make_cfg(tmp_path)
    StateStore(cfg.paths.state_dir).save(make_record(job_id=41, channel=None,
                                                     job_dir=str(job_dir(cfg, 41))))

    def owner_alive(record):
        raise RuntimeError("slurmctld not responding")

    torn = []
    report = health(cfg, slurm, owner_alive=owner_alive, teardown=lambda r: torn.append(r) or [])
    assert torn == [] and report.exit_code == 0
    assert "owner of job 41 not checked: slurmctld not responding" in report.notes


def test_teardown_failure_is_a_stale_domain_problem(tmp_path, slurm):
    cfg = make_cfg(tmp_path)
    StateStore(cfg.paths.state_dir).save(make_record(job_id=41, channel=None,
                                                     job_dir=str(job_dir(cfg, 41))))
    report = health(cfg, slurm, teardown=lambda r: [("stop-daemon", "daemon stuck: pid 7")])
    assert report.exit_code == 1
    assert slurm.nodes_["tray01"].reason == ("imexctl: health/stale-domain: job 41 ended but "
                                             "its domain could not be removed (stop-daemon: "
                                             "daemon stuck: pid 7)")


@needs_root
def test_running_jobs_domain_is_kept_but_dead_daemon_drains(tmp_path, slurm):
    cfg = make_cfg(tmp_path)
    slurm.jobs[41] = job_record(41, ("tray01", "tray02"), state="RUNNING")
    job_dir(cfg, 41).mkdir(parents=True)
    mkchannel(cfg, 9)
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        import psutil
        ps = psutil.Process(proc.pid)
        daemon = DaemonIdentity(pid=proc.pid, create_time=ps.create_time(), exe=ps.exe())
        StateStore(cfg.paths.state_dir).save(make_record(
            job_id=41, channel=9, job_dir=str(job_dir(cfg, 41)), phase="ready", daemon=daemon))
        assert health(cfg, slurm).exit_code == 0
        assert leftovers(tmp_path) == {"job_dirs": ["job-41"],
                                       "channels": ["channel9"], "record": True}
        now = expected.read(cfg)
        assert (now.state, now.job_id, now.imex_expected) == ("up", 41, True)
    finally:
        proc.kill()
        proc.wait()
    assert health(cfg, slurm).exit_code == 1
    assert slurm.nodes_["tray01"].reason == (
        f"imexctl: health/domain: nvidia-imex of running job 41 (pid {proc.pid}) is gone")
    assert leftovers(tmp_path)["record"] is True  # the job's epilog cleans up, not health


DEGRADED_ANSWER = {"status": "DEGRADED", "nodes": {
    "0": {"status": "READY", "host": "10.0.0.1", "version": "580.95.05",
          "connections": {"1": {"host": "10.0.0.2", "status": "DISCONNECTED"}}},
    "1": {"status": "UNAVAILABLE", "host": "10.0.0.2", "version": "", "connections": {}}}}


@pytest.mark.parametrize("job_nodes, says", [
    (("tray01",), "imexctl health: note: domain of running job 41 is DEGRADED: tray02 left "
                  "the job (it shrank): the domain stays DEGRADED until the job ends"),
    (("tray01", "tray02"), "imexctl health: note: domain of running job 41 is DEGRADED: "
                           "tray02 UNAVAILABLE (that tray's own health finds its fault)"),
])
def test_a_running_domain_not_up_is_named_not_drained(tmp_path, slurm, job_nodes, says):
    """Audit S3-8: a job that shrank leaves the remaining tray's domain DEGRADED; health
    said OK. Now it says which tray is missing and why, from a real ctl answer; it does
    not drain (the job's user shrank it; a peer's fault is the peer's)."""
    ctl = tmp_path / "nvidia-imex-ctl"
    ctl.write_text(f"#!/bin/sh\ncat <<'EOF'\n{json.dumps(DEGRADED_ANSWER)}\nEOF\n")
    ctl.chmod(0o755)
    cfg = make_cfg(tmp_path, paths={"imex_ctl_binary": str(ctl)})
    slurm.jobs[41] = job_record(41, job_nodes, state="RUNNING")
    job_dir(cfg, 41).mkdir(parents=True)
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        import psutil
        ps = psutil.Process(proc.pid)
        daemon = DaemonIdentity(pid=proc.pid, create_time=ps.create_time(), exe=ps.exe())
        StateStore(cfg.paths.state_dir).save(make_record(
            job_id=41, channel=None, job_dir=str(job_dir(cfg, 41)), phase="ready",
            daemon=daemon))
        report = health(cfg, slurm)
    finally:
        proc.kill()
        proc.wait()
    assert report.exit_code == 0 and drains(slurm) == []
    assert says in render(report)


@needs_root
@pytest.mark.parametrize("widen", [
    lambda path: os.chmod(path, 0o666),
    lambda path: (os.chown(path, 65534, 100), os.chmod(path, 0o660)),
])
def test_a_channel_its_owner_widened_is_made_owner_only_again(tmp_path, slurm, widen):
    """Audit S3-1: the job's user owns its channel node and may chmod 0666 (or chgrp to a
    group of theirs and chmod 0660) it; health finds it, restores 0600 group root, says so,
    and does not drain (a user must not be able to drain a tray) nor remove the channel."""
    import stat as st
    cfg = make_cfg(tmp_path)
    slurm.jobs[41] = job_record(41, ("tray01", "tray02"), state="RUNNING")
    job_dir(cfg, 41).mkdir(parents=True)
    path = mkchannel(cfg, 9)
    StateStore(cfg.paths.state_dir).save(make_record(
        job_id=41, channel=9, uid=65534, job_dir=str(job_dir(cfg, 41)), phase="ready"))
    widen(path)
    before = os.lstat(path)
    report = health(cfg, slurm)
    assert report.exit_code == 0 and drains(slurm) == []
    after = os.lstat(path)
    assert (st.S_IMODE(after.st_mode), after.st_uid, after.st_gid, after.st_rdev) == (
        0o600, 65534, 0, before.st_rdev)
    mode, gid = st.S_IMODE(before.st_mode), before.st_gid
    assert f"imexctl health: repaired: channel9 of uid 65534 was mode {mode:04o} group {gid}: " \
           "restored to 0600 group 0 (job 41; its owner had widened it)" in render(report)
    assert health(cfg, slurm).repaired == []      # as made now: nothing to say


def test_job_dirs_are_matched_exactly_and_removed_by_their_own_name(tmp_path, slurm):
    """Audit F-18 (r22): job-04242 must not alias the live job-4242; job-abc and
    non-ASCII digits are not job dirs; only what was removed is reported."""
    cfg = make_cfg(tmp_path)
    slurm.jobs[4242] = job_record(4242, ("tray01",), state="RUNNING")
    StateStore(cfg.paths.state_dir).save(make_record(job_id=4242, channel=None,
                                                     job_dir=str(job_dir(cfg, 4242))))
    run = tmp_path / "run"
    for name in ("job-4242", "job-04242", "job-abc", "job-\u0664\u0662", "job-0", "job-77"):
        (run / name).mkdir(parents=True)
    (run / "job-4242" / "config.cfg").write_text("live")
    report = health(cfg, slurm)
    assert report.repaired == [f"removed leftover {run / 'job-77'}"]
    assert sorted(os.listdir(run)) == sorted(["job-4242", "job-04242",
                                              "job-abc", "job-\u0664\u0662", "job-0"])
    assert (run / "job-4242" / "config.cfg").read_text() == "live"
    assert health(cfg, slurm).repaired == []


def test_unsafe_directories_are_problems_and_never_followed(tmp_path, slurm):
    """Audit F-16: a symlinked run_dir is not followed, a world-writable channel dir is
    reported; health no longer says OK on a tray whose every prolog drains."""
    cfg = make_cfg(tmp_path)
    victim = tmp_path / "victim"
    (victim / "job-5").mkdir(parents=True)
    os.symlink(victim, tmp_path / "run")
    os.chmod(tmp_path / "dev" / "channels", 0o777)
    report = health(cfg, slurm)
    assert report.exit_code == 1
    causes = [p.cause for p in report.problems if p.check == "dirs"]
    assert any("run is a symbolic link" in c for c in causes), causes
    assert any("channels is writable by group or others" in c for c in causes), causes
    assert os.listdir(victim) == ["job-5"]
    assert slurm.nodes_["tray01"].reason.startswith("imexctl: health/dirs: ")


def test_unreadable_record_is_reported_and_nothing_is_swept(tmp_path, slurm):
    cfg = make_cfg(tmp_path)
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "domain.json").write_text("{not json")
    (tmp_path / "run" / "job-9").mkdir(parents=True)
    report = health(cfg, slurm)
    assert report.exit_code == 1
    assert slurm.nodes_["tray01"].reason.startswith(
        "imexctl: health/record: ownership record unreadable (RecordUnreadable: "
        "unreadable record")
    assert "JSONDecodeError" in slurm.nodes_["tray01"].reason
    assert (tmp_path / "run" / "job-9").is_dir()


def test_skipped_checks_do_not_run(tmp_path, slurm):
    cfg = make_cfg(tmp_path, health={"skip": ["fabric", "identity"]})
    write_fabric_file(tmp_path / "fabric.json", simulated_tray(UUID, 1, **{"0": {"state": 1}}))
    report = health(cfg, slurm)
    assert report.exit_code == 0 and report.skipped == ["fabric", "identity"]
    assert "fabric" not in report.ran and "stale-domain" in report.ran
    assert "imexctl health: skipped ([health] skip): fabric, identity" in render(report)
    assert not [c for c in slurm.calls if c[0] == "extra_merge"]


def test_unknown_check_in_skip_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match=r"health.skip: unknown check 'nvlink'"):
        parse_config({"health": {"skip": ["nvlink"]}}, None, "tray01")


def test_watchdog_stops_a_hung_check_and_drains(tmp_path, slurm):
    cfg = make_cfg(tmp_path, health={"timeout_s": 1})
    StateStore(cfg.paths.state_dir).save(make_record(job_id=41, channel=None,
                                                     job_dir=str(job_dir(cfg, 41))))
    start = time.monotonic()
    report = health(cfg, slurm, owner_alive=lambda record: time.sleep(30))
    assert time.monotonic() - start < 10
    assert "stale-domain" not in report.ran and "channels" not in report.ran
    assert slurm.nodes_["tray01"].reason == ("imexctl: health/watchdog: checks still running "
                                             "after 1s (in stale-domain); later checks not run")
    # the lock was released: a prolog can take it
    with StateStore(cfg.paths.state_dir).locked(timeout_s=0.5):
        pass


def test_a_busy_lock_skips_the_domain_checks_only(tmp_path, slurm):
    cfg = make_cfg(tmp_path, health={"lock_wait_s": 0.2})
    (tmp_path / "run" / "job-9").mkdir(parents=True)
    with StateStore(cfg.paths.state_dir).locked():
        report = health(cfg, slurm)
    assert report.exit_code == 0
    assert report.notes == ["a prolog or epilog holds the node lock; record and later "
                            "domain checks skipped"]
    assert (tmp_path / "run" / "job-9").is_dir()


@pytest.mark.parametrize("stood_down", ["lock-busy", "slurm-cannot-tell"])
def test_own_drain_is_not_lifted_by_a_run_whose_checks_stood_down(tmp_path, slurm,
                                                                  stood_down):
    """A stuck record drained health/record; a later run that could not look (a prolog
    holds the lock, or Slurm cannot say whether the owner runs) finds no problem, but that
    is not "every check passes": the drain stays. A full run then decides."""
    cfg = make_cfg(tmp_path, health={"lock_wait_s": 0.2})
    store = StateStore(cfg.paths.state_dir)
    store.save(make_record(job_id=7, channel=None, phase="stuck", daemon=None,
                           job_dir=str(job_dir(cfg, 7))))
    slurm.jobs[7] = job_record(7, ("tray01",), state="RUNNING")
    assert health(cfg, slurm).drain == "drained"
    node = slurm.nodes_["tray01"]
    assert node.reason.startswith("imexctl: health/record: record of job 7 is stuck")
    if stood_down == "lock-busy":
        with store.locked():
            report = health(cfg, slurm)
    else:
        def owner_alive(record):
            raise RuntimeError("slurmctld not responding")
        store.save(make_record(job_id=7, channel=None, job_dir=str(job_dir(cfg, 7))))
        report = health(cfg, slurm, owner_alive=owner_alive,
                        teardown=lambda r: [])
    assert report.problems == [] and report.drain != "resumed"
    assert "DRAIN" in node.state and node.reason.startswith("imexctl: health/record")


def test_node_without_nvidia_driver_is_not_drained(tmp_path, slurm):
    """A CPU node under a cluster-wide HealthCheckProgram: no libnvidia-ml, so no GPU and
    no fabric. Not an IMEX tray (as the prolog and status say), never a health/fabric drain."""
    import ctypes.util
    if ctypes.util.find_library("nvidia-ml"):
        pytest.skip("an NVIDIA driver is installed here")
    cfg = make_cfg(tmp_path, fabric={"source": "nvml"})
    report = health(cfg, slurm)
    assert report.exit_code == 0 and drains(slurm) == [], report
    assert any("no NVIDIA driver" in n and "not an IMEX tray" in n for n in report.notes)
    assert expected.read(cfg).state == "not-imex"


def test_tray_without_nvlink_fabric_is_not_an_imex_tray(tmp_path, slurm):
    cfg = make_cfg(tmp_path)
    write_fabric_file(tmp_path / "fabric.json", not_imex_tray())
    report = health(cfg, slurm)
    assert report.exit_code == 0 and drains(slurm) == []
    assert any("not an IMEX tray" in n for n in report.notes)
    now = expected.read(cfg)
    assert (now.state, now.imex_expected) == ("not-imex", False)


def test_expected_state_left_up_by_a_crash_becomes_idle(tmp_path, slurm):
    cfg = make_cfg(tmp_path)
    expected.write(cfg, expected.UP, job_id=41)
    health(cfg, slurm)
    assert expected.read(cfg).state == "idle"
    expected.write(cfg, expected.FAILED, step="prolog/wait-ready", reason="imexctl: x")
    health(cfg, slurm)
    assert expected.read(cfg).state == "failed"  # kept until the next transition


def test_old_boot_record_is_torn_down(tmp_path, slurm):
    cfg = make_cfg(tmp_path)
    slurm.jobs[41] = job_record(41, ("tray01",), state="RUNNING")  # even a "running" job id
    rec = make_record(job_id=41, channel=None, job_dir=str(job_dir(cfg, 41)))
    StateStore(cfg.paths.state_dir).save(rec)
    raw = json.loads((tmp_path / "state" / "domain.json").read_text())
    raw["boot_id"] = "00000000-0000-0000-0000-000000000000"
    (tmp_path / "state" / "domain.json").write_text(json.dumps(raw))
    job_dir(cfg, 41).mkdir(parents=True)
    report = health(cfg, slurm)
    assert report.exit_code == 0
    assert report.repaired == ["tore down the domain of job 41 left by an earlier boot"]
    assert leftovers(tmp_path) == {"job_dirs": [], "channels": [],
                                   "record": False}


def test_health_help_documents_exit_codes_for_nhc(capsys):
    from imexctl.cli import main
    assert main(["health", "--help"]) == 0
    out = capsys.readouterr().out
    assert "exit codes (HealthCheckProgram, NHC):" in out
    assert "1  problem found: node drained with 'imexctl: health/<check>: <cause>'" in out


def test_an_unexpected_error_in_a_check_is_a_finding_not_a_traceback(tmp_path, slurm):
    cfg = make_cfg(tmp_path, health={"skip": ["dirs"]})
    (tmp_path / "state").mkdir(mode=0o777)
    os.chmod(tmp_path / "state", 0o777)  # unsafe; the dirs check that would say so is skipped
    report = health(cfg, slurm)
    assert report.exit_code == 1 and "job-dirs" in report.ran
    assert report.problems[0].check == "record"
    assert report.problems[0].cause.startswith("internal error: UnsafePathError: ")


def test_a_check_out_of_file_descriptors_names_the_limit(tmp_path, slurm, monkeypatch):
    """A check that cannot start a command for want of descriptors says so (the limit),
    not "internal error" (audit 2026-11b, RLIMIT_NOFILE)."""
    import errno

    from imexctl.ops import health as health_mod
    from imexctl.base.subproc import start

    def daemons(run):   # a check that starts a command, with the pipe refused as at EMFILE
        monkeypatch.setattr(os, "pipe2", lambda flags: (_ for _ in ()).throw(
            OSError(errno.EMFILE, "Too many open files")))
        start(["/usr/bin/systemctl", "show"], 5, {})
    monkeypatch.setattr(health_mod, "CHECKS", (daemons,))
    report = health(make_cfg(tmp_path), slurm)
    monkeypatch.undo()
    soft = __import__("resource").getrlimit(__import__("resource").RLIMIT_NOFILE)[0]
    assert [(p.check, p.cause) for p in report.problems] == [(
        "daemons", f"out of file descriptors (RLIMIT_NOFILE {soft}; raise LimitNOFILE of "
                   "slurmd): cannot run systemctl")]


def test_report_as_json(tmp_path, slurm):
    import json as _json
    from imexctl.cli.display import health_json as render_json
    cfg = make_cfg(tmp_path)
    write_fabric_file(tmp_path / "fabric.json", simulated_tray(UUID, 1, **{"1": {"state": 2}}))
    doc = _json.loads(render_json(health(cfg, slurm)))
    assert doc["exit_code"] == 1 and doc["drain"] == "drained"
    assert doc["problems"] == [{"check": "fabric",
                                "cause": "GPU 1 fabric state In Progress, not Completed"}]
    assert doc["reason"] == slurm.nodes_["tray01"].reason


def test_stuck_record_is_reported_even_while_its_job_runs(tmp_path, slurm):
    """Audit F-02: the epilog kept the record as ``stuck`` (daemon not verified gone);
    health must not say OK just because the owning job still runs."""
    cfg = make_cfg(tmp_path)
    slurm.jobs[41] = job_record(41, ("tray01", "tray02"), state="RUNNING")
    StateStore(cfg.paths.state_dir).save(make_record(
        job_id=41, channel=None, job_dir=str(job_dir(cfg, 41)), phase="stuck",
        daemon=DaemonIdentity(pid=4321, create_time=1.0, exe="/usr/bin/nvidia-imex")))
    torn = []
    report = health(cfg, slurm, teardown=lambda r: torn.append(r.job_id) or [])
    assert report.exit_code == 1
    assert torn == []  # the job runs: nothing is torn down under it
    assert slurm.nodes_["tray01"].reason == (
        "imexctl: health/record: record of job 41 is stuck: the epilog could not verify its "
        "nvidia-imex (pid 4321) gone; it may hold ports 1/2 (docs/runbook.md#stuck-daemon)")
    assert StateStore(cfg.paths.state_dir).load().phase == "stuck"


def test_stuck_record_of_an_ended_job_torn_down_is_a_repair_not_a_problem(tmp_path, slurm):
    cfg = make_cfg(tmp_path)
    slurm.set_node("tray01", state="IDLE+DRAIN")
    slurm.set_node("tray01", reason="imexctl: health/record: record of job 41 is stuck: ...")
    store = StateStore(cfg.paths.state_dir)
    store.save(make_record(job_id=41, channel=None, job_dir=str(job_dir(cfg, 41)),
                           phase="stuck"))
    report = health(cfg, slurm, teardown=lambda r: store.clear() or [])
    assert report.exit_code == 0, report.problems
    assert report.repaired == ["tore down stale domain of ended job 41"]
    assert store.load() is None
    assert report.drain == "resumed" and "DRAIN" not in slurm.nodes_["tray01"].state


EPILOG_DRAIN = "imexctl: epilog/stop-daemon: daemon stuck: pid 4242 survived SIGKILL"


def test_a_hook_drain_between_healths_read_and_write_is_kept(tmp_path, slurm):
    """Slurm has no conditional update: an epilog that drains while health is between
    reading the node and draining it must not have its reason overwritten. With the
    tray's drain lock the epilog's drain waits for health's and comes last."""
    import threading

    from imexctl.lifecycle.outcome import drain as hook_drain
    cfg = make_cfg(tmp_path)
    write_fabric_file(tmp_path / "fabric.json",
                      simulated_tray(UUID, 1, **{"2": {"health_mask": 0x1A6}}))
    store = StateStore(cfg.paths.state_dir)
    epilog = threading.Thread(target=hook_drain, args=(slurm, store, "tray01", EPILOG_DRAIN))
    read = slurm.nodes

    def nodes(names):   # health has read the node to decide; the epilog concludes just then
        seen = read(names)
        if sys._getframe(1).f_code.co_name == "_drain_action" and epilog.ident is None:
            epilog.start()
            epilog.join(timeout=0.5)
        return seen
    slurm.nodes = nodes
    report = health(cfg, slurm)
    epilog.join(timeout=30)
    assert report.drain == "drained" and not epilog.is_alive()
    assert [c[2] for c in drains(slurm)] == [report.reason, EPILOG_DRAIN]
    node = slurm.nodes_["tray01"]
    assert (node.state, node.reason) == ("IDLE+DRAIN", EPILOG_DRAIN)


def test_a_drain_goes_on_without_the_drain_lock(tmp_path, slurm):
    """A drain lock held past the wait, or a state dir that cannot hold one, never loses
    the drain."""
    from imexctl.lifecycle.outcome import drain as hook_drain
    from imexctl.tray.ownership import DRAIN_LOCK
    cfg = make_cfg(tmp_path)
    store = StateStore(cfg.paths.state_dir)
    store.dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(store.dir / DRAIN_LOCK, os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        import imexctl.lifecycle.outcome as outcome
        outcome.DRAIN_LOCK_WAIT_S, wait = 0.2, outcome.DRAIN_LOCK_WAIT_S
        try:
            hook_drain(slurm, store, "tray01", EPILOG_DRAIN)
        finally:
            outcome.DRAIN_LOCK_WAIT_S = wait
    finally:
        os.close(fd)
    assert slurm.nodes_["tray01"].reason == EPILOG_DRAIN
    os.chmod(store.dir, 0o777)     # unsafe: no lock is taken there, the drain still happens
    try:
        hook_drain(slurm, store, "tray02", EPILOG_DRAIN)
    finally:
        os.chmod(store.dir, 0o755)
    assert slurm.nodes_["tray02"].reason == EPILOG_DRAIN


@pytest.mark.parametrize("planted", ["fifo", "symlink"])
def test_a_planted_drain_lock_is_not_followed_and_the_drain_happens(tmp_path, slurm, planted):
    """A FIFO or a symlink in place of state_dir/drain.lock is refused (never opened,
    never created through), and the drain still happens."""
    from imexctl.lifecycle.outcome import drain as hook_drain
    from imexctl.lifecycle.outcome import drain_guard
    from imexctl.tray.ownership import DRAIN_LOCK
    cfg = make_cfg(tmp_path)
    store = StateStore(cfg.paths.state_dir)
    store.dir.mkdir(parents=True, exist_ok=True)
    target = tmp_path / "elsewhere"
    if planted == "fifo":
        os.mkfifo(store.dir / DRAIN_LOCK)
    else:
        (store.dir / DRAIN_LOCK).symlink_to(target)
    with drain_guard(store, 1.0) as held:
        assert held is False
    hook_drain(slurm, store, "tray01", EPILOG_DRAIN)
    assert slurm.nodes_["tray01"].reason == EPILOG_DRAIN
    assert not target.exists() and os.path.islink(store.dir / DRAIN_LOCK) == (planted != "fifo")


def test_health_defers_while_a_hook_holds_the_drain_lock(tmp_path, slurm, monkeypatch):
    """Health does not drain (nor lift) without the drain lock when a hook holds it past
    its wait: it would overwrite the hook's reason. It says so and tries on its next run."""
    import imexctl.lifecycle.outcome as outcome
    from imexctl.tray.ownership import DRAIN_LOCK
    cfg = make_cfg(tmp_path)
    write_fabric_file(tmp_path / "fabric.json",
                      simulated_tray(UUID, 1, **{"2": {"health_mask": 0x1A6}}))
    store = StateStore(cfg.paths.state_dir)
    store.dir.mkdir(parents=True, exist_ok=True)
    monkeypatch.setattr(outcome, "HEALTH_DRAIN_LOCK_WAIT_S", 0.2)
    fd = os.open(store.dir / DRAIN_LOCK, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        report = health(cfg, slurm)
    finally:
        os.close(fd)
    assert report.exit_code == 1 and drains(slurm) == []
    assert report.drain == "deferred: another imexctl holds the drain lock"
    assert slurm.nodes_["tray01"].state == "IDLE"
    assert "imexctl health: tray01 left as it is until the next run (another imexctl holds " \
           "the drain lock)" in render(report)
    report = health(cfg, slurm)      # the lock is free again
    assert report.drain == "drained" and slurm.nodes_["tray01"].reason == report.reason
