"""Start and stop one job's IMEX daemon, never touching a process that is not ours.

``direct``: the daemon is a child in its own session with stdio detached from the
prolog's pipes (slurmd kills the prolog's process group and waits on its pipes), and
its pid + start time + executable are recorded. Stopping checks all three with psutil,
so a recycled pid is never signalled; SIGTERM, a grace period, then SIGKILL.
``systemd``: one instance of the template unit ``imexctl-imex@JOBID.service`` per job.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from imexctl.lazy import lazy_import
from imexctl.state import DaemonIdentity

psutil = lazy_import("psutil")  # loaded when a daemon is started, found or stopped

SYSTEMCTL = "/usr/bin/systemctl"
UNIT_TEMPLATE = "imexctl-imex@{job_id}.service"
SAFE_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"


class LaunchError(Exception):
    pass


@dataclass(frozen=True)
class StopResult:
    outcome: str          # "not-running" | "terminated" | "killed" | "not-ours" | "stuck"
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.outcome in ("not-running", "terminated", "killed", "not-ours")


def daemon_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {"PATH": SAFE_PATH, "LANG": "C.UTF-8"}
    env.update(extra or {})
    return env


def start_direct(binary: Path, config: Path, stdio_log: Path,
                 env: dict[str, str] | None = None) -> DaemonIdentity:
    """Spawn ``binary -c config`` in a new session; return its verified identity."""
    fd = os.open(stdio_log, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW
                 | os.O_CLOEXEC, 0o640)
    try:
        proc = subprocess.Popen([str(binary), "-c", str(config)], stdin=subprocess.DEVNULL,
                                stdout=fd, stderr=fd, start_new_session=True, close_fds=True,
                                cwd="/", env=daemon_env(env))
    except OSError as exc:
        raise LaunchError(f"cannot execute {binary}: {exc.strerror}") from None
    finally:
        os.close(fd)
    try:
        ps = psutil.Process(proc.pid)
        ident = DaemonIdentity(pid=proc.pid, create_time=ps.create_time(),
                               exe=_exe(ps), launcher="direct")
    except psutil.NoSuchProcess:
        rc = proc.wait()
        raise LaunchError(f"{binary} exited at once with status {rc}") from None
    # Do not leave a zombie behind in long-lived callers: reap it in a thread-free way
    # by detaching the Popen object (the prolog process exits soon and init adopts it).
    proc.returncode = 0
    return ident


def _exe(ps: psutil.Process) -> str:
    try:
        return ps.exe()
    except (psutil.AccessDenied, psutil.ZombieProcess, FileNotFoundError):
        return ""


def find_process(ident: DaemonIdentity) -> psutil.Process | None:
    """The recorded daemon if, and only if, pid, start time and executable all match."""
    try:
        ps = psutil.Process(ident.pid)
        if abs(ps.create_time() - ident.create_time) > 0.05:
            return None
        if ident.exe and _exe(ps) and _exe(ps) != ident.exe:
            return None
        if ps.status() == psutil.STATUS_ZOMBIE:
            _reap(ident.pid)
            return None
        return ps
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return None


def refresh_exe(ident: DaemonIdentity) -> None:
    """Record the executable once the daemon is up: a wrapper may exec the real binary
    after we spawned it, and pid + start time stay the same across exec."""
    if ident.launcher != "direct":
        return
    try:
        ps = psutil.Process(ident.pid)
        if abs(ps.create_time() - ident.create_time) <= 0.05:
            ident.exe = _exe(ps) or ident.exe
    except psutil.NoSuchProcess:
        pass


def is_alive(ident: DaemonIdentity) -> bool:
    if ident.launcher == "systemd":
        return systemd_main_pid(ident.unit or "") > 0
    return find_process(ident) is not None


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def _wait_gone(ps: psutil.Process, timeout: float) -> bool:
    """Poll until the process is gone or a zombie: a daemon whose parent is init is only
    reaped when init gets to it, and waiting for the pid to vanish would stall the epilog."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if ps.status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.02)


def stop_direct(ident: DaemonIdentity, grace_s: float) -> StopResult:
    """SIGTERM, wait ``grace_s``, SIGKILL; confirm the process is gone."""
    ps = find_process(ident)
    if ps is None:
        try:
            psutil.Process(ident.pid)
            return StopResult("not-ours", f"pid {ident.pid} now belongs to another process")
        except psutil.NoSuchProcess:
            return StopResult("not-running")
    ps.send_signal(signal.SIGTERM)
    if _wait_gone(ps, grace_s):
        _reap(ident.pid)
        return StopResult("terminated")
    ps.send_signal(signal.SIGKILL)
    if _wait_gone(ps, 5.0):
        _reap(ident.pid)
        return StopResult("killed", f"ignored SIGTERM for {grace_s:g}s")
    return StopResult("stuck", f"pid {ident.pid} survived SIGKILL (uninterruptible?)")


def _systemctl(*args: str, timeout: float = 30.0) -> subprocess.CompletedProcess:
    return subprocess.run([SYSTEMCTL, *args], capture_output=True, text=True,
                          timeout=timeout, env=daemon_env())


def start_systemd(job_id: int) -> DaemonIdentity:
    unit = UNIT_TEMPLATE.format(job_id=job_id)
    proc = _systemctl("start", unit)
    if proc.returncode != 0:
        raise LaunchError(f"systemctl start {unit} failed: {proc.stderr.strip()}")
    pid = systemd_main_pid(unit)
    if pid <= 0:
        raise LaunchError(f"{unit} has no main process after start")
    ps = psutil.Process(pid)
    return DaemonIdentity(pid=pid, create_time=ps.create_time(), exe=_exe(ps),
                          launcher="systemd", unit=unit)


def systemd_main_pid(unit: str) -> int:
    proc = _systemctl("show", "--property=MainPID", "--value", unit)
    try:
        return int(proc.stdout.strip() or 0)
    except ValueError:
        return 0


def stop_systemd(ident: DaemonIdentity, grace_s: float) -> StopResult:
    unit = ident.unit or ""
    proc = _systemctl("stop", unit, timeout=grace_s + 30)
    if proc.returncode != 0:
        return StopResult("stuck", f"systemctl stop {unit}: {proc.stderr.strip()}")
    return StopResult("terminated") if systemd_main_pid(unit) <= 0 else StopResult(
        "stuck", f"{unit} still has a main process")


def stop(ident: DaemonIdentity, grace_s: float) -> StopResult:
    if ident.launcher == "systemd":
        return stop_systemd(ident, grace_s)
    return stop_direct(ident, grace_s)
