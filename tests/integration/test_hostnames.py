"""Host-name node entries end to end (fidelity 2026-11b N1): with imex.node_entries =
"hostname" imexctl writes NodeAddr names into nodes_config.cfg, and the real ctl prints
them as written; members are matched by node index. Every prolog used to end `local
daemon UNAVAILABLE` (a drain) while the domain was UP."""

from __future__ import annotations

import json
import time

import pytest

from tests.cluster import imexctl_config

pytestmark = pytest.mark.integration


@pytest.fixture
def hostname_mode(imex):
    """imexctl.toml in host-name mode, reading a copy of slurm.conf whose NodeAddr are the
    trays' names (resolved by the harness's /etc/hosts on every tray), as a site that
    names its trays in NodeAddr has it; Slurm itself keeps its own file."""
    c = imex
    toml = c.state_dir / "etc" / "imexctl.toml"
    original = toml.read_text()
    conf = c.conf_path
    named = c.state_dir / "etc" / "slurm-named.conf"
    text = conf.read_text()
    for tray, addr in c.tray_addrs().items():
        text = text.replace(f"NodeName={tray} NodeAddr={addr} ", f"NodeName={tray} NodeAddr={tray} ")
    assert all(f"NodeAddr={t} " in text for t in c.trays)
    imexctl_config.atomic_write(named, text)
    assert "[imex]\n" in original and "\n[paths]\n" in "\n" + original
    imexctl_config.atomic_write(toml, original.replace(
        "[imex]\n", '[imex]\nnode_entries = "hostname"\ndriver_version = "580.95.05"\n').replace(
        "[paths]\n", f'[paths]\nslurm_conf = "{named}"\n'))
    try:
        yield c
    finally:
        imexctl_config.atomic_write(toml, original)
        named.unlink(missing_ok=True)


def test_host_name_entries_run_a_job_with_the_domain_up(hostname_mode):
    c = hostname_mode
    trays = ["tray01", "tray02", "tray03"]
    job = c.submit(["-N", "3", "-w", ",".join(trays), "--wrap", "sleep 6; echo ran"])
    c.wait_job_state(job, "RUNNING", timeout=60)
    deadline = time.monotonic() + 30
    while True:     # the prolog may still be running: until its domain is ready
        status = c.imexctl_status("tray02")
        dom = status.get("domain") or {}
        if dom.get("phase") == "ready" and "domain_state" in dom or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    # the daemon's node list holds the names, the ctl prints them, status names the trays
    assert [m["host"] for m in dom.get("members", [])] == trays, status
    assert [m["node"] for m in dom["members"]] == trays and dom["domain_state"] == "UP", status
    assert status["problems"] == [], status
    info = c.wait_job_state(job, ("COMPLETED", "FAILED", "CANCELLED"), timeout=90)
    assert info["JobState"] == "COMPLETED", info
    assert (c.state_dir / "jobs" / f"{job}.out").read_text().strip() == "ran"
    for tray in trays:
        node = c.node_info(tray)
        assert "DRAIN" not in node["state"], node
    c.wait_quiet(timeout=60)
    log = (c.state_dir / "trays" / "tray01" / "log" / "imexctl.log").read_text()
    waits = [json.loads(line) for line in log.splitlines()
             if '"wait-ready result"' in line and f'"job_id": {job}' in line]
    assert waits and waits[-1]["up"] is True, waits
