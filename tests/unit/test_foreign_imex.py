"""One owner of IMEX per tray (issue 29): an nvidia-imex that imexctl did not start (the
distribution's unit, another orchestrator's) is found by its command line, real
processes on this machine; imexctl's own job daemons are not."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from imexctl.imex.launcher import find_foreign_daemons


@pytest.fixture
def spawn(tmp_path):
    procs = []

    def start(name: str, *args: str) -> subprocess.Popen:
        script = tmp_path / name
        script.write_text("import time\ntime.sleep(60)\n")
        proc = subprocess.Popen([sys.executable, str(script), *args])
        procs.append(proc)
        time.sleep(0.2)
        return proc
    yield start
    for proc in procs:
        proc.kill()
        proc.wait()


def test_the_packaged_daemon_is_foreign_a_job_daemon_is_not(tmp_path, spawn):
    packaged = spawn("nvidia-imex", "-c", "/etc/nvidia-imex/config.cfg")
    ours = spawn("nvidia-imex", "-c", f"{tmp_path}/run/job-42/config.cfg")
    ctl = spawn("nvidia-imex-ctl", "-N", "-c", "/etc/nvidia-imex/config.cfg")
    found = dict(find_foreign_daemons(tmp_path / "bin" / "nvidia-imex"))
    assert packaged.pid in found and found[packaged.pid][-1] == "/etc/nvidia-imex/config.cfg"
    assert ours.pid not in found and ctl.pid not in found


def test_the_configured_binary_name_counts_too(tmp_path, spawn):
    other = spawn("site-imex", "-c", "/opt/orchestrator/imex.cfg")
    assert other.pid in dict(find_foreign_daemons(tmp_path / "site-imex"))
    assert other.pid not in dict(find_foreign_daemons(tmp_path / "nvidia-imex"))


def test_a_version_probe_is_not_a_daemon(tmp_path, spawn):
    probe = spawn("nvidia-imex", "--version")
    assert probe.pid not in dict(find_foreign_daemons(tmp_path / "nvidia-imex"))


def test_health_drains_for_a_second_owner_and_lifts_when_it_is_gone(tmp_path, spawn):
    from imexctl.config import parse_config
    from imexctl.ops.health import run_checks
    from tests.unit.fakes import FakeSlurm

    cfg = parse_config({"paths": {"state_dir": f"{tmp_path}/state", "run_dir": f"{tmp_path}/run",
                                  "channel_dir": f"{tmp_path}/ch",
                                  "imex_binary": f"{tmp_path}/bin/nvidia-imex"},
                        "health": {"skip": ["fabric", "identity", "dirs", "channels"]}},
                       None, "tray01")
    slurm = FakeSlurm()
    slurm.add_nodes({"tray01": "10.0.0.1"})
    packaged = spawn("nvidia-imex", "-c", "/etc/nvidia-imex/config.cfg")
    report = run_checks(cfg, slurm)
    reason = slurm.nodes_["tray01"].reason
    assert reason.startswith("imexctl: health/foreign-imex: a second owner of IMEX runs here: "
                             "systemctl mask --now nvidia-imex.service"), (reason, report)
    assert f"pid {packaged.pid}: " in reason
    packaged.kill()
    packaged.wait()
    run_checks(cfg, slurm)
    assert "DRAIN" not in slurm.nodes_["tray01"].state, slurm.nodes_["tray01"]
