"""Tear one job's IMEX domain down and verify it, step by step (epilog, health, prolog).

Every step runs even when an earlier one failed, and each checks its own result: the
daemon (the recorded one, and any root process started on the job's config, found by its
argv, so a daemon whose pid never reached the record is not forgotten), its listening
ports, the channel, the job directory, and last the record, which is kept with phase
``stuck`` while the daemon is not verified gone, so ``status`` and ``health`` still point
at it.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from imexctl.base import log
from imexctl.config import Config
from imexctl.errors import NodeFault
from imexctl.base.fsutil import check_secure_dir, remove_path
from imexctl.base.dataclass import dataclass, field, replace
from imexctl.imex.launcher import forget_importers
from imexctl.lifecycle.runner import RunContext, Step, run_steps
from imexctl.tray import jobdir
from imexctl.tray.ownership import DaemonIdentity, DomainRecord, StateStore

PORTS_RELEASE_S = 5.0   # a stopped daemon's sockets may linger this long in the kernel


def job_dir(cfg: Config, job_id: int) -> Path:
    return jobdir.path(cfg.paths.run_dir, job_id)


@dataclass(kw_only=True)
class TeardownRun(RunContext):
    cfg: Config
    store: StateStore
    job_id: int
    record: DomainRecord | None = None   # this job's record, when there is one
    locked: bool = True                  # the node lock is held: the record may change
    lock_busy: str = ""                  # why the lock is not held when another has it
    scrub_orphans: bool = False          # no domain is owned here: any channel is a leak
    daemon_pids: list[int] = field(default_factory=list)


@dataclass
class TeardownReport:
    failures: list[tuple[str, str]]      # (step, cause), in step order
    timings: dict[str, float]

    @property
    def ok(self) -> bool:
        return not self.failures


def teardown_domain(cfg: Config, record: DomainRecord, store: StateStore) -> TeardownReport:
    """Tear down ``record``'s domain (the caller holds the node lock); clear the record when
    everything is verified gone, else keep it with phase ``stuck``. A job's record on a
    persistent tray (``on_persistent``) loses its channel, files and record only: the
    tray's persistent daemon serves the next job."""
    steps = PERSISTENT_TEARDOWN_STEPS if record.on_persistent else TEARDOWN_STEPS
    run = TeardownRun(cfg=cfg, store=store, job_id=record.job_id, record=record)
    result = run_steps("teardown", steps, run)
    return TeardownReport(result.failures, result.timings)


def stop_job_daemons(cfg: Config, job_id: int, recorded: DaemonIdentity | None,
                     config: Path | None = None) -> tuple[list[int], str | None]:
    """Stop the job's daemon(s): the recorded one, root processes started on the job's
    config (argv) and, with systemd, the job's unit. Returns the pids seen and what is
    left running (None when nothing is)."""
    from imexctl.imex import launcher

    grace = cfg.imex.stop_grace_s
    config = config or job_dir(cfg, job_id) / jobdir.CONFIG
    problems: list[str] = []
    pids: list[int] = []
    found = launcher.find_by_config(config)
    targets = [recorded] if recorded is not None else []
    if recorded is not None and recorded.launcher == "direct":
        # The recorded process runs as root on this job's config: the job's daemon, even
        # if its executable changed since it was recorded (a wrapper's exec, F3-20)
        same = [d for d in found if d.pid == recorded.pid and abs(
            d.create_time - recorded.create_time) <= launcher.START_TIME_SLACK_S]
        targets = same[:1] or targets
    targets += [d for d in found if recorded is None or d.pid != recorded.pid]
    for ident in targets:
        pids.append(ident.pid)
        result = launcher.stop(ident, grace)
        log.get_logger().info("daemon stop", pid=ident.pid, outcome=result.outcome,
                              detail=result.detail)
        if not result.ok:   # every outcome but "stuck" is ok
            problems.append(f"{STUCK_CAUSE}{result.detail}")
    unit_stopped = recorded is not None and recorded.launcher == "systemd"
    if cfg.imex.launcher == "systemd" and not unit_stopped:
        result = launcher.stop_unit(launcher.unit_for_job(job_id), grace)
        if not result.ok:
            problems.append(f"{STUCK_CAUSE}{result.detail}")
    return pids, ("; ".join(problems) or None)


UNTRACKED = "untracked nvidia-imex of "   # health's problem, and the runbook row's name


def untracked_daemons(cfg: Config, owner: int | None) -> dict[int, list[int]]:
    """Daemons started on a job config under ``run_dir`` whose job is not ``owner`` (the
    job the ownership record names, if any), by job id: a daemon whose record was lost
    or cleared, or whose pid never reached it (audit F3-20). Nothing else tracks them."""
    from imexctl.imex import launcher

    by_job: dict[int, list[int]] = {}
    for job_id, ident in launcher.find_job_daemons(cfg.paths.run_dir):
        if job_id != owner:
            by_job.setdefault(job_id, []).append(ident.pid)
    return by_job


def describe_untracked(job_id: int, pids: list[int]) -> str:
    return f"{UNTRACKED}job {job_id} (pid {','.join(map(str, sorted(pids)))})"


def remove_job_dir(cfg: Config, job_id: int) -> bool:
    """Remove ``run_dir/job-<id>``; True when something was removed. OSError when it
    cannot be, NodeFault when it is still there afterwards."""
    jdir = job_dir(cfg, job_id)
    removed = remove_path(jdir)
    if os.path.lexists(jdir):
        raise NodeFault(f"{jdir} still present")
    return removed


def remove_orphan_channels(cfg: Config) -> list[int]:
    """No domain is owned here, so any channel node left behind is a leak."""
    from imexctl.tray.channels import list_channels, remove_channels
    try:
        removed = remove_channels(cfg.paths.channel_dir)
    except OSError as exc:
        raise NodeFault(f"cannot remove leaked channels: {exc.strerror}") from None
    left = list_channels(cfg.paths.channel_dir)
    if left:
        raise NodeFault("leaked channel" + ",".join(map(str, sorted(left))) + " still present")
    return removed


# ---------------------------------------------------------------------------- steps
def _stop_daemon(run: TeardownRun) -> None:
    record = run.record
    _mark_tearing_down(run)
    config = Path(record.job_dir) / jobdir.CONFIG if record else None
    run.daemon_pids, problem = stop_job_daemons(
        run.cfg, run.job_id, record.daemon if record else None, config)
    if problem:
        raise NodeFault(problem)
    forget_importers(run.cfg)


def _mark_tearing_down(run: TeardownRun) -> None:
    """Record phase ``tearing-down`` before the daemon is signalled, so ``status`` during
    an epilog (or after one killed midway) says so instead of "daemon not running". Best
    effort: a state dir that cannot be written must not keep the daemon running, and the
    record step reports it. A ``stuck`` record stays ``stuck`` until verified gone."""
    record = run.record
    if record is None or not run.locked or record.phase in ("tearing-down", "stuck"):
        return
    try:
        run.store.save(replace(record, phase="tearing-down"))
    except Exception as exc:  # noqa: BLE001 - best effort: the daemon is stopped regardless
        log.get_logger().warning("cannot mark the record tearing-down", error=str(exc))


def _ports(run: TeardownRun) -> None:
    """The stopped daemon no longer listens on the job's ports (sockets of other
    processes, or outgoing connections on those numbers, are not the daemon's)."""
    from imexctl.tray.ports import describe, listeners

    if run.record is None or not run.daemon_pids:
        return
    ports = [run.record.server_port, run.record.cmd_port]
    deadline = time.monotonic() + PORTS_RELEASE_S
    while True:
        held = {p: pid for p, pid in listeners(ports).items() if pid in run.daemon_pids}
        if not held or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    if held:
        raise NodeFault(PORTS_HELD + describe(held))


def _safe_dir(path: Path) -> None:
    """Never list or delete through a symlinked, foreign or world-writable directory: a
    link would make root delete in its target (same rule as the prolog's)."""
    if os.path.lexists(path):
        check_secure_dir(path)


def _channel(run: TeardownRun) -> None:
    from imexctl.tray.channels import list_channels, remove_channels

    _safe_dir(run.cfg.paths.channel_dir)
    record = run.record
    if record is not None and record.channel is not None:
        remove_channels(run.cfg.paths.channel_dir, {record.channel})
        if record.channel in list_channels(run.cfg.paths.channel_dir):
            raise NodeFault(f"channel{record.channel} still present")
    elif record is None and run.scrub_orphans and run.locked:
        removed = remove_orphan_channels(run.cfg)
        if removed:
            log.get_logger().warning("removed leaked channels", channels=removed)


def _files(run: TeardownRun) -> None:
    _safe_dir(run.cfg.paths.run_dir)
    if remove_job_dir(run.cfg, run.job_id) and run.record is None:
        log.get_logger().warning("removed leftover job directory",
                                 path=str(job_dir(run.cfg, run.job_id)))


DAEMON_STEPS = ("stop-daemon", "ports")
# Causes meaning a daemon could not be verified stopped (the record is then kept in phase
# "stuck"): cluster status recognises them in drain reasons (clusterstatus.py).
STUCK_CAUSE = "daemon stuck: "
PORTS_HELD = "ports still in use: "
STUCK_RECORD = "record of job {job_id} is stuck"     # health's report of such a record


def _record(run: TeardownRun) -> None:
    """Clear the record, unless the daemon is not verified gone: then keep it (phase
    ``stuck``), the only pointer to a root process with the job's ports, so status and
    health still see it. Channels and job directories left behind need no record: health
    and recover find them by name."""
    record = run.record
    if record is None:
        return
    if not run.locked:
        if run.lock_busy:
            raise NodeFault(f"record of job {record.job_id} not cleared: {run.lock_busy}")
        return  # the lock step already reported why
    if any(step in DAEMON_STEPS for step, _ in run.failures):
        record.phase = "stuck"
        run.store.save(record)
        log.get_logger().error("domain left behind; record kept", phase="stuck",
                               failures=run.failures)
        return
    run.store.clear()


TEARDOWN_STEPS: list[Step] = [
    Step("stop-daemon", _stop_daemon, keep_going=True),
    Step("ports", _ports, keep_going=True),
    Step("channel", _channel, keep_going=True),
    Step("files", _files, keep_going=True),
    Step("record", _record, keep_going=True),
]

# A job's part on a persistent tray (imex.lifetime = "persistent"): its channel, files and
# record. No daemon step: the daemon serves the next job, and persist.dat stays its own.
PERSISTENT_TEARDOWN_STEPS: list[Step] = [
    step for step in TEARDOWN_STEPS if step.name not in DAEMON_STEPS]

__all__ = ["PERSISTENT_TEARDOWN_STEPS", "TEARDOWN_STEPS", "TeardownReport", "TeardownRun",
           "job_dir", "remove_job_dir", "remove_orphan_channels", "stop_job_daemons",
           "teardown_domain", "untracked_daemons"]
