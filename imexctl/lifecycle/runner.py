"""One step runner for the hooks: named steps, timings, an undo journal, one last handler.

A hook is a declared list of ``Step``s (as LBNL NHC runs its checks). The runner sets the
current step before the step runs (so a lock the step takes is blamed on it), times each
step (``duration_ms`` in the log), and turns whatever a step raises into a ``RunResult``:
a fault's cause plus the name of the step it came from. Helpers never name steps.

Steps record what they create in an append-only ``UndoJournal``; when a step that must
succeed fails, the journal is unwound newest-first (the prolog creates record, files,
channel, daemon in that order, so the daemon is stopped first) and each undo's own result
is kept. Steps marked ``keep_going`` (teardown) record their failure and the next step
still runs. Any exception nobody expected is an ``internal error`` of the step, never a
traceback out of the hook.
"""

from __future__ import annotations

import time
from contextlib import ExitStack

from imexctl.base import log
from imexctl.errors import ImexctlError, JobFault, JobWait, NodeFault, SlurmError
from imexctl.base.dataclass import dataclass, field
from imexctl.slurm import reasons

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Callable, Sequence


class Done(Exception):
    """Raised by a step when the hook has nothing (more) to do: success, no later steps."""


@dataclass(frozen=True)
class Step:
    name: str
    action: Callable[..., None]   # takes the hook's run (PrologRun, EpilogRun, ...)
    keep_going: bool = False   # a failure is recorded and the next step still runs


@dataclass
class UndoJournal:
    """What a run created, newest last; ``unwind`` undoes it newest-first."""
    entries: list[tuple[str, Callable[[], str | None]]] = field(default_factory=list)
    problems: list[tuple[str, str]] = field(default_factory=list)

    def add(self, what: str, undo: Callable[[], str | None]) -> None:
        """``undo`` returns None when verified done, else what is left."""
        self.entries.append((what, undo))

    def unwind(self) -> list[tuple[str, str]]:
        logger = log.get_logger()
        while self.entries:
            what, undo = self.entries.pop()
            try:
                problem = undo()
            except Exception as exc:  # keep undoing the rest
                problem = f"{type(exc).__name__}: {exc}"
            if problem:
                self.problems.append((what, problem))
                logger.error("undo failed", undo=what, problem=problem)
            else:
                logger.info("undone", undo=what)
        return self.problems


@dataclass(kw_only=True)
class RunContext:
    """What the runner keeps for every hook; a hook's own state extends it."""
    journal: UndoJournal = field(default_factory=UndoJournal)
    stack: ExitStack = field(default_factory=ExitStack)   # locks held until the run ends
    step: str = ""
    timings: dict[str, float] = field(default_factory=dict)
    failures: list[tuple[str, str]] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)


@dataclass
class RunResult:
    hook: str
    result: str            # ok | skipped | job-fault | node-fault | slurm-error
    step: str = ""         # the step that decided the result
    cause: str = ""
    failures: list[tuple[str, str]] = field(default_factory=list)
    undo_problems: list[tuple[str, str]] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    duration_ms: float = 0.0
    requeue: bool = False  # a job fault that waits (JobWait): requeue the job, not cancel

    @property
    def reason(self) -> str:
        """``imexctl: <hook>/<step>: <cause>`` (plus failed undos), one line, bounded."""
        if self.result in ("ok", "skipped"):
            return ""
        if self.result == "job-fault":
            return reasons.one_line(reasons.ours(self.cause))
        text = reasons.format(self.hook, self.step, self.cause)
        if len(self.failures) > 1:
            text += f" (+{len(self.failures) - 1} more)"
        return reasons.one_line(text + self.undo_suffix())

    @property
    def node_reason(self) -> str:
        """The drain reason when the node must be drained (also after a job fault whose
        undo left something behind); "" when it need not be."""
        if self.result == "node-fault":
            return self.reason
        if self.result == "job-fault" and self.undo_problems:
            cause = f"cleanup after a refused job failed{self.undo_suffix()}"
            return reasons.one_line(reasons.format(self.hook, self.step, cause))
        return ""

    def undo_suffix(self) -> str:
        return "".join(f"; undo {what}: {problem}" for what, problem in self.undo_problems)


def internal_error(exc: BaseException) -> str:
    return f"internal error: {type(exc).__name__}: {exc}"


# Errors of the world outside (files, devices, locks): a fault of the node, with their text.
def _node_error_types() -> tuple[type[BaseException], ...]:
    from imexctl.rules.groups import ChannelError
    from imexctl.tray.ownership import LockTimeout, RecordUnreadable
    return (OSError, ChannelError, LockTimeout, RecordUnreadable, ImexctlError)


def _node_error_text(exc: BaseException) -> str:
    """The cause of a node fault; running out of file descriptors names the limit."""
    from imexctl.base.subproc import fd_error_text
    return fd_error_text(exc) or str(exc) or type(exc).__name__


def run_steps(hook: str, steps: Sequence[Step], run: RunContext) -> RunResult:
    """Run ``steps`` in order on ``run``; never raises (but for BaseException)."""
    logger = log.get_logger()
    node_errors = _node_error_types()
    result: RunResult | None = None
    skipped = False
    with run.stack:
        for step in steps:
            run.step = step.name
            wait = False
            try:
                with log.timed_step(step.name, run.timings):
                    step.action(run)
                continue
            except Done:
                skipped = True
                break
            except JobFault as exc:
                fault, wait = ("job-fault", str(exc)), isinstance(exc, JobWait)
            except SlurmError as exc:
                fault = ("slurm-error", str(exc))
            except NodeFault as exc:
                fault = ("node-fault", exc.cause)
            except node_errors as exc:
                fault = ("node-fault", _node_error_text(exc))
            except Exception as exc:
                import traceback
                logger.error("internal error", error=internal_error(exc))
                # info: into the log file for the developer, never onto the hook's stderr
                logger.info("internal error traceback",
                            traceback="".join(traceback.format_exception(exc)))
                fault = ("node-fault", internal_error(exc))
            run.failures.append((step.name, fault[1]))
            if step.keep_going:
                continue
            result = RunResult(hook, fault[0], step.name, fault[1], requeue=wait)
            break
        if result is None and run.failures:
            step_name, cause = run.failures[0]
            result = RunResult(hook, "node-fault", step_name, cause)
        if result is None:
            result = RunResult(hook, "skipped" if skipped else "ok")
            run.journal.entries.clear()  # everything stays: it is the job's now
        else:
            result.undo_problems = list(run.journal.unwind())
    result.failures = list(run.failures)
    result.timings = dict(run.timings)
    result.duration_ms = round((time.monotonic() - run.started) * 1000, 1)
    return result
