"""One interface to Slurm, two backends: the Slurm CLI (``scontrol``/``scancel``) and pyslurm.

Callers see only :class:`~imexctl.slurm.interface.SlurmAdapter` and the two records. Rules every backend keeps:

* drain never overwrites a drain (or DOWN) that imexctl did not set: only a reason that
  starts with ``imexctl:`` is ours;
* resume only a node that is drained with our reason (Slurm keeps the reason after a
  RESUME, so "drained" is read from the state, never from the reason);
* our data in a node's ``Extra`` lives under one key of a JSON object; other keys are
  kept, and an ``Extra`` that is not a JSON object is never clobbered.

``get_adapter(cfg)`` picks the backend from ``[slurm] backend``. With ``auto`` pyslurm is
used only when it is installed *and* a child process proved that it talks to the running
Slurm: importing pyslurm with no readable slurm.conf makes libslurm kill the process,
and a pyslurm built for another Slurm release cannot talk to this one.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from imexctl.config import NODE_NAME_RE   # one rule for Slurm node names
from imexctl.errors import SlurmError
from imexctl.base.lazyre import lazy
from imexctl.base.dataclass import dataclass, field

TYPE_CHECKING = False   # typing is imported for type checkers only: ~3 ms of start-up
if TYPE_CHECKING:
    from typing import Any

    from imexctl.slurm.interface import SlurmAdapter

OUR_PREFIX = "imexctl:"
# Flags/base states meaning "not taking jobs because someone said so".
UNAVAILABLE = frozenset({"DRAIN", "DRAINED", "DRAINING", "DOWN", "FAIL", "FAILING"})
DRAINED = frozenset({"DRAIN", "DRAINED", "DRAINING"})
MAX_REASON = 250
MAX_COMMENT = 1000
# Job states in which a job may hold IMEX domains on its trays.
ACTIVE_JOB_STATES = frozenset({"RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED"})


class SlurmNotFound(SlurmError):
    """Slurm does not know the job or node asked for."""


class JobRecordError(SlurmError):
    """Slurm answered, but the job's record cannot be read (audit S-01: a fault of the
    job, whose user writes parts of it, never of the node asking)."""


@dataclass(frozen=True)
class JobRecord:
    job_id: int
    state: str                  # "RUNNING", "PENDING", "CONFIGURING", ... (base state)
    user_id: int
    nodes: tuple[str, ...]      # allocated nodes, expanded, in Slurm's order
    partition: str | None
    features: str               # the job's constraint expression ("" when none)
    admin_comment: str          # "" when unset (or, CLI backend, when it is ambiguous)
    comment: str
    batch: bool
    # --segment=N (topology/block, 24.05+): 0 = not segmented; None = this backend
    # cannot tell (pyslurm 24.11 does not expose it).
    segment_size: int | None = 0
    # Where the controller's sealed decision is looked for (imexctl.rules.decision.find): the
    # CLI backend gives the whole record text, because a user-written field can make the
    # AdminComment's boundaries unreadable; the seal tells the real record from copies.
    decision_text: str = field(default="", repr=False, compare=False)
    # OverSubscribe= of the job record (OK, NO, YES, USER, MCS, TOPO); None when the
    # backend cannot tell or the text is ambiguous.
    oversubscribe: str | None = None
    # A heterogeneous job's leader id (HetJobId=); None for a plain job.
    het_job_id: int | None = None


@dataclass(frozen=True)
class NodeRecord:
    name: str
    addr: str
    hostname: str
    state: str                  # Slurm's combined state, e.g. "IDLE+DRAIN"
    reason: str                 # without the " [user@time]" stamp; "" when unset
    extra: str                  # raw Extra text; "" when unset
    features: tuple[str, ...]   # active features
    comment: str = ""
    # Filled by node_table() (cluster view); nodes() may leave the defaults.
    reason_time: float | None = None   # when the reason was set (epoch s), None if unknown
    partitions: tuple[str, ...] = ()

    @property
    def state_words(self) -> frozenset[str]:
        return frozenset(w.rstrip("*~#!%$@^-") for w in self.state.upper().split("+") if w)

    @property
    def unavailable(self) -> bool:
        """Drained, draining, down or failed (by anyone)."""
        return bool(self.state_words & UNAVAILABLE)

    @property
    def drained(self) -> bool:
        return bool(self.state_words & DRAINED)

    @property
    def ours(self) -> bool:
        return self.reason.startswith(OUR_PREFIX)


# --------------------------------------------------------------------------- shared rules


class NodeChanges:
    """The node-changing half of the contract, shared by both backends: each decides from
    the node's current record (never overwrite a foreign drain, resume only our own,
    merge Extra keeping other keys) and writes through the backend's ``_update_node``."""

    def nodes(self, names: list[str]) -> dict[str, NodeRecord]:  # pragma: no cover
        raise NotImplementedError

    def _update_node(self, node: str, **fields: str) -> None:  # pragma: no cover
        """Set ``state``, ``reason`` and/or ``extra`` of one node."""
        raise NotImplementedError

    def _node(self, node: str) -> NodeRecord:
        record = self.nodes([node]).get(node)
        if record is None:
            raise SlurmNotFound(f"node {node} is unknown to Slurm")
        return record

    def drain(self, node: str, reason: str) -> bool:
        check_node_name(node)
        reason = clean_text(reason, MAX_REASON)
        if not reason:
            raise SlurmError("drain needs a reason")
        if not should_drain(self._node(node)):
            return False
        self._update_node(node, state="DRAIN", reason=reason)
        return True

    def resume_if_ours(self, node: str, prefix: str = OUR_PREFIX) -> bool:
        """Resume only a drain whose reason starts with ``prefix`` (ours, or narrower)."""
        check_node_name(node)
        if not prefix.startswith(OUR_PREFIX):
            raise ValueError(f"resume prefix must start with {OUR_PREFIX!r}")
        record = self._node(node)
        if not (should_resume(record) and record.reason.startswith(prefix)):
            return False
        self._update_node(node, state="RESUME")
        return True

    def extra_merge(self, node: str, key: str, value: dict) -> bool:
        check_node_name(node)
        text = merged_extra(node, self._node(node).extra, key, value)
        if text is None:
            return False
        self._update_node(node, extra=text)
        return True

class ExtraNotOurs(SlurmError):
    """The node's Extra holds someone else's text (not a JSON object): imexctl's identity
    cannot be merged in without destroying it. Slurm answered fine: a setup fault."""


def check_node_name(node: str) -> str:
    if not isinstance(node, str) or not NODE_NAME_RE.fullmatch(node):
        raise SlurmError(f"invalid node name {node!r}")
    return node


def check_job_id(job_id: int) -> int:
    if isinstance(job_id, bool) or not isinstance(job_id, int) or not 0 < job_id < 2**32:
        raise SlurmError(f"invalid job id {job_id!r}")
    return job_id


def clean_text(text: str, limit: int) -> str:
    """One line of printable text: Slurm reasons and comments must not carry newlines."""
    text = "".join(ch if ch.isprintable() else " " for ch in str(text)).strip()
    return text[:limit]


def merged_extra(node: str, current: str, key: str, value: dict) -> str | None:
    """The new Extra text with ``{key: value}`` merged in; None when nothing changes.

    Refuses (SlurmError naming the node) when the current Extra is set but is not a
    JSON object: it belongs to someone else and must not be clobbered.
    """
    if not isinstance(key, str) or not key:
        raise SlurmError("extra_merge: key must be a non-empty string")
    current = (current or "").strip()
    if current:
        try:
            obj = json.loads(current)
        except ValueError:
            obj = None
        if not isinstance(obj, dict):
            shown = current if len(current) <= 60 else current[:57] + "..."
            raise ExtraNotOurs(f"node {node}: Extra is not a JSON object ({shown!r}); "
                               f"refusing to overwrite it with imexctl's '{key}' data")
    else:
        obj = {}
    if key in obj and obj[key] == value:
        return None
    obj[key] = value
    return json.dumps(obj, separators=(",", ":"), sort_keys=True)


def should_drain(record: NodeRecord) -> bool:
    """False when someone else's drain/down is in place: it must be left alone."""
    return not (record.unavailable and not record.ours)


def should_resume(record: NodeRecord) -> bool:
    return record.drained and record.ours


# --------------------------------------------------------------------------- selection
# Child-process probe: import, one RPC, and the versions of pyslurm and of slurmctld.
_PROBE = (
    "import sys\n"
    "import pyslurm\n"
    "node = sys.argv[1]\n"
    "config = getattr(getattr(pyslurm, 'slurmctld', None), 'Config', None)\n"
    "if config is not None:\n"
    "    slurm = config.load().version\n"
    "else:\n"
    "    n = pyslurm.Node.load(node) if node else None\n"
    "    slurm = getattr(n, 'slurm_version', '') or ''\n"
    "print('imexctl-pyslurm-ok', pyslurm.__version__, slurm)\n"
)
_probe_cache: dict[tuple, str | None] = {}
_RELEASE = lazy(r"(\d+)\.(\d+)")


def pyslurm_installed() -> bool:
    return _pyslurm_origin() is not None


def _pyslurm_origin() -> str | None:
    """Where ``import pyslurm`` would load it from; None when it is not installed."""
    try:
        import importlib.util   # not at import: only the pyslurm backend asks
        spec = importlib.util.find_spec("pyslurm")
    except (ImportError, ValueError):
        return None
    return None if spec is None else (spec.origin or "namespace package")


def _release(version: str) -> tuple[int, int] | None:
    m = _RELEASE.search(version or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


def pyslurm_unavailable(node: str = "", timeout_s: float = 10.0,
                        slurm_client: Path | None = None) -> str | None:
    """None when pyslurm imports, answers an RPC and is built for the running Slurm release
    (pyslurm X.Y talks only to Slurm X.Y); otherwise why not, in words for `status`.

    Tried in a child process: a failing ``import pyslurm`` may call libslurm's fatal() and
    end the process, and libslurm retries a missing config for 60 s. The answer is cached
    per process, and a "usable" answer also on disk (:func:`_remembered`) for
    ``PROBE_KEEP_S``: the probe imports pyslurm and loads Slurm's configuration from
    slurmctld, which every hook on every tray would otherwise pay at every job start.
    ``slurm_client``: a file every Slurm upgrade replaces (``scontrol``); without it
    nothing is kept on disk.
    """
    key = (node, os.environ.get("SLURM_CONF"))
    if key in _probe_cache:
        return _probe_cache[key]
    origin = _pyslurm_origin()
    identity = _probe_identity(node, origin, slurm_client) if origin else None
    if origin is None:
        reason: str | None = "pyslurm is not installed"
    elif identity is not None and _remembered(identity):
        reason = None
    else:
        reason = _probe(node, timeout_s)
        if reason is None and identity is not None:
            _remember(identity)
    _probe_cache[key] = reason
    return reason


PROBE_KEEP_S = 600.0          # how long a "pyslurm is usable" answer is kept on disk
PROBE_FILE = "pyslurm.probe"  # in the configuration cache's directory (configcache)


def _probe_identity(node: str, origin: str, slurm_client: Path | None) -> str | None:
    """What a kept answer holds for: the node, SLURM_CONF, and the exact files of pyslurm
    and of the Slurm client (a Slurm upgrade replaces it, with libslurm). None when a file
    cannot be seen: then nothing is kept."""
    if slurm_client is None:
        return None
    parts = [node, os.environ.get("SLURM_CONF", "")]
    for path in (origin, str(slurm_client)):
        try:
            st = os.stat(path)
        except OSError:
            return None
        parts.append(f"{path}:{st.st_dev}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}")
    return "\n".join(parts)


def _remembered(identity: str) -> bool:
    """Whether a probe of exactly these files found pyslurm usable less than
    ``PROBE_KEEP_S`` ago. The file is trusted like the configuration cache (this user's
    directory, not writable by others, no symlink); anything else means "probe again"."""
    import time

    from imexctl.base.cache import cache_dir
    from imexctl.base.fsutil import check_secure_dir, read_bytes

    try:
        check_secure_dir(cache_dir())
        text = read_bytes(cache_dir() / PROBE_FILE)
        kept = json.loads(text) if text is not None else None
        return (isinstance(kept, dict) and kept.get("identity") == identity
                and 0 <= time.time() - float(kept.get("at", -1)) < PROBE_KEEP_S)
    except (OSError, TypeError, ValueError):
        return False


def _remember(identity: str) -> None:
    """Keep a "usable" answer (best effort). A failed probe is never kept: slurmctld may
    only have been down, and the next hook asks again."""
    import time

    from imexctl.base.cache import cache_dir
    from imexctl.base.fsutil import atomic_write, ensure_secure_dir

    try:
        ensure_secure_dir(cache_dir(), 0o700)
        atomic_write(cache_dir() / PROBE_FILE,
                     json.dumps({"identity": identity, "at": time.time()}), 0o600,
                     durable=False)
    except (OSError, ValueError):
        pass


def _probe(node: str, timeout_s: float) -> str | None:
    from imexctl.base.subproc import Bounded, run_text

    proc = run_text([sys.executable, "-c", _PROBE, node], timeout_s, os.environ)
    if isinstance(proc, Bounded):
        return (f"pyslurm did not answer within {timeout_s:g}s" if proc.timed_out
                else f"pyslurm probe could not run: {proc.error}")
    words = next((line.split() for line in proc.stdout.splitlines()
                  if line.startswith("imexctl-pyslurm-ok")), None)
    if proc.returncode != 0 or words is None:
        last = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
        return f"pyslurm did not answer: {last[:200]}"
    ours, theirs = (words + ["", ""])[1:3]
    if _release(ours) and _release(theirs) and _release(ours) != _release(theirs):
        return f"pyslurm {ours} does not match Slurm {theirs}"
    return None


def probe_pyslurm(node: str = "", timeout_s: float = 10.0) -> bool:
    """True when pyslurm is usable here (see :func:`pyslurm_unavailable`)."""
    return pyslurm_unavailable(node, timeout_s) is None


def get_adapter(cfg: Any) -> SlurmAdapter:
    """The backend named by ``cfg.slurm.backend`` (auto | cli | pyslurm). The backend's
    ``selection`` attribute says which was picked and why (shown by ``imexctl status``)."""
    backend = cfg.slurm.backend
    if backend == "cli":
        from imexctl.slurm.cli_backend import CliBackend
        return _selected(CliBackend(cfg), 'slurm.backend = "cli"')
    if backend == "pyslurm":
        from imexctl.slurm.pyslurm_backend import PyslurmBackend
        if not pyslurm_installed():
            raise SlurmError("slurm.backend = \"pyslurm\" but pyslurm is not installed "
                             "(install imexctl[pyslurm] or use backend \"cli\")")
        return _selected(PyslurmBackend(cfg), 'slurm.backend = "pyslurm"')
    if backend == "auto":
        node = cfg.node if NODE_NAME_RE.fullmatch(cfg.node or "") else ""
        reason = pyslurm_unavailable(node, timeout_s=min(cfg.slurm.timeout_s, 10.0),
                                     slurm_client=Path(cfg.paths.slurm_bin_dir) / "scontrol")
        if reason is None:
            from imexctl.slurm.pyslurm_backend import PyslurmBackend
            return _selected(PyslurmBackend(cfg), "auto: pyslurm answered and matches this Slurm")
        from imexctl.slurm.cli_backend import CliBackend
        return _selected(CliBackend(cfg), f"auto: CLI, because {reason}")
    raise SlurmError(f"unknown slurm.backend {backend!r}; use auto, cli or pyslurm")


def _selected(adapter: Any, why: str) -> Any:
    adapter.selection = why
    return adapter


__all__ = ["JobRecord", "NodeRecord", "SlurmNotFound", "get_adapter",
           "probe_pyslurm", "pyslurm_unavailable", "merged_extra", "OUR_PREFIX"]
