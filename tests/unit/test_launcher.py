"""Direct launcher: own session, detached stdio, verified stop, reused pids untouched."""

import os
import subprocess
import sys
import time

import psutil
import pytest

from imexctl.imex import launcher
from imexctl.tray.ownership import DaemonIdentity
from tests.support.persistent import tray as persistent_tray

DAEMON = """
import signal, sys, time
if "ignore" in sys.argv:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
print("started", flush=True)
while True:
    time.sleep(0.1)
"""


@pytest.fixture
def fake_binary(tmp_path):
    """An executable standing in for nvidia-imex: `BIN -c CFG` runs forever."""
    script = tmp_path / "fake-imex"
    script.write_text(f"#!{sys.executable}\n{DAEMON}")
    script.chmod(0o755)
    cfg = tmp_path / "config.cfg"
    cfg.write_text("")
    return script, cfg


def test_start_detaches_and_stop_terminates(tmp_path, fake_binary):
    binary, cfg = fake_binary
    ident = launcher.start_direct(binary, cfg, tmp_path / "stdio.log", {"X": "1"})
    try:
        ps = psutil.Process(ident.pid)
        assert os.getsid(ident.pid) == ident.pid != os.getsid(0)  # own session
        assert ps.environ()["PATH"] == launcher.SAFE_PATH and ps.environ()["X"] == "1"
        assert launcher.is_alive(ident)
        for _ in range(50):
            if "started" in (tmp_path / "stdio.log").read_text():
                break
            time.sleep(0.05)
        assert "started" in (tmp_path / "stdio.log").read_text()
    finally:
        result = launcher.stop_direct(ident, grace_s=5)
    assert result.outcome == "terminated"
    assert not launcher.is_alive(ident)
    assert launcher.stop_direct(ident, grace_s=1).outcome == "not-running"


def test_sigterm_ignored_is_killed(tmp_path, fake_binary):
    binary, cfg = fake_binary
    stubborn = tmp_path / "stubborn"
    stubborn.write_text(f"#!/bin/sh\nexec {sys.executable} {binary} ignore \"$@\"\n")
    stubborn.chmod(0o755)
    ident = launcher.start_direct(stubborn, cfg, tmp_path / "stdio.log")
    time.sleep(0.5)  # let it exec python and install the SIGTERM handler
    launcher.refresh_exe(ident)
    assert ident.exe == psutil.Process(ident.pid).exe()
    result = launcher.stop_direct(ident, grace_s=0.5)
    assert result.outcome == "killed" and "ignored SIGTERM" in result.detail
    assert not psutil.pid_exists(ident.pid) or psutil.Process(ident.pid).status() == "zombie"


def test_reused_pid_is_never_signalled():
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        real = psutil.Process(bystander.pid)
        stale = DaemonIdentity(pid=bystander.pid, create_time=real.create_time() - 100,
                               exe=real.exe())
        assert not launcher.is_alive(stale)
        result = launcher.stop_direct(stale, grace_s=0.2)
        assert result.outcome == "not-ours"
        assert bystander.poll() is None  # still running, untouched
    finally:
        bystander.kill()
        bystander.wait()


def test_unexecutable_binary(tmp_path):
    with pytest.raises(launcher.LaunchError, match="cannot execute"):
        launcher.start_direct(tmp_path / "missing", tmp_path / "c", tmp_path / "log")


def test_systemd_launcher_calls_systemctl(fake_systemctl, mocker):
    calls = fake_systemctl(f"pid {os.getpid()}")     # MainPID: this process
    ident = launcher.start_systemd(42)
    assert ident.unit == "imexctl-imex@42.service" and ident.pid == os.getpid()
    mocker.patch.object(launcher, "systemd_main_pid", return_value=0)
    assert launcher.stop(ident, 5).outcome == "terminated"
    lines = calls.read_text().splitlines()
    assert lines[0] == "start imexctl-imex@42.service"
    assert lines[-1].startswith("stop imexctl-imex@42.service")


FAKE_SYSTEMCTL = """
import sys, time
from pathlib import Path
here = Path(__file__).parent
with open(here / "systemctl.calls", "a") as log:
    log.write(" ".join(sys.argv[1:]) + "\\n")
mode = (here / "systemctl.mode").read_text().strip()
if sys.argv[1] == "start" and mode == "hang":
    time.sleep(30)
if sys.argv[1] == "start" and mode.startswith("fail"):
    print("Job for imexctl-imex@42.service failed because the control process exited "
          "with error code.\\nSee systemctl status imexctl-imex@42.service and "
          "journalctl -xeu imexctl-imex@42.service for details.", file=sys.stderr)
    sys.exit(1)
if sys.argv[1] == "show" and "--property=MainPID" in sys.argv:
    # "vanish": a MainPID that no longer exists; "pid N": that one
    print(4194300 if mode == "vanish" else mode.split()[1] if mode.startswith("pid ") else 0)
elif sys.argv[1] == "show":
    # "fail C S": the unit failed, its main process ended with si_code C, status S
    code, status = mode.split()[1:3] if mode.startswith("fail ") else ("0", "0")
    # plain "fail": systemd already forgot the failed unit (CollectMode): a fresh load
    print(f"Result={'exit-code' if code == '1' else 'signal' if code != '0' else 'success'}")
    print(f"ActiveState={'failed' if code != '0' else 'inactive' if mode == 'fail' else 'active'}")
    print(f"ExecMainCode={code}\\nExecMainStatus={status}")
"""


@pytest.fixture
def fake_systemctl(tmp_path, monkeypatch):
    """systemd is a system boundary: a fake systemctl that logs its calls."""
    script = tmp_path / "systemctl"
    script.write_text(f"#!{sys.executable}\n{FAKE_SYSTEMCTL}")
    script.chmod(0o755)
    monkeypatch.setattr(launcher, "SYSTEMCTL", str(script))
    monkeypatch.setattr(launcher, "SYSTEMCTL_TIMEOUT_S", 1.0)
    journalctl = tmp_path / "journalctl"     # prints the file "journal", if any
    journalctl.write_text(f"#!{sys.executable}\nimport sys\n"
                          f"with open({str(tmp_path / 'systemctl.calls')!r}, 'a') as log:\n"
                          "    log.write('journalctl ' + ' '.join(sys.argv[1:]) + '\\n')\n"
                          f"try:\n    print(open({str(tmp_path / 'journal')!r}).read(), end='')\n"
                          "except FileNotFoundError:\n    pass\n")
    journalctl.chmod(0o755)
    monkeypatch.setattr(launcher, "JOURNALCTL", str(journalctl))

    def use(mode):
        (tmp_path / "systemctl.mode").write_text(mode)
        return tmp_path / "systemctl.calls"
    return use


def test_systemctl_start_that_hangs_is_a_launch_error(fake_systemctl):
    """F-07: was a TimeoutExpired traceback."""
    fake_systemctl("hang")
    with pytest.raises(launcher.LaunchError, match="did not return within 1s"):
        launcher.start_systemd(42)


@pytest.mark.parametrize("mode,detail", [
    ("fail 1 203", "result exit-code (failed): main process exited with status 203"),
    ("fail 2 9", "result signal (failed): main process killed by signal 9"),
    ("fail", "Job for imexctl-imex@42.service failed because the control process exited "
             "with error code."),
])
def test_failed_unit_start_says_how_the_unit_ended(fake_systemctl, mode, detail):
    """A failed start names systemd's Result and the daemon's exit (what `systemctl
    status` would show), not only "see systemctl status"; where systemd cannot say,
    systemctl's first line."""
    calls = fake_systemctl(mode)
    with pytest.raises(launcher.LaunchError) as info:
        launcher.start_systemd(42)
    assert str(info.value) == f"systemctl start imexctl-imex@42.service failed: {detail}"
    assert calls.read_text().splitlines()[1] == (
        "show --property=Result,ActiveState,ExecMainCode,ExecMainStatus "
        "imexctl-imex@42.service")


# What `journalctl -u imexctl-imex@42.service -o cat` shows after a requeued job's second
# start failed (systemd 252's words); the first run's end must not be reported.
JOURNAL = """\
Starting NVIDIA IMEX daemon for Slurm job 42 (managed by imexctl)...
Started NVIDIA IMEX daemon for Slurm job 42 (managed by imexctl).
imexctl-imex@42.service: Main process exited, code=killed, status=9/KILL
imexctl-imex@42.service: Failed with result 'signal'.
Starting NVIDIA IMEX daemon for Slurm job 42 (managed by imexctl)...
imexctl-imex@42.service: Failed to execute /usr/bin/nvidia-imex: No such file or directory
imexctl-imex@42.service: Failed at step EXEC spawning /usr/bin/nvidia-imex: No such file or directory
imexctl-imex@42.service: Main process exited, code=exited, status=203/EXEC
imexctl-imex@42.service: Failed with result 'exit-code'.
Failed to start NVIDIA IMEX daemon for Slurm job 42 (managed by imexctl).
"""


def test_a_forgotten_failed_unit_is_explained_from_the_journal(fake_systemctl, tmp_path):
    """CollectMode=inactive-or-failed lets systemd forget a failed unit at once, so
    `systemctl show` has nothing to say: the reason comes from what PID 1 logged about
    this start (the last three such lines), never from an earlier run of the job."""
    calls = fake_systemctl("fail")
    (tmp_path / "journal").write_text(JOURNAL)
    with pytest.raises(launcher.LaunchError) as info:
        launcher.start_systemd(42)
    assert str(info.value) == (
        "systemctl start imexctl-imex@42.service failed: Failed at step EXEC spawning "
        "/usr/bin/nvidia-imex: No such file or directory; Main process exited, code=exited, "
        "status=203/EXEC; Failed with result 'exit-code'")
    assert calls.read_text().splitlines()[2] == (
        "journalctl --unit=imexctl-imex@42.service --lines=20 --output=cat --no-pager --quiet")


def test_main_pid_gone_before_identified_is_a_launch_error(fake_systemctl):
    """F-07: was a psutil.NoSuchProcess traceback."""
    fake_systemctl("vanish")
    with pytest.raises(launcher.LaunchError, match="main process 4194300 exited"):
        launcher.start_systemd(42)


@pytest.mark.skipif(os.geteuid() != 0, reason="channel mknod needs root")
@pytest.mark.parametrize("mode", ["hang", "vanish"])
def test_failed_systemd_start_is_drained_and_the_unit_stopped(tmp_path, fake_systemctl, mode):
    """F-07: the undo runs 'systemctl stop' whether or not a main process was seen, so a
    unit that came up after the timeout does not run on untracked."""
    from imexctl.lifecycle.prolog import run_prolog
    from tests.support.memory_slurm import job_record, MemorySlurm
    from tests.support.lifecycle import CLEAN, ctx_for, leftovers, make_cfg, published
    slurm = MemorySlurm()
    slurm.add_nodes({"tray01": "127.0.0.1"})
    slurm.publish("tray01", published())
    slurm.jobs[42] = job_record(42, ("tray01",))
    calls = fake_systemctl(mode)
    cfg = make_cfg(tmp_path, imex={"launcher": "systemd"}, policy={"mode": "all"})
    assert run_prolog(cfg, slurm, ctx_for(nodes="tray01")) == 1
    assert slurm.nodes_["tray01"].reason.startswith("imexctl: prolog/start: ")
    assert "stop imexctl-imex@42.service" in calls.read_text().splitlines()
    assert leftovers(tmp_path) == CLEAN


def test_the_systemd_launcher_starts_the_persistent_unit(tmp_path, fake_systemctl, job_id):
    """``imex.launcher = "systemd"``: the persistent daemon is imexctl-imex-persistent's
    main process (systemd mocked at systemctl), after persist.dat is forgotten."""
    from imexctl.imex import persistent
    calls = fake_systemctl(f"pid {os.getpid()}")
    cfg = persistent_tray(tmp_path, job_id, launcher="systemd")
    cfg.paths.imex_persist_file.parent.mkdir(parents=True, exist_ok=True)
    cfg.paths.imex_persist_file.write_text('{"key": "k", "importers": {"1": "127.0.0.2"}}')
    ident = persistent.start(cfg)
    assert (ident.launcher, ident.unit, ident.pid) == ("systemd", launcher.PERSISTENT_UNIT,
                                                       os.getpid())
    assert calls.read_text().splitlines()[0] == "start imexctl-imex-persistent.service"
    assert not cfg.paths.imex_persist_file.exists()


def test_a_persistent_unit_that_fails_is_stopped_and_named(tmp_path, fake_systemctl, job_id):
    from imexctl.errors import NodeFault
    from imexctl.imex import persistent
    calls = fake_systemctl("fail 1 203")
    with pytest.raises(NodeFault, match="systemctl start imexctl-imex-persistent.service "
                                        "failed: result exit-code"):
        persistent.start(persistent_tray(tmp_path, job_id, launcher="systemd"))
    assert any(line.startswith("stop imexctl-imex-persistent.service")
               for line in calls.read_text().splitlines())
