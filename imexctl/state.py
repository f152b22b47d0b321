"""The ownership record: which job owns this node's IMEX domain, guarded by a lock.

One small JSON file per node. It is how ``status`` answers, how a second job's prolog
knows the node is taken, and how a stale domain (owner gone after a crash) is found.
The last outcome is kept separately so an admin can see why the previous job failed.
"""

from __future__ import annotations

import fcntl
import os
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterator

from imexctl.fsutil import ensure_secure_dir, read_json, remove_path, write_json

RECORD = "domain.json"
LAST = "last-outcome.json"
LOCK = "lock"


class LockTimeout(Exception):
    pass


@dataclass
class DaemonIdentity:
    pid: int
    create_time: float
    exe: str
    launcher: str = "direct"
    unit: str | None = None


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
    phase: str = "preparing"
    daemon: DaemonIdentity | None = None
    steps_ms: dict[str, float] = field(default_factory=dict)
    started_at: float = field(default_factory=time.time)
    updated_at: float = field(default_factory=time.time)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> "DomainRecord":
        raw = dict(raw)
        if raw.get("daemon"):
            raw["daemon"] = DaemonIdentity(**raw["daemon"])
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in raw.items() if k in known})


class StateStore:
    """Reads and writes the record and last outcome under ``state_dir``."""

    def __init__(self, state_dir: Path):
        self.dir = Path(state_dir)

    @contextmanager
    def locked(self, timeout_s: float = 30.0) -> Iterator["StateStore"]:
        ensure_secure_dir(self.dir, 0o755)
        fd = os.open(self.dir / LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o600)
        try:
            deadline = time.monotonic() + timeout_s
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        raise LockTimeout(f"{self.dir / LOCK} held by another imexctl for "
                                          f"{timeout_s:.0f}s") from None
                    time.sleep(0.05)
            yield self
        finally:
            os.close(fd)

    def load(self) -> DomainRecord | None:
        raw = read_json(self.dir / RECORD)
        return DomainRecord.from_dict(raw) if raw else None

    def save(self, record: DomainRecord) -> None:
        record.updated_at = time.time()
        ensure_secure_dir(self.dir, 0o755)
        write_json(self.dir / RECORD, asdict(record), 0o644)

    def clear(self) -> None:
        remove_path(self.dir / RECORD)

    def save_outcome(self, outcome: dict[str, Any]) -> None:
        ensure_secure_dir(self.dir, 0o755)
        write_json(self.dir / LAST, outcome, 0o644)

    def last_outcome(self) -> dict[str, Any] | None:
        return read_json(self.dir / LAST)
