"""The controller's decision for one job, carried to the trays in the job's AdminComment.

PrologSlurmctld groups the job's trays by clique and picks one channel per group once;
every node prolog then reads the same record with the one job-record query it already
makes. The record is sealed: it ends in a MUNGE credential over its digest, made by
SlurmUser (imexctl/slurm/munge.py). The job's user co-writes the job record's text
(JobName, Comment, WorkDir, StdErr, SubmitLine...), so copies of a record can stand
anywhere in it; a node prolog looks at every record in the text that names its job,
attempt and allocation, and believes only one whose seal opens as SlurmUser's or root's.
A forged copy is ignored; a copy of the real record is the real record.

Format, version 2 (one line, no spaces: nothing in it is a key boundary)::

    imexctl:v2;j=<job>;r=<restart>[;x=<het leader>];h=<nodes hash>;m=<imexctl|slurm>
              ;a=<action>[;n=<note, %-escaped>]
              ;g=<cluster uuid>.<clique>/<channel|->/<hostlist>   (one per group)
              ;s=<MUNGE credential over "imexctl-decision-v2:" + sha256 of all before ;s=>

One group per clique, its trays as a hostlist range (``gb[0001-0018]``), so 1,000
cliques (18,000 trays) take about 60 KB: within the 128 KiB one ``scontrol update``
argument may have. The members' order is the decoded order on every tray.

A heterogeneous job's components each get their own record (their job id, restart count and
node list) naming the het leader in ``x=``; its groups span every component's trays, so one
domain per clique serves the whole job, on ports and channels keyed by the leader.
"""

from __future__ import annotations

import re

from imexctl.base.digest import sha256_hex
from imexctl.base.dataclass import dataclass, field

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Sequence

    from imexctl.slurm.munge import MungeSeal

VERSION = 2
TAG = f"imexctl:v{VERSION}"
SEAL_PREFIX = f"imexctl-decision-v{VERSION}:"
# Linux caps one argv string at 128 KiB (MAX_ARG_STRLEN); "AdminComment=" and the seal
# fit in what is left (slurm.records.MAX_COMMENT; slurmctld itself keeps any size).
MAX_RECORD = 120_000
MAX_SEALED = MAX_RECORD + 8192     # the record with its seal, as decode() accepts it
MAX_NOTE = 300
MAX_MEMBERS = 1 << 20      # names one record may expand to
MAX_CANDIDATES = 4         # distinct records naming this job a prolog will try to open
CONTROLLER = "controller"
FALLBACK = "fallback"
MODES = ("imexctl", "slurm")
# domains: one domain per group. skip/none: no domain. refuse: cancel the job.
# pending: trays never published their identity (they publish, the job waits).
# wait: no free channel in a clique, or no usable channel table: the job waits.
ACTIONS = ("domains", "skip", "refuse", "none", "pending", "wait")
_FIELD_RE = {
    "j": r"[1-9][0-9]{0,9}",
    "r": r"0|[1-9][0-9]{0,9}",
    "x": r"[1-9][0-9]{0,9}",
    "h": r"[0-9a-f]{12}",
    "m": "|".join(MODES),
    "a": "|".join(ACTIONS),
    "n": r"[A-Za-z0-9._,:()/@+%\[\]-]{0,3000}",
}
_REQUIRED = frozenset({"j", "r", "h", "m", "a"})
_GROUP_RE = (
    r"(?P<uuid>[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})"
    r"\.(?P<clique>0|[1-9][0-9]{0,9})/(?P<ch>-|[1-9][0-9]{0,6})/(?P<hosts>[A-Za-z0-9._,\[\]-]+)")
_BRACKET_RE = r"\[([^\]]*)\]"
_CANDIDATE_RE = TAG.replace(":", r"\:") + r";[!-~]*"
_NOTE_SAFE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789.,:()/@-[]")


class DecisionTooLarge(ValueError):
    """The encoded record would not fit in AdminComment."""


@dataclass(frozen=True)
class GroupDecision:
    key: str                        # "<cluster uuid>.<clique id>"
    channel: int | None             # None: Slurm (switch/nvidia_imex) owns the channel
    members: tuple[str, ...]        # in the record's order


@dataclass(frozen=True)
class Decision:
    job_id: int
    action: str                     # one of ACTIONS
    channel_mode: str = "imexctl"   # imexctl | slurm
    groups: tuple[GroupDecision, ...] = ()
    restart_count: int = 0
    nodes_hash: str = ""
    note: str = ""
    het_job_id: int | None = None   # a het component's leader: the domain is the whole job's


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
    het_job_id: int | None = None

    @property
    def domain_id(self) -> int:
        """The job id the domain's ports and channel are keyed by: a het job's leader,
        so that every component's trays render the same domain."""
        return self.het_job_id or self.job_id


@dataclass(frozen=True)
class Found:
    """What :func:`find` made of a job record: the sealed decision, or why there is none."""
    decision: Decision | None
    why: str = ""                   # when decision is None: for the log and the refusal
    candidates: int = 0             # records naming this job, attempt and allocation


def nodes_hash(nodes: Sequence[str]) -> str:
    """Short digest of the job's node list, binding a record to one allocation."""
    return sha256_hex(",".join(nodes).encode())[:12]


def _escape_note(text: str) -> str:
    """The note inside the sealed record: spaces as ``_``, other unsafe characters (and
    ``_`` itself) as ``%XX``, so ``scontrol show job`` still reads as words."""
    text = " ".join("".join(ch if ch.isprintable() else " " for ch in text).split())
    out = []
    for ch in text[:MAX_NOTE]:
        if ch == " ":
            out.append("_")
        elif ch in _NOTE_SAFE:
            out.append(ch)
        else:
            out.append("".join(f"%{b:02X}" for b in ch.encode()))
    return "".join(out)


def _unescape_note(text: str) -> str:
    text = text.replace("_", " ")
    return re.sub(rb"%([0-9A-F]{2})", lambda m: bytes([int(m[1], 16)]),
                  text.encode()).decode(errors="replace")


def body(decision: Decision) -> str:
    """The record without its seal; ValueError for an invalid decision,
    DecisionTooLarge past MAX_RECORD (checked before anything else is done with it)."""
    from imexctl.slurm.hostlist import compress

    if decision.action not in ACTIONS or decision.channel_mode not in MODES:
        raise ValueError(f"invalid decision {decision.action!r}/{decision.channel_mode!r}")
    parts = [TAG, f"j={decision.job_id}", f"r={decision.restart_count}"]
    if decision.het_job_id is not None:
        parts.append(f"x={decision.het_job_id}")
    parts += [f"h={decision.nodes_hash}", f"m={decision.channel_mode}", f"a={decision.action}"]
    note = _escape_note(decision.note)
    if note:
        parts.append(f"n={note}")
    size = sum(len(p) + 1 for p in parts)
    for group in decision.groups:
        channel = "-" if group.channel is None else str(group.channel)
        part = f"g={group.key}/{channel}/{compress(group.members)}"
        size += len(part) + 1
        if size > MAX_RECORD:
            raise DecisionTooLarge(f"decision record for job {decision.job_id} is over "
                                   f"{MAX_RECORD} characters ({len(decision.groups)} groups)")
        parts.append(part)
    return ";".join(parts)


def encode(decision: Decision, seal: MungeSeal) -> str:
    """The sealed AdminComment text (SealError when MUNGE cannot seal; DecisionTooLarge
    when it would be over MAX_SEALED: refused whole, never cut)."""
    text = body(decision)
    record = f"{text};s={seal.seal(_seal_payload(text))}"
    if len(record) > MAX_SEALED:
        raise DecisionTooLarge(f"decision record for job {decision.job_id} is over "
                               f"{MAX_SEALED} characters with its seal")
    return record


def _seal_payload(text: str) -> str:
    return SEAL_PREFIX + sha256_hex(text.encode())


def decode(text: str | None) -> Decision | None:
    """The decision in one record (sealed or not), or None when malformed. Display only
    (the cluster view): what a prolog acts on comes from :func:`find`."""
    if not isinstance(text, str) or not text.startswith(TAG + ";") \
            or len(text) > MAX_SEALED:
        return None
    if len(text.split()) != 1 or text != text.strip():
        return None                 # a record holds no whitespace
    record = text.split(";s=", 1)[0]
    values: dict[str, str] = {}
    groups: list[GroupDecision] = []
    try:
        for item in record.split(";")[1:]:
            key, sep, value = item.partition("=")
            if not sep:
                return None
            if key == "g":
                group = _decode_group(value)
                if group is None:
                    return None
                groups.append(group)
            elif key in _FIELD_RE and key not in values and re.fullmatch(_FIELD_RE[key], value):
                values[key] = value
            else:
                return None
        if not _REQUIRED <= set(values):
            return None
        members = [n for g in groups for n in g.members]
        if len(members) > MAX_MEMBERS or len(set(members)) != len(members) \
                or len({g.key for g in groups}) != len(groups):
            return None
        if (values["a"] == "domains") != bool(groups):
            return None
        if any((g.channel is None) != (values["m"] == "slurm") for g in groups):
            return None
        return Decision(job_id=int(values["j"]), action=values["a"], channel_mode=values["m"],
                        groups=tuple(groups), restart_count=int(values["r"]),
                        nodes_hash=values["h"], note=_unescape_note(values.get("n", "")),
                        het_job_id=int(values["x"]) if "x" in values else None)
    except Exception:  # noqa: BLE001 - garbage of any kind is "no decision"
        return None


def _decode_group(value: str) -> GroupDecision | None:
    from imexctl.slurm.hostlist import expand

    match = re.fullmatch(_GROUP_RE, value)
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
        for inner in re.findall(_BRACKET_RE, word):
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


def sealed(record: str, seal: MungeSeal) -> bool:
    """Whether ``record`` ends in a seal that opens, as a trusted uid's, to its digest."""
    text, sep, cred = record.rpartition(";s=")
    if not sep:
        return False
    return seal.open(cred) == _seal_payload(text)


def candidates(text: str) -> list[str]:
    """Every distinct record in ``text`` (a whole job record: copies may stand in any
    user-written field), in the order first seen."""
    return list(dict.fromkeys(re.findall(_CANDIDATE_RE, text or "")))


def find(text: str, seal: MungeSeal, job_id: int, restart_count: int,
         job_nodes: Sequence[str]) -> Found:
    """The sealed decision for this job, attempt and allocation in ``text``.

    Records for another job, attempt or node list are not looked at further; of those
    that match, at most MAX_CANDIDATES are opened (each costs one ``unmunge``), so a
    user who fills their job's fields with copies only delays their own job.
    SealError when MUNGE cannot answer at all.
    """
    want_hash = nodes_hash(list(job_nodes))
    matching: list[tuple[str, Decision]] = []
    for record in candidates(text):
        dec = decode(record)
        if dec is not None and dec.job_id == job_id and dec.restart_count == restart_count \
                and dec.nodes_hash == want_hash:
            matching.append((record, dec))
    if not matching:
        return Found(None, "no controller decision for this job attempt in its record")
    for record, dec in matching[:MAX_CANDIDATES]:
        if sealed(record, seal):
            return Found(dec, candidates=len(matching))
    if len(matching) > MAX_CANDIDATES:
        return Found(None, f"{len(matching)} decision records in the job record, none of the "
                           f"first {MAX_CANDIDATES} sealed by SlurmUser (user text imitates "
                           "them)", len(matching))
    return Found(None, "no decision record in the job record is sealed by SlurmUser "
                       f"({len(matching)} unsealed or forged)", len(matching))


def find_all(text: str, seal: MungeSeal) -> list[Decision]:
    """Every sealed decision in ``text`` (many job records): per job, its latest attempt.
    The channel table is rebuilt from these."""
    best: dict[int, Decision] = {}
    tried: dict[int, int] = {}
    for record in candidates(text):
        dec = decode(record)
        if dec is None or (dec.job_id in best
                           and best[dec.job_id].restart_count >= dec.restart_count):
            continue
        tried[dec.job_id] = tried.get(dec.job_id, 0) + 1
        if tried[dec.job_id] > MAX_CANDIDATES:
            continue    # copies planted to slow the rebuild: one unmunge each, bounded
        if sealed(record, seal):
            best[dec.job_id] = dec
    return list(best.values())


def controller_required(cfg: object, conf: object) -> bool | None:
    """Whether only PrologSlurmctld's sealed decision may be acted on (``policy.controller``;
    ``auto``: when the local slurm.conf ``conf`` names a PrologSlurmctld). None under
    ``auto`` when ``conf`` is None (it could not be read): cannot tell, and the caller
    must fail closed, never take the fallback rule (audit F4-9)."""
    mode = getattr(getattr(cfg, "policy", None), "controller", "auto")
    if mode != "auto":
        return mode == "required"
    if conf is None:
        return None
    getter = getattr(conf, "get", None)
    value = getter("PrologSlurmctld") if callable(getter) else None
    return bool(value and value.strip() and value.strip() != "(null)")


def for_node(decision: Decision, node: str) -> NodeDecision:
    """This tray's part of a decision :func:`find` returned."""
    group = next((g for g in decision.groups if node in g.members), None)
    return NodeDecision(job_id=decision.job_id, action=decision.action, group=group,
                        channel_mode=decision.channel_mode, source=CONTROLLER,
                        reason=decision.note,
                        channel_rule="slurm switch/nvidia_imex"
                        if decision.channel_mode == "slurm" else "controller",
                        het_job_id=decision.het_job_id)


__all__ = ["Decision", "GroupDecision", "NodeDecision", "Found", "DecisionTooLarge", "body",
           "encode", "decode", "find", "find_all", "sealed", "for_node", "candidates", "nodes_hash", "controller_required",
           "TAG", "VERSION", "CONTROLLER", "FALLBACK", "ACTIONS", "MAX_RECORD", "MAX_SEALED"]
