"""One owner of IMEX per tray (issue 29): a prolog never starts a domain beside an IMEX
daemon imexctl did not start (the packaged nvidia-imex.service, another orchestrator's);
it drains the tray with a reason that says what to disable, and the tray runs jobs again
once that daemon is gone."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from tests.support.harness import wait_running_domain

pytestmark = pytest.mark.host_slurm_only(
    "the harness's trays share one /proc, so the stand-in is seen by every tray; the "
    "check is imexctl's own, the same on every Slurm")


def test_a_foreign_imex_daemon_drains_with_what_to_disable_and_nothing_starts(imex):
    c = imex
    script = c.state_dir / "jobs" / "nvidia-imex"
    script.write_text("import time\ntime.sleep(300)\n")
    packaged = subprocess.Popen([sys.executable, str(script), "-c",
                                 "/etc/nvidia-imex/config.cfg"])
    try:
        time.sleep(0.3)
        job = c.submit(["-N", "2", "-w", "tray01,tray02", "--wrap", "true"])
        deadline = time.monotonic() + 60
        while not all("DRAIN" in c.node_info(t)["state"] for t in ("tray01", "tray02")):
            assert time.monotonic() < deadline, {t: c.node_info(t) for t in c.trays}
            time.sleep(0.5)
        for tray in ("tray01", "tray02"):
            reason = c.node_info(tray)["reason"]
            assert reason.startswith("imexctl: prolog/ownership: a second owner of IMEX runs "
                                     "here: systemctl mask --now nvidia-imex.service"), reason
            assert f"pid {packaged.pid}: " in reason, reason
            assert (c.imexctl_status(tray).get("domain") or {}).get("job_id") is None
        c.client(["scancel", str(job)], check=False)
        # health finds it too, on a tray no job touched
        assert c.run_healthcheck("tray03").returncode == 1
        reason = c.node_info("tray03")["reason"]
        assert reason.startswith("imexctl: health/foreign-imex: a second owner of IMEX"), reason
    finally:
        packaged.kill()
        packaged.wait()
    assert c.run_healthcheck("tray03").returncode == 0      # lifts its own drain
    assert "DRAIN" not in c.node_info("tray03")["state"]
    for tray in ("tray01", "tray02"):
        c.scontrol("update", f"nodename={tray}", "state=resume", check=False)
    c.wait_quiet(timeout=60)
    job = c.submit(["-N", "2", "-w", "tray01,tray02", "--wrap", "sleep 3"])
    wait_running_domain(c, job, ["tray01", "tray02"])
    assert c.wait_job_state(job, ("COMPLETED", "FAILED"), timeout=60)["JobState"] == "COMPLETED"
