"""A persistent IMEX domain on the harness (issue 37), one clique of tray01-03 for the
whole module, brought up by ``imexctl recover``: two users' jobs at once get different
channels and each opens only its own; the daemons keep their pids across 10 jobs; a
SIGKILLed daemon is healed by ``imexctl health`` run as slurmd runs it; a rebooted tray
(new boot id) is brought back by the boot-time recover. After each heal the domain is UP
again: the peers' health runs nudge their daemons (SIGUSR1) instead of waiting out IMEX's
15 s reconnect back-off."""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
import uuid

import pytest

from tests.cluster.imexctl_config import atomic_write
from tests.support.harness import PersistentClique, channels, persistent_clique

pytestmark = pytest.mark.integration

TRAYS = ["tray01", "tray02", "tray03"]
PROBE = r"""
import errno, json, os, sys
out = {"own": os.environ.get("IMEX_CHANNEL_DEVICE", "")}
for path in [out["own"], *json.loads(sys.argv[1])]:
    try:
        os.close(os.open(path, os.O_RDONLY | os.O_NONBLOCK))
        out[path] = "opened"
    except OSError as exc:
        out[path] = errno.errorcode.get(exc.errno, str(exc.errno))
print("PROBE " + json.dumps(out, sort_keys=True), flush=True)
"""


@pytest.fixture(scope="module")
def clique(cluster):
    cluster.set_hooks("imexctl")
    # every job an IMEX job, one-tray jobs too (the default policy: multi-node only)
    with persistent_clique(cluster, TRAYS, toml_extra='\n[policy]\nmode = "all"\n') as q:
        yield q


def wait_channels(q: PersistentClique, trays: list[str], timeout: float = 60.0) -> dict[str, str]:
    """Each tray's one channel device path, once its job's prolog made it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = {t: sorted(channels(q.c, t)) for t in trays}
        if all(len(v) == 1 for v in found.values()):
            return {t: str(q.dirs[t] / "dev" / "nvidia-caps-imex-channels" / v[0])
                    for t, v in found.items()}
        time.sleep(0.2)
    raise AssertionError(f"no channel on each of {trays}: {found}")


def test_two_users_at_once_get_different_channels_and_open_only_their_own(clique):
    q, c = clique, clique.c
    go = c.state_dir / "jobs" / "persistent-go.json"
    go.unlink(missing_ok=True)
    script = c.state_dir / "jobs" / "persistent-probe.py"
    script.write_text(PROBE)
    script.chmod(0o644)
    done = c.state_dir / "jobs" / "persistent-done"
    shutil.rmtree(done, ignore_errors=True)
    done.mkdir()
    done.chmod(0o777)
    # both jobs probe while both hold their channels: each waits for the other's probe
    body = (f"#!/bin/sh\nwhile [ ! -s {go} ]; do sleep 0.2; done\n"
            f"srun python3 {script} \"$(cat {go})\"\ntouch {done}/$SLURM_JOB_ID\n"
            f"while [ $(ls {done} | wc -l) -lt 2 ]; do sleep 0.2; done\n")
    job_sh = c.state_dir / "jobs" / "persistent-probe.sh"
    job_sh.write_text(body)
    job_sh.chmod(0o755)
    pids = q.pids()
    a = c.submit(["-N", "2", "-w", "tray01,tray02", str(job_sh)], user="nobody")
    b = c.submit(["-N", "1", "-w", "tray03", str(job_sh)], user="daemon")
    try:
        devices = wait_channels(q, TRAYS)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; A {c.job_info(a)}; B {c.job_info(b)}") from None
    mine = {a: [devices["tray01"], devices["tray02"]], b: [devices["tray03"]]}
    assert devices["tray01"].rsplit("/", 1)[1] == devices["tray02"].rsplit("/", 1)[1]
    assert devices["tray01"].rsplit("/", 1)[1] != devices["tray03"].rsplit("/", 1)[1]
    atomic_write(go, json.dumps(sorted(devices.values())))
    for job in (a, b):
        info = c.wait_job_state(job, ("COMPLETED", "FAILED", "CANCELLED"), timeout=90)
        assert info["JobState"] == "COMPLETED", (info, c.job_output(job))
        probes = [json.loads(ln[len("PROBE "):]) for ln in c.job_output(job).splitlines()
                  if ln.startswith("PROBE ")]
        assert len(probes) == len(mine[job]), c.job_output(job)
        for probe in probes:
            assert probe["own"] in mine[job], probe
            for path in devices.values():
                # its own channel passes the permission check (no driver on the harness:
                # ENXIO); the other user's is refused
                assert probe[path] == ("ENXIO" if path in mine[job] else "EACCES"), probe
    c.wait_quiet(timeout=60)
    assert q.pids() == pids
    assert all(channels(c, t) == {} for t in TRAYS)


def test_the_daemons_keep_their_pids_across_ten_jobs(clique):
    q, c = clique, clique.c
    pids = q.pids()
    assert all(len(p) == 1 for p in pids.values()), pids
    jobs = [c.submit(["-N", "1", "-x", "tray04", "--wrap", "test -c \"$IMEX_CHANNEL_DEVICE\""])
            for _ in range(10)]
    for job in jobs:
        info = c.wait_job_state(job, ("COMPLETED", "FAILED", "CANCELLED"), timeout=120)
        assert info["JobState"] == "COMPLETED", (info, c.job_output(job))
    c.wait_quiet(timeout=60)
    assert q.pids() == pids
    assert all(channels(c, t) == {} for t in TRAYS)
    assert [t for t in c.trays if "DRAIN" in c.node_info(t)["state"]] == []


def test_a_killed_daemon_is_healed_by_health_and_the_domain_is_up_again(clique):
    q, c = clique, clique.c
    q.wait_up()
    old = q.record("tray02")["daemon"]["pid"]
    os.kill(old, signal.SIGKILL)
    out = q.health("tray02")
    assert f"restarted the persistent IMEX domain (its nvidia-imex (pid {old}) was gone; " \
        in out, out
    new = q.record("tray02")["daemon"]["pid"]
    assert new != old and q.pids()["tray02"] == [new]
    start = time.monotonic()
    for tray in ("tray01", "tray03"):       # their next health run nudges them
        q.health(tray)
    q.wait_up()
    print(f"UP {time.monotonic() - start:.1f}s after the restart (peers' health nudged)")
    assert "DRAIN" not in c.node_info("tray02")["state"]


def test_a_rebooted_tray_is_brought_back_into_the_domain(clique):
    q, c = clique, clique.c
    d = q.dirs["tray03"]
    old = q.record("tray03")
    c.kill_tray("tray03")                   # power cut: its daemon dies with it
    new_boot = str(uuid.uuid4())
    atomic_write(d / "boot_id", new_boot + "\n")
    for f in (d / "sim-run").iterdir():     # /run is a tmpfs: persist.dat is gone
        f.unlink()
    c.restart_tray("tray03", timeout=40)
    out = c.imexctl("tray03", "recover")    # the boot unit
    assert "restarted the persistent IMEX domain (this tray rebooted since it last ran; " \
        in out, out
    record = q.record("tray03")
    assert record["boot_id"] == new_boot and record["phase"] == "ready"
    assert record["daemon"]["pid"] != old["daemon"]["pid"]
    for tray in ("tray01", "tray02"):
        q.health(tray)
    q.wait_up()
    c.cancel_all()                          # Slurm may have marked the rebooted tray down
    job = c.submit(["-N", "3", "-w", ",".join(TRAYS), "--wrap", "true"])
    info = c.wait_job_state(job, ("COMPLETED", "FAILED", "CANCELLED"), timeout=90)
    assert info["JobState"] == "COMPLETED", (info, c.job_output(job))


def test_a_hung_daemon_under_a_job_drains_its_tray_naming_the_job(clique):
    """health never restarts a daemon a running job's channel depends on: a hung one
    (SIGSTOP: alive, never READY) drains its tray with ``health/persistent`` naming the
    job; once the job ends and the daemon answers again, the tray returns to service."""
    q, c = clique, clique.c
    q.wait_up()
    job = c.submit(["-N", "2", "-w", "tray01,tray02", "--wrap", "sleep 300"])
    pid = q.record("tray02")["daemon"]["pid"]
    try:
        c.wait_job_state(job, "RUNNING", timeout=90)
        wait_channels(q, ["tray01", "tray02"])      # both prologs done (RUNNING may be sooner)
        os.kill(pid, signal.SIGSTOP)
        res = c.run_healthcheck("tray02")
        assert "Traceback" not in res.stderr, res.stderr
        info = c.node_info("tray02")
        assert "DRAIN" in info["state"], info
        assert info["reason"].startswith("imexctl: health/persistent: the persistent "
                                         f"nvidia-imex (pid {pid}) did not answer READY "), info
        assert f"not restarted while job {job} holds channel" in info["reason"], info
        assert q.pids()["tray02"] == [pid]          # the shared daemon was not touched
    finally:
        os.kill(pid, signal.SIGCONT)
        c.cancel_until_quiet(job)
    c.resume_all()
    for tray in TRAYS:
        q.health(tray)
    q.wait_up()
    assert q.pids()["tray02"] == [pid]
