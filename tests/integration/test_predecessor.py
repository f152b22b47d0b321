"""Predecessor proof (issue 29): job B starts on a tray job A has just left while A's
daemon on another tray is still shutting down (a daemon that ignores SIGTERM, a long
stop grace). IMEX treats identical node lists as one domain, and the Kubernetes DRA
driver saw a dying predecessor shut a new domain down (dra-driver-nvidia-gpu #1447);
imexctl's per-job ports and node lists keep B's domain to its own members, and A's late
kill leaves it UP."""

from __future__ import annotations

import time

import pytest

from tests.support.harness import wait_running_domain

pytestmark = pytest.mark.host_slurm_only(
    "waits out a slow teardown (~10 s); imexctl's side, per-job ports and node lists, is "
    "the same on every Slurm")


def test_a_successor_never_counts_a_dying_predecessor_and_outlives_its_kill(imex):
    c = imex
    toml = c.state_dir / "etc" / "imexctl.toml"
    base = toml.read_text()
    toml.write_text(base.replace("stop_grace_s = 2", "stop_grace_s = 8"))
    try:
        c.inject_fault("tray02", {"hang_on_sigterm": True})
        a = c.submit(["-N", "2", "-w", "tray01,tray02", "--wrap", "sleep 3"])
        dom_a = wait_running_domain(c, a, ["tray01", "tray02"])["tray01"]["domain"]
        # B waits for tray01; it starts once A's epilog there is done, while A's daemon
        # on tray02 still ignores its SIGTERM
        b = c.submit(["-N", "2", "-w", "tray01,tray03", "--wrap", "sleep 25"])
        sts = wait_running_domain(c, b, ["tray01", "tray03"], timeout=60)
        deadline = time.monotonic() + 20
        while True:     # B's domain comes UP among its own two trays
            sts = {t: c.imexctl_status(t) for t in ("tray01", "tray03")}
            if all(s["domain"].get("domain_state") == "UP" for s in sts.values()):
                break
            assert time.monotonic() < deadline, sts
            time.sleep(0.3)
        dying = c.imexctl_status("tray02").get("domain") or {}
        assert dying.get("job_id") == a and dying["daemon"]["alive"], \
            f"A's daemon on tray02 was gone before B was UP: no overlap to prove ({dying})"
        for s in sts.values():
            dom = s["domain"]
            assert dom["job_id"] == b and dom["nodes"] == ["tray01", "tray03"]
            assert [m["status"] for m in dom["members"]] == ["READY", "READY"], dom
            assert {dom["server_port"], dom["cmd_port"]}.isdisjoint(
                {dom_a["server_port"], dom_a["cmd_port"]})
        # A's daemon is killed at the end of its stop grace; B's domain stays UP
        deadline = time.monotonic() + 30
        while (c.imexctl_status("tray02").get("domain") or {}).get("job_id") == a:
            assert time.monotonic() < deadline, "A's teardown on tray02 never finished"
            time.sleep(0.5)
        for tray in ("tray01", "tray03"):
            dom = c.imexctl_status(tray)["domain"]
            assert dom["job_id"] == b and dom["domain_state"] == "UP", dom
        assert c.wait_job_state(b, ("COMPLETED", "FAILED", "CANCELLED"),
                                timeout=60)["JobState"] == "COMPLETED"
        c.wait_quiet(timeout=60)
        assert [t for t in c.trays if "DRAIN" in c.node_info(t)["state"]] == []
    finally:
        toml.write_text(base)
        c.clear_faults("tray02")
