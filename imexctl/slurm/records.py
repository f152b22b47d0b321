"""What Slurm tells imexctl, as records, and the rules every backend keeps when it writes.

* drain never overwrites a drain (or DOWN) that imexctl did not set: only a reason that
  starts with ``imexctl:`` is ours;
* resume only a node that is drained with our reason (Slurm keeps the reason after a
  RESUME, so "drained" is read from the state, never from the reason);
* our data in a node's ``Extra`` lives under one key of a JSON object; other keys are
  kept, and an ``Extra`` that is not a JSON object is never clobbered.
"""

from __future__ import annotations

import json
import re

from imexctl.base.text import printable
from imexctl.base.dataclass import dataclass, field
from imexctl.errors import SlurmError
from imexctl.slurm import reasons
from imexctl.slurm.states import DRAINED, UNAVAILABLE, node_words

# One rule for Slurm node names (config.py and the hook context use it too).
NODE_NAME = r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}"

# AdminComment is written by ``scontrol update JobId=<id> AdminComment=<text>``: one argv
# string, which Linux caps at 128 KiB with its NUL (MAX_ARG_STRLEN). slurmctld itself keeps
# AdminComment whole at every size measured (4 MiB on Slurm 22.05, 24.11 and 26.05,
# docs/multi-rack.md), so this is the bound: a text over it is refused, never cut.
MAX_ARG_STRLEN = 128 * 1024
ADMIN_COMMENT_KEY = "AdminComment="
MAX_COMMENT = MAX_ARG_STRLEN - len(ADMIN_COMMENT_KEY) - 1    # 131,058 characters


class SlurmNotFound(SlurmError):
    """Slurm does not know the job or node asked for."""


class CommentTooLarge(SlurmError):
    """An AdminComment text that one ``scontrol update`` cannot carry whole: refused before
    anything is written (a cut record would lose its seal at the end)."""


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
    # SubmitTime (epoch s; Slurm sets it anew at each requeue); None when unknown. A
    # decision record sealed before it is an earlier job's (imexctl/rules/decision.py).
    submit_time: int | None = None


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
        return node_words(self.state)

    @property
    def unavailable(self) -> bool:
        """Drained, draining, down or failed (by anyone)."""
        return bool(self.state_words & UNAVAILABLE)

    @property
    def drained(self) -> bool:
        return bool(self.state_words & DRAINED)

    @property
    def ours(self) -> bool:
        return reasons.is_ours(self.reason)


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
        reason = clean_text(reason, reasons.MAX_LEN)
        if not reason:
            raise SlurmError("drain needs a reason")
        if not should_drain(self._node(node)):
            return False
        self._update_node(node, state="DRAIN", reason=reason)
        return True

    def resume_if_ours(self, node: str, prefix: str = reasons.PREFIX) -> bool:
        """Resume only a drain whose reason starts with ``prefix`` (ours, or narrower)."""
        check_node_name(node)
        if not reasons.is_ours(prefix):
            raise ValueError(f"resume prefix must start with {reasons.PREFIX!r}")
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
    if not isinstance(node, str) or not re.fullmatch(NODE_NAME, node):
        raise SlurmError(f"invalid node name {node!r}")
    return node


def check_job_id(job_id: int) -> int:
    if isinstance(job_id, bool) or not isinstance(job_id, int) or not 0 < job_id < 2**32:
        raise SlurmError(f"invalid job id {job_id!r}")
    return job_id


def clean_text(text: str, limit: int) -> str:
    """One line of printable text, at most ``limit`` characters (a node's reason)."""
    return one_line(text)[:limit]


def one_line(text: str) -> str:
    """Printable text on one line (``base.text.printable``): Slurm reasons and comments
    must not carry newlines, nor control characters a terminal acts on."""
    return printable(str(text)).strip()


def admin_comment_text(job_id: int, text: str) -> str:
    """What ``set_admin_comment`` writes, whole (both backends): one line of ``text``, or
    CommentTooLarge when it is over MAX_COMMENT characters. Nothing is ever cut."""
    text = one_line(text)
    if len(text) > MAX_COMMENT:
        raise CommentTooLarge(f"AdminComment for job {job_id} would be {len(text)} "
                              f"characters, over the {MAX_COMMENT} one 'scontrol update' "
                              "carries: nothing written")
    return text


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


