"""One owner of IMEX per tray (issue 29): an nvidia-imex that imexctl did not start (the
distribution's unit, another orchestrator's) is found by its command line, real
processes on this machine; imexctl's own job daemons are not. Only root's count: a user's
process named ``nvidia-imex`` is a note, never a drain (audit F4-3)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

import pytest

from imexctl.imex.launcher import find_foreign_daemons


PYTHON = shutil.which("python3", path="/usr/bin:/bin")
SLEEP = "import time; time.sleep(60)"
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="another user's process needs root")


def owners(binary):
    return dict(find_foreign_daemons(binary)[0])


@pytest.fixture
def spawn(tmp_path):
    procs = []

    def start(name: str, *args: str, user: int | None = None) -> subprocess.Popen:
        if user is None:
            script = tmp_path / name
            script.write_text("import time\ntime.sleep(60)\n")
            proc = subprocess.Popen([sys.executable, str(script), *args])
        else:       # exec -a NAME python3 ARGS: argv[0] is NAME, run as that user
            proc = subprocess.Popen([name, *args], executable=PYTHON, user=user, group=user,
                                    cwd="/")
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
    found = owners(tmp_path / "bin" / "nvidia-imex")
    assert packaged.pid in found and found[packaged.pid][-1] == "/etc/nvidia-imex/config.cfg"
    assert ours.pid not in found and ctl.pid not in found


def test_the_configured_binary_name_counts_too(tmp_path, spawn):
    other = spawn("site-imex", "-c", "/opt/orchestrator/imex.cfg")
    assert other.pid in owners(tmp_path / "site-imex")
    assert other.pid not in owners(tmp_path / "nvidia-imex")


def test_a_version_probe_is_not_a_daemon(tmp_path, spawn):
    probe = spawn("nvidia-imex", "--version")
    assert probe.pid not in owners(tmp_path / "nvidia-imex")


def health_tray(tmp_path):
    """A tray's config whose health runs only the checks about daemons, and its Slurm."""
    from imexctl.config import parse_config
    from tests.support.memory_slurm import MemorySlurm

    cfg = parse_config({"paths": {"state_dir": f"{tmp_path}/state", "run_dir": f"{tmp_path}/run",
                                  "channel_dir": f"{tmp_path}/ch",
                                  "imex_binary": f"{tmp_path}/bin/nvidia-imex"},
                        "health": {"skip": ["fabric", "identity", "dirs", "channels"]}},
                       None, "tray01")
    slurm = MemorySlurm()
    slurm.add_nodes({"tray01": "10.0.0.1"})
    return cfg, slurm


def test_health_drains_for_a_second_owner_and_lifts_when_it_is_gone(tmp_path, spawn):
    from imexctl.ops.health import run_checks

    cfg, slurm = health_tray(tmp_path)
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


@as_root
def test_a_users_process_named_nvidia_imex_is_a_look_alike_not_an_owner(tmp_path, spawn):
    """audit F4-3: any user can name a process ``nvidia-imex``; only root's is an owner."""
    fake = spawn("nvidia-imex", "-c", SLEEP, user=65534)
    found, lookalikes = find_foreign_daemons(tmp_path / "bin" / "nvidia-imex")
    assert fake.pid not in dict(found)
    assert (fake.pid, 65534, ["nvidia-imex", "-c", SLEEP]) in lookalikes


@as_root
def test_health_notes_a_users_look_alike_and_drains_nothing(tmp_path, spawn):
    from imexctl.ops.health import run_checks

    cfg, slurm = health_tray(tmp_path)
    fake = spawn("nvidia-imex", "-c", SLEEP, user=65534)
    report = run_checks(cfg, slurm)
    assert not report.problems and report.exit_code == 0, report
    assert "DRAIN" not in slurm.nodes_["tray01"].state, slurm.nodes_["tray01"]
    assert any(n.startswith("a process of uid 65534 named like an IMEX daemon is not a second "
                            f"owner (not root's; left alone): pid {fake.pid}: nvidia-imex -c ")
               for n in report.notes), report.notes
    assert fake.poll() is None          # never signalled


@as_root
def test_a_prolog_beside_a_users_look_alike_starts_the_domain_and_logs_it(tmp_path, world,
                                                                          spawn):
    import json

    from imexctl.lifecycle.epilog import run_epilog
    from imexctl.lifecycle.prolog import run_prolog

    cfg, slurm, ctx = world
    fake = spawn("nvidia-imex", "-c", SLEEP, user=65534)
    assert run_prolog(cfg, slurm, ctx) == 0, slurm.nodes_["tray01"]
    try:
        assert "DRAIN" not in slurm.nodes_["tray01"].state, slurm.nodes_["tray01"]
        events = [json.loads(x)["event"] for x in cfg.paths.log_file.read_text().splitlines()]
        assert any(e.startswith("a process of uid 65534 named like an IMEX daemon is not a "
                                f"second owner (not root's; left alone): pid {fake.pid}")
                   for e in events), events
    finally:
        assert run_epilog(cfg, slurm, ctx) == 0
    assert fake.poll() is None
