"""``imexctl health``: Slurm's HealthCheckProgram for IMEX. This module is the driver.

It runs the checks of :mod:`imexctl.ops.health_checks` in order under a watchdog, then
drains, lifts or leaves the node, makes the expected-state file true again and returns a
:class:`~imexctl.ops.health_checks.Report`; the CLI renders it. What slurmd and the
local slurm.conf tell a run (its deadline, a post-reboot run) is read by
:mod:`imexctl.slurm.healthcheck`; the drain reason's grammar is :mod:`imexctl.slurm.reasons`'s.
(As LBNL NHC keeps its driver, its checks and its node-marking helper apart.)

Slurm only logs a failing health check, so a problem drains the node with
``imexctl: health/<check>: <cause>``. Health drains and lifts only its own drains: a
node that is already drained for any other reason, an ``imexctl:`` prolog or epilog
drain included, keeps that drain and its reason (they wait for an admin, audit F-01).
What can be repaired safely is repaired and listed: a stale domain whose job no longer
runs here, a domain an earlier boot left, channel devices and per-job directories no
domain owns. The node lock is never held while Slurm is asked something (audit S-04).

Modes: ``full`` (repair, drain, lift), ``repair-only`` (repair, never drain or lift:
NHC drains), ``no-drain`` and ``dry-run`` (change nothing at all: no file, device node,
process or Slurm node record; dry-run lists what a full run would do).

Exit codes (for NHC and Slurm; ``imexctl health --help`` lists them): 0 healthy, repairs
listed; 1 a problem was found (drained in a full run unless another drain is kept);
2 usage error; 3 configuration error.
"""

from __future__ import annotations

import signal
import threading
import time

from imexctl.base import log
from imexctl.config import Config
from imexctl.ops import metrics
from imexctl.ops.health_checks import (CHECKS, FULL, HOOK, MODES, REPAIR_ONLY, HealthRun,
                                       Report, check_name)
from imexctl.ops.plan import Action, Recovery
from imexctl.slurm import reasons, states
from imexctl.slurm.healthcheck import SlurmdFacts, budget_s, slurmd_facts
from imexctl.tray import bootid, expected

TYPE_CHECKING = False
if TYPE_CHECKING:
    from types import FrameType

    from imexctl.ops.health_checks import OwnerAlive
    from imexctl.ops.plan import Teardown
    from imexctl.slurm.interface import SlurmAdapter
    from imexctl.slurm.records import NodeRecord

HEALTH_PREFIX = reasons.hook_prefix(HOOK)   # the drains health lifts: its own only
# What a post-reboot run (HealthCheckNodeState=REBOOT_ONLY) runs whatever [health] skip says.
POST_REBOOT_CHECKS = ("reboot", "channels", "job-dirs")


def default_teardown(cfg: Config, slurm: SlurmAdapter | None = None) -> Teardown:
    from imexctl.tray.ownership import StateStore
    from imexctl.lifecycle.teardown import teardown_domain
    store = StateStore(cfg.paths.state_dir)
    return lambda record: teardown_domain(cfg, record, store).failures


def default_owner_alive(cfg: Config, slurm: SlurmAdapter) -> OwnerAlive:
    from imexctl.tray.ownership import owner_alive
    return lambda record: owner_alive(slurm, record, cfg.node)


# --------------------------------------------------------------------------- the runner
class _Watchdog(BaseException):
    """Raised in the main thread when the whole run exceeds ``[health] timeout_s``."""


def run_checks(cfg: Config, slurm: SlurmAdapter, *, mode: str = FULL,
               teardown: Teardown | None = None, owner_alive: OwnerAlive | None = None,
               boot_id: str | None = None, slurmd: SlurmdFacts | None = None) -> Report:
    """Run every check not skipped, then drain or lift our drain; return the report.

    ``mode``: see the module's docstring. ``slurmd``: what slurmd and the local
    slurm.conf say about this run (:func:`slurmd_facts`; read when not given)."""
    if mode not in MODES:
        raise ValueError(f"unknown health mode {mode!r}; one of {', '.join(MODES)}")
    logger = log.get_logger()
    start = time.monotonic()
    facts = slurmd if slurmd is not None else slurmd_facts(cfg)
    report = Report(node=cfg.node, mode=mode, slurm_facts=facts.describe())
    run = HealthRun(cfg=cfg, slurm=slurm, report=report, mode=mode,
                    teardown=teardown or default_teardown(cfg, slurm),
                    owner_alive=owner_alive or default_owner_alive(cfg, slurm),
                    boot_id=boot_id or bootid.current_boot_id(cfg))
    timeout = report.budget_s = budget_s(cfg, facts)
    logger.info("health budget", deadline_s=timeout, mode=mode, **facts.describe())
    skip = set(cfg.health.skip)
    if facts.post_reboot and skip & set(POST_REBOOT_CHECKS):
        skip -= set(POST_REBOOT_CHECKS)
        report.notes.append("post-reboot run (HealthCheckNodeState=REBOOT_ONLY): "
                            f"{', '.join(POST_REBOOT_CHECKS)} run whatever [health] skip says")
    current = "-"
    with _watchdog(timeout):
        try:
            for fn in CHECKS:
                current = check_name(fn)
                if current in skip:
                    report.skipped.append(current)
                    continue
                try:
                    with log.timed_step(f"health/{current}"):
                        fn(run)
                except Exception as exc:  # noqa: BLE001 - a finding, never a traceback
                    from imexctl.base.subproc import fd_error_text
                    run.fail(current, fd_error_text(exc)
                             or f"internal error: {type(exc).__name__}: {exc}")
                report.ran.append(current)
        except _Watchdog:
            run.fail("watchdog", f"checks still running after {timeout:g}s (in {current}); "
                                 "later checks not run")
    _reconcile_expected(run)
    report.duration_ms = round((time.monotonic() - start) * 1000, 1)
    if mode == REPAIR_ONLY:
        report.drain = "none"        # NHC drains and lifts (docs/health.md)
    else:
        _drain_or_resume(run, facts)
    if run.changes:          # before the verdict line: a metrics error is not the last word
        _publish_metrics(run)
    if report.problems:
        logger.error("health check failed", reason=report.reason, mode=mode,
                     problems=[(p.check, p.cause) for p in report.problems],
                     would=report.would, notes=report.notes,
                     duration_ms=report.duration_ms)
    else:       # slurmd keeps no HealthCheckProgram output: the notes are logged
        logger.info("health check passed", repaired=report.repaired, mode=mode,
                    would=report.would, notes=report.notes, duration_ms=report.duration_ms)
    return report


def _publish_metrics(run: HealthRun) -> None:
    cfg, report = run.cfg, run.report
    if run.fabric_seen is not None:
        metrics.remember_fabric(cfg, run.fabric_seen)
    if run.stale_found:
        metrics.count(cfg, "stale_domains_found", run.stale_found)
    if run.persistent_restarts:
        metrics.count(cfg, "persistent_restarts", run.persistent_restarts)
    metrics.observe(cfg, "health", "node-fault" if report.problems else "ok",
                    duration_ms=report.duration_ms, reason=report.reason)



class _watchdog:
    """SIGALRM after ``timeout`` seconds raises _Watchdog in the main thread; elsewhere
    (tests in threads) it is a no-op."""

    def __init__(self, timeout: float):
        self.timeout = timeout
        self.armed = threading.current_thread() is threading.main_thread()

    def __enter__(self) -> None:
        if self.armed:
            self.old = signal.signal(signal.SIGALRM, self._fire)
            signal.setitimer(signal.ITIMER_REAL, self.timeout)

    @staticmethod
    def _fire(_signum: int, _frame: FrameType | None) -> None:
        raise _Watchdog()

    def __exit__(self, *exc: object) -> None:
        if self.armed:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, self.old)


def _drain_or_resume(run: HealthRun, facts: SlurmdFacts) -> None:
    """Drain for our problems unless another drain is in place (kept, reason and all);
    lift only a drain whose reason starts ``imexctl: health/``, and only after a run in
    which every check ran (a check that stood down for a busy lock or a Slurm that could
    not tell may still have its finding). A passing run whose slurmd says
    ``SLURM_NODE_IS_HEALTHY=yes`` (the node is not drained, down, failing or in
    maintenance) has no drain to lift and asks Slurm nothing. A run that changes nothing
    says what it would do and takes no lock."""
    from imexctl.lifecycle.outcome import HEALTH_DRAIN_LOCK_WAIT_S, drain_guard

    report = run.report
    if not report.problems and run.undecided:  # a check stood down: its finding may
        return                                 # still stand; the health drain stays
    if not report.problems and facts.node_is_healthy:
        return                                 # slurmctld: nothing drained to lift
    try:
        if not run.changes:
            _would_drain_or_resume(run)
            return
        # Read and write under the tray's drain lock: a prolog or epilog drain set between
        # the read and the write would otherwise be overwritten (Slurm has no conditional
        # update); with the lock, a hook's drain comes before the read or after the write.
        guard = drain_guard(run.store, HEALTH_DRAIN_LOCK_WAIT_S, quiet_busy=True)
        with guard:
            if guard.busy:    # a hook is draining now: this run neither drains nor lifts
                report.drain = "deferred: another imexctl holds the drain lock"
                log.get_logger().warning("drain deferred: the drain lock is busy")
                return
            action = _drain_action(run)
            if action is not None:
                action.do()
    except Exception as exc:  # noqa: BLE001 - report, do not hide the findings behind it
        report.drain = f"failed: {exc}"
        log.get_logger().error("could not drain or resume node", error=str(exc))


def _would_drain_or_resume(run: HealthRun) -> None:
    """A run that changes nothing says what it would do; where Slurm cannot be asked (a
    tray without Slurm, slurmctld down) it says so instead of failing (platform check
    2026-11-28: ``health --dry-run`` on a machine without Slurm)."""
    report = run.report
    try:
        action = _drain_action(run)
    except Exception as exc:  # noqa: BLE001 - the findings stand; Slurm's state is unknown
        if report.problems:
            report.would.append(f"drain: drain {run.cfg.node}: {report.reason} (unless "
                                f"another drain is in place; Slurm not asked: {exc})")
            report.drain = "would drain"
        return
    if action is not None:
        report.would.append(f"{action.step}: {action.what}")
        report.drain = f"would {action.step}"


def _drain_action(run: HealthRun) -> Action | None:
    """The drain or lift this run's findings call for (None: nothing; a drain that is not
    ours is kept and said so). Reads the node from Slurm."""
    report, slurm, node = run.report, run.slurm, run.cfg.node
    current = slurm.nodes([node]).get(node)
    if report.problems:
        other = _other_drain(current)
        if other is not None:
            report.drain = f"kept: {other}"
            return None

        def drain() -> Recovery:
            report.drain = ("kept: drained by someone else"
                            if slurm.drain(node, report.reason) is False else "drained")
            return Recovery()
        return Action("drain", f"drain {node}: {report.reason}", drain)
    if current is None or not _our_drain(current):
        return None

    def resume() -> Recovery:
        if slurm.resume_if_ours(node, prefix=HEALTH_PREFIX):
            report.drain = "resumed"
            log.get_logger().info("health drain lifted")
        return Recovery()
    return Action("resume", f"lift {node}'s health drain ({current.reason})", resume)


def _our_drain(node: NodeRecord) -> bool:
    reason = node.reason
    return bool(states.node_words(node.state) & states.UNAVAILABLE) \
        and reason.startswith(HEALTH_PREFIX)


def _other_drain(node: NodeRecord | None) -> str | None:
    """The reason (or state) of a drain/down that is not a health drain, else None."""
    if node is None:
        return None
    reason = node.reason
    if not states.node_words(node.state) & states.UNAVAILABLE or reason.startswith(HEALTH_PREFIX):
        return None
    return reason or str(node.state)


def _reconcile_expected(run: HealthRun) -> None:
    """Make the expected-state file true again where a hook could not (a crash, a
    reboot, a repair here). A prolog in progress and a failure are left as written."""
    cfg = run.cfg
    if not run.record_ok:
        return
    try:
        rec = run.projected_record()
    except (OSError, ValueError, TypeError, AttributeError):
        return
    now = expected.read(cfg)
    want: tuple[str, int | None] | None = None
    if run.imex_tray is False and rec is None:
        want = (expected.NOT_IMEX, None)
    elif rec is None:
        if now is None or now.state in (expected.STARTING, expected.UP, expected.NOT_IMEX) \
                or now.state == expected.IDLE and now.persistent != expected.persistent_here(cfg):
            want = (expected.IDLE, None)
    elif rec.phase == "ready" and not any(p.check == "domain" for p in run.report.problems):
        want = (expected.UP, rec.job_id)
    if want and not expected.is_current(cfg, now, *want):
        state, job_id = want
        was = f"{now.state}" + (f" job {now.job_id}" if now and now.job_id else "") \
            if now else "none"

        def write() -> Recovery:
            expected.write(cfg, state, job_id=job_id)
            return Recovery()
        run.apply(Recovery(actions=[Action(
            "expected", f"write the expected state {state}"
                        + (f" job {job_id}" if job_id else "") + f" (was {was})", write)]))


__all__ = ["run_checks", "default_teardown", "default_owner_alive", "HEALTH_PREFIX",
           "POST_REBOOT_CHECKS"]
