"""An epilog may run more than once (Slurm reruns it in some versions): with the real
epilog steps and the simulated daemon, a repeat exits 0, changes nothing, drains nothing and
writes exactly one log line saying it is a repeat; anything that is not a true repeat
still gets the full, verified teardown."""

from __future__ import annotations

import json
import os
import time
from imexctl.base.dataclass import replace
from pathlib import Path

import pytest

from imexctl.lifecycle import epilog
from imexctl.tray import expected
from imexctl.lifecycle.epilog import DONE, DONE_KEEP, run_epilog
from imexctl.errors import NodeFault
from imexctl.lifecycle.prolog import run_prolog
from imexctl.tray.ownership import StateStore
from tests.support.lifecycle import CLEAN, ctx_for, leftovers
from tests.support.sim_daemon import sim_processes

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="channel mknod needs root")


def with_(ctx, job_id=None, restart_count=None):
    """The context of another job or attempt on the same trays, as slurmd would give it."""
    return ctx_for(ctx.job_id if job_id is None else job_id, nodes=ctx.nodelist_expr,
                   restart_count=ctx.restart_count if restart_count is None else restart_count)


def hook(cfg, slurm, ctx, fn=run_epilog, kind="epilog"):
    """What the CLI does for a hook: the run, then the expected-state transition."""
    started = time.time()
    rc = fn(cfg, slurm, ctx)
    expected.after_hook(cfg, kind, ctx.job_id, started)
    return rc


def snapshot(tmp_path, slurm):
    """Every file under the tray's state, run and channel dirs (with content and mtime),
    and the node as Slurm holds it."""
    files = {}
    for top in ("state", "run", "dev"):
        for path in sorted((tmp_path / top).rglob("*")):
            st = path.lstat()
            files[str(path)] = (st.st_mode, st.st_mtime_ns,
                                path.read_bytes() if path.is_file() else None)
    node = slurm.nodes_["tray01"]
    return files, node.state, node.reason


def log_lines(cfg, start=0):
    lines = Path(cfg.paths.log_file).read_text().splitlines()
    return len(lines), [json.loads(x) for x in lines[start:]]


def test_second_epilog_changes_nothing_and_logs_one_line(tmp_path, world):
    cfg, slurm, ctx = world
    assert hook(cfg, slurm, ctx, run_prolog, "prolog") == 0
    assert hook(cfg, slurm, ctx) == 0
    assert leftovers(tmp_path) == CLEAN and sim_processes(tmp_path) == []
    before = snapshot(tmp_path, slurm)
    n, _ = log_lines(cfg)
    calls = len(slurm.calls)

    assert hook(cfg, slurm, ctx) == 0

    assert snapshot(tmp_path, slurm) == before          # not a byte, not an mtime
    assert "DRAIN" not in slurm.nodes_["tray01"].state and slurm.nodes_["tray01"].reason in ("", None)
    assert len(slurm.calls) == calls                     # Slurm not even asked
    _, lines = log_lines(cfg, n)
    assert [x["event"] for x in lines] == [
        "epilog repeat: this job's epilog already tore everything down and verified it; "
        "nothing to do"]
    assert lines[0]["level"] == "info" and lines[0]["first_epilog_at"] > 0
    # a third run is a repeat too, and still one line
    assert hook(cfg, slurm, ctx) == 0
    _, lines = log_lines(cfg, n)
    assert len(lines) == 2 and all("repeat" in x["event"] for x in lines)


def test_repeat_after_a_failed_epilog_runs_every_step_again(monkeypatch, tmp_path, world):
    """Only an epilog that verified everything gone is remembered: after a drained one
    the rerun does the whole teardown again (and is not announced as a repeat)."""
    cfg, slurm, ctx = world
    assert run_prolog(cfg, slurm, ctx) == 0
    real = list(epilog.EPILOG_STEPS)

    def fail_files(run):
        raise NodeFault("injected")
    monkeypatch.setattr(epilog, "EPILOG_STEPS",
                        [replace(s, action=fail_files) if s.name == "files" else s for s in real])
    assert run_epilog(cfg, slurm, ctx) == 1
    assert not (cfg.paths.state_dir / DONE).exists()
    monkeypatch.setattr(epilog, "EPILOG_STEPS", real)
    n, _ = log_lines(cfg)
    assert run_epilog(cfg, slurm, ctx) == 0
    _, lines = log_lines(cfg, n)
    assert [x["step"] for x in lines if x["event"] == "step done"] == [s.name for s in real]
    assert not any("repeat" in x["event"] for x in lines)
    assert leftovers(tmp_path) == CLEAN and sim_processes(tmp_path) == []


@pytest.mark.parametrize("restart", [0, 1])
def test_a_job_back_on_the_tray_is_not_a_repeat(tmp_path, world, restart):
    """Requeued onto the same tray (SLURM_RESTART_COUNT up, or not set by this Slurm): the
    new run's domain is torn down by its epilog, never skipped as a repeat."""
    cfg, slurm, ctx = world
    assert run_prolog(cfg, slurm, ctx) == 0 and run_epilog(cfg, slurm, ctx) == 0
    again = with_(ctx, restart_count=ctx.restart_count + restart)
    assert run_prolog(cfg, slurm, again) == 0
    assert len(sim_processes(tmp_path)) == 1
    assert run_epilog(cfg, slurm, again) == 0
    assert leftovers(tmp_path) == CLEAN and sim_processes(tmp_path) == []
    assert StateStore(cfg.paths.state_dir).last_outcome()["hook"] == "epilog"


def test_ledger_is_bounded_and_unreadable_ledger_means_full_epilog(tmp_path, world):
    cfg, slurm, ctx = world
    for i in range(DONE_KEEP + 5):
        assert run_epilog(cfg, slurm, with_(ctx, job_id=1000 + i)) == 0
    done = json.loads((cfg.paths.state_dir / DONE).read_text())
    assert len(done) == DONE_KEEP and done[-1][0] == 1000 + DONE_KEEP + 4
    (cfg.paths.state_dir / DONE).write_text("{not json")
    n, _ = log_lines(cfg)
    assert run_epilog(cfg, slurm, with_(ctx, job_id=1000 + DONE_KEEP + 4)) == 0
    _, lines = log_lines(cfg, n)
    assert any(x["event"] == "step done" for x in lines)
    assert not any("repeat" in x["event"] for x in lines)


def test_a_ledger_write_killed_midway_is_swept(tmp_path, world):
    cfg, slurm, ctx = world
    assert run_epilog(cfg, slurm, ctx) == 0
    left = cfg.paths.state_dir / f".{DONE}.abcd1234"
    left.write_text("[")
    os.utime(left, (1, 1))                         # abandoned long ago
    assert run_epilog(cfg, slurm, with_(ctx, job_id=ctx.job_id + 1)) == 0
    assert not left.exists() and (cfg.paths.state_dir / DONE).exists()


def test_the_ledger_is_written_under_the_node_lock(monkeypatch, tmp_path, world):
    """Two epilogs never rewrite epilogs-done.json at once: the write happens while this
    epilog still holds the node lock (a second flock on the lock file is refused)."""
    import fcntl

    from imexctl.tray.ownership import LOCK
    cfg, slurm, ctx = world
    assert run_prolog(cfg, slurm, ctx) == 0
    seen = []
    real = epilog._remember_done

    def spy(store, c):
        fd = os.open(store.dir / LOCK, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            seen.append("free")
        except BlockingIOError:
            seen.append("held")
        finally:
            os.close(fd)
        real(store, c)
    monkeypatch.setattr(epilog, "_remember_done", spy)
    assert run_epilog(cfg, slurm, ctx) == 0
    assert seen == ["held"]
    assert (cfg.paths.state_dir / DONE).exists()
