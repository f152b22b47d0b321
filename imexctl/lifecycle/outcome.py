"""What a hook's ``RunResult`` does to the job and the node, and the exit code for slurmd.

A job fault drains nothing: the job is cancelled with an ``imexctl:`` AdminComment and the
hook exits 0 (a non-zero node prolog makes Slurm drain the node). A node fault drains this
node with ``imexctl: <hook>/<step>: <cause>`` and exits 1 (Slurm keeps our reason, fails
an srun and requeue-holds a batch job). The outcome is kept in the state dir for status.
"""

from __future__ import annotations

import time

from imexctl.base import log
from imexctl.errors import EXIT_NODE_FAULT, EXIT_OK, EXIT_SLURM
from imexctl.lifecycle.runner import RunResult
from imexctl.tray.ownership import StateStore

TYPE_CHECKING = False
if TYPE_CHECKING:
    from imexctl.tray.ownership import _NodeLock
    from imexctl.slurm.context import JobContext
    from imexctl.slurm.interface import SlurmAdapter


def conclude(slurm: SlurmAdapter, store: StateStore, ctx: JobContext, result: RunResult) -> int:
    logger = log.get_logger()
    if result.result != "skipped":
        save_outcome(store, ctx, result)
    if result.result in ("ok", "skipped"):
        return EXIT_OK
    if result.result == "slurm-error":
        logger.error("Slurm unreachable", step=result.step, error=result.cause)
        return EXIT_SLURM
    code = EXIT_OK
    if result.result == "job-fault" and result.requeue:
        logger.warning("job requeued to wait", reason=result.reason)
        code = requeue_job(slurm, ctx.job_id, result.reason)
    elif result.result == "job-fault":
        logger.error("job refused", reason=result.reason)
        code = refuse_job(slurm, ctx.job_id, result.reason)
    if result.node_reason:
        logger.error("node fault", reason=result.node_reason)
        drain(slurm, store, ctx.node, result.node_reason)
        code = EXIT_NODE_FAULT
    return code


def refuse_job(slurm: SlurmAdapter, job_id: int, text: str) -> int:
    """Cancel the job with ``text`` as AdminComment. Every tray of the job reaches the same
    verdict at about the same time: the first one cancels, the others find the job already
    ending. Only a job still starting that could not be cancelled fails the hook."""
    logger = log.get_logger()
    try:
        if _job_starting(slurm, job_id):
            spec = _own_spec(slurm, job_id)
            slurm.set_admin_comment(job_id, text, spec=spec)
            slurm.cancel(job_id, spec=spec)
    except Exception as exc:
        try:
            starting = _job_starting(slurm, job_id)
        except Exception:
            starting = True
        if starting:
            logger.error("could not cancel refused job", error=str(exc))
            return EXIT_NODE_FAULT
    return EXIT_OK


def requeue_job(slurm: SlurmAdapter, job_id: int, text: str) -> int:
    """Requeue the job with ``text`` as AdminComment: Slurm starts it again after its
    requeue delay (SchedulerParameters requeue_delay, else the credential lifetime), and
    PrologSlurmctld decides afresh. A job Slurm will not requeue (srun or salloc, or
    --no-requeue) is cancelled with the same reason. As with a refusal, the first tray
    acts and the others find the job no longer starting."""
    logger = log.get_logger()
    try:
        if not _job_starting(slurm, job_id):
            return EXIT_OK
        spec = _own_spec(slurm, job_id)
        slurm.set_admin_comment(job_id, f"{text}; requeued", spec=spec)
        slurm.requeue(job_id, spec=spec)
        return EXIT_OK
    except Exception as exc:  # noqa: BLE001 - not requeueable: cancel it instead
        logger.warning("job not requeued; cancelling it", error=str(exc))
    return refuse_job(slurm, job_id, text)


def _own_spec(slurm: SlurmAdapter, job_id: int) -> str | None:
    """This job alone, where its bare id names more: an array element that kept the
    array's id (scancel of that id would cancel every element). The node prolog's
    environment does not say; squeue does (one RPC, on this rare path only)."""
    spec = slurm.job_spec(job_id)
    return spec if spec and spec != str(job_id) else None


def _job_starting(slurm: SlurmAdapter, job_id: int) -> bool:
    from imexctl.slurm import states
    from imexctl.slurm.records import JobRecordError, SlurmNotFound
    try:
        state = slurm.job(job_id).state
    except SlurmNotFound:
        return False
    except JobRecordError:  # there, but unreadable: a prolog runs for it, so it starts
        return True
    if state not in states.STARTING:
        # Already requeued (another tray's prolog failed), cancelled or ended.
        log.get_logger().info("job no longer starting; leaving it as it is", job_state=state)
        return False
    return True


# A hook drains within what is left of Slurm's prolog/epilog timeout, so it waits only
# briefly, then drains without the lock (never lost to it). Health is not so pressed: it
# waits longer and, if still refused, leaves the node as it is until its next run.
DRAIN_LOCK_WAIT_S = 5.0
HEALTH_DRAIN_LOCK_WAIT_S = 30.0


class drain_guard:  # noqa: N801 - a context manager without contextlib (see stdio.guarded)
    """Hold the tray's drain lock (``StateStore.drain_lock``) from reading the node's
    drain state to writing it; ``with`` gives whether it is held. Not held when the state
    dir cannot hold one (logged: go on, a drain must not be lost to a broken dir) or when
    another holds it past the wait (logged, unless ``quiet_busy``: the caller decides)."""

    def __init__(self, store: StateStore, timeout_s: float | None = None,
                 quiet_busy: bool = False):
        self.lock: _NodeLock = store.drain_lock(DRAIN_LOCK_WAIT_S if timeout_s is None else timeout_s)
        self.quiet_busy = quiet_busy
        self.busy = self.held = False

    def __enter__(self) -> bool:
        from imexctl.tray.ownership import LockTimeout
        try:
            self.lock.__enter__()
            self.held = True
            return True
        except (LockTimeout, OSError) as exc:
            self.busy = isinstance(exc, LockTimeout)
            if not (self.busy and self.quiet_busy):
                log.get_logger().warning("drain lock not held; changing the node's drain "
                                         "state without it", error=str(exc))
            return False

    def __exit__(self, *exc_info: object) -> None:
        if self.held:
            self.lock.__exit__(*exc_info)


def drain(slurm: SlurmAdapter, store: StateStore, node: str, reason: str) -> None:
    logger = log.get_logger()
    try:
        with drain_guard(store):
            drained = slurm.drain(node, reason)
        if drained is False:
            logger.warning("node already drained by someone else; reason kept")
    except Exception as exc:
        logger.error("could not drain node", error=str(exc))


def save_outcome(store: StateStore, ctx: JobContext, result: RunResult) -> None:
    try:
        store.save_outcome({
            "job_id": ctx.job_id, "hook": result.hook, "result": result.result,
            "reason": result.node_reason or result.reason, "step": result.step,
            "steps_ms": result.timings, "finished_at": time.time(),
            "duration_ms": result.duration_ms})
    except OSError as exc:  # UnsafePathError is an OSError
        log.get_logger().error("cannot record outcome", error=str(exc))
