"""The node epilog: tear this job's IMEX domain down and verify it, as declared steps.

Every step runs even when an earlier one failed (``keep_going``); the first failure names
the drain reason ``imexctl: epilog/<step>: <cause>``. Nothing that stops the daemon or
removes the channel needs the state dir, so a read-only, full or unsafe state dir, or an
unreadable record, still gets the job's daemon stopped (found by its argv) and its files
removed before the node is drained. Running it twice, or without a prolog, is harmless.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from imexctl import log
from imexctl.config import Config
from imexctl.errors import NodeFault
from imexctl.fsutil import UnsafePathError
from imexctl.outcome import conclude
from imexctl.runner import Step, run_steps
from imexctl.state import LockTimeout, RecordUnreadable, StateStore
from imexctl.teardown import TEARDOWN_STEPS, TeardownRun, job_dir


LOCK_WAIT_S = 30.0


@dataclass(kw_only=True)
class EpilogRun(TeardownRun):
    slurm: Any
    ctx: Any
    state_untrusted: bool = False   # state dir unsafe: its record could be planted


def run_epilog(cfg: Config, slurm: Any, ctx: Any) -> int:
    run = EpilogRun(cfg=cfg, slurm=slurm, ctx=ctx, store=StateStore(cfg.paths.state_dir),
                    job_id=ctx.job_id, locked=False)
    result = run_steps("epilog", EPILOG_STEPS, run)
    if result.result == "ok":
        log.get_logger().info("IMEX domain torn down and verified" if run.record else
                              "no IMEX domain of this job here; nothing left",
                              duration_ms=result.duration_ms)
    return conclude(slurm, run.store, ctx, result)


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
]
