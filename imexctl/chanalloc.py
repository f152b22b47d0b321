"""Cluster-side IMEX channel allocation: one channel per domain, unique within its clique.

Two IMEX domains in one clique must not share a channel number (DRA driver issue #892),
and a job-id formula alone collides, so PrologSlurmctld, which sees every job, hands out
channels from one table on the slurmctld host:

* channel 0 is reserved, and no channel is ever at or above ``count`` (the driver's
  ``NVreg_ImexChannelCount``);
* one file, changed only under an exclusive lock and replaced atomically, so 200
  controller prologs starting at once are serialized and a crash leaves the old or the
  new table, never half of one;
* reconciled with Slurm's live jobs on every allocation and every release, so a job whose
  EpilogSlurmctld never ran (slurmctld crash, hook killed) does not hold its channels
  past the next job start (issue 10). A site may space the allocation-time reconciling
  out (``reconcile_every_s``; then a full clique still reconciles at once). The
  live-job snapshot is taken *before* the lock (an RPC must not be held under it), so
  only entries older than the snapshot may be dropped: a job that allocated meanwhile
  is never mistaken for a dead one.
* per clique, the next free channel after the last one handed out: a number just
  released is reused as late as possible.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from pathlib import Path

from imexctl.fsutil import LockBusy, ensure_secure_dir, exclusive_lock, read_json, write_json
from imexctl.record import dataclass

TYPE_CHECKING = False   # typing is imported for type checkers only: ~3 ms of start-up
if TYPE_CHECKING:
    from typing import Callable, Iterable, Iterator

TABLE = "channels.json"
LOCK = "channels.lock"
FORMAT = 1
RECONCILE_EVERY_S = 0.0   # every allocation and release (config: channels.reconcile_every_s)


class ChannelTableError(Exception):
    """The table cannot be used (lock timeout, unreadable, exhausted)."""


@dataclass(frozen=True)
class Reconciled:
    dropped: tuple[int, ...]        # jobs whose channels were released as dead


class ChannelTable:
    """The allocation table under ``directory`` (owned by SlurmUser, not writable by others)."""

    def __init__(self, directory: Path, count: int = 2048, lock_timeout_s: float = 20.0,
                 reconcile_every_s: float | None = None):
        if not 2 <= count <= 1 << 20:
            raise ValueError(f"channel count {count} out of range 2..{1 << 20}")
        self.dir = Path(directory)
        self.count = count
        self.lock_timeout_s = lock_timeout_s
        self.reconcile_every_s = (RECONCILE_EVERY_S if reconcile_every_s is None
                                  else reconcile_every_s)
        self.last_reconcile = Reconciled(())
        self._exhausted = False

    # ------------------------------------------------------------------ storage
    @contextmanager
    def _locked(self) -> Iterator[None]:
        ensure_secure_dir(self.dir, 0o755)
        try:
            with exclusive_lock(self.dir / LOCK, self.lock_timeout_s):
                yield
        except LockBusy as exc:
            raise ChannelTableError(str(exc)) from None

    def _load(self) -> dict:
        """The table; an unreadable or malformed one is an error, never an empty table
        (starting afresh would hand out channels that running jobs hold)."""
        try:
            raw = read_json(self.dir / TABLE)
        except (OSError, ValueError) as exc:
            raise ChannelTableError(f"{self.dir / TABLE}: unreadable ({exc})") from None
        if raw is None:
            return {"format": FORMAT, "jobs": {}, "cursor": {}}
        if not isinstance(raw, dict) or raw.get("format") != FORMAT \
                or not isinstance(raw.get("jobs"), dict) or not isinstance(raw.get("cursor"), dict):
            raise ChannelTableError(f"{self.dir / TABLE}: not an imexctl channel table")
        for jid, entry in raw["jobs"].items():
            channels = entry.get("channels") if isinstance(entry, dict) else None
            if not jid.isdigit() or not isinstance(channels, dict) or not all(
                    type(c) is int and 0 < c < self.count for c in channels.values()):
                raise ChannelTableError(f"{self.dir / TABLE}: bad entry for job {jid!r}")
        return raw

    def _save(self, table: dict) -> None:
        write_json(self.dir / TABLE, table, 0o644)

    # ------------------------------------------------------------------ operations
    def allocate(self, job_id: int, cliques: Iterable[str],
                 live_jobs: Callable[[], set[int] | None] | None = None) -> dict[str, int]:
        """One channel per clique for ``job_id``: {clique key: channel}.

        ``live_jobs`` returns the ids of jobs Slurm still runs (None when Slurm cannot
        say: then nothing is dropped); a query already sent (PrologSlurmctld starts it
        beside the job query) says when in ``asked_at``, and only entries older than that
        may be dropped. A second call for the same job returns what it already holds for
        those cliques.
        """
        cliques = list(dict.fromkeys(cliques))
        ask = live_jobs is not None and self.reconcile_due()
        while True:
            snapshot_at = time.time()
            live = live_jobs() if ask and live_jobs else None
            snapshot_at = min(snapshot_at, getattr(live_jobs, "asked_at", snapshot_at))
            try:
                return self._allocate(job_id, cliques, live, snapshot_at)
            except ChannelTableError:
                if ask or live_jobs is None or not self._exhausted:
                    raise
                ask = True  # a clique is full: drop dead jobs' channels and try once more

    def _allocate(self, job_id: int, cliques: list[str], live: set[int] | None,
                  snapshot_at: float) -> dict[str, int]:
        self._exhausted = False
        with self._locked():
            table = self._load()
            self._reconcile(table, live, snapshot_at, keep=job_id)
            jobs = table["jobs"]
            mine = jobs.get(str(job_id), {"at": time.time(), "channels": {}})
            held = mine["channels"]
            for key in cliques:
                if key in held:
                    continue
                used = {entry["channels"][key] for jid, entry in jobs.items()
                        if jid != str(job_id) and key in entry["channels"]}
                held[key] = self._next_free(key, used, table["cursor"])
            mine["at"] = time.time()
            jobs[str(job_id)] = mine
            self._save(table)
            return {key: held[key] for key in cliques}

    def reconcile_due(self) -> bool:
        """Whether the last reconciliation is ``reconcile_every_s`` old (read without the
        lock: a stale answer only moves one reconciliation by one job)."""
        if self.reconcile_every_s <= 0:
            return True  # every allocation reconciles: no extra table read
        try:
            return self._due(self._load())
        except ChannelTableError:
            return True  # the locked path reports an unusable table

    def _due(self, table: dict) -> bool:
        try:
            last = float(table.get("reconciled_at", 0))
        except (TypeError, ValueError):
            return True
        return time.time() - last >= self.reconcile_every_s

    def release(self, job_id: int,
                live_jobs: Callable[[], set[int] | None] | None = None) -> dict[str, int]:
        """Drop the job's channels (EpilogSlurmctld); returns what it held.

        EpilogSlurmctld runs for every job of the cluster: a job that holds nothing
        costs one read, no lock, no RPC and no write; one that holds channels asks
        ``live_jobs`` only when a reconciliation is due.
        """
        try:
            table = self._load()
            if str(job_id) not in table["jobs"]:
                return {}
            due = self._due(table)
        except ChannelTableError:
            due = True  # let the locked path report it
        snapshot_at = time.time()
        live = live_jobs() if live_jobs and due else None
        with self._locked():
            table = self._load()
            entry = table["jobs"].pop(str(job_id), None)
            self._reconcile(table, live, snapshot_at, keep=None)
            self._save(table)
        return dict(entry["channels"]) if entry else {}

    def held(self) -> dict[int, dict[str, int]]:
        """{job id: {clique: channel}} as stored (read without the lock: a snapshot)."""
        table = self._load()
        return {int(jid): dict(entry["channels"]) for jid, entry in table["jobs"].items()}

    # ------------------------------------------------------------------ rules
    def _reconcile(self, table: dict, live: set[int] | None, snapshot_at: float,
                   keep: int | None) -> None:
        if live is None:
            self.last_reconcile = Reconciled(())
            return
        table["reconciled_at"] = snapshot_at
        dead = [jid for jid, entry in table["jobs"].items()
                if int(jid) != keep and int(jid) not in live
                and float(entry.get("at", 0)) < snapshot_at]
        for jid in dead:
            del table["jobs"][jid]
        self.last_reconcile = Reconciled(tuple(sorted(int(j) for j in dead)))

    def _next_free(self, key: str, used: set[int], cursor: dict) -> int:
        top = self.count - 1                      # channels 1 .. count-1
        start = int(cursor.get(key, 0))
        for step in range(1, top + 1):
            channel = (start + step - 1) % top + 1
            if channel not in used:
                cursor[key] = channel
                return channel
        self._exhausted = True
        raise ChannelTableError(f"no free IMEX channel in clique {key} "
                                f"({len(used)} in use, channels 1..{top})")


__all__ = ["ChannelTable", "ChannelTableError", "Reconciled"]
