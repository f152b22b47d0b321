"""Cluster-side IMEX channel allocation: one channel per domain, unique within its clique.

Two IMEX domains in one clique must not share a channel number (DRA driver issue #892),
and a job-id formula alone collides, so PrologSlurmctld, which sees every job, hands out
channels from one table kept by the controller (by default on the StateSaveLocation,
which a backup slurmctld shares):

* channel 0 is reserved, and no channel is ever at or above ``count`` (the driver's
  ``NVreg_ImexChannelCount``);
* one file, changed only under an exclusive lock and replaced atomically, so 200
  controller prologs starting at once are serialized and a crash leaves the old or the
  new table, never half of one;
* stamped with the host's boot id and then written without fsync (two disk flushes, about
  10 ms of every job start and end on a VM's disk): a process that dies leaves its write
  in the page cache, and only a reboot can lose one, so a table stamped with another boot
  is rebuilt from the live jobs' records like another host's (without a boot id every
  write is flushed);
* reconciled with Slurm's live jobs on every allocation and every release, so a job whose
  EpilogSlurmctld never ran (slurmctld crash, hook killed) does not hold its channels
  past the next job start (issue 10). A site may space the allocation-time reconciling
  out (``reconcile_every_s``; then a full clique still reconciles at once). The
  live-job snapshot is taken *before* the lock (an RPC must not be held under it), so
  only entries older than the snapshot may be dropped: a job that allocated meanwhile
  is never mistaken for a dead one.
* never started afresh while jobs may hold channels (audit F3-12): a table that is
  missing, unreadable or corrupt, or was last written by another host (a failover to
  the backup controller) or in an earlier boot of this one, is rebuilt from what the
  live jobs hold per their sealed decision records before anything is handed out; when
  Slurm cannot say, nothing is;
* every field is checked on load (audit F3-10), and a clock stepped back does not pin
  entries stamped "in the future" (audit F3-14);
* per clique, the next free channel after the last one handed out: a number just
  released is reused as late as possible.
"""

from __future__ import annotations

import json
import math
import os
import time
from contextlib import contextmanager
from pathlib import Path

from imexctl.base.fsutil import LockBusy, ensure_secure_dir, exclusive_lock, read_bytes, write_json
from imexctl.base.dataclass import dataclass

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable, Iterable, Iterator

TABLE = "channels.json"
LOCK = "channels.lock"
# Taken before LOCK (never after it) by the one process that rebuilds: the others wait
# for it instead of each asking Slurm for every job's record at once (a failover starts
# many jobs together).
REBUILD_LOCK = "channels.rebuild.lock"
FORMAT = 1
COUNT_MAX = 1 << 20
TABLE_BYTES = 16 << 20    # a few hundred bytes per job: room for tens of thousands
RECONCILE_EVERY_S = 0.0   # every allocation and release (config: channels.reconcile_every_s)
MISSING = "missing"


class ChannelTableError(Exception):
    """The table cannot be used (lock timeout, not rebuildable, exhausted)."""


class _RebuildNeeded(Exception):
    """Raised under the lock so that Slurm is asked with the lock released."""


@dataclass(frozen=True)
class Reconciled:
    dropped: tuple[int, ...]        # jobs whose channels were released as dead


@dataclass(frozen=True)
class Rebuilt:
    why: str                        # missing, written by another host, corrupt (...)
    path: str
    jobs: tuple[int, ...]           # live jobs whose channels came from their records
    kept: tuple[int, ...]           # entries of the old table kept beside them
    aside: str = ""                 # where an unreadable table was moved, for the admin
    asked: bool = True              # False: no other job ran, so Slurm was not asked


class LiveJobs:
    """Slurm's live jobs, for a reconciliation: calling it answers (the ids of the jobs
    Slurm still runs; None when Slurm cannot say). ``asked_at``: when the question went
    out, where it went out before the call (PrologSlurmctld sends it beside its job
    query); None: when called."""

    def __init__(self, ask: Callable[[], set[int] | None], asked_at: float | None = None):
        self.ask, self.asked_at = ask, asked_at

    def __call__(self) -> set[int] | None:
        return self.ask()


@dataclass(frozen=True)
class _Snapshot:
    held: dict                      # {job id: {clique: channel}} from the rebuild source
    asked_at: float
    asked: bool = True


class ChannelTable:
    """The allocation table under ``directory`` (owned by SlurmUser, not writable by others).

    ``rebuild_from`` returns {job id: {clique: channel}} for the live jobs (None when
    Slurm cannot say); ``report(event, fields)`` is told of a rebuild and, once, of the
    table's first locked use (the controller logs both); ``host`` is this host's name
    (``socket.gethostname()``), stamped on every table it writes; ``boot`` this host's
    boot id, stamped beside it: a table of another boot is rebuilt, so writes need no
    fsync (None: no stamp, every write flushed to disk).
    """

    def __init__(self, directory: Path, count: int = 2048, lock_timeout_s: float = 20.0,
                 reconcile_every_s: float | None = None,
                 rebuild_from: Callable[[], dict[int, dict[str, int]] | None] | None = None,
                 report: Callable[[str, dict], None] | None = None, host: str | None = None,
                 boot: str | None = None):
        if not 2 <= count <= COUNT_MAX:
            raise ValueError(f"channel count {count} out of range 2..{COUNT_MAX}")
        self.dir = Path(directory)
        self.count = count
        self.lock_timeout_s = lock_timeout_s
        self.reconcile_every_s = (RECONCILE_EVERY_S if reconcile_every_s is None
                                  else reconcile_every_s)
        self.rebuild_from = rebuild_from
        self.report = report
        # What socket.gethostname() returns (both are uname's nodename), without
        # importing socket on every controller hook.
        self.host = host or os.uname().nodename
        self.boot = boot
        self.last_reconcile = Reconciled(())
        self.last_rebuild: Rebuilt | None = None
        self._exhausted = False
        self._reported_use = False

    @property
    def path(self) -> Path:
        return self.dir / TABLE

    # ------------------------------------------------------------------ storage
    @contextmanager
    def _locked(self, name: str = LOCK) -> Iterator[None]:
        ensure_secure_dir(self.dir, 0o700)
        try:
            with exclusive_lock(self.dir / name, self.lock_timeout_s):
                yield
        except LockBusy as exc:
            raise ChannelTableError(str(exc)) from None

    def _read(self) -> tuple[dict | None, str]:
        """(table, "") when usable; (None, "missing"); (None, why) when it cannot be
        read or is not a valid table. A valid table says which host wrote it."""
        try:
            data = read_bytes(self.path, TABLE_BYTES)
        except (OSError, ValueError) as exc:
            return None, f"unreadable ({exc})"
        if data is None:
            return None, MISSING
        try:
            raw = json.loads(data.decode("utf-8"))
        except (ValueError, RecursionError) as exc:
            return None, f"corrupt (not JSON: {str(exc)[:120]})"
        try:
            return self._valid(raw), ""
        except ValueError as exc:
            return None, f"corrupt ({exc})"

    def _load(self) -> dict:
        """The table as stored (an empty one when missing: readers and releases only);
        an unreadable or malformed one is an error, never an empty table (starting
        afresh would hand out channels that running jobs hold)."""
        table, why = self._read()
        if why == MISSING:
            return {"format": FORMAT, "jobs": {}, "cursor": {}}
        if table is None:
            raise ChannelTableError(f"{self.path}: {why}")
        return table

    def _valid(self, raw: object) -> dict:
        """``raw`` checked field by field (audit F3-10): ValueError names the first bad
        one. Numbers must be finite, job ids ASCII digits as Slurm prints them, channels
        within 1..count-1, cursors ints within 0..COUNT_MAX; ``at`` defaults to 0 (older
        tables)."""
        if not isinstance(raw, dict) or type(raw.get("format")) is not int \
                or raw["format"] != FORMAT:
            raise ValueError("not an imexctl channel table")
        jobs, cursor = raw.get("jobs"), raw.get("cursor")
        if not isinstance(jobs, dict) or not isinstance(cursor, dict):
            raise ValueError("no jobs or cursor object")
        if "host" in raw and not (isinstance(raw["host"], str) and 0 < len(raw["host"]) <= 255):
            raise ValueError(f"bad host {raw['host']!r:.80}")
        if "boot" in raw and not (isinstance(raw["boot"], str) and 0 < len(raw["boot"]) <= 64):
            raise ValueError(f"bad boot {raw['boot']!r:.80}")
        if "reconciled_at" in raw and not _finite(raw["reconciled_at"]):
            raise ValueError(f"bad reconciled_at {raw['reconciled_at']!r:.80}")
        for jid, entry in jobs.items():
            channels = entry.get("channels") if isinstance(entry, dict) else None
            if not _job_id_text(jid) or not isinstance(channels, dict) or not all(
                    type(c) is int and 0 < c < self.count for c in channels.values()):
                raise ValueError(f"bad entry for job {jid!r:.80}")
            at = entry.setdefault("at", 0)
            if not _finite(at):
                raise ValueError(f"bad time {at!r:.80} for job {jid}")
        for key, value in cursor.items():   # at or above count: the count was lowered
            if type(value) is not int or not 0 <= value <= COUNT_MAX:
                raise ValueError(f"bad cursor {value!r:.80} for clique {key!r:.80}")
        return raw

    def _save(self, table: dict) -> None:
        # SlurmUser's: it maps jobs to channels. Flushed only when no boot stamps it; one
        # line, as it is rewritten at every job start and end whatever its size.
        write_json(self.path, table, 0o600, durable=self.boot is None, indent=None)

    def _ours(self, table: dict | None) -> bool:
        """Whether ``table`` was last written here, in this boot (when one is known)."""
        return (table is not None and table.get("host") == self.host
                and (self.boot is None or table.get("boot") == self.boot))

    # ------------------------------------------------------------------ operations
    def allocate(self, job_id: int, cliques: Iterable[str],
                 live_jobs: LiveJobs | Callable[[], set[int] | None] | None = None,
                 rebuild_from: Callable[[], dict[int, dict[str, int]] | None] | None = None,
                 due: bool | None = None) -> dict[str, int]:
        """One channel per clique for ``job_id``: {clique key: channel}.

        ``live_jobs`` returns the ids of jobs Slurm still runs (None when Slurm cannot
        say: then nothing is dropped); a query already sent (PrologSlurmctld starts it
        beside the job query) says when in :attr:`LiveJobs.asked_at`, and only entries
        older than that may be dropped. ``rebuild_from`` (default: the table's own) is asked only when
        the table must be rebuilt. ``due``: whether a reconciliation is due, when the
        caller already read it (:meth:`reconcile_due`, before sending the query); None:
        read it here. A second call for the same job returns what it already holds for
        those cliques.
        """
        cliques = list(dict.fromkeys(cliques))
        source = rebuild_from or self.rebuild_from
        ask = live_jobs is not None and (self.reconcile_due() if due is None else due)
        asked_at = live_jobs.asked_at if isinstance(live_jobs, LiveJobs) else None
        while True:
            snapshot_at = time.time()
            live = live_jobs() if ask and live_jobs else None
            if asked_at is not None:
                snapshot_at = min(snapshot_at, asked_at)
            try:
                try:
                    return self._allocate(job_id, cliques, live, snapshot_at,
                                          legacy=source is None)
                except _RebuildNeeded:
                    return self._allocate_rebuilt(job_id, cliques, live, snapshot_at, source)
            except ChannelTableError:
                if ask or live_jobs is None or not self._exhausted:
                    raise
                ask = True  # a clique is full: drop dead jobs' channels and try once more

    def _allocate_rebuilt(self, job_id: int, cliques: list[str], live: set[int] | None,
                          snapshot_at: float, source: Callable | None) -> dict[str, int]:
        """Rebuild, then allocate. One process rebuilds at a time; one that waited for
        it finds the table rebuilt and asks Slurm nothing. When the live-job snapshot
        names no other job, no other job can hold a channel: nothing to ask either."""
        self.last_rebuild = None
        with self._locked(REBUILD_LOCK):
            table, why = self._read()
            snapshot = None
            if self._ours(table):
                pass
            elif live is not None and live <= {job_id}:
                snapshot = _Snapshot({}, snapshot_at, asked=False)
            else:
                snapshot = self._ask(source, why or self._foreign(table))
            try:
                held = self._allocate(job_id, cliques, live, snapshot_at, snapshot)
            except _RebuildNeeded:
                raise ChannelTableError(f"{self.path}: changed while it was rebuilt") from None
        if self.last_rebuild is not None:
            self._tell("rebuilt", {"why": self.last_rebuild.why, "path": self.last_rebuild.path,
                                   "jobs": list(self.last_rebuild.jobs),
                                   "kept": list(self.last_rebuild.kept),
                                   "aside": self.last_rebuild.aside,
                                   "asked": self.last_rebuild.asked})
        return held

    def _ask(self, source: Callable | None, why: str) -> _Snapshot:
        """What the live jobs hold, asked with no lock on the table; the job waits rather
        than get a channel the table cannot vouch for."""
        if source is None:
            raise ChannelTableError(f"{self.path}: {why}; nothing to rebuild it from")
        asked_at = time.time()
        try:
            held = source()
        except Exception as exc:  # noqa: BLE001 - whatever failed, Slurm did not say
            raise ChannelTableError(f"{self.path}: {why}; not rebuilt: "
                                    f"{type(exc).__name__}: {exc}") from None
        if held is None:
            raise ChannelTableError(f"{self.path}: {why}; not rebuilt: Slurm cannot say "
                                    "which channels live jobs hold, or a live job's decision "
                                    "record does not verify (controller log)")
        if not isinstance(held, dict):
            raise ChannelTableError(f"{self.path}: {why}; not rebuilt: the live jobs' "
                                    f"channels came as {type(held).__name__}")
        clean: dict[str, dict[str, int]] = {}
        for jid, channels in held.items():
            if type(jid) is not int or jid <= 0 or not isinstance(channels, dict):
                raise ChannelTableError(f"{self.path}: {why}; not rebuilt: bad entry "
                                        f"{jid!r:.40} from the live jobs")
            # A channel at or above count (the count was lowered) is never handed out.
            kept = {str(k): c for k, c in channels.items()
                    if isinstance(k, str) and type(c) is int and 0 < c < self.count}
            if kept:
                clean[str(jid)] = kept
        return _Snapshot(clean, asked_at)

    def _foreign(self, table: dict | None) -> str:
        host = (table or {}).get("host")
        if host == self.host and (table or {}).get("boot"):
            return (f"written before this host's boot {self.boot} (a reboot may have lost "
                    "its last writes)")
        if host == self.host:
            return "written without a boot stamp (an older imexctl)"
        return (f"written by {host}, not {self.host} (a controller failover)" if host
                else "written without a host (an older imexctl)")

    def _allocate(self, job_id: int, cliques: list[str], live: set[int] | None,
                  snapshot_at: float, rebuild: _Snapshot | None = None,
                  legacy: bool = False) -> dict[str, int]:
        """``legacy``: no rebuild source, so the caller vouches that no job holds a
        channel the table does not list (tests, benchmarks): a missing table starts
        empty and another host's is used as it is. The controller always has one."""
        self._exhausted = False
        with self._locked():
            now = time.time()
            table, why = self._read()
            if legacy and why == MISSING:
                table = {"format": FORMAT, "jobs": {}, "cursor": {}}
            elif legacy and table is None:
                raise ChannelTableError(f"{self.path}: {why}")
            elif not legacy and not self._ours(table):
                if rebuild is None:
                    raise _RebuildNeeded()
                table = self._rebuilt(table, why or self._foreign(table), rebuild, now)
            assert table is not None   # each branch above made, kept or refused it
            stepped = _clamp(table, now)
            self._reconcile(table, live, snapshot_at, keep=job_id, stepped=stepped)
            jobs = table["jobs"]
            mine = jobs.get(str(job_id), {"at": now, "channels": {}})
            held = mine["channels"]
            for key in cliques:
                if key in held:
                    continue
                used = {entry["channels"][key] for jid, entry in jobs.items()
                        if jid != str(job_id) and key in entry["channels"]}
                held[key] = self._next_free(key, used, table["cursor"])
            mine["at"] = time.time()
            jobs[str(job_id)] = mine
            table["host"] = self.host
            if self.boot is not None:
                table["boot"] = self.boot
            self._save(table)
        self._tell_use()
        return {key: held[key] for key in cliques}

    def _rebuilt(self, old: dict | None, why: str, snap: _Snapshot, now: float) -> dict:
        """The table made from the live jobs' channels. A readable table (another host's)
        keeps its entries too: one of its jobs may not have its record written yet, and a
        dead one is dropped by the next reconciliation, which is made due. An unreadable
        one is moved aside for the admin."""
        aside = "" if old is not None or why == MISSING else self._move_aside(now)
        jobs: dict[str, dict] = {jid: {"at": snap.asked_at, "channels": dict(ch)}
                                           for jid, ch in snap.held.items()}
        cursor: dict[str, int] = {}
        kept: list[int] = []
        if old is not None:
            cursor = dict(old["cursor"])
            for jid, entry in old["jobs"].items():
                if jid not in jobs:
                    jobs[jid] = entry
                    kept.append(int(jid))
                else:   # the sealed record wins; anything else the old entry held stays
                    jobs[jid]["channels"] = {**entry["channels"], **jobs[jid]["channels"]}
        for entry in jobs.values():
            for key, channel in entry["channels"].items():
                if key not in cursor:
                    cursor[key] = channel
                elif key not in (old or {}).get("cursor", {}):
                    cursor[key] = max(cursor[key], channel)
        table = {"format": FORMAT, "jobs": jobs, "cursor": cursor,
                 # Only live jobs' records: a reconciliation as of the question, unless
                 # old entries were kept.
                 "reconciled_at": 0 if kept else snap.asked_at}
        self.last_rebuild = Rebuilt(why=why, path=str(self.path),
                                    jobs=tuple(sorted(int(j) for j in snap.held)),
                                    kept=tuple(sorted(kept)), aside=aside, asked=snap.asked)
        return table

    def _move_aside(self, now: float) -> str:
        """Rename the unusable table to ``channels.json.corrupt-<UTC time>``; the rename
        does not follow a link, and the directory is SlurmUser's own."""
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))
        for n in range(100):
            target = self.dir / f"{TABLE}.corrupt-{stamp}{f'-{n}' if n else ''}"
            if not os.path.lexists(target):
                try:
                    os.rename(self.path, target)
                except FileNotFoundError:
                    return ""
                except OSError as exc:
                    raise ChannelTableError(f"{self.path}: cannot move it aside: "
                                            f"{exc.strerror or exc}") from None
                return str(target)
        raise ChannelTableError(f"{self.path}: no free name to move it aside")

    def _tell(self, event: str, fields: dict) -> None:
        if self.report is not None:
            try:
                self.report(event, fields)
            except Exception:  # noqa: BLE001 - a report never changes the allocation
                pass

    def _tell_use(self) -> None:
        if not self._reported_use:
            self._reported_use = True
            self._tell("used", {"path": str(self.path)})

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
        """A reconciliation stamped ahead of the clock (the clock was stepped back since)
        is due at once, not when the clock catches up (audit F3-14)."""
        last = table.get("reconciled_at", 0)
        now = time.time()
        return last > now or now - last >= self.reconcile_every_s

    def release(self, job_id: int,
                live_jobs: Callable[[], set[int] | None] | None = None) -> dict[str, int]:
        """Drop the job's channels (EpilogSlurmctld); returns what it held.

        EpilogSlurmctld runs for every job of the cluster: a job that holds nothing
        costs one read, no lock, no RPC and no write; one that holds channels asks
        ``live_jobs`` only when a reconciliation is due. A missing table is not created
        and another host's stays stamped as such, so the next allocation rebuilds it.
        """
        try:
            stored = self._load()
            if str(job_id) not in stored["jobs"]:
                return {}
            due = self._due(stored)
        except ChannelTableError:
            due = True  # let the locked path report it
        snapshot_at = time.time()
        live = live_jobs() if live_jobs and due else None
        with self._locked():
            now = time.time()
            table, why = self._read()
            if why == MISSING:
                return {}
            if table is None:
                raise ChannelTableError(f"{self.path}: {why}")
            entry = table["jobs"].pop(str(job_id), None)
            stepped = _clamp(table, now)
            self._reconcile(table, live, snapshot_at, keep=None, stepped=stepped)
            self._save(table)
        self._tell_use()
        return dict(entry["channels"]) if entry else {}

    @property
    def exhausted(self) -> bool:
        """Whether the last allocation failed because a clique had no free channel."""
        return self._exhausted

    def per_clique(self) -> dict[str, int]:
        """{clique: channels held} as stored (read without the lock: a snapshot), with
        every clique the table has handed a channel in, 0 when none is held now; a
        missing table is {}. ChannelTableError when it cannot be read or is invalid."""
        table = self._load()
        usage = {key: 0 for key in table["cursor"]}
        for entry in table["jobs"].values():
            for key in entry["channels"]:
                usage[key] = usage.get(key, 0) + 1
        return usage

    def held(self) -> dict[int, dict[str, int]]:
        """{job id: {clique: channel}} as stored (read without the lock: a snapshot)."""
        table = self._load()
        return {int(jid): dict(entry["channels"]) for jid, entry in table["jobs"].items()}

    # ------------------------------------------------------------------ rules
    def _reconcile(self, table: dict, live: set[int] | None, snapshot_at: float,
                   keep: int | None, stepped: frozenset[str] = frozenset()) -> None:
        """Drop the entries of jobs not in ``live`` that are older than the snapshot.
        ``stepped``: entries stamped ahead of the clock, written before it was stepped
        back, so before the snapshot too."""
        if live is None:
            self.last_reconcile = Reconciled(())
            return
        table["reconciled_at"] = snapshot_at
        dead = [jid for jid, entry in table["jobs"].items()
                if int(jid) != keep and int(jid) not in live
                and (entry["at"] < snapshot_at or jid in stepped)]
        for jid in dead:
            del table["jobs"][jid]
        self.last_reconcile = Reconciled(tuple(sorted(int(j) for j in dead)))

    def _next_free(self, key: str, used: set[int], cursor: dict) -> int:
        top = self.count - 1                      # channels 1 .. count-1
        start = cursor.get(key, 0)
        for step in range(1, top + 1):
            channel = (start + step - 1) % top + 1
            if channel not in used:
                cursor[key] = channel
                return channel
        self._exhausted = True
        raise ChannelTableError(f"no free IMEX channel in clique {key} "
                                f"({len(used)} in use, channels 1..{top})")


def _finite(value: object) -> bool:
    return isinstance(value, (int, float)) and type(value) is not bool and math.isfinite(value)


def _job_id_text(jid: str) -> bool:
    """A job id as Slurm prints it: 1 to 10 ASCII digits, no leading zero (``"²"`` and
    other Unicode digits pass ``str.isdigit``)."""
    return 0 < len(jid) <= 10 and jid.isascii() and jid.isdigit() and jid[0] != "0"


def _clamp(table: dict, now: float) -> frozenset[str]:
    """Entries stamped ahead of ``now`` (the clock was stepped back) are stamped now;
    returns their job ids (audit F3-14)."""
    ahead = [jid for jid, entry in table["jobs"].items() if entry["at"] > now]
    for jid in ahead:
        table["jobs"][jid]["at"] = now
    return frozenset(ahead)


__all__ = ["ChannelTable", "ChannelTableError", "Reconciled", "Rebuilt"]
