"""Recovery after a reboot on the harness: a tray hard-killed under a live domain and
booted again is clean after the boot-time `imexctl recover`, and takes the next job."""

from __future__ import annotations

import json
import uuid

import pytest

from tests.cluster.imexctl_config import atomic_write, tray_dir
from tests.support.harness import assert_clean, channels, wait_running_domain

pytestmark = pytest.mark.integration

TRAY, PEER = "tray04", "tray03"   # imexctl's default policy gives multi-node jobs a domain
TRAYS = [PEER, TRAY]


@pytest.mark.host_slurm_only("CI time: boot-time recovery is imexctl's alone (~11 s)")
def test_tray_hard_killed_with_a_live_domain_is_clean_after_boot_time_recover(imex):
    c = imex
    job = c.submit(["-N", "2", "-w", ",".join(TRAYS), "--wrap", "sleep 300"])
    dom = wait_running_domain(c, job, TRAYS)[TRAY]["domain"]
    assert dom["domain_state"] == "UP" and dom["daemon"]["alive"], dom
    d = tray_dir(c, TRAY)
    record = json.loads((d / "state" / "domain.json").read_text())
    old_boot = record["boot_id"]
    assert set(channels(c, TRAY)) == {f"channel{record['channel']}"}, channels(c, TRAY)

    # Power cut: every process of the tray dies, its files stay as they were on disk.
    c.kill_tray(TRAY)
    assert (d / "state" / "domain.json").exists()
    assert (d / "run" / f"job-{job}").is_dir()
    # The reboot: a new boot id, and /run (a tmpfs) comes back empty, the IMEX persistence
    # file with it.
    new_boot = str(uuid.uuid4())
    assert new_boot != old_boot
    atomic_write(d / "boot_id", new_boot + "\n")
    for f in (d / "sim-run").iterdir():
        f.unlink()
    c.restart_tray(TRAY, timeout=40)

    # What the boot-time oneshot runs (before slurmd in a real boot).
    out = c.imexctl(TRAY, "recover")
    assert (f"imexctl recover: repaired: tore down the domain of job {job} left by an "
            "earlier boot") in out, out
    assert "FAIL" not in out, out
    assert not (d / "state" / "domain.json").exists()
    assert_clean(c, [TRAY])

    # Slurm still believes the job runs on the tray: cancel it and let the restarted
    # slurmd report it gone (its epilog finds nothing to do); the peer's epilog removes
    # the peer's half of the domain.
    c.client(["scancel", str(job)], check=False)
    c.wait_job_state(job, ["CANCELLED", "COMPLETED", "FAILED", "NODE_FAIL"], timeout=30)
    for tray in TRAYS:
        c.wait_node_state(tray, "IDLE", timeout=30)
    assert_clean(c, TRAYS)

    # The tray takes the next job, with a domain of its own, and is clean after it.
    nxt = c.submit(["-N", "2", "-w", ",".join(TRAYS), "--wrap", "sleep 6"])
    sts = wait_running_domain(c, nxt, TRAYS, timeout=40)
    assert sts[TRAY]["domain"]["domain_state"] == "UP", sts
    assert sts[TRAY]["domain"]["daemon"]["alive"], sts
    # stamped with this boot (the job runs 6 s: its record is still there)
    assert json.loads((d / "state" / "domain.json").read_text())["boot_id"] == new_boot
    c.wait_job_state(nxt, "COMPLETED", timeout=30)
    c.wait_quiet(timeout=30)
    assert_clean(c, TRAYS)
