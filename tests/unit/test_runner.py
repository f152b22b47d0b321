"""The step runner on its own: results, step names, timings, undo order and undo results."""

from __future__ import annotations

import json

import pytest

from imexctl.base import log
from imexctl.errors import JobFault, NodeFault, SlurmError
from imexctl.lifecycle.runner import Done, RunContext, Step, run_steps


def journal_steps(names, fail_at=None, exc=None, keep_going=False):
    """Steps that each journal an undo of themselves; ``fail_at`` raises ``exc`` after."""
    undone: list[str] = []

    def make(name):
        def action(run):
            assert run.step == name  # the runner names the step before it runs
            run.journal.add(name, lambda: undone.append(name))
            if name == fail_at:
                raise exc
        return Step(name, action, keep_going=keep_going)
    return [make(n) for n in names], undone


NAMES = ["a", "b", "c", "d"]


def test_all_steps_ok_keeps_everything_and_times_each_step():
    steps, undone = journal_steps(NAMES)
    result = run_steps("prolog", steps, RunContext())
    assert result.result == "ok" and result.reason == "" and undone == []
    assert list(result.timings) == NAMES and all(ms >= 0 for ms in result.timings.values())


@pytest.mark.parametrize("fail_at", NAMES)
def test_each_step_failing_is_named_and_undone_newest_first(fail_at):
    steps, undone = journal_steps(NAMES, fail_at, NodeFault("disk on fire"))
    result = run_steps("prolog", steps, RunContext())
    assert result.result == "node-fault" and result.step == fail_at
    assert result.reason == f"imexctl: prolog/{fail_at}: disk on fire"
    done = NAMES[:NAMES.index(fail_at) + 1]
    assert undone == list(reversed(done))
    assert list(result.timings) == done  # later steps never ran


@pytest.mark.parametrize("fail_at", NAMES)
def test_unexpected_exception_in_each_step_is_an_internal_error(fail_at):
    steps, undone = journal_steps(NAMES, fail_at, KeyError("daemon"))
    result = run_steps("epilog", steps, RunContext())
    assert result.result == "node-fault"
    assert result.reason == f"imexctl: epilog/{fail_at}: internal error: KeyError: 'daemon'"
    assert undone == list(reversed(NAMES[:NAMES.index(fail_at) + 1]))


def test_os_error_is_a_node_fault_with_its_text():
    steps, _ = journal_steps(NAMES, "b", PermissionError(13, "Permission denied"))
    result = run_steps("prolog", steps, RunContext())
    assert result.reason == "imexctl: prolog/b: [Errno 13] Permission denied"


def test_job_fault_refuses_and_undoes_without_node_reason():
    steps, undone = journal_steps(NAMES, "c", JobFault("allocation spans cliques"))
    result = run_steps("prolog", steps, RunContext())
    assert result.result == "job-fault" and result.reason == "imexctl: allocation spans cliques"
    assert result.node_reason == "" and undone == ["c", "b", "a"]


def test_slurm_error_is_its_own_result():
    steps, undone = journal_steps(NAMES, "a", SlurmError("Unable to contact slurm controller"))
    result = run_steps("prolog", steps, RunContext())
    assert result.result == "slurm-error" and undone == ["a"]


def test_done_stops_with_success_and_keeps_what_was_made():
    steps, undone = journal_steps(NAMES, "b", Done())
    result = run_steps("prolog", steps, RunContext())
    assert result.result == "skipped" and undone == [] and list(result.timings) == ["a", "b"]


def test_failed_undo_is_reported_and_the_rest_still_undone():
    order: list[str] = []

    def first(run):
        run.journal.add("record", lambda: order.append("record"))
        run.journal.add("files", lambda: order.append("files") or "job-1 still present")

    def second(run):
        def boom():
            order.append("daemon")
            raise ProcessLookupError("gone")
        run.journal.add("daemon", boom)
        raise NodeFault("not READY")

    result = run_steps("prolog", [Step("one", first), Step("two", second)], RunContext())
    assert order == ["daemon", "files", "record"]
    assert result.undo_problems == [("daemon", "ProcessLookupError: gone"),
                                    ("files", "job-1 still present")]
    assert result.reason == ("imexctl: prolog/two: not READY; undo daemon: "
                             "ProcessLookupError: gone; undo files: job-1 still present")


def test_job_fault_with_failed_undo_also_drains():
    def step(run):
        run.journal.add("daemon", lambda: "daemon stuck: pid 9 survived SIGKILL")
        raise JobFault("IMEX domain DOWN after 3s")

    result = run_steps("prolog", [Step("wait-ready", step)], RunContext())
    assert result.result == "job-fault"
    assert result.node_reason == ("imexctl: prolog/wait-ready: cleanup after a refused job "
                                  "failed; undo daemon: daemon stuck: pid 9 survived SIGKILL")


def test_keep_going_steps_all_run_and_the_first_failure_names_the_reason():
    ran: list[str] = []

    def make(name, exc=None):
        def action(run):
            ran.append(name)
            if exc:
                raise exc
        return Step(name, action, keep_going=True)

    steps = [make("stop-daemon", NodeFault("daemon stuck")), make("ports"),
             make("channel", ValueError("bad")), make("record")]
    result = run_steps("epilog", steps, RunContext())
    assert ran == ["stop-daemon", "ports", "channel", "record"]
    assert result.failures == [("stop-daemon", "daemon stuck"),
                               ("channel", "internal error: ValueError: bad")]
    assert result.reason == "imexctl: epilog/stop-daemon: daemon stuck (+1 more)"


def test_reason_is_one_bounded_line():
    steps, _ = journal_steps(["a"], "a", NodeFault("line one\nline two " + "x" * 400))
    reason = run_steps("prolog", steps, RunContext()).reason
    assert "\n" not in reason and len(reason) == 250


def test_locks_entered_by_a_step_are_released_after_the_undo(tmp_path):
    from imexctl.tray.ownership import StateStore
    store = StateStore(tmp_path / "state")
    held_during_undo = []

    def lock(run):
        run.stack.enter_context(store.locked())
        run.journal.add("record", lambda: held_during_undo.append(_lock_free(store)))
        raise NodeFault("x")

    run_steps("prolog", [Step("ownership", lock)], RunContext())
    assert held_during_undo == [False] and _lock_free(store)


def _lock_free(store) -> bool:
    import fcntl
    import os
    fd = os.open(store.dir / "lock", os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


def test_each_step_logs_its_duration(tmp_path):
    log.setup_logging(tmp_path / "imexctl.log", "info", "tray01", stderr=None)
    steps, _ = journal_steps(["a", "b"], "b", NodeFault("x"))
    run_steps("prolog", steps, RunContext())
    lines = [json.loads(x) for x in (tmp_path / "imexctl.log").read_text().splitlines()]
    timed = {x["step"]: x for x in lines if "duration_ms" in x}
    assert set(timed) == {"a", "b"} and timed["b"]["event"] == "step failed"
