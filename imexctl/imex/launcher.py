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

from imexctl.errors import NodeFault
from imexctl.lazy import lazy_import
from imexctl.state import DaemonIdentity

psutil = lazy_import("psutil")  # loaded when a daemon is started, found or stopped

SYSTEMCTL = "/usr/bin/systemctl"
SYSTEMCTL_TIMEOUT_S = 30.0
UNIT_TEMPLATE = "imexctl-imex@{job_id}.service"
SAFE_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"


class LaunchError(NodeFault):
    """The daemon could not be started (a node fault; the runner names the step)."""


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
        try:
            return systemd_main_pid(ident.unit or "") > 0
        except SystemctlError:
            return find_process(ident) is not None
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
    try:
        ps.send_signal(signal.SIGTERM)
    except psutil.NoSuchProcess:
        return StopResult("not-running")
    if _wait_gone(ps, grace_s):
        _reap(ident.pid)
        return StopResult("terminated")
    try:
        ps.send_signal(signal.SIGKILL)
    except psutil.NoSuchProcess:
        return StopResult("terminated")
    if _wait_gone(ps, 5.0):
        _reap(ident.pid)
        return StopResult("killed", f"ignored SIGTERM for {grace_s:g}s")
    return StopResult("stuck", f"pid {ident.pid} survived SIGKILL (uninterruptible?)")


class SystemctlError(Exception):
    pass


def _systemctl(*args: str, timeout: float | None = None) -> subprocess.CompletedProcess:
    """Run systemctl bounded by ``timeout``; SystemctlError when it cannot run or hangs."""
    timeout = timeout or SYSTEMCTL_TIMEOUT_S
    try:
        return subprocess.run([SYSTEMCTL, *args], capture_output=True, text=True,
                              errors="replace", timeout=timeout, env=daemon_env())
    except subprocess.TimeoutExpired:
        raise SystemctlError(f"systemctl {' '.join(args)} did not return within "
                             f"{timeout:g}s") from None
    except OSError as exc:
        raise SystemctlError(f"cannot run {SYSTEMCTL}: {exc.strerror}") from None


def unit_for_job(job_id: int) -> str:
    return UNIT_TEMPLATE.format(job_id=job_id)


def start_systemd(job_id: int) -> DaemonIdentity:
    """Start the job's unit and identify its main process. The caller stops the unit on
    failure (``stop_unit``) whether or not a main process was seen: a unit that came up
    after a timeout must not run on untracked."""
    unit = unit_for_job(job_id)
    try:
        proc = _systemctl("start", unit)
        if proc.returncode != 0:
            raise LaunchError(f"systemctl start {unit} failed: {proc.stderr.strip()}")
        pid = systemd_main_pid(unit)
    except SystemctlError as exc:
        raise LaunchError(str(exc)) from None
    if pid <= 0:
        raise LaunchError(f"{unit} has no main process after start")
    try:
        ps = psutil.Process(pid)
        return DaemonIdentity(pid=pid, create_time=ps.create_time(), exe=_exe(ps),
                              launcher="systemd", unit=unit)
    except psutil.Error:
        raise LaunchError(f"{unit} main process {pid} exited during start-up") from None


def systemd_main_pid(unit: str) -> int:
    """The unit's MainPID; 0 when it has none. SystemctlError when systemctl fails."""
    proc = _systemctl("show", "--property=MainPID", "--value", unit)
    try:
        return max(0, int(proc.stdout.strip() or 0))
    except ValueError:
        return 0


def stop_unit(unit: str, grace_s: float) -> StopResult:
    """``systemctl stop`` and confirm the unit has no main process left."""
    try:
        proc = _systemctl("stop", unit, timeout=grace_s + SYSTEMCTL_TIMEOUT_S)
        if proc.returncode != 0:
            return StopResult("stuck", f"systemctl stop {unit}: {proc.stderr.strip()}")
        left = systemd_main_pid(unit)
    except SystemctlError as exc:
        return StopResult("stuck", str(exc))
    if left <= 0 or not psutil.pid_exists(left):
        return StopResult("terminated")
    return StopResult("stuck", f"{unit} still has main process {left}")


def stop_systemd(ident: DaemonIdentity, grace_s: float) -> StopResult:
    return stop_unit(ident.unit or "", grace_s)


def find_by_config(config: Path) -> list[DaemonIdentity]:
    """Root processes started as ``... -c <config>``: a job's daemon found without its
    record (the prolog was killed between spawn and saving the record, or the record is
    unreadable). Only root processes count, so a user cannot get one of theirs signalled."""
    wanted = str(config)
    found = []
    for ps in psutil.process_iter(["cmdline", "uids", "create_time"]):
        try:
            argv = ps.info["cmdline"] or []
            uids = ps.info["uids"]
            if uids is None or uids.real != 0 or ps.pid == os.getpid():
                continue
            if not any(a == "-c" and b == wanted for a, b in zip(argv, argv[1:])):
                continue
            if ps.status() == psutil.STATUS_ZOMBIE:
                continue
            found.append(DaemonIdentity(pid=ps.pid, create_time=ps.info["create_time"],
                                        exe=_exe(ps)))
        except psutil.Error:
            continue
    return found


def stop(ident: DaemonIdentity, grace_s: float) -> StopResult:
    if ident.launcher == "systemd":
        return stop_systemd(ident, grace_s)
    return stop_direct(ident, grace_s)
