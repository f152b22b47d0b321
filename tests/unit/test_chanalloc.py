"""The controller's channel table: unique per clique, bounded, reconciled, crash-safe."""

import json
import multiprocessing
import os
import time

import pytest

from imexctl.chanalloc import ChannelTable, ChannelTableError

A = "5b1b3a1e-1c1a-4d0e-9a5e-000000000001.32766"
B = "5b1b3a1e-1c1a-4d0e-9a5e-000000000002.32766"


@pytest.fixture
def table(tmp_path):
    return ChannelTable(tmp_path / "ctld", count=8)


def test_channels_unique_per_clique_never_zero_never_at_count(table):
    got = [table.allocate(job, [A])[A] for job in range(1, 8)]
    assert sorted(got) == [1, 2, 3, 4, 5, 6, 7]
    with pytest.raises(ChannelTableError, match="no free IMEX channel in clique"):
        table.allocate(99, [A])
    assert table.allocate(99, [B]) == {B: 1}  # another clique has its own numbers
    on_disk = json.loads((table.dir / "channels.json").read_text())
    assert on_disk["jobs"]["3"]["channels"] == {A: 3}


def test_multi_clique_job_gets_one_channel_per_group_and_rerun_is_stable(table):
    table.allocate(1, [A])
    first = table.allocate(2, [A, B])
    assert first == {A: 2, B: 1}
    assert table.allocate(2, [A, B]) == first


def test_release_frees_and_next_allocation_moves_on(table):
    table.allocate(1, [A])
    table.allocate(2, [A])
    assert table.release(1) == {A: 1}
    assert table.release(1) == {}          # twice is harmless
    assert table.allocate(3, [A]) == {A: 3}  # not the just-released 1: reused late
    assert set(table.held()) == {2, 3}


def test_reconcile_drops_jobs_slurm_no_longer_runs(table):
    table.allocate(1, [A])
    table.allocate(2, [A])
    # job 1 ended without EpilogSlurmctld (controller crash): Slurm lists only job 2.
    table.allocate(3, [A], live_jobs=lambda: {2, 3})
    assert set(table.held()) == {2, 3}
    assert table.last_reconcile.dropped == (1,)
    # Slurm unreachable: nothing is dropped on a guess.
    table.allocate(4, [A], live_jobs=lambda: None)
    assert set(table.held()) == {2, 3, 4}
    table.release(4, live_jobs=lambda: set())
    assert table.held() == {}


def test_every_allocation_reconciles_by_default(tmp_path):
    table = ChannelTable(tmp_path / "ctld", count=8)
    asked = []
    table.allocate(1, [A], live_jobs=lambda: asked.append(1) or {1})
    table.allocate(2, [A], live_jobs=lambda: asked.append(2) or {2})   # job 1 ended, no epilog
    assert asked == [1, 2] and table.last_reconcile.dropped == (1,)


def test_spaced_reconciling_asks_only_when_due_or_a_clique_is_full(tmp_path):
    table = ChannelTable(tmp_path / "ctld", count=3, reconcile_every_s=60)   # channels 1, 2
    asked = []

    def live(ids):
        return lambda: asked.append(ids) or ids
    table.allocate(1, [A], live_jobs=live({1}))        # a fresh table: due
    table.allocate(2, [A], live_jobs=live({1, 2}))     # reconciled just now: not asked
    assert asked == [{1}]
    # job 1 ended without its EpilogSlurmctld and the clique is full: reconcile, then allocate
    assert table.allocate(3, [A], live_jobs=live({2, 3})) == {A: 1}
    assert table.last_reconcile.dropped == (1,) and asked[-1] == {2, 3}
    # full of live jobs: still an error, after one question
    with pytest.raises(ChannelTableError, match="no free IMEX channel"):
        table.allocate(4, [A], live_jobs=live({2, 3, 4}))
    assert asked[-1] == {2, 3, 4} and len(asked) == 3
    # once the interval has passed, the next allocation asks again
    table.reconcile_every_s = 0.0
    table.release(3)
    table.allocate(5, [A], live_jobs=live({5}))
    assert len(asked) == 4 and table.last_reconcile.dropped == (2,)


def test_snapshot_older_than_an_allocation_never_drops_it(table):
    def stale_snapshot():
        # While this caller asked Slurm, job 5 started and allocated.
        ChannelTable(table.dir, count=8).allocate(5, [A])
        return {6}
    table.allocate(6, [A], live_jobs=stale_snapshot)
    assert set(table.held()) == {5, 6}
    assert len({c[A] for c in table.held().values()}) == 2


def test_a_query_sent_before_an_allocation_never_drops_it(table):
    """PrologSlurmctld's squeue starts beside its job query: the answer comes later, but
    it is as old as the question (``asked_at``), and a job that allocated in between is
    kept although the answer does not name it."""
    class Sent:
        def __init__(self):
            self.asked_at = time.time()

        def __call__(self):
            return {6}
    early = Sent()
    time.sleep(0.01)
    ChannelTable(table.dir, count=8).allocate(5, [A])   # after the question was sent
    table.allocate(6, [A], live_jobs=early)
    assert set(table.held()) == {5, 6}
    table.allocate(7, [A], live_jobs=lambda: {6, 7})     # a fresh question: 5 is dead
    assert set(table.held()) == {6, 7} and table.last_reconcile.dropped == (5,)


@pytest.mark.parametrize("content", ["{", "[]", '{"format": 1, "jobs": {"x": {}}, "cursor": {}}',
                                     '{"format": 1, "jobs": {"1": {"channels": {"k": 0}}},'
                                     ' "cursor": {}}'])
def test_corrupt_table_is_an_error_not_a_fresh_start(table, content):
    table.dir.mkdir(mode=0o755)
    (table.dir / "channels.json").write_text(content)
    with pytest.raises(ChannelTableError):
        table.allocate(1, [A])


def test_symlinked_or_group_writable_dir_is_refused(tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    with pytest.raises(OSError, match="symbolic link"):
        ChannelTable(tmp_path / "link").allocate(1, [A])
    open_dir = tmp_path / "open"
    open_dir.mkdir()
    os.chmod(open_dir, 0o777)
    with pytest.raises(OSError, match="writable by group or others"):
        ChannelTable(open_dir).allocate(1, [A])


def _worker(args):
    directory, job = args
    return job, ChannelTable(directory, count=2048).allocate(job, [A, B])


def test_concurrent_allocations_from_many_processes_never_collide(tmp_path):
    jobs = list(range(1, 41))
    with multiprocessing.get_context("fork").Pool(8) as pool:
        results = dict(pool.map(_worker, [(tmp_path / "t", j) for j in jobs]))
    for key in (A, B):
        channels = [results[j][key] for j in jobs]
        assert len(set(channels)) == len(jobs) and min(channels) >= 1
    assert ChannelTable(tmp_path / "t").held() == results


def test_lock_timeout_is_reported(tmp_path):
    import fcntl
    table = ChannelTable(tmp_path / "t", lock_timeout_s=0.2)
    table.allocate(1, [A])
    fd = os.open(tmp_path / "t" / "channels.lock", os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        with pytest.raises(ChannelTableError, match="held by another imexctl"):
            table.allocate(2, [A])
    finally:
        os.close(fd)
