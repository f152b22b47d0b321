"""Start and stop one job's IMEX daemon, never touching a process that is not ours.

``direct``: the daemon is a child in its own session with stdio detached from the
prolog's pipes (slurmd kills the prolog's process group and waits on its pipes), and
its pid + start time + session + executable are recorded. Stopping checks them (read from
/proc by imexctl.base.proc, ``identify``), so a recycled pid is never signalled; SIGTERM, a
grace period, then SIGKILL. The executable counts only once the daemon is up: a wrapper
``exec``s the real binary after the spawn.
``systemd``: one instance of the template unit ``imexctl-imex@JOBID.service`` per job.
"""

from __future__ import annotations

import math
import os
import re
import time
from pathlib import Path

from imexctl.base import log
from imexctl.base import proc as procfs
from imexctl.base.dataclass import dataclass
from imexctl.base.fsutil import atomic_write, ensure_secure_dir, tail_bytes
from imexctl.config import Config
from imexctl.errors import NodeFault
from imexctl.tray import jobdir
from imexctl.tray.ownership import FAILED_DAEMON_LOG, DaemonIdentity

TYPE_CHECKING = False
if TYPE_CHECKING:
    from imexctl.base.subproc import Completed

SYSTEMCTL = "/usr/bin/systemctl"
SYSTEMCTL_TIMEOUT_S = 30.0
UNIT_TEMPLATE = "imexctl-imex@{job_id}.service"
PERSISTENT_UNIT = "imexctl-imex-persistent.service"   # systemd/: the persistent domain's daemon
SAFE_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"


class LaunchError(NodeFault):
    """The daemon could not be started (a node fault; the runner names the step)."""


@dataclass(frozen=True)
class StopResult:
    # "not-running" | "terminated" | "killed" | "not-ours" (the pid was reused: gone) |
    # "stuck" | "unverified" (same pid and start time, another executable: not signalled)
    outcome: str
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.outcome in ("not-running", "terminated", "killed", "not-ours")


def stop_timeout_s(grace_s: float) -> int:
    """The unit's TimeoutStopSec for ``imex.stop_grace_s``: systemd waits that long after
    SIGTERM, sends SIGKILL, and waits that long again."""
    return max(1, math.ceil(grace_s))


def daemon_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {"PATH": SAFE_PATH, "LANG": "C.UTF-8"}
    env.update(extra or {})
    return env


_ENV_NAME = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_")


def environment_file(path: Path | None) -> dict[str, str]:
    """``imex.environment_file``: its ``KEY=VALUE`` lines, for the environment of
    nvidia-imex (direct launcher) and of every nvidia-imex-ctl imexctl runs. Blank lines
    and ``#`` comments are skipped; a value is taken as written (no quotes, no
    expansion). Unset: nothing. An unreadable file or a line that is not ``KEY=VALUE``
    is a NodeFault naming the file and line: the daemon would run without what the site
    meant it to have."""
    if path is None:
        return {}
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        raise NodeFault(f"imex.environment_file {path}: cannot read: {why}") from None
    env = {}
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if not sep or not key or key[0].isdigit() or not set(key) <= _ENV_NAME:
            raise NodeFault(f"imex.environment_file {path} line {number}: not KEY=VALUE "
                            "(KEY: letters, digits, _)")
        env[key] = value
    return env


def start_direct(binary: Path, config: Path, stdio_log: Path,
                 env: dict[str, str] | None = None) -> DaemonIdentity:
    """Spawn ``binary -c config`` in a new session; return its verified identity."""
    from imexctl.base.subproc import spawn

    fd = os.open(stdio_log, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW
                 | os.O_CLOEXEC, 0o640)
    try:
        pid = spawn([str(binary), "-c", str(config)], daemon_env(env), stdout=fd, stderr=fd,
                    cwd="/")
    except OSError as exc:
        raise LaunchError(f"cannot execute {binary}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    try:   # the exe may still be a site's wrapper: settled once the daemon is up
        ident = DaemonIdentity(pid=pid, create_time=procfs.create_time(pid),
                               exe=_exe(pid), launcher="direct", sid=procfs.session(pid),
                               exe_settled=False)
    except procfs.NoSuchProcess:
        _, status = os.waitpid(pid, 0)
        raise LaunchError(f"{binary} exited at once with status "
                          f"{os.waitstatus_to_exitcode(status)}") from None
    # The prolog exits soon and init adopts the daemon: nothing here waits for it.
    return ident


def forget_importers(cfg: Config) -> bool:
    """Remove the host's persist.dat (``paths.imex_persist_file``) before a daemon starts;
    True when there was one. After an unclean stop (SIGKILL, a crash) it lists the dead
    daemon's importers, and a new daemon on the same node list (same nodes_config key)
    waits in WAITING_FOR_RECOVERY until every one of them reconnects (IMEX guide,
    IMEX_WAIT_FOR_QUORUM=RECOVERY). Their imports died with that daemon, and a peer meeting
    a new instance cleans them up at once: neither a per-job domain nor a restart of the
    persistent one has anything to recover. Call it with the node lock held and no daemon
    of this host running."""
    from imexctl.base.fsutil import remove_path

    path = cfg.paths.imex_persist_file
    if remove_path(path):
        log.get_logger().info("removed the IMEX persistence file", path=str(path))
        return True
    return False


def _exe(pid: int) -> str:
    try:
        return procfs.exe(pid)
    except procfs.NoSuchProcess:
        return ""


START_TIME_SLACK_S = 0.05   # two reads of one start time (clock ticks) never differ more


def identify(ident: DaemonIdentity) -> tuple[str, int | None]:
    """Whether the recorded daemon still runs: ("ours", pid), ("gone", None) or
    ("unverified", None), from /proc alone.

    A pid whose start time differs is another process (the daemon is gone). With the same
    start time it is the process imexctl spawned, and it is ours when: it is this
    process's own child (a child's pid cannot be reused before we reap it: the prolog
    never disowns the daemon it spawned); or its executable is not settled yet (a site's
    wrapper ``exec``s the daemon after the spawn, audit F3-20) and it is still in the
    session it was spawned in; or its executable is the settled one. Otherwise it runs
    something else than the daemon recorded: "unverified", never signalled, and not gone
    either (the record is kept)."""
    pid = ident.pid
    try:
        if abs(procfs.create_time(pid) - ident.create_time) > START_TIME_SLACK_S:
            return "gone", None
        if procfs.is_zombie(pid):
            _reap(pid)
            return "gone", None
        if procfs.parent(pid) == os.getpid():
            return "ours", pid
        if not ident.exe_settled:
            if ident.sid is None or procfs.session(pid) == ident.sid:
                return "ours", pid
            return "unverified", None
        exe = _exe(pid)
        if ident.exe and exe and exe != ident.exe:
            return "unverified", None
        return "ours", pid
    except procfs.NoSuchProcess:
        return "gone", None


def find_process(ident: DaemonIdentity) -> int | None:
    """The recorded daemon's pid if, and only if, it is still that daemon (``identify``)."""
    return identify(ident)[1]


def refresh_exe(ident: DaemonIdentity) -> None:
    """Settle the executable once the daemon is up: a wrapper may exec the real binary
    after we spawned it, and pid, start time and session stay the same across exec."""
    if ident.launcher != "direct":
        return
    if find_process(ident) is not None:
        try:
            ident.exe = _exe(ident.pid) or ident.exe
            ident.exe_settled = True
        except procfs.NoSuchProcess:
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


def _wait_gone(pid: int, timeout: float) -> bool:
    """Wait until the process is gone or a zombie: a daemon whose parent is init is only
    reaped when init gets to it, and waiting for the pid to vanish would stall the epilog.
    A pidfd wakes us the moment it exits (no polling delay on the epilog's path); without
    one (old kernel) the state is polled every 20 ms."""
    deadline = time.monotonic() + timeout
    pidfd = _pidfd(pid)
    try:
        while True:
            try:
                if procfs.is_zombie(pid):
                    return True
            except procfs.NoSuchProcess:
                return True
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            if pidfd is None:
                time.sleep(min(0.02, left))
            else:
                import select
                select.select([pidfd], [], [], min(0.5, left))  # readable once it exits
    finally:
        if pidfd is not None:
            os.close(pidfd)


def _is_zombie(pid: int) -> bool:
    try:
        return procfs.is_zombie(pid)
    except procfs.NoSuchProcess:
        return True


def _pidfd(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):   # no pidfd (kernel < 5.3), or already gone
        return None


def stop_direct(ident: DaemonIdentity, grace_s: float) -> StopResult:
    """SIGTERM, wait ``grace_s``, SIGKILL; confirm the process is gone."""
    import signal   # not at import: the prolog starting a daemon never signals one

    verdict, pid = identify(ident)
    if verdict == "unverified":
        return StopResult("unverified", f"pid {ident.pid} started when the daemon did but "
                          f"runs {_exe(ident.pid) or 'an unknown executable'}, not "
                          f"{ident.exe or 'the recorded one'}: not signalled, not "
                          "verified gone")
    if pid is None:
        if procfs.exists(ident.pid) and not _is_zombie(ident.pid):
            return StopResult("not-ours", f"pid {ident.pid} now belongs to another process "
                              "(another start time): the daemon is gone")
        return StopResult("not-running")
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return StopResult("not-running")
    if _wait_gone(pid, grace_s):
        _reap(ident.pid)
        return StopResult("terminated")
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return StopResult("terminated")
    if _wait_gone(pid, 5.0):
        _reap(ident.pid)
        return StopResult("killed", f"ignored SIGTERM for {grace_s:g}s")
    return StopResult("stuck", f"pid {ident.pid} survived SIGKILL (uninterruptible?)")


class SystemctlError(Exception):
    pass


def _systemctl(*args: str, timeout: float | None = None) -> Completed:
    """Run systemctl bounded by ``timeout``; SystemctlError when it cannot run or hangs."""
    from imexctl.base.subproc import Bounded, run_text

    timeout = timeout or SYSTEMCTL_TIMEOUT_S
    res = run_text([SYSTEMCTL, *args], timeout, daemon_env())
    if isinstance(res, Bounded):
        if res.timed_out:
            raise SystemctlError(f"systemctl {' '.join(args)} did not return within "
                                 f"{timeout:g}s")
        raise SystemctlError(res.error)
    return res


def unit_for_job(job_id: int) -> str:
    return UNIT_TEMPLATE.format(job_id=job_id)


def start_systemd(job_id: int) -> DaemonIdentity:
    """Start the job's unit and identify its main process. The caller stops the unit on
    failure (``stop_unit``) whether or not a main process was seen: a unit that came up
    after a timeout must not run on untracked."""
    return start_unit(unit_for_job(job_id))


def start_unit(unit: str) -> DaemonIdentity:
    """``systemctl start unit`` and identify its main process (LaunchError naming how the
    unit ended when it does not come up)."""
    try:
        proc = _systemctl("start", unit)
        if proc.returncode != 0:
            # systemctl's own words point at `systemctl status`; the drain reason says
            # what that would: how the unit ended and the daemon's exit status or signal
            said = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[0]
            raise LaunchError(f"systemctl start {unit} failed: "
                              f"{unit_failure(unit) or said}")
        pid = systemd_main_pid(unit)
    except SystemctlError as exc:
        raise LaunchError(str(exc)) from None
    if pid <= 0:
        raise LaunchError(f"{unit} has no main process after start"
                          + _why(unit_failure(unit)))
    try:
        return DaemonIdentity(pid=pid, create_time=procfs.create_time(pid), exe=_exe(pid),
                              launcher="systemd", unit=unit)
    except procfs.NoSuchProcess:
        raise LaunchError(f"{unit} main process {pid} exited during start-up"
                          + _why(unit_failure(unit))) from None


# systemd's ExecMainCode values (siginfo si_code)
_SI_CODES = {"1": "exited with status", "2": "killed by signal", "3": "dumped core on signal"}
# What PID 1 logs about a unit's end ("<unit>: Main process exited, code=exited,
# status=203/EXEC", "<unit>: Failed with result 'exit-code'.")
_JOURNAL_ENDS = ("Main process exited", "Failed to execute", "Failed at step",
                 "Failed with result")
JOURNALCTL = "/usr/bin/journalctl"
UNIT_DESCRIPTION = "IMEX daemon for Slurm job"   # systemd/imexctl-imex@.service
JOURNAL_TIMEOUT_S = 5.0   # detail for a drain reason: not worth holding the prolog longer


def unit_failure(unit: str) -> str:
    """How ``unit``'s last run ended: from ``systemctl show`` (Result and the main
    process's exit) while systemd still has the failed unit, else from what PID 1 logged
    about it (the unit's ``CollectMode=inactive-or-failed`` lets systemd forget a failed
    unit at once); "" when neither says. Never raises: it only adds detail."""
    from imexctl.base.subproc import Bounded, run_text

    try:
        proc = _systemctl("show", "--property=Result,ActiveState,ExecMainCode,ExecMainStatus",
                          unit)
    except SystemctlError:
        proc = None
    props = dict(line.partition("=")[::2] for line in proc.stdout.splitlines()
                 if "=" in line) if proc is not None else {}
    result = props.get("Result", "")
    if result and result != "success":
        text = f"result {result}" + (f" ({props['ActiveState']})"
                                     if props.get("ActiveState") else "")
        how = _SI_CODES.get(props.get("ExecMainCode", ""))
        return text + (f": main process {how} {props.get('ExecMainStatus', '?')}"
                       if how else "")
    res = run_text([JOURNALCTL, f"--unit={unit}", "--lines=20", "--output=cat", "--no-pager",
                    "--quiet"], JOURNAL_TIMEOUT_S, daemon_env())
    if isinstance(res, Bounded) or res.returncode != 0:
        return ""
    lines = res.stdout.splitlines()
    starts = [i for i, line in enumerate(lines)   # PID 1's "Starting <Description>..."
              if line.startswith("Starting ") and UNIT_DESCRIPTION in line]
    lines = lines[starts[-1] + 1:] if starts else lines   # this start, not a requeue's
    said = [line.removeprefix(f"{unit}: ").strip().rstrip(".")
            for line in lines if any(end in line for end in _JOURNAL_ENDS)]
    return "; ".join(dict.fromkeys(said[-3:]))


def _why(failure: str) -> str:
    return f" ({failure})" if failure else ""


def systemd_main_pid(unit: str) -> int:
    """The unit's MainPID; 0 when it has none. SystemctlError when systemctl fails."""
    proc = _systemctl("show", "--property=MainPID", "--value", unit)
    try:
        return max(0, int(proc.stdout.strip() or 0))
    except ValueError:
        return 0


def stop_unit(unit: str, grace_s: float) -> StopResult:
    """``systemctl stop`` and confirm the unit has no main process left."""

    try:   # systemd: SIGTERM, TimeoutStopSec, SIGKILL, TimeoutStopSec again
        proc = _systemctl("stop", unit, timeout=2 * stop_timeout_s(grace_s) + SYSTEMCTL_TIMEOUT_S)
        if proc.returncode != 0:
            return StopResult("stuck", f"systemctl stop {unit}: {proc.stderr.strip()}")
        left = systemd_main_pid(unit)
    except SystemctlError as exc:
        return StopResult("stuck", str(exc))
    if left <= 0 or not procfs.exists(left):
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
    for pid in _pids_with_arg(os.fsencode(wanted)):
        try:
            argv = procfs.cmdline(pid)
            if procfs.real_uid(pid) != 0 or pid == os.getpid():
                continue
            if not any(a == "-c" and b == wanted for a, b in zip(argv, argv[1:])):
                continue
            if procfs.is_zombie(pid):
                continue
            found.append(DaemonIdentity(pid=pid, create_time=procfs.create_time(pid),
                                        exe=_exe(pid)))
        except (procfs.NoSuchProcess, ValueError):
            continue
    return found


def find_job_daemons(run_dir: Path) -> list[tuple[int, DaemonIdentity]]:
    """Every root process started as ``... -c <run_dir>/job-<id>/config.cfg`` (a job's
    daemon, whether or not a record names it), as (job id, identity): how health finds a
    daemon nothing tracks any more."""
    config = jobdir.config_arg(run_dir)
    found = []
    for pid in _pids_with_arg(os.fsencode(f"{run_dir}/{jobdir.PREFIX}")):
        try:
            argv = procfs.cmdline(pid)
            if procfs.real_uid(pid) != 0 or pid == os.getpid() or procfs.is_zombie(pid):
                continue
            jobs = [m.group(1) for a, b in zip(argv, argv[1:])
                    if a == "-c" and (m := config.fullmatch(b))]
            if jobs:
                found.append((int(jobs[0]), DaemonIdentity(
                    pid=pid, create_time=procfs.create_time(pid), exe=_exe(pid))))
        except (procfs.NoSuchProcess, ValueError):
            continue
    return found


def find_foreign_daemons(binary: Path, proc: str = "/proc") -> tuple[
        list[tuple[int, list[str]]], list[tuple[int, int, list[str]]]]:
    """IMEX daemons imexctl did not start, as (owners, look-alikes). A process run as
    ``nvidia-imex`` (or as the configured binary) whose ``-c`` is not an imexctl job
    config (``.../job-<id>/config.cfg``) nor its persistent domain's
    (``.../persistent/config.cfg``) is one: the distribution's
    ``nvidia-imex.service`` (``-c /etc/nvidia-imex/config.cfg``) or another
    orchestrator's daemon. Owners, as (pid, argv), are root's (real uid 0, as
    :func:`find_job_daemons` requires): a second owner of IMEX on a tray (reference
    peers.md 9c) makes per-job daemons fail in ways that look like a node fault.
    Look-alikes, as (pid, uid, argv), are any other user's: only named so (audit F4-3),
    they hold no channel and no fabric state, and are never an owner nor signalled. (Any
    job config counts as imexctl's: the harness's trays share one /proc, each with its
    own run_dir.)"""
    names = {"nvidia-imex", Path(binary).name}
    ours = jobdir.config_arg()
    persistent = jobdir.persistent_config_arg()     # issue 37: the tray's persistent domain
    owners: list[tuple[int, list[str]]] = []
    lookalikes: list[tuple[int, int, list[str]]] = []
    for pid in _pids_with_arg(b"imex", proc):
        try:
            argv = procfs.cmdline(pid)
            if pid == os.getpid() or not argv:
                continue
            # the daemon itself, or an interpreter running it as a script (argv[1])
            if not any(Path(a).name in names for a in argv[:2]):
                continue
            if {"--version", "-h", "--help"} & set(argv):
                continue        # a version probe (doctor's), not a daemon
            configs = [b for a, b in zip(argv, argv[1:]) if a == "-c"]
            if configs and all(ours.fullmatch(c) or persistent.fullmatch(c) for c in configs):
                continue
            uid = procfs.real_uid(pid)
        except (procfs.NoSuchProcess, ValueError):
            continue
        if uid == 0:
            owners.append((pid, argv))
        else:
            lookalikes.append((pid, uid, argv))
    return owners, lookalikes


def second_owner(foreign: list[tuple[int, list[str]]]) -> str:
    """The reason for the owners :func:`find_foreign_daemons` found: what to do first."""
    pid, argv = foreign[0]
    more = f" (+{len(foreign) - 1} more)" if len(foreign) > 1 else ""
    return ("a second owner of IMEX runs here: systemctl mask --now nvidia-imex.service, or "
            f"stop its orchestrator; pid {pid}{more}: {' '.join(argv)[:120]}")


def not_an_owner(lookalikes: list[tuple[int, int, list[str]]]) -> str:
    """The note for the look-alikes :func:`find_foreign_daemons` found: left alone."""
    pid, uid, argv = lookalikes[0]
    more = f" (+{len(lookalikes) - 1} more)" if len(lookalikes) > 1 else ""
    return (f"a process of uid {uid} named like an IMEX daemon is not a second owner (not "
            f"root's; left alone): pid {pid}{more}: {' '.join(argv)[:120]}")


def _pids_with_arg(arg: bytes, proc: str = "/proc") -> list[int]:
    """Pids whose command line contains ``arg`` (a job's config path): one read of
    ``/proc/PID/cmdline`` per process (not three, for each of the node's thousands); the caller makes the exact checks on the few that match."""
    out = []
    with os.scandir(proc) as entries:
        names = [e.name for e in entries if e.name.isdigit()]
    for name in names:
        try:
            with open(f"{proc}/{name}/cmdline", "rb") as handle:
                raw = handle.read()
        except OSError:  # gone meanwhile, or a kernel thread's empty line
            continue
        if arg in raw:
            out.append(int(name))
    return out


def stop(ident: DaemonIdentity, grace_s: float) -> StopResult:
    if ident.launcher == "systemd":
        return stop_systemd(ident, grace_s)
    return stop_direct(ident, grace_s)


# ------------------------------------------------------------------ a failed start's logs
FAILED_LOG_TAIL = 32 * 1024  # bytes kept of each daemon log of a failed start
DAEMON_LOGS = (jobdir.DAEMON_LOG, jobdir.STDIO)


def kept_log_note(cfg: Config, jdir: Path) -> str:
    kept = keep_daemon_log(cfg, jdir)
    return f" (daemon log kept in {kept})" if kept else ""


# What a daemon's log says when a peer's TLS handshake failed (the simulator's wording:
# "TLS authentication with node 1 (10.0.0.2) failed: ..."; gRPC's: "Handshake failed").
TLS_FAILURE_RE = r"(?i)\b(tls|ssl|handshake|certificate)\b.*\b(fail|refus|unknown ca|expired|verify)"
TLS_TAIL = 64 * 1024


def tls_failure(jdir: Path) -> str:
    """The last line of the job daemon's log that names a failed TLS handshake, cleaned
    and cut for a reason ("" when none): a domain that never comes UP because its trays
    do not share the secret, or a clock, says why (audit F4-6)."""
    from imexctl.slurm.records import clean_text

    try:
        data = tail_bytes(jdir / DAEMON_LOGS[0], TLS_TAIL) or b""
    except OSError:
        return ""
    for line in reversed(data.decode(errors="replace").splitlines()):
        if re.search(TLS_FAILURE_RE, line):   # without the "[time] [LEVEL] [tid N]" prefix
            return clean_text(re.sub(r"^(\s*\[[^\]]*\])+\s*", "", line), 200)
    return ""


def keep_daemon_log(cfg: Config, jdir: Path) -> Path | None:
    """Copy the tail of a failed daemon's logs to ``state_dir/failed-daemon.log`` (bounded,
    replaced by the next failure) before the undo removes the job directory."""
    parts = []
    for name in DAEMON_LOGS:
        try:
            data = tail_bytes(jdir / name, FAILED_LOG_TAIL)
        except OSError:
            continue
        if data:
            parts.append(f"==> {jdir / name} (last {len(data)} bytes) <==\n".encode() + data)
    if not parts:
        return None
    target = cfg.paths.state_dir / FAILED_DAEMON_LOG
    try:
        ensure_secure_dir(cfg.paths.state_dir)
        atomic_write(target, b"\n".join(parts), 0o640)
    except OSError as exc:
        log.get_logger().warning("cannot keep failed daemon log", error=str(exc))
        return None
    return target
