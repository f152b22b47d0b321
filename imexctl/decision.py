"""The controller's decision for one job, carried to the trays in the job's AdminComment.

PrologSlurmctld groups the job's trays by clique and picks one channel per group once;
every node prolog then reads the same record with the one job-record query it already
makes. AdminComment, because the job's user cannot write it (a user can rewrite
Comment). The record is versioned, bounded in size, free of spaces and ``Key=`` text
(so ``scontrol -o`` parsing cannot be confused), and bound to the job attempt: a record
left over from an earlier attempt (AdminComment survives a requeue) is not believed.

Format, version 1 (one line; a human note may follow after one space)::

    imexctl:v1;j=<job>;r=<restart>;h=<nodes hash>;m=<imexctl|slurm>;a=<action>
              ;g=<cluster uuid>.<clique>/<channel|->/<hostlist>   (one per group)

Decoding never raises: anything malformed is "no decision" and the node prolog falls
back to published identities (and says so).
"""

from __future__ import annotations

import re

from imexctl.digest import sha256_hex
from imexctl.lazyre import lazy
from imexctl.record import dataclass, field

TYPE_CHECKING = False   # typing is imported for type checkers only: ~3 ms of start-up
if TYPE_CHECKING:
    from typing import Sequence

VERSION = 1
TAG = f"imexctl:v{VERSION}"
MAX_RECORD = 1000          # the adapters cut AdminComment at 1000 characters
MAX_NOTE = 200
MAX_MEMBERS = 65536        # names one record may expand to
CONTROLLER = "controller"
FALLBACK = "fallback"
MODES = ("imexctl", "slurm")
_ACTIONS = ("domains", "skip", "refuse", "none", "pending")
_FIELD_RE = {
    "j": lazy(r"[1-9][0-9]{0,9}"),
    "r": lazy(r"0|[1-9][0-9]{0,9}"),
    "h": lazy(r"[0-9a-f]{12}"),
    "m": lazy("|".join(MODES)),
    "a": lazy("|".join(_ACTIONS)),
}
_GROUP_RE = lazy(
    r"(?P<uuid>[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})"
    r"\.(?P<clique>0|[1-9][0-9]{0,9})/(?P<ch>-|[1-9][0-9]{0,6})/(?P<hosts>[A-Za-z0-9._,\[\]-]+)")
_BRACKET_RE = lazy(r"\[([^\]]*)\]")


class DecisionTooLarge(ValueError):
    """The encoded record would not fit in AdminComment."""


@dataclass(frozen=True)
class GroupDecision:
    key: str                        # "<cluster uuid>.<clique id>"
    channel: int | None             # None: Slurm (switch/nvidia_imex) owns the channel
    members: tuple[str, ...]        # in the job's node order


@dataclass(frozen=True)
class Decision:
    job_id: int
    action: str                     # domains | skip | refuse | none | pending
    channel_mode: str = "imexctl"   # imexctl | slurm
    groups: tuple[GroupDecision, ...] = ()
    restart_count: int = 0
    nodes_hash: str = ""
    note: str = ""


@dataclass(frozen=True)
class NodeDecision:
    """What one tray must do for the job: its group (None: no domain on this tray)."""
    job_id: int
    action: str
    group: GroupDecision | None
    channel_mode: str
    source: str                     # controller | fallback
    reason: str = ""
    channel_rule: str = field(default="controller")


def nodes_hash(nodes: Sequence[str]) -> str:
    """Short digest of the job's node list, binding a record to one allocation."""
    return sha256_hex(",".join(nodes).encode())[:12]


def _clean_note(text: str) -> str:
    text = "".join(ch if ch.isprintable() and ch not in "=;" else " " for ch in text)
    return " ".join(text.split())[:MAX_NOTE]


def encode(decision: Decision) -> str:
    """The AdminComment text; raises DecisionTooLarge past MAX_RECORD characters."""
    from imexctl.slurm.hostlist import compress

    if decision.action not in _ACTIONS or decision.channel_mode not in MODES:
        raise ValueError(f"invalid decision {decision.action!r}/{decision.channel_mode!r}")
    parts = [TAG, f"j={decision.job_id}", f"r={decision.restart_count}",
             f"h={decision.nodes_hash}", f"m={decision.channel_mode}", f"a={decision.action}"]
    for group in decision.groups:
        channel = "-" if group.channel is None else str(group.channel)
        parts.append(f"g={group.key}/{channel}/{compress(group.members)}")
    text = ";".join(parts)
    if decode(text) != _comparable(decision):
        raise ValueError(f"decision does not survive encoding: {decision!r}")
    note = _clean_note(decision.note)
    if note:
        text = f"{text} {note}"
    if len(text) > MAX_RECORD:
        raise DecisionTooLarge(f"decision record is {len(text)} characters "
                               f"(AdminComment holds {MAX_RECORD})")
    return text


def _comparable(decision: Decision) -> Decision:
    return Decision(decision.job_id, decision.action, decision.channel_mode, decision.groups,
                    decision.restart_count, decision.nodes_hash, "")


def decode(text: str | None) -> Decision | None:
    """The record in an AdminComment, or None when there is none or it is malformed."""
    if not isinstance(text, str) or not text.startswith(TAG + ";") or len(text) > 4 * MAX_RECORD:
        return None
    record, _, note = text.partition(" ")
    fields = record.split(";")[1:]
    values: dict[str, str] = {}
    groups: list[GroupDecision] = []
    try:
        for item in fields:
            key, sep, value = item.partition("=")
            if not sep:
                return None
            if key == "g":
                group = _decode_group(value)
                if group is None:
                    return None
                groups.append(group)
            elif key in _FIELD_RE and key not in values and _FIELD_RE[key].fullmatch(value):
                values[key] = value
            else:
                return None
        if set(values) != set(_FIELD_RE):
            return None
        members = [n for g in groups for n in g.members]
        if len(set(members)) != len(members) or len({g.key for g in groups}) != len(groups):
            return None
        if values["a"] != "domains" and groups:
            return None
        if any((g.channel is None) != (values["m"] == "slurm") for g in groups):
            return None
        return Decision(job_id=int(values["j"]), action=values["a"], channel_mode=values["m"],
                        groups=tuple(groups), restart_count=int(values["r"]),
                        nodes_hash=values["h"], note=note)
    except Exception:  # noqa: BLE001 - garbage of any kind is "no decision"
        return None


def _decode_group(value: str) -> GroupDecision | None:
    from imexctl.slurm.hostlist import expand

    match = _GROUP_RE.fullmatch(value)
    if not match or _name_count(match["hosts"]) > MAX_MEMBERS:
        return None
    members = tuple(expand(match["hosts"]))
    if not members:
        return None
    channel = None if match["ch"] == "-" else int(match["ch"])
    return GroupDecision(f"{match['uuid']}.{int(match['clique'])}", channel, members)


def _name_count(expr: str) -> int:
    """How many names ``expr`` expands to, counted without expanding it."""
    total = 0
    for word in re.split(r",(?![^\[]*\])", expr):
        count = 1
        for inner in _BRACKET_RE.findall(word):
            size = 0
            for part in inner.split(","):
                lo, _, hi = part.partition("-")
                if not lo.isdigit() or (hi and not hi.isdigit()):
                    return MAX_MEMBERS + 1
                size += max(int(hi or lo) - int(lo) + 1, 0)
            count *= size
            if count > MAX_MEMBERS:
                return count
        total += count
    return total


def for_node(admin_comment: str | None, node: str, job_id: int | None = None,
             job_nodes: Sequence[str] | None = None,
             restart_count: int | None = None) -> NodeDecision | None:
    """This tray's part of the controller's decision, or None when there is no usable one.

    Pass what the node prolog knows of the job (id, node list in Slurm's order, restart
    count): a record for another job, allocation or attempt is stale and not believed.
    """
    decision = decode(admin_comment)
    if decision is None:
        return None
    if job_id is not None and decision.job_id != job_id:
        return None
    if restart_count is not None and decision.restart_count != restart_count:
        return None
    if job_nodes is not None:
        job_nodes = list(job_nodes)
        if decision.nodes_hash != nodes_hash(job_nodes):
            return None
        if node not in job_nodes:
            return None
    group = next((g for g in decision.groups if node in g.members), None)
    return NodeDecision(job_id=decision.job_id, action=decision.action, group=group,
                        channel_mode=decision.channel_mode, source=CONTROLLER,
                        reason=decision.note,
                        channel_rule="slurm switch/nvidia_imex"
                        if decision.channel_mode == "slurm" else "controller")


__all__ = ["Decision", "GroupDecision", "NodeDecision", "DecisionTooLarge", "encode",
           "decode", "for_node", "nodes_hash", "TAG", "VERSION", "CONTROLLER", "FALLBACK"]
