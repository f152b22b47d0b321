"""Per-job IMEX domains on the real Slurm harness: prolog/epilog on every tray, as slurmd
runs them, with the simulated IMEX stack. Jobs run as `nobody`. Every wait polls."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import time

import pytest

from tests.support.harness import assert_clean, channels, wait_running_domain

pytestmark = pytest.mark.integration

NOBODY = 65534


def assert_job_never_ran_and_only_drained(c, job, tray):
    """After a node fault: the job produced nothing, only `tray` is drained, and every
    tray (the drained one too) was cleaned up."""
    c.client(["scancel", str(job)], check=False)
    c.wait_quiet(timeout=90)
    assert not (c.state_dir / "jobs" / f"{job}.out").exists()
    assert [t for t in c.trays if "DRAIN" in c.node_info(t)["state"]] == [tray]
    assert_clean(c, c.trays)


def test_four_tray_job_gets_one_domain_and_leaves_nothing(imex):
    c = imex
    script = c.state_dir / "jobs" / "domain.sh"
    script.write_text("#!/bin/sh\nsrun -l sh -c 'ls -ln " + str(c.state_dir) +
                      "/trays/$(hostname)/dev/nvidia-caps-imex-channels'\nsleep 6\n")
    job = c.submit(["-N", "4", str(script)])
    sts = wait_running_domain(c, job, c.trays)
    digests = {s["domain"]["digest"] for s in sts.values()}
    assert len(digests) == 1
    dom = sts["tray01"]["domain"]
    assert dom["nodes"] == c.trays and dom["daemon"]["alive"] and dom["domain_state"] == "UP"
    assert [m["status"] for m in dom["members"]] == ["READY"] * 4
    # nodes_config.cfg is byte-identical on every tray, in Slurm's node order
    cfgs = {t: (c.state_dir / "trays" / t / "run" / f"job-{job}" / "nodes_config.cfg").read_bytes()
            for t in c.trays}
    assert len(set(cfgs.values())) == 1
    assert cfgs["tray01"].decode().split() == [c.tray_addrs()[t] for t in c.trays]
    # the real ctl tool's view from one tray
    view = c.exec_on("tray02", [str(c.sim_ctl), "-c", f"{dom['job_dir'].replace('tray01', 'tray02')}/config.cfg",
                                "-N", "-j"])
    assert view.returncode == 0, view.stderr
    assert json.loads(view.stdout)["status"] == "UP"
    # the channel: a char device only the job's user can open
    for tray in c.trays:
        (name, st), = channels(c, tray).items()
        assert name == f"channel{dom['channel']}"
        assert stat.S_ISCHR(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600
        assert st.st_uid == NOBODY and os.major(st.st_rdev) == 234
    table = c.imexctl("tray03", "status")
    assert f"job:           {job}" in table and "ready" in table
    info = c.wait_job_state(job, ("COMPLETED", "FAILED", "CANCELLED"), timeout=60)
    assert info["JobState"] == "COMPLETED", info
    assert f"crw------- 1 {NOBODY}" in c.job_output(job)
    c.wait_quiet()
    assert_clean(c, c.trays)
    assert "domain:        none" in c.imexctl("tray03", "status")
    assert all("DRAIN" not in c.node_info(t)["state"] for t in c.trays)


def test_two_consecutive_jobs_on_the_same_trays(imex):
    """The second job on trays the first one just left gets its own domain UP, as the
    first did: each job's tasks on all four trays are told so by the TaskProlog."""
    c = imex
    script = c.state_dir / "jobs" / "told.sh"
    script.write_text("#!/bin/sh\nsrun -l sh -c 'echo $(hostname) "
                      "IMEX_DOMAIN_STATE=$IMEX_DOMAIN_STATE IMEX_DOMAIN_NODES=$IMEX_DOMAIN_NODES'\n")
    script.chmod(0o755)
    for _ in range(2):
        job = c.submit(["-N", "4", str(script)])
        info = c.wait_job_state(job, ("COMPLETED", "FAILED", "CANCELLED"), timeout=60)
        assert info["JobState"] == "COMPLETED", info
        out = c.job_output(job)
        for tray in c.trays:
            assert f"{tray} IMEX_DOMAIN_STATE=UP IMEX_DOMAIN_NODES=tray[01-04]" in out, out
        c.wait_quiet()
        assert_clean(c, c.trays)


def test_concurrent_jobs_on_disjoint_trays_get_separate_domains(imex):
    c = imex
    a = c.submit(["-N", "2", "-w", "tray01,tray02", "--wrap", "sleep 8"])
    b = c.submit(["-N", "2", "-w", "tray03,tray04", "--wrap", "sleep 8"])
    sa = wait_running_domain(c, a, ["tray01", "tray02"])["tray01"]["domain"]
    sb = wait_running_domain(c, b, ["tray03", "tray04"])["tray03"]["domain"]
    assert sa["digest"] != sb["digest"]
    assert {sa["server_port"], sa["cmd_port"]}.isdisjoint({sb["server_port"], sb["cmd_port"]})
    assert sa["channel"] != sb["channel"]
    assert sa["domain_state"] == sb["domain_state"] == "UP"
    assert len(sa["members"]) == len(sb["members"]) == 2
    for job in (a, b):
        assert c.wait_job_state(job, ("COMPLETED", "FAILED"), timeout=60)["JobState"] == "COMPLETED"
    c.wait_quiet()
    assert_clean(c, c.trays)


def test_job_spanning_two_cliques_gets_one_domain_per_clique(imex):
    """The default multi-clique policy (per-clique): a multi-rack job runs, each clique's
    trays forming their own domain ('refuse' and 'skip': tests/integration/test_multiclique.py)."""
    c = imex
    c.set_fabric("tray04", 4, clique_id=2)
    assert "published clique" in c.imexctl("tray04", "identity", "publish")
    job = c.submit(["-N", "4", "--wrap", "sleep 3"])
    sts = wait_running_domain(c, job, c.trays)
    assert [sts[t]["domain"]["nodes"] for t in c.trays] == [["tray01", "tray02", "tray03"]] * 3 + [["tray04"]]
    assert len({sts[t]["domain"]["digest"] for t in ("tray01", "tray02", "tray03")}) == 1
    assert sts["tray04"]["domain"]["digest"] != sts["tray01"]["domain"]["digest"]
    info = c.wait_job_state(job, ("CANCELLED", "COMPLETED", "FAILED"), timeout=60)
    assert info["JobState"] == "COMPLETED"
    c.wait_quiet()
    assert all("DRAIN" not in c.node_info(t)["state"] for t in c.trays)
    assert_clean(c, c.trays)


@pytest.mark.host_slurm_only("CI time: the fault matrix's fabric-in-progress row covers it on every Slurm (~18 s)")
def test_tray_with_gpu_not_completed_is_drained(imex):
    c = imex
    gpus = [{"index": i, "cluster_uuid": "5b1b3a1e-1c1a-4d0e-9a5e-000000000001", "clique_id": 1,
             "state": "IN_PROGRESS" if i == 1 else "COMPLETED"} for i in range(4)]
    c.set_fabric("tray02", gpus)
    job = c.submit(["-N", "4", "--wrap", "echo ran"])
    node = c.wait_node_state("tray02", lambda st: "DRAIN" in st, timeout=60)
    assert node["reason"] == "imexctl: prolog/fabric: GPU 1 fabric state In Progress, not Completed"
    info = c.wait_job_state(job, "PENDING", timeout=60)
    assert "held" in info["Reason"] or info["Priority"] == "0", info
    assert_job_never_ran_and_only_drained(c, job, "tray02")


@pytest.mark.host_slurm_only("CI time: the fault matrix's never-ready row and test_outcomes cover it on every Slurm (~18 s)")
def test_daemon_never_ready_drains_its_tray_and_job_does_not_run(imex):
    c = imex
    c.inject_fault("tray03", {"never_ready": True})
    job = c.submit(["-N", "4", "--wrap", "echo ran"])
    node = c.wait_node_state("tray03", lambda st: "DRAIN" in st, timeout=90)
    assert node["reason"].startswith("imexctl: prolog/wait-ready: local daemon"), node["reason"]
    c.wait_job_state(job, ("PENDING", "CANCELLED"), timeout=60)
    assert_job_never_ran_and_only_drained(c, job, "tray03")


def test_daemon_ignoring_sigterm_is_killed_and_tray_stays_healthy(imex):
    c = imex
    c.inject_fault("tray02", {"hang_on_sigterm": True})
    job = c.submit(["-N", "2", "-w", "tray01,tray02", "--wrap", "true"])
    info = c.wait_job_state(job, ("COMPLETED", "FAILED", "CANCELLED"), timeout=60)
    assert info["JobState"] == "COMPLETED"
    c.wait_quiet(timeout=60)
    assert_clean(c, ["tray01", "tray02"])
    assert "DRAIN" not in c.node_info("tray02")["state"]
    log = (c.state_dir / "trays" / "tray02" / "log" / "imexctl.log").read_text()
    stops = [json.loads(line) for line in log.splitlines()
             if '"daemon stop"' in line and f'"job_id": {job}' in line]
    assert stops and stops[-1]["outcome"] == "killed", stops


def test_reused_pid_in_stale_record_is_never_signalled(imex):
    c = imex
    victim = subprocess.Popen(["nsenter", "-t", str(c.tray_pid("tray01")), "-n", "-m", "--",
                               "sleep", "300"], start_new_session=True)
    try:
        time.sleep(0.3)
        state = c.state_dir / "trays" / "tray01" / "state"
        record = {"job_id": 999001, "uid": NOBODY, "user": "nobody", "nodes": ["tray01"],
                  "addresses": [c.tray_addrs()["tray01"]], "node_id": 0, "digest": "stale",
                  "server_port": 40000, "cmd_port": 50000, "channel": None,
                  "channel_rule": "job-id", "job_dir": str(c.state_dir / "trays/tray01/run/job-999001"),
                  "phase": "ready",
                  "daemon": {"pid": victim.pid, "create_time": 1.0, "exe": "/usr/bin/sleep",
                             "launcher": "direct"}}
        (state / "domain.json").write_text(json.dumps(record))
        job = c.submit(["-N", "2", "-w", "tray01,tray02", "--wrap", "true"])
        try:
            info = c.wait_job_state(job, ("COMPLETED", "FAILED", "CANCELLED"), timeout=60)
        except TimeoutError as exc:  # say which tray refused and why
            reasons = {t: c.node_info(t).get("reason") for t in ("tray01", "tray02")}
            raise AssertionError(f"{exc}; node reasons {reasons}; last outcome "
                                 f"{c.imexctl_status('tray01').get('last_outcome')}") from None
        assert info["JobState"] == "COMPLETED"
        c.wait_quiet()
        assert victim.poll() is None, "the process that reused the pid was signalled"
        assert_clean(c, ["tray01", "tray02"])
        log = (c.state_dir / "trays" / "tray01" / "log" / "imexctl.log").read_text()
        assert "stale IMEX domain of ended job found" in log
    finally:
        victim.send_signal(signal.SIGKILL)
        victim.wait()


def test_identity_round_trip_keeps_other_extra_keys(imex):
    c = imex
    c.scontrol("update", "nodename=tray01", 'extra={"rack":"r07","imex":{"clique_id":5}}')
    out = c.imexctl("tray01", "identity", "publish")
    assert "published clique 5b1b3a1e-1c1a-4d0e-9a5e-000000000001.1 (4 GPUs, imex.auth off, " \
        "imex.lifetime job)" in out
    extra = json.loads(c.node_info("tray01")["extra"])
    assert extra["rack"] == "r07" and extra["imex"]["clique_id"] == 1
    assert extra["imex"]["auth"] == "off" and extra["imex"]["lifetime"] == "job"
    rows = json.loads(c.imexctl("tray02", "identity", "show", "tray[01-04]", "--json"))
    assert [r["node"] for r in rows] == c.trays
    assert {r["clique"] for r in rows} == {"5b1b3a1e-1c1a-4d0e-9a5e-000000000001.1"}
    assert "tray04" in c.imexctl("tray02", "identity", "show", "tray[01-04]")


def test_health_check_repairs_leaks_and_drains_on_bad_fabric(imex):
    c = imex
    tray = c.state_dir / "trays" / "tray02"
    os.mknod(tray / "dev" / "nvidia-caps-imex-channels" / "channel77", 0o600 | stat.S_IFCHR,
             os.makedev(234, 77))
    (tray / "run" / "job-424242").mkdir()
    res = c.run_healthcheck("tray02")  # as slurmd runs it: root, only SLURMD_NODENAME
    assert res.returncode == 0, res.stdout + res.stderr
    assert "removed leaked channel77" in res.stdout and "job-424242" in res.stdout
    assert channels(c, "tray02") == {}
    c.set_fabric("tray02", 4, health_mask=0x19A)  # route_unhealthy
    res = c.run_healthcheck("tray02")
    assert res.returncode == 1
    node = c.wait_node_state("tray02", lambda st: "DRAIN" in st)
    assert node["reason"] == "imexctl: health/fabric: GPU 0 fabric unhealthy (route_unhealthy=TRUE)"
    c.set_fabric("tray02")
    res = c.run_healthcheck("tray02")
    assert res.returncode == 0 and "resumed tray02" in res.stdout
    c.wait_node_state("tray02", "IDLE")


@pytest.mark.host_slurm_only("waits out a slow peer (~10 s); the progress lines are imexctl's "
                             "alone, the same on every Slurm")
def test_a_prolog_waiting_for_a_slow_peer_logs_its_progress(imex):
    """Issue 28: the log is never silent while the prolog waits for UP: every few seconds
    it says how many members are READY and who is missing."""
    c = imex
    c.inject_fault("tray02", {"slow_start": 8})
    try:
        job = c.submit(["-N", "2", "-w", "tray01,tray02", "--wrap", "true"])
        assert c.wait_job_state(job, ("COMPLETED", "FAILED", "CANCELLED"),
                                timeout=90)["JobState"] == "COMPLETED"
    finally:
        c.clear_faults("tray02")
    log = (c.state_dir / "trays" / "tray01" / "log" / "imexctl.log").read_text()
    waits = [json.loads(line) for line in log.splitlines()
             if '"waiting for the IMEX domain"' in line and f'"job_id": {job}' in line]
    assert waits, "no progress line while tray02 was starting"
    first = waits[0]
    assert first["step"] == "wait-ready" and first["members"] == 2
    assert first["members_ready"] == 1 and any("tray02" in m for m in first["missing"]), first
    assert 4.5 <= first["elapsed_s"] < 8, first
    c.wait_quiet(timeout=60)
