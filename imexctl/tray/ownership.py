"""The ownership record: which job owns this node's IMEX domain, guarded by a lock.

One small JSON file per node. It is how ``status`` answers, how a second job's prolog
knows the node is taken, and how a stale domain (owner gone after a crash) is found.
The last outcome is kept separately so an admin can see why the previous job failed.
A record that does not load is never "no record": it raises ``RecordUnreadable`` so each
caller reports it instead of forgetting a daemon the record pointed to.
"""

from __future__ import annotations

import errno
import math
import os
import time
from pathlib import Path

from imexctl.base.fsutil import (LockBusy, ensure_secure_dir, flock_wait, open_regular, read_json,
                            remove_path, sweep_temp_files, write_json)
from imexctl.base.dataclass import asdict, dataclass, field, fields
from imexctl.config import Lifetime
from imexctl.slurm import states

TYPE_CHECKING = False
if TYPE_CHECKING:
    from imexctl.base.jsontypes import Json
    from typing import Protocol

    class OfJob(Protocol):
        """What :func:`owner_alive` reads of a record: its job (a daemon no record names
        is asked about by its job id alone)."""
        @property
        def job_id(self) -> int: ...

    from imexctl.slurm.interface import SlurmAdapter

RECORD = "domain.json"
# The persistent domain's record (issue 37): a file of its own, so that every reader of a
# job's record (prolog, epilog, health, status, recover) goes on seeing only jobs'.
PERSISTENT_RECORD = "persistent.json"
LAST = "last-outcome.json"
LOCK = "lock"
DRAIN_LOCK = "drain.lock"
FAILED_DAEMON_LOG = "failed-daemon.log"
TEMP_SWEEP_AGE_S = 60.0  # files other writers may still be renaming are left alone

# errno values that mean "the state dir cannot be written", not "someone else has the lock"
_READ_ONLY = {errno.EROFS, errno.ENOSPC, errno.EDQUOT, errno.EACCES, errno.EPERM}


class LockTimeout(Exception):
    pass


class RecordUnreadable(ValueError):
    """domain.json exists but is not a record this version can use (a ValueError, so
    callers that treat any bad state file alike need no new clause)."""


# A record's phases: the prolog's three, the epilog's, and "stuck" (a daemon whose stop
# could not be verified; the record is kept so status and health still see it).
PHASES = ("preparing", "starting", "ready", "tearing-down", "stuck")


@dataclass
class DaemonIdentity:
    pid: int
    create_time: float
    exe: str
    launcher: str = "direct"
    unit: str | None = None
    # Until the daemon is up, ``exe`` is what was spawned (a site's wrapper may ``exec``
    # the real binary): the process is then known by pid, start time and session alone
    # (audit F3-20). ``exe_settled`` is set once ``exe`` was read from the running daemon;
    # records of earlier versions have no field and were settled (or predate wrappers).
    sid: int | None = None
    exe_settled: bool = True

    @classmethod
    def from_dict(cls, raw: object) -> "DaemonIdentity":
        if not isinstance(raw, dict):
            raise TypeError("daemon is not an object")
        known = {f.name for f in fields(cls)}
        ident = cls(**{k: v for k, v in raw.items() if k in known})
        _check_types(ident, {"pid": int, "create_time": (int, float), "exe": str,
                             "launcher": str, "unit": (str, type(None)),
                             "sid": (int, type(None)), "exe_settled": bool})
        return ident


@dataclass
class DomainRecord:
    job_id: int
    uid: int
    user: str
    nodes: list[str]
    addresses: list[str]
    node_id: int
    digest: str
    server_port: int
    cmd_port: int
    channel: int | None
    channel_rule: str
    job_dir: str
    phase: str = "preparing"   # one of PHASES
    daemon: DaemonIdentity | None = None
    steps_ms: dict[str, float] = field(default_factory=dict)
    started_at: float = field(default_factory=time.time)
    updated_at: float = field(default_factory=time.time)
    boot_id: str = ""          # boot this domain was created in (tray/bootid.py)
    decision_source: str = ""  # controller | fallback: who grouped the trays (status)
    clique: str = ""           # the group's clique key "<cluster uuid>.<clique id>"
    imexctl_version: str = ""  # the imexctl that made the domain (a rolling upgrade)
    # config.Lifetime's value: "job" (a job's domain; records written before issue 37 have
    # no field and are jobs') or "persistent" (the tray's domain across jobs: job_id 0, no
    # user or channel; kept in PERSISTENT_RECORD)
    lifetime: str = "job"
    # A job's record on a persistent tray: its channel is served by the tray's persistent
    # domain (persistent.json), it has no daemon of its own, and its teardown never stops
    # one or touches the daemon's persist.dat (lifecycle.teardown.teardown_domain).
    on_persistent: bool = False
    # A persistent domain's daemon started while its tray was drained for the clique's
    # maintenance: that maintenance's token (ops/maintain.py), published as imex.maintenance
    maintenance: str = ""

    @classmethod
    def from_dict(cls, raw: object) -> "DomainRecord":
        """Build a record from its JSON form; unknown keys are ignored (a newer or older
        imexctl wrote it), wrong shapes raise TypeError/ValueError."""
        if not isinstance(raw, dict):
            raise TypeError(f"record is a JSON {type(raw).__name__}, not an object")
        raw = dict(raw)
        raw["daemon"] = DaemonIdentity.from_dict(raw["daemon"]) if raw.get("daemon") else None
        known = {f.name for f in fields(cls)}
        record = cls(**{k: v for k, v in raw.items() if k in known})
        _check_types(record, {
            "job_id": int, "uid": int, "user": str, "nodes": list, "addresses": list,
            "node_id": int, "digest": str, "server_port": int, "cmd_port": int,
            "channel": (int, type(None)), "channel_rule": str, "job_dir": str, "phase": str,
            "steps_ms": dict, "started_at": (int, float), "updated_at": (int, float),
            "boot_id": str, "decision_source": str, "clique": str, "lifetime": str,
            "on_persistent": bool, "maintenance": str})
        if record.lifetime not in (JOB, PERSISTENT):
            raise ValueError(f"lifetime {record.lifetime!r} is neither {JOB} nor {PERSISTENT}")
        first_job = 0 if record.persistent else 1   # a persistent domain serves no one job
        if record.job_id < first_job or not all(isinstance(n, str) for n in record.nodes):
            raise ValueError("job_id or nodes out of range")
        return record

    @property
    def persistent(self) -> bool:
        return self.lifetime == PERSISTENT


def _is(value: object, kind: type | tuple[type, ...]) -> bool:
    """isinstance without bool passing for int, and only finite floats."""
    if kind is bool:
        return isinstance(value, bool)
    if isinstance(value, bool) or not isinstance(value, kind):
        return False
    return not isinstance(value, float) or math.isfinite(value)


def _check_types(obj: object, types: dict[str, type | tuple[type, ...]]) -> None:
    for name, kind in types.items():
        value = getattr(obj, name)
        if not _is(value, kind):
            raise TypeError(f"{name} is {type(value).__name__}")


JOB, PERSISTENT = Lifetime.JOB.value, Lifetime.PERSISTENT.value   # a record's lifetimes


class StateStore:
    """Reads and writes the record and last outcome under ``state_dir``."""

    def __init__(self, state_dir: Path):
        self.dir = Path(state_dir)

    def locked(self, timeout_s: float = 30.0) -> _NodeLock:
        """The node lock, to hold with ``with``. A state dir that cannot be written
        (read-only, full) still gives a lock on an existing lock file (flock works on a
        read-only fd)."""
        return _NodeLock(self, timeout_s)

    def drain_lock(self, timeout_s: float) -> _NodeLock:
        """The lock every imexctl on this tray holds from reading the node's drain state in
        Slurm to writing it (prolog/epilog drain, health drain or resume): Slurm has no
        conditional update, so without it health could overwrite a hook's drain reason
        set between its read and its write. Separate from the node lock: a slow slurmctld
        never holds up the next job's prolog."""
        return _NodeLock(self, timeout_s, DRAIN_LOCK)

    def _open_lock(self, name: str = LOCK) -> int:
        try:
            return open_regular(self.dir / name, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            if exc.errno not in _READ_ONLY:
                raise
            return open_regular(self.dir / name, os.O_RDONLY)

    def load(self) -> DomainRecord | None:
        """The record; None when there is none; RecordUnreadable when one is there but
        unusable (not JSON, wrong shape, a FIFO, ...)."""
        path = self.dir / RECORD
        try:
            raw = read_json(path)
            return None if raw is None else DomainRecord.from_dict(raw)
        except PermissionError:
            raise RecordUnreadable(f"{path} is readable by root only (it names the job's "
                                   "channel): run imexctl as root") from None
        except (OSError, ValueError, TypeError, KeyError) as exc:
            raise RecordUnreadable(f"unreadable record {path}: {type(exc).__name__}: "
                                   f"{exc}") from None

    def save(self, record: DomainRecord) -> None:
        record.updated_at = time.time()
        ensure_secure_dir(self.dir, 0o755)   # 0755: slurmctld/ below is SlurmUser's
        write_json(self.dir / RECORD, asdict(record), 0o600, durable=False)   # root's (S3-2)

    def clear(self) -> None:
        remove_path(self.dir / RECORD)

    def load_persistent(self) -> DomainRecord | None:
        """The persistent domain's record (PERSISTENT_RECORD); None when there is none;
        RecordUnreadable when one is there but unusable or is not a persistent one."""
        path = self.dir / PERSISTENT_RECORD
        try:
            raw = read_json(path)
            record = None if raw is None else DomainRecord.from_dict(raw)
        except (OSError, ValueError, TypeError, KeyError) as exc:
            raise RecordUnreadable(f"unreadable record {path}: {type(exc).__name__}: "
                                   f"{exc}") from None
        if record is not None and not record.persistent:
            raise RecordUnreadable(f"{path} holds a record of lifetime {record.lifetime!r}")
        return record

    def save_persistent(self, record: DomainRecord) -> None:
        if not record.persistent:
            raise ValueError("only a persistent domain's record goes to " + PERSISTENT_RECORD)
        record.updated_at = time.time()
        ensure_secure_dir(self.dir, 0o755)
        write_json(self.dir / PERSISTENT_RECORD, asdict(record), 0o600, durable=False)

    def clear_persistent(self) -> None:
        remove_path(self.dir / PERSISTENT_RECORD)

    def sweep_temp(self) -> list[str]:
        """Remove temp files of writers killed mid-write (call under the lock): the
        record's at once, the others once they are old enough to be abandoned."""
        removed = sweep_temp_files(self.dir, [RECORD, PERSISTENT_RECORD])
        return removed + sweep_temp_files(self.dir, [LAST, FAILED_DAEMON_LOG, "switch-type.json"],
                                          TEMP_SWEEP_AGE_S)

    def save_outcome(self, outcome: Json) -> None:
        ensure_secure_dir(self.dir, 0o755)
        write_json(self.dir / LAST, outcome, 0o600, durable=False)   # reasons name channels

    def last_outcome(self) -> Json | None:
        """The last hook outcome; None when absent or unusable (it is only informative)."""
        try:
            raw = read_json(self.dir / LAST)
        except (OSError, ValueError):
            return None
        if not isinstance(raw, dict):
            return None
        for key, kind in _OUTCOME_TYPES.items():
            value = raw.get(key)
            if value is not None and not _is(value, kind):
                return None
        if not all(_is(v, (int, float)) for v in (raw.get("steps_ms") or {}).values()):
            return None
        return raw


_OUTCOME_TYPES: dict[str, type | tuple[type, ...]] = {
    "job_id": int, "hook": str, "result": str, "reason": str, "step": str,
    "steps_ms": dict, "finished_at": (int, float), "duration_ms": (int, float)}


class _NodeLock:
    """``with store.locked():`` without contextlib (see stdio.guarded): holds the node's
    flock for the block and gives the store."""

    def __init__(self, store: StateStore, timeout_s: float, name: str = LOCK):
        self.store, self.timeout_s, self.name = store, timeout_s, name

    def __enter__(self) -> StateStore:
        store = self.store
        ensure_secure_dir(store.dir, 0o755)
        fd = store._open_lock(self.name)
        try:
            flock_wait(fd, self.timeout_s, store.dir / self.name, max_poll_s=0.05)
        except LockBusy as exc:
            os.close(fd)
            raise LockTimeout(str(exc)) from None
        except BaseException:
            os.close(fd)
            raise
        self.fd = fd
        return store

    def __exit__(self, *exc_info: object) -> None:
        os.close(self.fd)


# Whether the job named in this node's ownership record still holds the node.


def owner_alive(slurm: SlurmAdapter, record: OfJob, node: str) -> bool:
    """True while Slurm says the owner job is live on ``node``. Any SlurmError but "not
    found" propagates: an unreachable slurmctld is not "job gone", and tearing down a live
    job's domain on that guess would break the job."""
    from imexctl.slurm.records import JobRecordError, SlurmNotFound
    try:
        owner = slurm.job(record.job_id)
    except SlurmNotFound:  # unknown to Slurm: it ended long ago
        return False
    except JobRecordError:  # its own user text broke the record: ask squeue (audit F3-22)
        return _confirmed_alive(slurm, record.job_id, node)
    return states.base_state(owner.state) in states.OWNER_LIVE and node in owner.nodes


def _confirmed_alive(slurm: SlurmAdapter, job_id: int, node: str) -> bool:
    """Whether squeue (fields without user text) shows ``job_id`` live on ``node``. An
    ended job whose record its own name made unreadable must not hold the tray until
    slurmctld purges it."""
    found = slurm.job_state(job_id)
    if found is None:   # Slurm no longer knows it
        return False
    state, nodes = found
    return states.base_state(state) in states.OWNER_LIVE and node in nodes
