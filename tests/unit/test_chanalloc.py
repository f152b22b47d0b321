"""The controller's channel table: unique per clique, bounded, reconciled, crash-safe."""

import json
import multiprocessing
import os
import time

import pytest

from imexctl.controller.channel_table import ChannelTable, ChannelTableError, LiveJobs

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
    early = LiveJobs(lambda: {6}, asked_at=time.time())
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


# ---------------------------------------------------------------- audit F3-10: every field
def _valid_table(**changes):
    raw = {"format": 1, "host": os.uname().nodename, "reconciled_at": time.time() - 5,
           "jobs": {"1": {"at": time.time() - 5, "channels": {A: 1}}}, "cursor": {A: 1}}
    raw.update(changes)
    return raw


def _job(jid="1", **entry):
    return {jid: {"at": time.time() - 5, "channels": {A: 1}, **entry}}


CORRUPT = {
    # the eight shapes of F3-10 that are not clock steps, and their neighbours
    "at-text": _valid_table(jobs=_job(at="yesterday")),
    "at-inf": '{"format": 1, "jobs": {"1": {"at": 1e999, "channels": {"%s": 1}}}, '
              '"cursor": {}}' % A,
    "at-nan": '{"format": 1, "jobs": {"1": {"at": NaN, "channels": {"%s": 1}}}, '
              '"cursor": {}}' % A,
    "at-bool": _valid_table(jobs=_job(at=True)),
    "cursor-text": _valid_table(cursor={A: "x"}),
    "cursor-list": _valid_table(cursor={A: [1]}),
    "cursor-inf": '{"format": 1, "jobs": {}, "cursor": {"%s": 1e999}}' % A,
    "cursor-float": _valid_table(cursor={A: 1.0}),
    "cursor-negative": _valid_table(cursor={A: -1}),
    "cursor-huge": _valid_table(cursor={A: (1 << 20) + 1}),
    "job-superscript-two": _valid_table(jobs=_job("²")),
    "job-arabic-indic": _valid_table(jobs=_job("٣")),
    "job-leading-zero": _valid_table(jobs=_job("01")),
    "job-too-long": _valid_table(jobs=_job("1" * 11)),
    "reconciled-text": _valid_table(reconciled_at="x"),
    "reconciled-inf": '{"format": 1, "jobs": {}, "cursor": {}, "reconciled_at": -1e999}',
    "format-true": _valid_table(format=True),
    "host-number": _valid_table(host=5),
    "channel-bool": _valid_table(jobs={"1": {"at": 1.0, "channels": {A: True}}}),
    "not-utf8": b'{"format": 1, "jobs": {}, "cursor": {}, "x": "\xff"}',
}


def _write(directory, content):
    directory.mkdir(mode=0o755, exist_ok=True)
    path = directory / "channels.json"
    if isinstance(content, dict):
        content = json.dumps(content)
    if isinstance(content, str):
        content = content.encode()
    path.write_bytes(content)
    return path


@pytest.mark.parametrize("shape", sorted(CORRUPT))
def test_every_corrupt_field_is_a_table_error_never_a_crash(table, shape):
    """F3-10: ValueError, TypeError or OverflowError escaped past ChannelTableError, and
    PrologSlurmctld failed open without a record; infinite or Unicode-digit values were
    accepted and never reconciled."""
    _write(table.dir, CORRUPT[shape])
    with pytest.raises(ChannelTableError, match="corrupt|unreadable"):
        table.allocate(2, [A], live_jobs=lambda: {2})
    with pytest.raises(ChannelTableError):
        table.release(1, live_jobs=lambda: {1})
    with pytest.raises(ChannelTableError):
        table.held()
    assert ChannelTable(table.dir, count=8, reconcile_every_s=60).reconcile_due() is True


def test_a_valid_table_passes_the_checks(table):
    _write(table.dir, _valid_table())
    assert table.allocate(2, [A]) == {A: 2} and set(table.held()) == {1, 2}


def test_a_cursor_above_a_lowered_count_wraps_around(table):
    _write(table.dir, _valid_table(cursor={A: 2047}))      # count was 2048, now 8
    assert table.allocate(2, [A])[A] in range(2, 8)        # job 1 holds channel 1


# ---------------------------------------------------------------- audit F3-14: clock steps
def test_a_clock_stepped_back_one_day_drops_dead_jobs_at_the_next_allocation(tmp_path):
    """F3-14: the controller's clock ran a day ahead when jobs 1 and 2 allocated, then
    was stepped back; they ended without their EpilogSlurmctld. Their entries and the
    last reconciliation are stamped a day "in the future": the reconciliation is due at
    once and drops them, and job 8 finds the clique free, not full."""
    table = ChannelTable(tmp_path / "ctld", count=3, reconcile_every_s=60)   # channels 1, 2
    ahead = time.time() + 86400
    _write(table.dir, _valid_table(
        reconciled_at=ahead, cursor={A: 2},
        jobs={"1": {"at": ahead, "channels": {A: 1}}, "2": {"at": ahead, "channels": {A: 2}},
              "3": {"at": ahead, "channels": {B: 1}}}))
    assert table.reconcile_due()
    assert table.allocate(8, [A], live_jobs=lambda: {3, 8}) == {A: 1}
    assert table.last_reconcile.dropped == (1, 2)
    assert set(table.held()) == {3, 8}
    on_disk = json.loads((table.dir / "channels.json").read_text())
    now = time.time()
    assert all(e["at"] <= now for e in on_disk["jobs"].values())       # clamped to now
    assert on_disk["reconciled_at"] <= now and not table.reconcile_due()


def test_a_reconciliation_stamped_in_the_future_is_due_and_stays_due_until_made(tmp_path):
    table = ChannelTable(tmp_path / "ctld", count=8, reconcile_every_s=60)
    _write(table.dir, _valid_table(reconciled_at=time.time() + 3600))
    assert table.reconcile_due()
    table.allocate(2, [A], live_jobs=lambda: None)      # Slurm could not say: still due
    assert table.reconcile_due()
    table.allocate(3, [A], live_jobs=lambda: {1, 2, 3})
    assert not table.reconcile_due()


def test_release_after_a_clock_step_drops_the_dead_as_well(tmp_path):
    table = ChannelTable(tmp_path / "ctld", count=8)
    ahead = time.time() + 86400
    _write(table.dir, _valid_table(jobs={"1": {"at": ahead, "channels": {A: 1}},
                                         "2": {"at": ahead, "channels": {A: 2}}}))
    assert table.release(2, live_jobs=lambda: set()) == {A: 2}
    assert table.held() == {} and table.last_reconcile.dropped == (1,)


# ---------------------------------------------------------------- audit F3-12: rebuilds
class Source:
    """A rebuild source: what live jobs hold per their records; counts its calls."""

    def __init__(self, held):
        self.held, self.calls = held, 0

    def __call__(self):
        self.calls += 1
        return self.held


def test_a_missing_table_is_rebuilt_from_the_live_jobs_not_started_empty(tmp_path):
    source = Source({5: {A: 1}, 6: {A: 2, B: 1}})
    table = ChannelTable(tmp_path / "ctld", count=8, rebuild_from=source)
    assert table.allocate(9, [A, B], live_jobs=lambda: {5, 6, 9}) == {A: 3, B: 2}
    assert source.calls == 1 and table.held() == {5: {A: 1}, 6: {A: 2, B: 1}, 9: {A: 3, B: 2}}
    assert table.last_rebuild.why == "missing" and table.last_rebuild.jobs == (5, 6)
    on_disk = json.loads((table.dir / "channels.json").read_text())
    assert on_disk["host"] == os.uname().nodename
    assert table.allocate(10, [A], live_jobs=lambda: {5, 6, 9, 10}) == {A: 4}
    assert source.calls == 1                       # the table is ours now: no more asking


def test_a_missing_table_while_no_other_job_runs_asks_nothing(tmp_path):
    source = Source(None)
    table = ChannelTable(tmp_path / "ctld", count=8, rebuild_from=source)
    assert table.allocate(1, [A], live_jobs=lambda: {1}) == {A: 1}
    assert source.calls == 0 and table.last_rebuild.asked is False


def test_no_answer_from_slurm_is_an_error_and_nothing_is_written(tmp_path):
    table = ChannelTable(tmp_path / "ctld", count=8, rebuild_from=Source(None))
    with pytest.raises(ChannelTableError, match="missing; not rebuilt: Slurm cannot say"):
        table.allocate(9, [A], live_jobs=lambda: {5, 9})
    assert not (table.dir / "channels.json").exists()
    broken = ChannelTable(tmp_path / "ctld", count=8, rebuild_from=lambda: 1 / 0)
    with pytest.raises(ChannelTableError, match="ZeroDivisionError"):
        broken.allocate(9, [A])


def test_a_corrupt_table_is_kept_aside_and_rebuilt(tmp_path):
    source = Source({5: {A: 1}})
    table = ChannelTable(tmp_path / "ctld", count=8, rebuild_from=source)
    _write(table.dir, CORRUPT["cursor-inf"])
    assert table.allocate(9, [A], live_jobs=lambda: {5, 9}) == {A: 2}
    aside = list(table.dir.glob("channels.json.corrupt-*"))
    assert len(aside) == 1 and aside[0].read_text() == CORRUPT["cursor-inf"]
    assert str(aside[0]) == table.last_rebuild.aside
    assert table.last_rebuild.why.startswith("corrupt (bad cursor")
    assert table.held() == {5: {A: 1}, 9: {A: 2}}


def test_a_corrupt_table_stays_in_place_when_slurm_cannot_say(tmp_path):
    table = ChannelTable(tmp_path / "ctld", count=8, rebuild_from=Source(None))
    path = _write(table.dir, "{")
    with pytest.raises(ChannelTableError, match="corrupt"):
        table.allocate(9, [A])
    assert path.read_text() == "{" and not list(table.dir.glob("*.corrupt-*"))


def test_another_hosts_table_is_rebuilt_keeping_its_entries(tmp_path):
    """A failover: the backup controller finds the table the primary wrote. The live
    jobs' records are added to it (job 6 allocated on the primary and is not in the
    table the backup reads, as with a host-local table or a lagging copy), its own
    entries stay (job 4 may not have its record written yet) and the next
    reconciliation drops the dead among them."""
    primary = ChannelTable(tmp_path / "ctld", count=8, host="ctl1")
    primary.allocate(4, [A])
    primary.allocate(5, [A])
    source = Source({5: {A: 2}, 6: {A: 3}})
    backup = ChannelTable(tmp_path / "ctld", count=8, host="ctl2", rebuild_from=source,
                          reconcile_every_s=60)
    assert backup.allocate(9, [A]) == {A: 4}
    assert source.calls == 1 and backup.held() == {4: {A: 1}, 5: {A: 2}, 6: {A: 3}, 9: {A: 4}}
    assert backup.last_rebuild.why == "written by ctl1, not ctl2 (a controller failover)"
    assert backup.last_rebuild.kept == (4,)
    assert backup.reconcile_due()                  # kept entries: reconciled next time
    assert backup.allocate(10, [A], live_jobs=lambda: {5, 6, 9, 10}) == {A: 5}
    assert backup.last_reconcile.dropped == (4,) and source.calls == 1
    assert json.loads((backup.dir / "channels.json").read_text())["host"] == "ctl2"


def test_a_table_without_a_host_is_rebuilt_once(tmp_path):
    """Tables written before the host stamp: the first allocation after the upgrade
    rebuilds (its entries kept), then the table is this host's."""
    legacy = _valid_table()
    del legacy["host"]
    source = Source({})
    table = ChannelTable(tmp_path / "ctld", count=8, rebuild_from=source)
    _write(table.dir, legacy)
    assert table.allocate(2, [A]) == {A: 2} and table.allocate(3, [A]) == {A: 3}
    assert source.calls == 1 and set(table.held()) == {1, 2, 3}


def test_release_never_creates_or_restamps_a_table(tmp_path):
    table = ChannelTable(tmp_path / "ctld", count=8, host="ctl2", rebuild_from=Source({}))
    assert table.release(1, live_jobs=lambda: set()) == {}
    assert not (table.dir / "channels.json").exists()
    ChannelTable(tmp_path / "ctld", count=8, host="ctl1").allocate(1, [A])
    assert table.release(1, live_jobs=lambda: set()) == {A: 1}
    assert json.loads((table.dir / "channels.json").read_text())["host"] == "ctl1"


def test_channels_out_of_range_from_the_records_are_left_out(tmp_path):
    table = ChannelTable(tmp_path / "ctld", count=8,
                         rebuild_from=Source({5: {A: 9}, 6: {A: 0, B: 2}}))
    assert table.allocate(9, [A, B]) == {A: 1, B: 3}
    assert table.held() == {6: {B: 2}, 9: {A: 1, B: 3}}
    with pytest.raises(ChannelTableError, match="bad entry"):
        ChannelTable(tmp_path / "other", count=8,
                     rebuild_from=Source({"5": {A: 1}})).allocate(9, [A])


def test_rebuild_and_first_use_are_reported(tmp_path):
    events = []
    table = ChannelTable(tmp_path / "ctld", count=8, rebuild_from=Source({5: {A: 1}}),
                         report=lambda event, fields: events.append((event, fields)))
    table.allocate(9, [A])
    table.allocate(10, [A])
    table.release(10)
    assert [e for e, _ in events] == ["used", "rebuilt"]
    assert events[1][1]["why"] == "missing" and events[1][1]["jobs"] == [5]
    assert events[0][1]["path"] == str(table.dir / "channels.json")


def _rebuild_worker(args):
    directory, job, counter = args

    def slow_source():
        with open(counter, "a") as f:
            f.write("asked\n")
        time.sleep(0.3)
        return {1000: {A: 1}}
    return job, ChannelTable(directory, count=2048, rebuild_from=slow_source).allocate(job, [A])


def test_concurrent_allocations_on_a_lost_table_rebuild_it_once(tmp_path):
    """After a failover many jobs start at once: one asks Slurm, the others wait for
    its rebuild instead of each asking for every job's record."""
    counter = tmp_path / "asked"
    jobs = list(range(1, 13))
    with multiprocessing.get_context("fork").Pool(6) as pool:
        results = dict(pool.map(_rebuild_worker, [(tmp_path / "t", j, counter) for j in jobs]))
    assert counter.read_text() == "asked\n"
    channels = [results[j][A] for j in jobs]
    assert len(set(channels)) == len(jobs) and 1 not in channels
