"""The controller's decision for one job, carried to the trays in the job's AdminComment.

PrologSlurmctld groups the job's trays by clique and picks one channel per group once;
every node prolog then reads the same record with the one job-record query it already
makes. The record is sealed: it ends in a MUNGE credential over its digest, made by
SlurmUser (imexctl/slurm/munge.py). The job's user co-writes the job record's text
(JobName, Comment, WorkDir, StdErr, SubmitLine...), so copies of a record can stand
anywhere in it; a node prolog looks at every record in the text that names its job,
attempt and allocation, and believes only one whose seal opens as SlurmUser's or root's.
A forged copy is ignored; a copy of the real record is the real record.

Format, version 3 (one line, no spaces: nothing in it is a key boundary)::

    imexctl:v3;j=<job>;r=<restart>[;x=<het leader>];c=<cluster name>;h=<nodes hash>
              ;m=<imexctl|slurm>;a=<action>[;n=<note, %-escaped>]
              ;g=<cluster uuid>.<clique>/<channel|->/<hostlist>   (one per group)
              ;s=<MUNGE credential over "imexctl-decision-v3:" + sha256 of all before ;s=>

One group per clique, its trays as a hostlist range (``gb[0001-0018]``), so 1,000
cliques (18,000 trays) take about 60 KB: within the 128 KiB one ``scontrol update``
argument may have. The members' order is the decoded order on every tray.

A record is bound to one job instance, not only to a job id (audit F4-2): ``j``, ``r`` and
``h`` name the job, attempt and allocation; ``c`` the Slurm cluster (two clusters that
share ``munge.key`` and node names cannot use each other's records); and the seal's
MUNGE ENCODE_TIME must not be before the job's SubmitTime (:data:`ENCODE_SLACK_S`): a job id
Slurm hands out again (MaxJobId wrap-around, FirstJobId after a lost StateSaveLocation) is
a job submitted after every record of the id's earlier incarnations was sealed, so those
records are refused however genuine their seal. Slurm sets SubmitTime anew at every
requeue (``batch_requeue_fini``), after which PrologSlurmctld seals a new record.

Reading is bounded by the text, never by what it expands to (audit F4-4): a record's
scalar fields and its members' total count (:data:`MEMBERS_PER_CHAR` per character of
the record, at most :data:`MAX_MEMBERS`) are checked before any hostlist is expanded,
and :func:`find`/:func:`find_all` expand only a record whose seal opened.

A heterogeneous job's components each get their own record (their job id, restart count and
node list) naming the het leader in ``x=``; its groups span every component's trays, so one
domain per clique serves the whole job, on ports and channels keyed by the leader.

Version 2 records (no ``c=``) of releases before 2026-11c are still read: a node prolog
asks for the job to be requeued (:attr:`Found.legacy`; the new PrologSlurmctld then seals
a version 3 record) and a channel-table rebuild counts their channels as held.
"""

from __future__ import annotations

import re

from imexctl.base.digest import sha256_hex
from imexctl.base.dataclass import dataclass, field
from imexctl.rules.groups import (ACTIONS, DOMAINS, PER_CLIQUE, channel_for_job, group_trays,
                                  judge)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Mapping, Sequence

    from imexctl.config import Config
    from imexctl.rules.cliques import TrayIdentity
    from imexctl.slurm.localconf import LocalSlurmConf
    from imexctl.slurm.munge import MungeSeal

VERSION = 3
TAG = f"imexctl:v{VERSION}"
SEAL_PREFIX = f"imexctl-decision-v{VERSION}:"
LEGACY_VERSION = 2          # read, never written: records of releases before 2026-11c
_TAGS = {TAG: VERSION, f"imexctl:v{LEGACY_VERSION}": LEGACY_VERSION}
# Linux caps one argv string at 128 KiB (MAX_ARG_STRLEN); "AdminComment=" and the seal
# fit in what is left (slurm.records.MAX_COMMENT; slurmctld itself keeps any size).
MAX_RECORD = 120_000
MAX_SEALED = MAX_RECORD + 8192     # the record with its seal, as decode() accepts it
MAX_NOTE = 300
MAX_MEMBERS = 1 << 20      # names one record may expand to
# ... and at most this many per character of the record: a real record names fewer names
# than it has characters (a clique's group is some 50 characters of key and channel
# before its hostlist), so only a decode bomb is refused by it.
MEMBERS_PER_CHAR = 32
MAX_CANDIDATES = 4         # distinct records naming this job a prolog will try to open
MAX_REBUILD_OPENS = 2048   # seals a channel-table rebuild opens in all (one unmunge each)
# A record sealed this long before the job's SubmitTime still counts as the job's: both
# clocks are the controller host's, but Slurm may set a requeued job's SubmitTime one
# second ahead (batch_requeue_fini), and a backup slurmctld's clock may differ a little.
ENCODE_SLACK_S = 5
CONTROLLER = "controller"
FALLBACK = "fallback"
MODES = ("imexctl", "slurm")
_FIELD_RE = {
    "j": r"[1-9][0-9]{0,9}",
    "r": r"0|[1-9][0-9]{0,9}",
    "x": r"[1-9][0-9]{0,9}",
    "c": r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}",
    "h": r"[0-9a-f]{12}",
    "m": "|".join(MODES),
    "a": "|".join(ACTIONS),
    "n": r"[A-Za-z0-9._,:()/@+%\[\]-]{0,3000}",
}
_REQUIRED = {VERSION: frozenset({"j", "r", "c", "h", "m", "a"}),
             LEGACY_VERSION: frozenset({"j", "r", "h", "m", "a"})}
_GROUP_RE = (
    r"(?P<uuid>[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})"
    r"\.(?P<clique>0|[1-9][0-9]{0,9})/(?P<ch>-|[1-9][0-9]{0,6})/(?P<hosts>[A-Za-z0-9._,\[\]-]+)")
_BRACKET_RE = r"\[([^\]]*)\]"
_CANDIDATE_RE = r"imexctl\:v[23];[!-~]*"
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
    cluster: str = ""               # Slurm's ClusterName (required to encode)
    version: int = VERSION          # LEGACY_VERSION: a record read from an older release


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
    # A genuinely sealed record that is not this job instance's (sealed before the job was
    # submitted, or for another cluster): a replay. The job is refused whatever the policy.
    refused: bool = False
    # Only a sealed version 2 record (sealed before an upgrade): the job is requeued, and
    # the upgraded PrologSlurmctld seals a version 3 record for its next attempt.
    legacy: bool = False
    # When the decision was sealed (the seal's ENCODE_TIME: the controller host's clock;
    # 0 when MUNGE did not say). The node prolog compares its own clock with it.
    encoded: int = 0


@dataclass(frozen=True)
class JobText:
    """One job's part of many job records, for :func:`find_all`: its record line (the
    only text a record of this job is looked for in), its AdminComment when the line
    reads unambiguously, and its SubmitTime (epoch s; None when unknown)."""
    job_id: int
    text: str
    admin_comment: str = ""
    submit_time: int | None = None


@dataclass(frozen=True)
class Rebuilt:
    """What :func:`find_all` found: the verified decision of each job with a record, and
    the jobs whose records could not be verified (a rebuild from it would free their
    channels: it must not happen). ``capped``: :data:`MAX_REBUILD_OPENS` was reached."""
    decisions: tuple[Decision, ...]
    unverified: tuple[int, ...] = ()
    capped: bool = False


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
    if not re.fullmatch(_FIELD_RE["c"], decision.cluster):
        raise ValueError(f"invalid cluster name {decision.cluster!r}: the record is bound "
                         "to Slurm's ClusterName")
    parts = [TAG, f"j={decision.job_id}", f"r={decision.restart_count}"]
    if decision.het_job_id is not None:
        parts.append(f"x={decision.het_job_id}")
    parts += [f"c={decision.cluster}", f"h={decision.nodes_hash}", f"m={decision.channel_mode}", f"a={decision.action}"]
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


def _seal_payload(text: str, version: int = VERSION) -> str:
    return f"imexctl-decision-v{version}:" + sha256_hex(text.encode())


@dataclass(frozen=True)
class _Header:
    """A record's scalar fields and its groups' text, read without expanding anything."""
    version: int
    values: dict
    groups: tuple                   # re.Match of _GROUP_RE, one per group
    body: str                       # the record before ``;s=``
    size: int                       # the whole record's length


def _header(text: str | None) -> _Header | None:
    """The record's fields, checked, with its groups matched but not expanded; None when
    malformed. Costs one pass over the text: nothing here depends on what hostlists
    expand to, and the members' total is bounded before :func:`_expand` is allowed."""
    if not isinstance(text, str) or len(text) > MAX_SEALED:
        return None
    tag, sep, _ = text.partition(";")
    version = _TAGS.get(tag)
    if version is None or not sep or len(text.split()) != 1 or text != text.strip():
        return None                 # a record holds no whitespace
    record = text.split(";s=", 1)[0]
    values: dict[str, str] = {}
    groups = []
    for item in record.split(";")[1:]:
        key, sep, value = item.partition("=")
        if not sep:
            return None
        if key == "g":
            match = re.fullmatch(_GROUP_RE, value)
            if not match:
                return None
            groups.append(match)
        elif key in _FIELD_RE and key not in values and re.fullmatch(_FIELD_RE[key], value) \
                and (key != "c" or version >= 3):
            values[key] = value
        else:
            return None
    if not _REQUIRED[version] <= set(values):
        return None
    if (values["a"] == "domains") != bool(groups):
        return None
    if any((g["ch"] == "-") != (values["m"] == "slurm") for g in groups):
        return None
    if len({(g["uuid"], int(g["clique"])) for g in groups}) != len(groups):
        return None
    bound = min(MAX_MEMBERS, MEMBERS_PER_CHAR * len(text))
    total = 0
    for g in groups:                # every group counted before any is expanded
        total += _name_count(g["hosts"])
        if total > bound:
            return None
    return _Header(version, values, tuple(groups), record, len(text))


def _expand(head: _Header) -> Decision | None:
    """The decision of a checked header: its hostlists expanded (their total is bounded
    by :func:`_header`)."""
    from imexctl.slurm.hostlist import expand

    values, groups = head.values, []
    try:
        for match in head.groups:
            members = tuple(expand(match["hosts"]))
            if not members:
                return None
            channel = None if match["ch"] == "-" else int(match["ch"])
            groups.append(GroupDecision(f"{match['uuid']}.{int(match['clique'])}", channel,
                                        members))
    except Exception:  # noqa: BLE001 - garbage of any kind is "no decision"
        return None
    names = [n for g in groups for n in g.members]
    if len(set(names)) != len(names):
        return None
    return Decision(job_id=int(values["j"]), action=values["a"], channel_mode=values["m"],
                    groups=tuple(groups), restart_count=int(values["r"]),
                    nodes_hash=values["h"], note=_unescape_note(values.get("n", "")),
                    het_job_id=int(values["x"]) if "x" in values else None,
                    cluster=values.get("c", ""), version=head.version)


def decode(text: str | None) -> Decision | None:
    """The decision in one record (sealed or not), or None when malformed. Display only
    (the cluster view): what a prolog acts on comes from :func:`find`. Its cost is bounded
    by the text: fields and the members' total are checked before any hostlist expands."""
    try:
        head = _header(text)
    except Exception:  # noqa: BLE001 - garbage of any kind is "no decision"
        return None
    return _expand(head) if head is not None else None


def _name_count(expr: str) -> int:
    """How many names ``expr`` expands to, counted without expanding it."""
    total = 0
    for word in re.split(r",(?![^\[]*\])", expr):
        count = 1
        for inner in re.findall(_BRACKET_RE, word):
            size = 0
            for part in inner.split(","):
                lo, _, hi = part.partition("-")
                if not lo.isdigit() or (hi and not hi.isdigit()) or len(lo) > 12 \
                        or len(hi) > 12:
                    return MAX_MEMBERS + 1
                size += max(int(hi or lo) - int(lo) + 1, 0)
            count *= size
            if count > MAX_MEMBERS:
                return count
        total += count
    return total


def sealed(record: str, seal: MungeSeal) -> bool:
    """Whether ``record`` ends in a seal that opens, as a trusted uid's, to its digest."""
    head = _header(record)
    return head is not None and _open(record, head, seal) is not None


def _open(record: str, head: _Header, seal: MungeSeal) -> int | None:
    """The seal's ENCODE_TIME (0 when MUNGE did not say) when ``record``'s seal opens as
    a trusted uid's to its digest; None otherwise (SealError: MUNGE cannot answer)."""
    text, sep, cred = record.rpartition(";s=")
    if not sep or text != head.body:
        return None
    opened = seal.open_sealed(cred)
    if opened is None or opened.payload != _seal_payload(text, head.version):
        return None
    return opened.encode_time or 0


def candidates(text: str) -> list[str]:
    """Every distinct record in ``text`` (a whole job record: copies may stand in any
    user-written field), in the order first seen."""
    return list(dict.fromkeys(re.findall(_CANDIDATE_RE, text or "")))


def _ordered(text: str, admin_comment: str) -> list[str]:
    """The records of ``text``, the one at AdminComment's own position first (when the
    job record reads unambiguously there, that is the controller's)."""
    own = candidates(admin_comment)[:1]
    return list(dict.fromkeys(own + candidates(text)))


def _instance_fault(head: _Header, encoded: int, cluster: str,
                    submit_time: int | None) -> str:
    """Why a record whose seal opened is not this job instance's ("" when it is)."""
    if head.version >= 3 and head.values["c"] != cluster:
        return (f"it was sealed for cluster {head.values['c']!r}, this is {cluster!r} "
                "(clusters sharing munge.key)")
    if submit_time is None:
        return "the job's SubmitTime is unknown, so its age cannot be told"
    if encoded + ENCODE_SLACK_S < submit_time:
        return (f"it was sealed at {encoded}, before the job was submitted at {submit_time}: "
                "a record of an earlier job with this id (replayed)")
    return ""


def find(text: str, seal: MungeSeal, job_id: int, restart_count: int,
         job_nodes: Sequence[str], *, cluster: str, submit_time: int | None,
         admin_comment: str = "") -> Found:
    """The sealed decision for this job instance, attempt and allocation in ``text``.

    Only records naming this job, attempt and allocation (read from their fields,
    nothing expanded) are looked at, the one at ``admin_comment``'s position first; at
    most MAX_CANDIDATES are opened (each costs one ``unmunge``), so a user who fills
    their job's fields with copies only delays their own job. An opened record must be
    this cluster's and sealed after the job's ``submit_time``; one that is not is a
    replay (:attr:`Found.refused`). SealError when MUNGE cannot answer at all.
    """
    want_hash = nodes_hash(list(job_nodes))
    matching: list[tuple[str, _Header]] = []
    for record in _ordered(text, admin_comment):
        try:
            head = _header(record)
        except Exception:  # noqa: BLE001 - garbage of any kind is "no decision"
            head = None
        if head is not None and head.values["j"] == str(job_id) \
                and head.values["r"] == str(restart_count) and head.values["h"] == want_hash:
            matching.append((record, head))
    if not matching:
        return Found(None, "no controller decision for this job attempt in its record")
    refusal, legacy = "", False
    for record, head in matching[:MAX_CANDIDATES]:
        encoded = _open(record, head, seal)
        if encoded is None:
            continue
        fault = _instance_fault(head, encoded, cluster, submit_time)
        if fault:
            refusal = refusal or fault
            continue
        if head.version != VERSION:
            legacy = True
            continue
        decision = _expand(head)
        if decision is not None:
            return Found(decision, candidates=len(matching), encoded=encoded)
    if refusal:
        return Found(None, f"a sealed decision record for job {job_id} is not this job's: "
                           f"{refusal}", len(matching), refused=True)
    if legacy:
        return Found(None, f"the decision record of job {job_id} is format "
                           f"v{LEGACY_VERSION}, sealed before imexctl was upgraded: the job "
                           "is requeued for a new decision", len(matching), legacy=True)
    if len(matching) > MAX_CANDIDATES:
        return Found(None, f"{len(matching)} decision records in the job record, none of the "
                           f"first {MAX_CANDIDATES} sealed by SlurmUser (user text imitates "
                           "them)", len(matching))
    return Found(None, "no decision record in the job record is sealed by SlurmUser "
                       f"({len(matching)} unsealed or forged)", len(matching))


def find_all(jobs: Sequence[JobText], seal: MungeSeal, *, cluster: str,
             max_opens: int | None = None) -> Rebuilt:
    """The verified decision of every job in ``jobs`` (the live jobs' record lines) that
    has a record: what the channel table is rebuilt from. A record counts only in the
    line of the job it names (copies in another job's fields are never opened, so they
    cannot spend its tries), AdminComment's own record first, then the latest attempt.
    A job with records of which none verifies within MAX_CANDIDATES tries is
    ``unverified``; after ``max_opens`` unmunge calls in all, the search stops
    (``capped``): either way a rebuild must not free anything (it fails closed).
    Version 2 records of jobs started before an upgrade count (reserving is safe)."""
    max_opens = MAX_REBUILD_OPENS if max_opens is None else max_opens
    found: list[Decision] = []
    unverified: list[int] = []
    opens = 0
    for job in jobs:
        mine: list[tuple[str, _Header]] = []
        for record in _ordered(job.text, job.admin_comment):
            try:
                head = _header(record)
            except Exception:  # noqa: BLE001
                head = None
            if head is not None and head.values["j"] == str(job.job_id):
                mine.append((record, head))
        if not mine:
            continue            # no record: the job holds no channel of ours
        own = job.admin_comment and mine[0][0] in candidates(job.admin_comment)
        rest = sorted(mine[1:] if own else mine, key=lambda rh: -int(rh[1].values["r"]))
        ordered = ([mine[0]] if own else []) + rest
        decision = None
        for record, head in ordered[:MAX_CANDIDATES]:
            if opens >= max_opens:
                return Rebuilt(tuple(found), tuple(unverified + [job.job_id]), capped=True)
            opens += 1
            encoded = _open(record, head, seal)
            if encoded is None or _instance_fault(head, encoded, cluster, job.submit_time):
                continue
            decision = _expand(head)
            if decision is not None:
                break
        if decision is None:
            unverified.append(job.job_id)
        else:
            found.append(decision)
    return Rebuilt(tuple(found), tuple(unverified))


def controller_required(cfg: Config, conf: LocalSlurmConf | None) -> bool | None:
    """Whether only PrologSlurmctld's sealed decision may be acted on (``policy.controller``;
    ``auto``: when the local slurm.conf ``conf`` names a PrologSlurmctld). None under
    ``auto`` when ``conf`` is None (it could not be read): cannot tell, and the caller
    must fail closed, never take the fallback rule (audit F4-9)."""
    mode = cfg.policy.controller
    if mode != "auto":
        return mode == "required"
    if conf is None:
        return None
    value = conf.get("PrologSlurmctld")
    return bool(value and value.strip() and value.strip() != "(null)")


def fallback_decision(job_id: int, nodes: Sequence[str],
                      identities: Mapping[str, TrayIdentity | None], node: str,
                      policy: str = PER_CLIQUE, slurm_channels: bool = False,
                      channel_count: int = 2048) -> NodeDecision:
    """The node prolog's decision when the controller recorded none (no PrologSlurmctld,
    or it failed open): the same grouping from published identities, and the job-id
    channel rule (identical on every tray, but not collision-free across jobs).

    Its ``source`` is ``"fallback"``.
    """
    grouping = group_trays(nodes, identities)
    verdict = judge(grouping, policy)
    group = grouping.group_of(node)
    mode = "slurm" if slurm_channels else "imexctl"
    chosen = None
    if verdict.action == DOMAINS and group is not None:
        channel = None if slurm_channels else channel_for_job(job_id, channel_count).number
        chosen = GroupDecision(group.key, channel, group.members)
    return NodeDecision(job_id=job_id, action=verdict.action, group=chosen,
                        channel_mode=mode, source=FALLBACK, reason=verdict.reason,
                        channel_rule="slurm switch/nvidia_imex" if slurm_channels
                        else "job-id")


def for_node(decision: Decision, node: str) -> NodeDecision:
    """This tray's part of a decision :func:`find` returned."""
    group = next((g for g in decision.groups if node in g.members), None)
    return NodeDecision(job_id=decision.job_id, action=decision.action, group=group,
                        channel_mode=decision.channel_mode, source=CONTROLLER,
                        reason=decision.note,
                        channel_rule="slurm switch/nvidia_imex"
                        if decision.channel_mode == "slurm" else "controller",
                        het_job_id=decision.het_job_id)


__all__ = ["Decision", "GroupDecision", "NodeDecision", "Found", "JobText", "Rebuilt",
           "DecisionTooLarge", "body",
           "encode", "decode", "find", "find_all", "sealed", "for_node", "candidates", "nodes_hash", "controller_required",
           "fallback_decision",
           "TAG", "VERSION", "CONTROLLER", "FALLBACK", "ACTIONS", "MAX_RECORD", "MAX_SEALED"]
