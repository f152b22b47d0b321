"""The controller hooks' counters: what PrologSlurmctld decided, fail-opens, hook times.

PrologSlurmctld and EpilogSlurmctld are short-lived processes run as SlurmUser, so what
they count lives in a small JSON file beside the channel table (``controller-metrics.json``
in SlurmUser's controller directory, mode 0600), changed by one locked, atomic update at
the end of each hook run. ``imexctl metrics --controller`` renders it
(:mod:`imexctl.ops.controller_metrics`).

The update takes its own lock (``controller-metrics.lock``), not the channel table's:
the table's lock is on every job start's critical path, and a hook that only counts
must never make an allocation wait. Nothing here raises into a hook, and nothing here
waits long: a busy or unusable file drops the update (it is logged), never the job.
"""

from __future__ import annotations

import json
import time

from imexctl.base.counting import inc, observe

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Callable

STATE_FILE = "controller-metrics.json"
LOCK = "controller-metrics.lock"
STATE_BYTES = 1 << 20           # a few labels per family: kilobytes; more is not ours
LOCK_TIMEOUT_S = 1.0            # an update never holds a hook longer than this
FORMAT = 1
# Hook wall time buckets (seconds): PrologSlurmctld's target is 50 ms (bench/targets.py).
BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)

# Decision outcomes and their reason classes (docs/monitoring.md lists each).
GRANTED, REFUSED, WAITING, PENDING, FALLBACK, NONE, NOT_IMEX = (
    "granted", "refused", "waiting", "pending", "fallback", "none", "not-imex")
DECISIONS = {
    GRANTED: ("channel-table", "slurm-channels"),
    REFUSED: ("spans-cliques", "het-job", "record-too-large", "auth-mismatch",
              "lifetime-mismatch"),
    WAITING: ("table-full", "table-unusable", "auth-mismatch"),
    PENDING: ("unpublished",),
    FALLBACK: ("policy-skip",),
    NONE: ("no-imex-tray",),
    NOT_IMEX: ("not-wanted",),
}
HOOKS = ("prolog-slurmctld", "epilog-slurmctld")
REBUILDS = ("missing", "corrupt", "unreadable", "failover", "reboot", "older")


class Tally:
    """One controller hook run: what it decided, whether it failed open, whether the
    channel table was rebuilt; :meth:`save` adds it to the counters once (a refusal
    saves before its ``scancel``, which kills the hook)."""

    def __init__(self, directory: Callable[[], Path], hook: str, started: float | None = None):
        self.directory, self.hook = directory, hook
        self.started = time.monotonic() if started is None else started
        self.outcome: tuple[str, str] | None = None
        self.failed_open = False
        self.rebuilds: list[str] = []
        self.saved = False

    def decided(self, outcome: str, reason: str) -> None:
        self.outcome = (outcome, reason)

    def save(self) -> str | None:
        """Add this run to the counters; the error text when it could not be."""
        if self.saved:
            return None
        self.saved = True
        elapsed = max(0.0, time.monotonic() - self.started)
        try:
            directory = self.directory()
        except Exception as exc:  # noqa: BLE001 - no directory, nothing to count in
            return f"{type(exc).__name__}: {exc}"
        return update(directory, lambda state: self._apply(state, elapsed))

    def _apply(self, state: dict, elapsed: float) -> None:
        if self.outcome is not None:
            inc(state, "imexctl_controller_decisions_total",
                {"outcome": self.outcome[0], "reason": self.outcome[1]})
        if self.failed_open:
            inc(state, "imexctl_controller_fail_opens_total", {"hook": self.hook})
        for why in self.rebuilds:
            inc(state, "imexctl_controller_channel_table_rebuilds_total", {"why": why})
        observe(state, "imexctl_controller_hook_duration_seconds", {"hook": self.hook},
                elapsed, BUCKETS)


def rebuild_class(why: str) -> str:
    """The bounded class of a rebuild's ``why`` (channel_table.Rebuilt): missing,
    corrupt, unreadable, failover (written by another host), reboot (written here in an
    earlier boot) or older (no host or no boot stamp: an older imexctl)."""
    if why.startswith("missing"):
        return "missing"
    if why.startswith("corrupt"):
        return "corrupt"
    if why.startswith("unreadable"):
        return "unreadable"
    if why.startswith("written by"):
        return "failover"
    if why.startswith("written before"):
        return "reboot"
    return "older"


# --------------------------------------------------------------------------- the file
def update(directory: Path, change: Callable[[dict], None]) -> str | None:
    """Apply ``change`` to the counters under their lock and replace the file
    atomically (0600, never through a symlink); the error text when it could not be
    (the update is then dropped), None when done. An unusable file starts the counters
    again (Prometheus handles a counter reset)."""
    from imexctl.base.fsutil import LockBusy, ensure_secure_dir, exclusive_lock, write_json

    try:
        ensure_secure_dir(directory, 0o700)
        with exclusive_lock(directory / LOCK, LOCK_TIMEOUT_S):
            state, _ = load(directory)
            change(state)
            state["format"] = FORMAT
            write_json(directory / STATE_FILE, state, 0o600, durable=False)
    except (OSError, ValueError, TypeError, LockBusy) as exc:
        return f"{directory / STATE_FILE}: {exc}"
    return None


def load(directory: Path) -> tuple[dict, str]:
    """(counters, state): ``ok``, ``missing`` (no hook has counted yet), ``corrupt``
    (not a counters file) or ``unreadable`` (cannot be opened: permissions, a symlink);
    the counters are empty unless ``ok``."""
    from imexctl.base.fsutil import read_bytes

    try:
        data = read_bytes(directory / STATE_FILE, STATE_BYTES)
    except (OSError, ValueError):
        return {}, "unreadable"
    if data is None:
        return {}, "missing"
    try:
        state = json.loads(data.decode("utf-8"))
    except (ValueError, RecursionError):
        return {}, "corrupt"
    return (state, "ok") if valid(state) else ({}, "corrupt")


def valid(state: object) -> bool:
    """Every counter a finite number, every histogram of :data:`BUCKETS`' shape, every
    label key a JSON list of string pairs."""
    if not isinstance(state, dict) or state.get("format", FORMAT) != FORMAT:
        return False
    counters, hists = state.get("counters", {}), state.get("histograms", {})
    if not isinstance(counters, dict) or not isinstance(hists, dict):
        return False
    for family in (*counters.values(), *hists.values()):
        if not isinstance(family, dict) or not all(_labels_ok(k) for k in family):
            return False
    for family in counters.values():
        if not all(_number(v) for v in family.values()):
            return False
    for family in hists.values():
        for h in family.values():
            if not (isinstance(h, dict) and _number(h.get("sum")) and _number(h.get("count"))
                    and isinstance(h.get("buckets"), list)
                    and len(h["buckets"]) == len(BUCKETS)
                    and all(_number(b) for b in h["buckets"])):
                return False
    return True


def _labels_ok(key: str) -> bool:
    try:
        pairs = json.loads(key)
    except (ValueError, RecursionError):
        return False
    return isinstance(pairs, list) and all(
        isinstance(p, list) and len(p) == 2 and all(isinstance(x, str) for x in p)
        for p in pairs)


def _number(value: object) -> bool:
    import math

    return (isinstance(value, (int, float)) and type(value) is not bool
            and math.isfinite(value) and value >= 0)


__all__ = ["Tally", "load", "update", "rebuild_class", "BUCKETS", "STATE_FILE", "DECISIONS",
           "HOOKS", "REBUILDS"]
