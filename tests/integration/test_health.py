"""Health, recovery and the "IMEX expected here" file on the real Slurm harness: health run
as slurmd runs it (root, only SLURMD_NODENAME), drains and resumes read back from slurmctld."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import stat
import time
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from imexctl.base import proc
from tests.cluster import procs
from tests.support.harness import channels, release_file, wait_running_domain

pytestmark = pytest.mark.integration
NOBODY = 65534


def tray_path(c, tray, *parts):
    return c.state_dir.joinpath("trays", tray, *parts)


def expected_state(c, tray):
    path = tray_path(c, tray, "run", "expected.json")
    return json.loads(path.read_text()) if path.exists() else None


def wait_expected(c, tray, state, timeout=20):
    deadline = time.monotonic() + timeout
    while True:
        now = expected_state(c, tray)
        if now and now["state"] == state:
            return now
        assert time.monotonic() < deadline, (tray, now)
        time.sleep(0.2)


def hook_outcomes(c, tray, hook):
    text = c.imexctl(tray, "metrics")
    total = 0.0
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == "imexctl_hook_outcomes_total" and s.labels["hook"] == hook \
                    and s.labels["class"] == "ok":
                total += s.value
    return total


def mkchannel(c, tray, n):
    os.mknod(tray_path(c, tray, "dev", "nvidia-caps-imex-channels", f"channel{n}"),
             0o600 | stat.S_IFCHR, os.makedev(234, n))


def test_expected_state_through_a_jobs_life_and_on_a_non_imex_tray(imex):
    c = imex
    before = hook_outcomes(c, "tray01", "prolog")
    job = c.submit(["-N", "2", "-w", "tray01,tray02", "--wrap", "sleep 5"])
    wait_running_domain(c, job, ["tray01", "tray02"])
    for tray in ("tray01", "tray02"):
        up = wait_expected(c, tray, "up")
        assert up["job_id"] == job and up["imex_expected"] is True and up["node"] == tray
    assert expected_state(c, "tray03") is None or not expected_state(c, "tray03")["imex_expected"]
    assert c.wait_job_state(job, ("COMPLETED", "FAILED", "CANCELLED"), timeout=60)["JobState"] \
        == "COMPLETED"
    c.wait_quiet()
    for tray in ("tray01", "tray02"):
        idle = wait_expected(c, tray, "idle")
        assert idle["imex_expected"] is False and idle["job_id"] is None
    assert hook_outcomes(c, "tray01", "prolog") == before + 1
    # a tray without NVLink fabric (as an H100 answers: NOT_SUPPORTED, no cluster UUID):
    # not an IMEX tray, never drained for it
    c.set_fabric("tray03", 4, state="NOT_SUPPORTED",
                 cluster_uuid="00000000-0000-0000-0000-000000000000", clique_id=0)
    res = c.run_healthcheck("tray03")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "not an IMEX tray" in res.stdout
    assert expected_state(c, "tray03")["state"] == "not-imex"
    assert "DRAIN" not in c.node_info("tray03")["state"]
    c.set_fabric("tray03")
    assert c.run_healthcheck("tray03").returncode == 0
    assert expected_state(c, "tray03")["state"] == "idle"


def test_health_drains_a_stale_domain_lifts_after_recover_and_keeps_an_admin_drain(imex):
    c = imex
    run = tray_path(c, "tray02", "run")
    jdir = run / "job-999002"
    (jdir / "mnt").mkdir(parents=True)
    empty = tray_path(c, "tray02", "empty")
    empty.mkdir(exist_ok=True)
    record = {"job_id": 999002, "uid": NOBODY, "user": "nobody", "nodes": ["tray02"],
              "addresses": [c.tray_addrs()["tray02"]], "node_id": 0, "digest": "old",
              "server_port": 40002, "cmd_port": 50002, "channel": 77, "channel_rule": "job-id",
              "job_dir": str(jdir), "phase": "ready", "daemon": None,
              "boot_id": "00000000-0000-4000-8000-000000000000"}
    (tray_path(c, "tray02", "state") / "domain.json").write_text(json.dumps(record))
    mkchannel(c, "tray02", 77)
    mkchannel(c, "tray02", 78)
    # something still holds the old job's directory (a leftover mount in the tray)
    assert c.exec_on("tray02", ["mount", "--bind", str(empty), str(jdir / "mnt")]).returncode == 0
    try:
        res = c.run_healthcheck("tray02")
        assert res.returncode == 1, res.stdout + res.stderr
        node = c.wait_node_state("tray02", lambda st: "DRAIN" in st)
        assert node["reason"].startswith("imexctl: health/reboot: domain of job 999002 left by "
                                         "an earlier boot could not be removed (files: ")
        assert channels(c, "tray02") == {}  # the channel of the old domain and the leak
        assert not (tray_path(c, "tray02", "state") / "domain.json").exists()
        # still held: the next run keeps the node drained, now naming the directory
        res = c.run_healthcheck("tray02")
        assert res.returncode == 1 and "FAIL job-dirs" in res.stdout, res.stdout
    finally:
        c.exec_on("tray02", ["umount", str(jdir / "mnt")])
    out = c.imexctl("tray02", "recover")
    assert f"imexctl recover: repaired: removed leftover {jdir}" in out, out
    assert not jdir.exists()
    res = c.run_healthcheck("tray02")
    assert res.returncode == 0 and "resumed tray02" in res.stdout, res.stdout
    c.wait_node_state("tray02", "IDLE")
    assert expected_state(c, "tray02")["state"] == "idle"

    # an admin's drain is never replaced nor lifted; health still repairs what it can
    c.scontrol("update", "nodename=tray03", "state=drain", "reason=admin: cabling check")
    mkchannel(c, "tray03", 79)
    c.set_fabric("tray03", 4, health_mask=0x19A)
    res = c.run_healthcheck("tray03")
    assert res.returncode == 1
    assert "tray03 is already drained (admin: cabling check); that drain is kept" in res.stdout
    assert "removed leaked channel79" in res.stdout and channels(c, "tray03") == {}
    c.set_fabric("tray03")
    assert c.run_healthcheck("tray03").returncode == 0
    node = c.node_info("tray03")
    assert "DRAIN" in node["state"] and node["reason"] == "admin: cabling check"


FREEZER = "/sys/fs/cgroup/freezer"


@contextlib.contextmanager
def frozen(pid):
    """Put ``pid`` in a frozen cgroup-v1 freezer group: it sleeps uninterruptibly (state D,
    wchan refrigerator) and survives SIGKILL until thawed, as a daemon stuck in the driver
    does. Yields False where no v1 freezer is mounted. Thawed (and killed) afterwards."""
    group = os.path.join(FREEZER, f"imexctl-test-stuck-{os.getpid()}")
    if not os.path.isfile(os.path.join(FREEZER, "cgroup.procs")):
        yield False
        return
    os.mkdir(group)
    try:
        with open(os.path.join(group, "cgroup.procs"), "w") as f:
            f.write(str(pid))
        with open(os.path.join(group, "freezer.state"), "w") as f:
            f.write("FROZEN")
        deadline = time.monotonic() + 10
        while open(os.path.join(group, "freezer.state")).read().strip() != "FROZEN":
            assert time.monotonic() < deadline, "freezer did not freeze"
            time.sleep(0.05)
        yield True
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        with open(os.path.join(group, "freezer.state"), "w") as f:
            f.write("THAWED")
        deadline = time.monotonic() + 10
        while os.path.exists(f"/proc/{pid}") and time.monotonic() < deadline:
            time.sleep(0.05)
        with contextlib.suppress(OSError):
            os.rmdir(group)


@pytest.mark.host_slurm_only("CI time: a stuck daemon's reporting is imexctl's alone (~31 s)")
def test_a_daemon_that_cannot_be_killed_is_reported_stuck_by_status_health_and_cluster(imex):
    """Audit F-02 for real: tray02's nvidia-imex is frozen (uninterruptible, survives
    SIGKILL) when its job ends. The epilog drains with stop-daemon and keeps the record in
    phase stuck; `imexctl status` says `stuck` with the pid, job and what to do; the
    cluster view flags the tray from Slurm alone; health reports it without replacing the
    epilog's drain; once the process is gone, health clears the record."""
    c = imex
    job = c.submit(["-N", "2", "-w", "tray[01-02]", "--wrap", "sleep 300"])
    sts = wait_running_domain(c, job, ["tray01", "tray02"])
    pid = sts["tray02"]["domain"]["daemon"]["pid"]
    ports = [sts["tray02"]["domain"]["server_port"], sts["tray02"]["domain"]["cmd_port"]]
    with frozen(pid) as real:
        if real:
            c.client(["scancel", str(job)])
            node = c.wait_node_state("tray02", lambda st: "DRAIN" in st, timeout=60)
            assert node["reason"].startswith(
                f"imexctl: epilog/stop-daemon: daemon stuck: pid {pid} survived SIGKILL"), node
            c.wait_quiet(timeout=90)
        else:  # no v1 freezer here: plant the record an epilog would have kept, live pid
            path = tray_path(c, "tray02", "state", "domain.json")
            record = json.loads(path.read_text())
            path.write_text(json.dumps({**record, "phase": "stuck"}))
        st = c.imexctl_status("tray02")
        assert st["state"] == "stuck", st
        stuck = st["stuck"]
        assert (stuck["pid"], stuck["job_id"], stuck["alive"]) == (pid, job, True)
        assert stuck["ports"] == ports and stuck["runbook"] == "docs/runbook.md#stuck-daemon"
        assert st["problems"][0].startswith(f"stuck daemon: nvidia-imex pid {pid} of job {job} "
                                            "could not be stopped by the epilog")
        table = c.imexctl("tray02", "status")
        assert f"state:         stuck (nvidia-imex pid {pid} of job {job} still running" in table
        assert f"`ps -o pid,stat,wchan -p {pid}`" in table

        res = c.run_healthcheck("tray02")
        assert res.returncode == 1, res.stdout + res.stderr
        assert f"record of job {job} is stuck" in res.stdout and f"(pid {pid})" in res.stdout
        if real:
            view = json.loads(c.imexctl("tray01", "status", "--nodes", "tray[01-04]", "--json"))
            assert view["stuck_daemons"] == ["tray02"], view["imexctl_drains"]
            assert "STUCK DAEMON on tray02" in c.imexctl("tray01", "status", "--nodes",
                                                         "tray[01-04]")
            # health reports, never replaces the epilog's drain (audit F-01)
            assert c.node_info("tray02")["reason"] == node["reason"]
            assert ps_state(pid) == "D"
    # the process is gone now: health tears the rest down and clears the record
    if not real:
        c.client(["scancel", str(job)])
        c.wait_quiet(timeout=90)
    res = c.run_healthcheck("tray02")
    assert not tray_path(c, "tray02", "state", "domain.json").exists(), res.stdout
    st = c.imexctl_status("tray02")
    assert st["state"] == "idle" and st["stuck"] is None
    if real:
        assert "DRAIN" in c.node_info("tray02")["state"]   # the epilog's drain waits for an admin
        c.scontrol("update", "nodename=tray02", "state=resume")
    c.wait_node_state("tray02", "IDLE")


def ps_state(pid):
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


FABRIC_MANAGER_LOST = 0xA1AA   # healthy mask + partition_assigned=FALSE + gfm_state=DISCONNECTED


@pytest.mark.host_slurm_only("a 25 s event; what it tests is imexctl's reading of NVML's fabric "
                             "bits, the same on every Slurm (passed on 22.05, 24.11 and 26.05 "
                             "when written)")
def test_fabric_manager_restart_keeps_the_rack_in_service(imex):
    """Fidelity N5 (issue 26): a fabric-manager restart sets gfm_state=DISCONNECTED and
    partition_assigned=FALSE on every GPU of the rack. For 25 s (several health rounds) every
    tray's GPUs say so while health runs on every tray: nothing drains, the running job keeps running and
    completes, and a job started during the event gets its domain."""
    c = imex
    release, wait = release_file(c, "fm-event-over")     # the running job lasts the event
    running = c.submit(["-N", "2", "-w", "tray01,tray02", "--wrap", wait])
    wait_running_domain(c, running, ["tray01", "tray02"])
    for tray in c.trays:
        c.set_fabric(tray, health_mask=FABRIC_MANAGER_LOST)
    started = time.monotonic()
    try:
        second = None
        while time.monotonic() - started < 25:
            for tray in c.trays:
                res = c.run_healthcheck(tray)
                assert res.returncode == 0, (tray, res.stdout + res.stderr)
                assert "fabric manager not reachable on every GPU" in res.stdout, res.stdout
                assert "DRAIN" not in c.node_info(tray)["state"], c.node_info(tray)
            assert c.job_info(running)["JobState"] == "RUNNING"
            if second is None:   # a new job during the event: its prolog warns and runs it
                second = c.submit(["-N", "2", "-w", "tray03,tray04", "--wrap", "sleep 10"])
                wait_running_domain(c, second, ["tray03", "tray04"])
            time.sleep(5)
        assert c.wait_job_state(second, ("COMPLETED", "FAILED", "CANCELLED"),
                                timeout=60)["JobState"] == "COMPLETED"
    finally:
        for tray in c.trays:
            c.set_fabric(tray)
        release.touch()
    assert c.wait_job_state(running, ("COMPLETED", "FAILED", "CANCELLED"),
                            timeout=60)["JobState"] == "COMPLETED"
    c.wait_quiet()
    for tray in c.trays:
        assert "DRAIN" not in c.node_info(tray)["state"], c.node_info(tray)
        assert c.run_healthcheck(tray).returncode == 0


def _tray_tree(c, tray):
    """Every entry of a tray's imexctl world, the log aside: mode, owner, device, mtime and
    a file's contents."""
    out = {}
    for path in sorted(tray_path(c, tray).rglob("*")):
        if "log" in path.relative_to(tray_path(c, tray)).parts[:1]:
            continue
        st = path.lstat()
        out[str(path)] = (st.st_mode, st.st_uid, st.st_gid, st.st_rdev, st.st_mtime_ns,
                          path.read_bytes() if stat.S_ISREG(st.st_mode) else None)
    return out


@pytest.mark.host_slurm_only("a health run that changes nothing is imexctl's alone (~5 s)")
def test_no_drain_and_dry_run_leave_the_tray_and_its_node_record_unchanged(imex):
    """Issue 28: on a tray with a domain left by an earlier boot, a leaked channel, a
    leftover job directory and a health drain to lift, `health --no-drain` and `health
    --dry-run` (as slurmd runs them: root, SLURMD_NODENAME) change no file and not the
    node's state, reason or Extra; --dry-run lists the changes (`recover --dry-run` too);
    --repair-only makes the repairs and leaves the drain; a plain run lifts it."""
    c = imex
    tray = "tray04"
    run = tray_path(c, tray, "run")
    jdir = run / "job-999004"
    jdir.mkdir(parents=True)
    (run / "job-999005").mkdir()
    record = {"job_id": 999004, "uid": NOBODY, "user": "nobody", "nodes": [tray],
              "addresses": [c.tray_addrs()[tray]], "node_id": 0, "digest": "old",
              "server_port": 40004, "cmd_port": 50004, "channel": 81, "channel_rule": "job-id",
              "job_dir": str(jdir), "phase": "ready", "daemon": None,
              "boot_id": "00000000-0000-4000-8000-000000000000"}
    (tray_path(c, tray, "state") / "domain.json").write_text(json.dumps(record))
    mkchannel(c, tray, 81)
    mkchannel(c, tray, 82)
    c.scontrol("update", f"nodename={tray}", "state=drain",
               "reason=imexctl: health/fabric: a finding of an earlier run")
    node = c.wait_node_state(tray, lambda st: "DRAIN" in st)
    before = (_tray_tree(c, tray), node["state"], node["reason"], node["extra"])
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "SLURMD_NODENAME": tray}
    try:
        for flag in ("--no-drain", "--dry-run"):
            res = c.exec_on(tray, [str(c.imexctl_bin), "health", flag], env=env, timeout=60)
            assert res.returncode == 0, res.stdout + res.stderr
            node = c.node_info(tray)
            assert (_tray_tree(c, tray), node["state"], node["reason"], node["extra"]) == before
        would = [x for x in res.stdout.splitlines() if x.startswith("imexctl health: would: ")
                 and not x.startswith("imexctl health: would: expected: write the expected "
                                      "state idle (was ")]   # absent or left by a crash
        assert would == [
            "imexctl health: would: reboot: tear down the domain of job 999004 left by an "
            "earlier boot",
            "imexctl health: would: channels: remove leaked channel82",
            f"imexctl health: would: job-dirs: remove leftover {run / 'job-999005'}",
            f"imexctl health: would: resume: lift {tray}'s health drain (imexctl: "
            "health/fabric: a finding of an earlier run)"], res.stdout
        out = c.imexctl(tray, "recover", "--dry-run")          # recover's dry run, too
        assert "imexctl recover: would: reboot: tear down the domain of job 999004 left by " \
               "an earlier boot" in out and "dry run: nothing changed" in out, out
        node = c.node_info(tray)
        assert (_tray_tree(c, tray), node["state"], node["reason"], node["extra"]) == before
        # NHC's mode: the repairs, and the node's state and reason left to NHC
        res = c.exec_on(tray, [str(c.imexctl_bin), "health", "--repair-only"], env=env,
                        timeout=60)
        assert res.returncode == 0, res.stdout + res.stderr
        assert channels(c, tray) == {} and not jdir.exists(), res.stdout
        assert not (tray_path(c, tray, "state") / "domain.json").exists()
        node = c.node_info(tray)
        assert (node["state"], node["reason"]) == before[1:3]
        res = c.exec_on(tray, [str(c.imexctl_bin), "health"], env=env, timeout=60)
        assert res.returncode == 0 and f"resumed {tray}" in res.stdout, res.stdout
        c.wait_node_state(tray, "IDLE")
    finally:
        c.scontrol("update", f"nodename={tray}", "state=resume", check=False)


@pytest.mark.slurm_only("sid", "SLURM_NODE_IS_HEALTHY (26.05.2+) and HealthCheckTimeout "
                        "(26.05) exist only in the sid root's Slurm")
def test_slurmd_26_05_gives_health_its_verdict_and_its_timeout(imex):
    """Slurm 26.05.2+ (the sid root runs 26.05.5): with SlurmctldParameters=
    health_check_report slurmd gives the HealthCheckProgram SLURM_NODE_IS_HEALTHY (yes on an
    idle tray, no on a drained one), and health keeps inside HealthCheckTimeout=4 (a 2 s
    deadline, logged). A health drain is lifted by slurmd's own run on the drained tray."""
    c = imex
    assert c.slurm_version >= (26, 5), f"the sid root runs Slurm {c.slurm_version}"
    conf = c.conf_path.read_text()
    assert "HealthCheckInterval=0\n" in conf
    # a tray's health record is one file, rewritten by each run (healthcheck-none-<tray>.env):
    # an earlier test's record of tray02 is removed, so only this test's runs are read
    for r in c.hook_records("healthcheck"):
        Path(r["__file"]).unlink(missing_ok=True)
    log = tray_path(c, "tray01", "log", "imexctl.log")
    seen = len(log.read_text().splitlines()) if log.exists() else 0
    c.scontrol("update", "nodename=tray02", "state=drain",
               "reason=imexctl: health/fabric: a finding of an earlier run")
    c.set_hooks("record+imexctl")
    c.conf_path.write_text(conf.replace("HealthCheckInterval=0\n", "HealthCheckInterval=5\n"
                                        "HealthCheckTimeout=4\n"
                                        "SlurmctldParameters=health_check_report\n"))
    try:
        c.scontrol("reconfigure")

        def verdicts():
            return {(r["__node"], r.get("SLURM_NODE_IS_HEALTHY"))
                    for r in c.hook_records("healthcheck")}
        deadline = time.monotonic() + 60
        while not {("tray01", "yes"), ("tray02", "no")} <= verdicts():
            assert time.monotonic() < deadline, (verdicts(), c.node_info("tray02"))
            time.sleep(0.5)
        c.wait_node_state("tray02", "IDLE", timeout=30)   # slurmd's run lifted its drain
        lines = [json.loads(x) for x in log.read_text().splitlines()[seen:]]
        budget = [x for x in lines if x.get("event") == "health budget"]
        assert budget and budget[-1]["deadline_s"] == 2.0, lines[-5:]
        assert budget[-1]["HealthCheckTimeout"] == "4"
    finally:
        c.conf_path.write_text(conf)
        c.scontrol("reconfigure", check=False)
        c.set_hooks("imexctl")
        c.scontrol("update", "nodename=tray02", "state=resume", check=False)
        for tray in c.trays:          # the next test finds every tray back and idle
            c.wait_node_state(tray, "IDLE", timeout=60)


def look_alikes() -> list[int]:
    """The processes of uid nobody run as ``nvidia-imex -c ...``."""
    found = []
    for pid in procs.all_pids():
        with contextlib.suppress(proc.NoSuchProcess):
            if procs.cmdline(pid)[:2] == ["nvidia-imex", "-c"] and proc.real_uid(pid) == NOBODY:
                found.append(pid)
    return found


def test_a_users_process_named_nvidia_imex_drains_nothing(imex):
    """Audit F4-3 on real Slurm: a job's user runs ``exec -a nvidia-imex ...`` inside their
    job (the harness's trays share one /proc, so every tray sees it). It is no second owner
    of IMEX: health notes it and drains nothing, the next job's prolog starts its domain,
    and the process is never signalled."""
    c = imex
    release, loop = release_file(c, "look-alike-done")
    holder = c.submit(["-N", "1", "-w", "tray01", "--wrap",
                       f"bash -c 'exec -a nvidia-imex sh -c \"{loop}\"'"])
    deadline = time.monotonic() + 60
    while not (fake := look_alikes()):
        assert time.monotonic() < deadline, c.job_info(holder)
        time.sleep(0.2)
    try:
        res = c.run_healthcheck("tray02")
        assert res.returncode == 0, res.stdout + res.stderr
        assert (f"note: a process of uid {NOBODY} named like an IMEX daemon is not a second "
                f"owner (not root's; left alone): pid {fake[0]}: nvidia-imex -c ") in res.stdout
        job = c.submit(["-N", "2", "-w", "tray02,tray03", "--wrap", "true"])
        assert c.wait_job_state(job, ("COMPLETED", "FAILED", "CANCELLED"),
                                timeout=60)["JobState"] == "COMPLETED"
        for tray in c.trays:
            assert "DRAIN" not in c.node_info(tray)["state"], c.node_info(tray)
        assert look_alikes() == fake        # still there: never signalled
    finally:
        release.touch()
    assert c.wait_job_state(holder, ("COMPLETED", "FAILED", "CANCELLED"),
                            timeout=60)["JobState"] == "COMPLETED"
