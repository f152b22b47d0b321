""""IMEX expected here now": one small state file other monitors read.

Per-job IMEX means an idle tray legitimately runs no ``nvidia-imex``; DCGM (health code
122) and NVSentinel read that as a failure. This file says what imexctl intends, so they
can tell "no daemon, none expected" from "no daemon, one should be there".

Path: ``<paths.run_dir>/expected.json`` (``/run/imexctl/expected.json`` by default; on
tmpfs, so it is gone after a reboot until ``imexctl recover`` writes ``idle``). Schema
(version 1), written atomically on every transition::

    {"version": 1, "node": "tray01", "state": "up", "imex_expected": true,
     "job_id": 4242, "since": 1795000000.5, "step": null, "reason": null,
     "updated_at": 1795000000.5}

``state`` is one of :data:`STATES`; ``imex_expected`` is true exactly for ``starting``
and ``up``, and on a tray with ``imex.lifetime = "persistent"`` (``"persistent": true``,
issue 37) for every state but ``not-imex``: its daemon runs with or without a job.
Writers never raise: a monitor signal must not break a hook.
"""

from __future__ import annotations

import time
from pathlib import Path

from imexctl.base.dataclass import asdict, dataclass
from imexctl.config import Lifetime
from imexctl.slurm import reasons

TYPE_CHECKING = False
if TYPE_CHECKING:
    from imexctl.base.jsontypes import Json
    from imexctl.config import Config

FILE_NAME = "expected.json"
VERSION = 1
IDLE, STARTING, UP, FAILED, NOT_IMEX = "idle", "starting", "up", "failed", "not-imex"
STATES = (IDLE, STARTING, UP, FAILED, NOT_IMEX)
EXPECTED = frozenset({STARTING, UP})


@dataclass(frozen=True)
class Expected:
    state: str
    node: str = ""
    job_id: int | None = None
    since: float | None = None     # when this state began (for ``up``: domain UP since)
    step: str | None = None        # ``failed``: the hook/step that failed, e.g. prolog/wait-ready
    reason: str | None = None      # ``failed``: the imexctl: reason
    updated_at: float = 0.0
    version: int = VERSION
    persistent: bool = False       # written by a tray with imex.lifetime = "persistent"

    @property
    def imex_expected(self) -> bool:
        return imex_expected(self.state, self.persistent)

    def to_json(self) -> Json:
        return {**asdict(self), "imex_expected": self.imex_expected}


def imex_expected(state: str, persistent: bool) -> bool:
    """Whether a daemon should run here in ``state``: during a job's domain, and on a
    persistent tray always (its daemon outlives jobs) unless it has no NVLink fabric."""
    return state in EXPECTED or (persistent and state != NOT_IMEX)


def persistent_here(cfg: Config) -> bool:
    return cfg.imex.lifetime == Lifetime.PERSISTENT


def is_current(cfg: Config, now: Expected | None, state: str, job_id: int | None = None
               ) -> bool:
    """Whether the file already says ``state`` (of ``job_id``) for this tray's lifetime:
    recover and health rewrite it otherwise (a lifetime switch changes ``persistent``)."""
    return now is not None and (now.state, now.job_id, now.persistent) == \
        (state, job_id, persistent_here(cfg))


def path_for(cfg: Config) -> Path:
    return Path(cfg.paths.run_dir) / FILE_NAME


def read(cfg: Config) -> Expected | None:
    """The current file, or None when absent or unusable (an unusable file is rewritten
    by the next transition or health run)."""
    from imexctl.base.fsutil import read_json
    try:
        raw = read_json(path_for(cfg))
        if not isinstance(raw, dict) or raw.get("state") not in STATES:
            return None
        job = raw.get("job_id")
        return Expected(state=raw["state"], node=str(raw.get("node") or ""),
                        job_id=int(job) if isinstance(job, int) else None,
                        since=_num(raw.get("since")), step=_str(raw.get("step")),
                        reason=_str(raw.get("reason")),
                        updated_at=_num(raw.get("updated_at")) or 0.0,
                        persistent=raw.get("persistent") is True)
    except (OSError, ValueError, TypeError):
        return None


def write(cfg: Config, state: str, job_id: int | None = None, step: str | None = None,
          reason: str | None = None) -> Expected | None:
    """Record one transition (the only call a hook makes); None when it could not be written.

    ``since`` is kept when the state and job are unchanged, so a health run that confirms
    ``up`` does not move "up since T".
    """
    if state not in STATES:
        raise ValueError(f"unknown expected state {state!r}; one of {', '.join(STATES)}")
    now = time.time()
    old = read(cfg)
    since = old.since if old and old.state == state and old.job_id == job_id else now
    value = Expected(state=state, node=cfg.node, job_id=job_id,
                     since=since, step=step, reason=reason, updated_at=now,
                     persistent=persistent_here(cfg))
    try:
        from imexctl.base.fsutil import ensure_secure_dir, write_json
        ensure_secure_dir(path_for(cfg).parent)
        write_json(path_for(cfg), value.to_json(), 0o600, durable=False)   # root's (S3-2)
    except OSError as exc:  # UnsafePathError included
        _log_failure(exc)
        return None
    return value


def after_hook(cfg: Config, hook: str, job_id: int, started: float) -> dict | None:
    """The transition a finished prolog/epilog of ``job_id`` made, written from what it
    left (ownership record, last outcome) rather than from its internals; returns this
    run's recorded outcome (for metrics), or None when it recorded none.

    A node fault is ``failed`` at its step; this job's ready domain is ``up``; no domain
    at all is ``idle`` (a ``failed`` stays until a run records something new); another
    job's domain is left as that job's hooks described it.
    """
    from imexctl.tray.ownership import StateStore
    store = StateStore(cfg.paths.state_dir)
    try:
        record = store.load()
        last = store.last_outcome()
    except (OSError, ValueError, TypeError, AttributeError):
        return None
    mine = last if (isinstance(last, dict) and last.get("job_id") == job_id
                    and last.get("hook") == hook
                    and _num(last.get("finished_at")) is not None
                    and last["finished_at"] >= started) else None
    if mine and mine.get("result") == "node-fault":
        reason = str(mine.get("reason") or "")
        parsed = reasons.parse(reason)
        write(cfg, FAILED, job_id=job_id,
              step=f"{parsed[0]}/{parsed[1]}" if parsed is not None else hook,
              reason=reason)
    elif record is not None:
        if record.job_id == job_id and record.phase == "ready":
            write(cfg, UP, job_id=job_id)
    else:
        now = read(cfg)
        if mine is not None or now is None or now.state not in (FAILED, IDLE):
            write(cfg, IDLE)    # a run that recorded nothing (an epilog repeat) leaves idle as it is
    return mine


def _log_failure(exc: Exception) -> None:
    try:
        from imexctl.base import log
        log.get_logger().error("cannot write expected-state file", error=str(exc))
    except Exception:  # noqa: BLE001 - never let the signal break a hook
        pass


def _num(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) \
        else None


def _str(value: object) -> str | None:
    return value if isinstance(value, str) else None
