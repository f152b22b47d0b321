"""The node epilog: tear this job's IMEX domain down and verify it, as declared steps.

Every step runs even when an earlier one failed (``keep_going``); the first failure names
the drain reason ``imexctl: epilog/<step>: <cause>``. Nothing that stops the daemon or
removes the channel needs the state dir, so a read-only, full or unsafe state dir, or an
unreadable record, still gets the job's daemon stopped (found by its argv) and its files
removed before the node is drained. Running it without a prolog is harmless.

Slurm may run the epilog of one job more than once (a lost completion message, slurmd
restarting). A repeat of an epilog that already verified everything gone changes nothing:
it logs one line saying so and exits 0 (no steps, no outcome, no drain). Repeats are known
by a small ledger of the last jobs whose epilog ended ok (``epilogs-done.json`` in the
state dir), and only trusted while nothing of that job is back on the tray.
"""

from __future__ import annotations

import os
import time

from imexctl.base import log
from imexctl.config import Config, Lifetime
from imexctl.errors import EXIT_OK, NodeFault
from imexctl.base.fsutil import UnsafePathError, read_json, sweep_temp_files, write_json
from imexctl.lifecycle.outcome import conclude
from imexctl.base.dataclass import dataclass, replace
from imexctl.lifecycle.runner import Step, run_steps
from imexctl.tray.ownership import TEMP_SWEEP_AGE_S, LockTimeout, RecordUnreadable, StateStore
from imexctl.lifecycle.teardown import (PERSISTENT_TEARDOWN_STEPS, TEARDOWN_STEPS, TeardownRun,
                                        job_dir)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from imexctl.slurm.context import JobContext
    from imexctl.slurm.interface import SlurmAdapter


LOCK_WAIT_S = 30.0
DONE = "epilogs-done.json"   # [[job_id, restart_count, finished_at], ...], newest last
DONE_KEEP = 64               # a repeat comes soon after the first run; this is plenty


@dataclass(kw_only=True)
class EpilogRun(TeardownRun):
    slurm: SlurmAdapter
    ctx: JobContext
    state_untrusted: bool = False   # state dir unsafe: its record could be planted


def run_epilog(cfg: Config, slurm: SlurmAdapter, ctx: JobContext) -> int:
    store = StateStore(cfg.paths.state_dir)
    first_at = repeat_of(cfg, store, ctx)
    if first_at is not None:
        log.get_logger().info("epilog repeat: this job's epilog already tore everything down "
                              "and verified it; nothing to do", first_epilog_at=first_at,
                              restart_count=ctx.restart_count)
        return EXIT_OK
    run = EpilogRun(cfg=cfg, slurm=slurm, ctx=ctx, store=store, job_id=ctx.job_id,
                    locked=False)
    result = run_steps("epilog", epilog_steps(cfg, store, ctx), run)
    if result.result == "ok":
        log.get_logger().info("IMEX domain torn down and verified" if run.record else
                              "no IMEX domain of this job here; nothing left",
                              duration_ms=result.duration_ms)
    return conclude(slurm, run.store, ctx, result)


def epilog_steps(cfg: Config, store: StateStore, ctx: JobContext) -> list[Step]:
    """The job's own record says which teardown it needs (``on_persistent``, written by
    its prolog), whatever ``imex.lifetime`` says now: a tray switched between the job's
    prolog and its epilog still stops a per-job daemon, and never the persistent one's
    persist.dat. Without a readable record of this job (no prolog ran, or the state dir
    cannot be read or trusted) the configured lifetime decides; the lock and ownership
    steps then report what is wrong."""
    from imexctl.base.fsutil import check_secure_dir

    configured = cfg.imex.lifetime == Lifetime.PERSISTENT
    try:
        check_secure_dir(store.dir)
        record = store.load()
    except (OSError, ValueError, TypeError, AttributeError):
        record = None
    persistent = record.on_persistent if record is not None and \
        record.job_id == ctx.job_id else configured
    if persistent != configured:
        log.get_logger().warning("the job's record and imex.lifetime disagree: tearing down "
                                 "as the job's prolog set it up",
                                 on_persistent=persistent, lifetime=cfg.imex.lifetime.value)
    return PERSISTENT_EPILOG_STEPS if persistent else EPILOG_STEPS


def repeat_of(cfg: Config, store: StateStore, ctx: JobContext) -> float | None:
    """When this job's (same run: ``restart_count``) epilog already ended ok, and nothing
    of the job came back since (no record of it, no job directory, no later prolog of it):
    the time that epilog ended. None means "run the epilog", also whenever anything here
    cannot be read: a full epilog of a clean job is harmless too."""
    try:
        done = read_json(store.dir / DONE)
        entry = next((e for e in reversed(done) if isinstance(e, list) and len(e) == 3
                      and e[:2] == [ctx.job_id, ctx.restart_count]), None) \
            if isinstance(done, list) else None
        if entry is None or not isinstance(entry[2], (int, float)):
            return None
        record = store.load()
        if record is not None and record.job_id == ctx.job_id:
            return None
        if os.path.lexists(job_dir(cfg, ctx.job_id)):
            return None
        last = store.last_outcome() or {}
        if last.get("job_id") == ctx.job_id and last.get("hook") == "prolog" and \
                (last.get("finished_at") or 0) > entry[2]:
            return None  # the job ran here again (requeued with the same restart count)
        return float(entry[2])
    except (OSError, ValueError, TypeError, AttributeError):
        return None


def _ledger(run: EpilogRun) -> None:
    """Last step, still under the node lock: a teardown that was verified in full is
    added to the ledger of finished epilogs. Never a failure of the hook."""
    if run.locked and not run.failures:
        _remember_done(run.store, run.ctx)


def _remember_done(store: StateStore, ctx: JobContext) -> None:
    """Add this job to the ledger of verified epilogs (best effort: without it a repeat
    only runs the full, harmless epilog again). Called with the node lock held: two
    epilogs never rewrite the ledger at once."""
    try:
        done = read_json(store.dir / DONE)
    except (OSError, ValueError):
        done = None
    done = [e for e in done if isinstance(e, list) and e[:2] != [ctx.job_id, ctx.restart_count]] \
        if isinstance(done, list) else []
    done.append([ctx.job_id, ctx.restart_count, round(time.time(), 3)])
    try:
        write_json(store.dir / DONE, done[-DONE_KEEP:], 0o600, durable=False)
    except OSError as exc:
        log.get_logger().warning("cannot record the finished epilog", error=str(exc))


def _lock(run: EpilogRun) -> None:
    try:
        run.stack.enter_context(run.store.locked(timeout_s=LOCK_WAIT_S))
    except LockTimeout as exc:
        # Another imexctl is busy here (the next job's prolog, a health run): not a fault
        # of the node. This job's daemon, channel and files are still removed below; only
        # its record, if there is one, cannot be cleared (the record step says so).
        run.lock_busy = str(exc)
        log.get_logger().warning("node lock busy; tearing down without it", error=str(exc))
        return
    except UnsafePathError:
        run.state_untrusted = True
        raise
    run.locked = True
    run.store.sweep_temp()
    sweep_temp_files(run.store.dir, [DONE], TEMP_SWEEP_AGE_S)  # a ledger write killed midway


def _ownership(run: EpilogRun) -> None:
    try:
        record = run.store.load()
    except RecordUnreadable as exc:
        raise NodeFault(str(exc)) from None
    if record is None:
        run.scrub_orphans = True
    elif record.job_id == run.job_id:
        run.record = record
        if run.state_untrusted:
            # Anyone who could write the state dir could have planted this record: use
            # its channel and ports, but find the daemon by its argv under our run_dir,
            # never by a recorded pid, so no other root process is ever signalled.
            run.record = replace(record, daemon=None, job_dir=str(job_dir(run.cfg, run.job_id)))
    # else: another job owns the domain here; only this job's leftovers are removed


EPILOG_STEPS: list[Step] = [
    Step("lock", _lock, keep_going=True),
    Step("ownership", _ownership, keep_going=True),
    *TEARDOWN_STEPS,
    Step("ledger", _ledger),
]

def _importers(run: EpilogRun) -> None:
    """A log note, never a failure: once the job's channel is gone and no other job holds
    one here, importers the persistent daemon's persist.dat still lists. It names nodes,
    not channels (IMEX documents nothing per channel or per job): with another job on the
    tray it says nothing about this one, so it is read only when none is. An importer
    listed then may be a peer holding this tray's memory after its job ended; the grace
    time (``IMEX_NODE_DISCONNECTED_GRACE_TIME``) bounds how long a lost one keeps it."""
    from imexctl.imex.persistent import importers

    if not run.locked or run.record is None or run.failures:
        return
    try:
        if run.store.load() is not None:  # another job's record: not this job's to judge
            return
    except (OSError, ValueError) as exc:  # a note cannot be a fault: the record step's
        log.get_logger().warning("importers not looked at", error=str(exc))
        return
    listed = importers(run.cfg.paths.imex_persist_file)
    if listed:
        log.get_logger().info("the persistent IMEX daemon lists importers with no job left "
                              "on this tray (per node, not per channel: IMEX cannot say "
                              "whose)", importers=listed,
                              path=str(run.cfg.paths.imex_persist_file))


# On a persistent tray (imex.lifetime = "persistent") the job's channel, files and record
# go; the tray's persistent daemon is never stopped by an epilog.
PERSISTENT_EPILOG_STEPS: list[Step] = [
    Step("lock", _lock, keep_going=True),
    Step("ownership", _ownership, keep_going=True),
    *PERSISTENT_TEARDOWN_STEPS,
    Step("importers", _importers, keep_going=True),
    Step("ledger", _ledger),
]
