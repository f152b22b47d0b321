"""imexctl.base.proc reads what psutil would, with psutil's meaning (psutil is the oracle)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

import psutil
import pytest

from imexctl.base import proc


@pytest.fixture
def child(tmp_path):
    """A running process with spaces and parentheses in its name and arguments."""
    exe = tmp_path / "odd (name) x"
    shutil.copy(sys.executable, exe)
    p = subprocess.Popen([str(exe), "-c", "import time; time.sleep(60)", "a b", "-c", "/x/c.cfg"])
    try:
        yield p
    finally:
        p.kill()
        p.wait()


def test_start_time_executable_and_argv_match_psutil(child):
    ps = psutil.Process(child.pid)
    assert abs(proc.create_time(child.pid) - ps.create_time()) < 1e-6
    assert proc.exe(child.pid) == ps.exe()
    assert proc.cmdline(child.pid) == ps.cmdline()
    assert proc.real_uid(child.pid) == ps.uids().real
    assert proc.state(child.pid) in ("S", "R")
    assert abs(proc.boot_time() - psutil.boot_time()) < 1.0


def test_a_deleted_executable_is_named_without_the_suffix(child, tmp_path):
    path = proc.exe(child.pid)
    os.unlink(path)
    assert proc.exe(child.pid) == path == psutil.Process(child.pid).exe()


def test_zombie_is_seen_and_gone_process_raises(tmp_path):
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.monotonic() + 10
    while proc.state(p.pid) != "Z" and time.monotonic() < deadline:
        time.sleep(0.01)
    assert proc.is_zombie(p.pid) and proc.exe(p.pid) == ""
    assert proc.exists(p.pid)
    p.wait()
    assert not proc.exists(p.pid)
    for fn in (proc.create_time, proc.state, proc.exe, proc.cmdline, proc.real_uid):
        with pytest.raises(proc.NoSuchProcess):
            fn(p.pid)
    assert not proc.exists(0) and not proc.exists(-1)


def test_a_recorded_daemon_is_found_and_stopped_and_a_stranger_is_not_ours(tmp_path):
    """The launcher's use: identity from /proc, the same pid with another start time is
    never signalled."""
    from imexctl.imex import launcher
    from imexctl.tray.ownership import DaemonIdentity

    cfg = tmp_path / "config.cfg"
    cfg.write_text("")
    daemon = tmp_path / "daemon"
    daemon.write_text("#!/bin/sh\nsleep 60\n")   # stays the parent: sh is the exe
    daemon.chmod(0o755)
    ident = launcher.start_direct(daemon, cfg, tmp_path / "stdio.log")
    assert ident.exe == os.path.realpath("/bin/sh")
    try:
        assert launcher.find_process(ident) == ident.pid
        stranger = DaemonIdentity(pid=ident.pid, create_time=ident.create_time - 100,
                                  exe=ident.exe)
        assert launcher.find_process(stranger) is None
        assert launcher.stop_direct(stranger, 1.0).outcome == "not-ours"
        assert proc.exists(ident.pid) and not proc.is_zombie(ident.pid)
    finally:
        result = launcher.stop_direct(ident, 5.0)
    assert result.outcome in ("terminated", "not-running")
    assert launcher.find_process(ident) is None


def test_hooks_do_not_import_psutil():
    code = ("import sys, imexctl.imex.launcher, imexctl.ops.recover, imexctl.lifecycle.epilog, "
            "imexctl.lifecycle.prolog; print('psutil' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
