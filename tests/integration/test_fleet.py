"""Issue 9 on the real Slurm harness: what a real GB200/GB300 fleet has that a clean rack
does not. A partition of trays without an NVLink fabric (H100-like: every GPU answers
fabric state NOT_SUPPORTED), a tray whose NVLink runs at limited capacity, a tray whose
command service refuses remote queries, and the driver's world-usable channel0."""

from __future__ import annotations

import json
import os
import stat

import pytest

from tests.support.harness import (assert_clean, channels, sim_daemons,
                                   wait_running_domain)

pytestmark = pytest.mark.integration

ZERO_UUID = "00000000-0000-0000-0000-000000000000"


def tray_log(c, tray) -> str:
    path = c.state_dir / "trays" / tray / "log" / "imexctl.log"
    return path.read_text() if path.exists() else ""


def not_an_imex_tray(c, tray):
    """What a real H100 tray answers (seen on driver 580.159.04): SUCCESS, NOT_SUPPORTED,
    an all-zero cluster UUID."""
    c.set_fabric(tray, state="NOT_SUPPORTED", cluster_uuid=ZERO_UUID, clique_id=0)


def test_h100_like_partition_runs_multi_node_jobs_without_a_domain_or_a_drain(imex):
    c = imex
    for tray in c.trays:
        not_an_imex_tray(c, tray)
        c.imexctl(tray, "identity", "publish")
    logs_before = {t: len(tray_log(c, t)) for t in c.trays}
    job = c.submit(["-N", "4", "--wrap", "srun true"])
    info = c.wait_job_state(job, ("COMPLETED", "FAILED", "CANCELLED"), timeout=90)
    assert info["JobState"] == "COMPLETED", info
    c.wait_quiet(timeout=60)
    for tray in c.trays:
        node = c.node_info(tray)
        assert "DRAIN" not in node["state"], (tray, node)
        assert "not an IMEX tray" in tray_log(c, tray)[logs_before[tray]:], tray
        st = c.imexctl_status(tray)
        assert st["fabric"]["imex_tray"] is False, st
    assert_clean(c, c.trays)
    # Health never drains such a tray either.
    res = c.run_healthcheck("tray01")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "DRAIN" not in c.node_info("tray01")["state"]


def test_limited_capacity_tray_starts_its_domain_with_a_warning(imex):
    c = imex
    c.set_fabric("tray01", health_summary="LIMITED_CAPACITY")
    before = len(tray_log(c, "tray01"))
    job = c.submit(["-N", "2", "-w", "tray01,tray02", "--wrap", "sleep 3"])
    wait_running_domain(c, job, ["tray01", "tray02"])
    assert "DRAIN" not in c.node_info("tray01")["state"]
    text = tray_log(c, "tray01")[before:]
    assert "degraded" in text.lower() or "limited" in text.lower(), text[-2000:]
    info = c.wait_job_state(job, ("COMPLETED", "FAILED", "CANCELLED"), timeout=60)
    assert info["JobState"] == "COMPLETED", info
    c.wait_quiet(timeout=60)
    assert_clean(c, ["tray01", "tray02"])
    # Health judges it as the prolog did (fabric.on_degraded = warn): noted, not drained;
    # nor for degraded bandwidth in the health mask.
    for fabric in ({"health_summary": "LIMITED_CAPACITY"}, {"health_mask": 0x1A9}):
        c.set_fabric("tray01", **fabric)
        res = c.run_healthcheck("tray01")
        assert res.returncode == 0 and "degraded" in res.stdout, res.stdout + res.stderr
        assert "DRAIN" not in c.node_info("tray01")["state"]
    c.set_fabric("tray01")


@pytest.mark.host_slurm_only("CI time: the ctl view and the refusal are imexctl's; the refusal path runs on every Slurm in the fault matrix (~17 s)")
def test_tray_whose_command_service_refuses_remote_queries_gets_the_job_refused(imex):
    """The command port answers only local queries on tray02 (the real daemon's
    cmd_unreachable case): tray01 sees tray02 UNAVAILABLE and the domain never reads UP,
    so the job is refused with that tray named."""
    c = imex
    c.inject_fault("tray02", {"cmd_unreachable": True})
    job = c.submit(["-N", "2", "-w", "tray01,tray02", "--wrap", "true"])
    info = c.wait_job_state(job, ("COMPLETED", "FAILED", "CANCELLED", "PENDING"), timeout=90)
    c.wait_quiet(timeout=90)
    info = c.job_info(job)
    assert info["JobState"] in ("CANCELLED", "PENDING"), info
    reason = info.get("AdminComment", "") + " " + c.node_info("tray01").get("reason", "")
    assert "tray02" in reason, (info, c.node_info("tray01"))
    assert "DRAIN" not in c.node_info("tray01")["state"]
    c.client(["scancel", str(job)], check=False)
    c.wait_quiet(timeout=60)
    c.clear_faults("tray02")
    c.resume_all()
    for tray in ("tray01", "tray02"):
        assert sim_daemons(c, tray) == [], tray


def test_world_usable_channel0_is_reported_not_removed(imex):
    c = imex
    chdir = c.state_dir / "trays" / "tray01" / "dev" / "nvidia-caps-imex-channels"
    ch0 = chdir / "channel0"
    os.mknod(ch0, 0o666 | stat.S_IFCHR, os.makedev(234, 0))
    os.chmod(ch0, 0o666)   # as NVreg_CreateImexChannel0=1 makes it
    try:
        job = c.submit(["-N", "2", "-w", "tray01,tray02", "--wrap", "true"])
        info = c.wait_job_state(job, ("COMPLETED", "FAILED", "CANCELLED"), timeout=60)
        assert info["JobState"] == "COMPLETED", info
        c.wait_quiet(timeout=60)
        assert stat.S_IMODE(os.lstat(ch0).st_mode) == 0o666, "channel0 was changed"
        st = c.imexctl_status("tray01")
        assert "channel0 is world-usable: jobs are not isolated" in st["problems"], st
        res = c.run_healthcheck("tray01")
        assert res.returncode == 0, res.stdout + res.stderr
        assert ch0.exists() and "DRAIN" not in c.node_info("tray01")["state"]
        assert set(channels(c, "tray01")) == {"channel0"}
    finally:
        ch0.unlink()


@pytest.mark.host_slurm_only("CI time: readiness and nudging are imexctl's and the simulator's (~22 s)")
def test_tray_starting_20s_late_reaches_up_under_the_real_backoff_thanks_to_nudging(imex):
    """One tray's daemon comes up 20 s after its peer's (late_start). Its peer's first dial
    was refused, and the real daemon retries only at 15 s and 46 s: without a nudge the
    domain is DEGRADED until 46 s. The waiting prologs nudge (SIGUSR1, at most every 5 s),
    so the domain is UP well before the back-off's 46 s and within the ready timeout."""
    import time

    from tests.cluster import imexctl_config

    c = imex
    toml = c.state_dir / "etc" / "imexctl.toml"
    original = toml.read_text()
    assert "ready_timeout_s = 15" in original
    imexctl_config.atomic_write(toml, original.replace("ready_timeout_s = 15",
                                                       "ready_timeout_s = 40"))
    c.inject_fault("tray02", {"late_start": 20})
    try:
        t0 = time.monotonic()
        job = c.submit(["-N", "2", "-w", "tray01,tray02", "--wrap", "true"])
        info = c.wait_job_state(job, ("COMPLETED", "FAILED", "CANCELLED"), timeout=120)
        took = time.monotonic() - t0
        assert info["JobState"] == "COMPLETED", (info, c.node_info("tray01"),
                                                 c.node_info("tray02"))
        waits = [json.loads(line) for line in tray_log(c, "tray01").splitlines()
                 if '"wait-ready result"' in line and f'"job_id": {job}' in line]
        assert waits and waits[-1]["up"] is True and waits[-1]["nudges"] > 0, (waits, took)
        # tray01's wait: from its daemon's start to domain UP (the job's whole life
        # includes Slurm's own start and end, slower on 24.11+).
        assert waits[-1]["elapsed_ms"] < 46_000, \
            f"UP only after {waits[-1]['elapsed_ms']:.0f} ms: the un-nudged back-off says 46 s"
    finally:
        c.clear_faults("tray02")
        imexctl_config.atomic_write(toml, original)
    c.wait_quiet(timeout=60)
    assert_clean(c, ["tray01", "tray02"])


@pytest.mark.host_slurm_only("CI time: fabric judgement is imexctl's; drains run on every Slurm in the fault matrix (~17 s)")
def test_limited_capacity_tray_is_drained_when_the_site_says_drain(imex):
    from tests.cluster import imexctl_config

    c = imex
    toml = c.state_dir / "etc" / "imexctl.toml"
    original = toml.read_text()
    assert '[fabric]\nsource = "file"' in original
    imexctl_config.atomic_write(toml, original.replace(
        '[fabric]\nsource = "file"', '[fabric]\non_degraded = "drain"\nsource = "file"'))
    c.set_fabric("tray01", health_summary="LIMITED_CAPACITY")
    try:
        job = c.submit(["-N", "2", "-w", "tray01,tray02", "--wrap", "echo ran"])
        node = c.wait_node_state("tray01", lambda st: "DRAIN" in st, timeout=60)
        assert node["reason"].startswith("imexctl: prolog/fabric:"), node
        c.cancel_until_quiet(job, timeout=120)   # a requeued-held job ends more slowly on 24.11+
        assert "DRAIN" not in c.node_info("tray02")["state"]
    finally:
        imexctl_config.atomic_write(toml, original)
    assert_clean(c, ["tray01", "tray02"])
