"""Pure parsers for Slurm CLI output (``scontrol show job|node -o``, ``show config``).

``scontrol -o`` prints one ``Key=value`` record per line, but several values may hold
spaces (Reason, Comment, Extra, OS, JobName, WorkDir, Command, StdOut, ...), and some
of those are written by the job's user. So a line is split only at `` Key=`` where Key
is a key Slurm prints; inside a free-text value only known keys end it; a JSON Extra
value is measured with the JSON decoder itself. A key found twice means some value
contains text that looks like a key: the parser reports it (``ambiguous``) so the
caller can refuse to trust that key instead of believing a forged one.
These functions take text and return data; they run no commands.
"""

from __future__ import annotations

import json
import re

from imexctl.base.dataclass import dataclass, field
from imexctl.slurm.hostlist import expand

# Keys printed by `scontrol show node -o` (22.05 .. 26.05), in Slurm's order.
NODE_KEYS = (
    "NodeName", "Arch", "CpuBind", "CoresPerSocket", "CPUAlloc", "CPUEfctv", "CPUTot",
    "CPULoad", "AvailableFeatures", "ActiveFeatures", "Features", "Gres", "GresDrain",
    "GresUsed", "NodeAddr", "NodeHostName", "BcastAddr", "Port", "Version", "OS",
    "RealMemory", "AllocMem", "FreeMem", "Sockets", "Boards", "CoreSpecCount",
    "CPUSpecList", "MemSpecLimit", "RestrictedCoresPerGPU", "State", "ThreadsPerCore",
    "TmpDisk", "Weight", "Owner", "MCS_label", "NextState", "Partitions", "BootTime",
    "SlurmdStartTime", "LastBusyTime", "ResumeAfterTime", "CfgTRES", "AllocTRES",
    "CapWatts", "CurrentWatts", "AveWatts", "LowestJoules", "ConsumedJoules",
    "ExtSensorsJoules", "ExtSensorsWatts", "ExtSensorsTemp", "Reason", "Comment", "Extra",
    "InstanceId", "InstanceType", "ReservationName", "Topology", "TLSCertExpiration",
    # 26.05
    "SuspendTime", "TLSCertLastRenewal", "TLSCertTokenSet",
)
NODE_FREE_TEXT = frozenset({"OS", "Reason", "Comment", "Extra", "ReservationName"})

# Keys printed by `scontrol show job -o` (22.05 .. 26.05). 26.05 added SubmitLine (the user's
# whole sbatch/srun command line, so user-written text like Comment), Exclusive and SLUID.
JOB_KEYS = (
    "JobId", "ArrayJobId", "ArrayTaskId", "ArrayTaskThrottle", "HetJobId", "HetJobOffset",
    "HetJobIdSet", "JobName", "UserId", "GroupId", "MCS_label", "Priority", "Nice",
    "Account", "QOS", "WCKey", "JobState", "Reason", "Dependency", "Requeue", "Restarts",
    "BatchFlag", "Reboot", "ExitCode", "DerivedExitCode", "RunTime", "TimeLimit",
    "TimeMin", "SubmitTime", "EligibleTime", "AccrueTime", "StartTime", "EndTime",
    "Deadline", "PreemptEligibleTime", "PreemptTime", "SuspendTime", "SecsPreSuspend",
    "LastSchedEval", "Scheduler", "Partition", "AllocNode:Sid", "ReqNodeList",
    "ExcNodeList", "NodeList", "SchedNodeList", "BatchHost", "NumNodes", "NumCPUs",
    "NumTasks", "CPUs/Task", "ReqB:S:C:T", "ReqTRES", "AllocTRES", "TRES",
    "Socks/Node", "NtasksPerN:B:S:C", "CoreSpec", "JOB_GRES", "Nodes", "CPU_IDs", "Mem",
    "GRES", "MinCPUsNode", "MinMemoryNode", "MinMemoryCPU", "MinTmpDiskNode", "Features",
    "ClusterFeatures", "Prefer", "DelayBoot", "Reservation", "OverSubscribe",
    "Contiguous", "Licenses", "LicensesAlloc", "Network", "Command", "WorkDir",
    "AdminComment", "SystemComment", "Comment", "StdErr", "StdIn", "StdOut", "Power",
    "CpusPerTres", "MemPerTres", "TresBind", "TresFreq", "TresPerJob", "TresPerNode",
    "TresPerSocket", "TresPerTask", "MailUser", "MailType", "NtasksPerTRES",
    "CPUFreqMin", "CPUFreqMax", "CPUFreqGov", "BurstBuffer", "BurstBufferState",
    "Container", "ContainerID", "FedOrigin", "FedViableSiblings", "FedActiveSiblings",
    "KillOInInvalidDependent", "Partitions", "ResvPorts", "SegmentSize", "Switches",
    "Wait4Switch", "StepMgrEnabled", "Tres",
    # 26.05
    "SubmitLine", "Exclusive", "SLUID", "KillOnInvalidDependent", "ExpeditedRequeue",
    "SpreadSegments", "ConsolidateSegments",
)
JOB_FREE_TEXT = frozenset({"JobName", "Command", "WorkDir", "AdminComment", "SystemComment",
                           "Comment", "StdErr", "StdIn", "StdOut", "MailUser", "Reason",
                           "Dependency", "Container", "ContainerID", "Licenses", "SubmitLine"})
# Job keys whose values decide what imexctl does; a forged copy must never be believed.
JOB_CRITICAL = frozenset({"JobId", "UserId", "JobState", "Partition", "NodeList",
                          "BatchFlag", "AdminComment", "Features", "OverSubscribe", "HetJobId"})
# The keys squeue can confirm (fields without spaces): see SQUEUE_FORMAT.
JOB_IDENTITY = frozenset({"JobId", "UserId", "JobState", "Partition", "NodeList", "HetJobId"})
# squeue fields for confirming a job's identity: %A is the plain job id (one per array
# element and het component); %i prints ``3_2`` for an array element and
# ``leader+offset`` for a het component (measured on 22.05.8), so it gives the het leader.
SQUEUE_FORMAT = "%A|%i|%T|%U|%P|%N"

_CANDIDATE = r"(?:^|(?<= ))([A-Za-z][A-Za-z0-9_:/]*)="
_NULLS = {"(null)", "None", "N/A", ""}
_REASON_STAMP = r" \[[^\[\]\s@]*@[^\[\]]*\]"


class ParseError(ValueError):
    """The text is not the record shape scontrol prints."""


@dataclass
class Parsed:
    values: dict[str, str]
    ambiguous: set[str] = field(default_factory=set)
    order: list[str] = field(default_factory=list)   # keys in the order first seen

    def before(self, first: str, second: str) -> bool:
        """Both keys present and ``first`` was printed before ``second``."""
        return (first in self.values and second in self.values
                and self.order.index(first) < self.order.index(second))


def split_record(line: str, known: tuple[str, ...] | frozenset[str],
                 free_text: frozenset[str]) -> Parsed:
    """Split one ``scontrol -o`` line into ``{Key: value}`` (first occurrence wins).

    Boundaries are `` Key=`` at the start of the line or after a space. After a key
    whose value may hold spaces (``free_text``) only a key in ``known`` ends the
    value; elsewhere any capitalised ``Key=`` does (new Slurm keys do not corrupt the
    value before them). An ``Extra={...}`` value is cut where its JSON ends.
    """
    known = frozenset(known)
    line = line.rstrip("\n")
    cands = [(m.start(), m.end(), m.group(1)) for m in re.finditer(_CANDIDATE, line)]
    if not cands or cands[0][0] != 0:
        raise ParseError(f"not a Key=value record: {line[:80]!r}")
    values: dict[str, str] = {}
    ambiguous: set[str] = set()
    order: list[str] = []
    i = 0
    while i < len(cands):
        _, vstart, key = cands[i]
        skip_to = vstart
        if key == "Extra" and line[vstart:vstart + 1] in ("{", "["):
            try:
                _, end = json.JSONDecoder().raw_decode(line, vstart)
                skip_to = end
            except ValueError:
                pass
        j = i + 1
        while j < len(cands):
            start, _, nxt = cands[j]
            if start >= skip_to and (nxt in known or (key not in free_text and nxt[0].isupper())):
                break
            j += 1
        vend = cands[j][0] if j < len(cands) else len(line)
        value = line[vstart:vend]
        value = value.rstrip(" ")  # 22.05 separates some fields with two spaces
        if key in values:
            ambiguous.add(key)
        else:
            values[key] = value
            order.append(key)
        i = j
    return Parsed(values, ambiguous, order)


def _opt(value: str | None) -> str:
    return "" if value is None or value in ("(null)",) else value


def _first_word(value: str | None) -> str:
    return (value or "").split(" ", 1)[0]


def parse_uid(value: str) -> int:
    """``nobody(65534)`` or ``65534`` -> 65534."""
    m = re.fullmatch(r"(?:[^()\s]*\()?(\d+)\)?", _first_word(value))
    if not m:
        raise ParseError(f"UserId={value!r} has no numeric uid")
    return int(m.group(1))


def strip_reason_stamp(reason: str) -> str:
    """``imexctl: x [root@2026-11-22T08:24:15]`` -> ``imexctl: x`` (first stamp only)."""
    return re.sub(_REASON_STAMP, "", reason, count=1).strip()


def parse_nodelist(value: str | None) -> tuple[str, ...]:
    value = _first_word(value)
    if value in _NULLS or value == "(null)":
        return ()
    try:
        return tuple(expand(value))
    except ValueError as exc:
        raise ParseError(f"NodeList={value!r}: {exc}") from None


def split_features(value: str | None) -> tuple[str, ...]:
    value = _first_word(value)
    if value in _NULLS:
        return ()
    return tuple(f for f in value.split(",") if f)


def parse_job_line(line: str) -> Parsed:
    """Split a job line; a critical key printed out of Slurm's order counts as ambiguous.

    Slurm always prints JobId, JobName, UserId first and WorkDir before AdminComment, so
    an AdminComment seen before WorkDir (or any critical key before UserId) came from a
    user-written value such as JobName, even when no real one exists to collide with.
    """
    parsed = split_record(line, JOB_KEYS, JOB_FREE_TEXT)
    if "JobId" not in parsed.values:
        raise ParseError(f"no JobId in {line[:80]!r}")
    for key in JOB_CRITICAL - {"JobId", "UserId", "HetJobId"}:
        if parsed.before(key, "UserId"):
            parsed.ambiguous.add(key)
    # A het component's HetJobId is printed right after JobId, before JobName: one seen
    # after JobName came from the name (a plain job has none to collide with).
    if "HetJobId" in parsed.values and not parsed.before("HetJobId", "JobName"):
        parsed.ambiguous.add("HetJobId")
    # Slurm prints WorkDir, AdminComment, Comment in that order (26.05: SubmitLine first).
    # An AdminComment out of that order, or after a forged WorkDir, came from user text
    # (JobName, Comment, 26.05's SubmitLine), even when no real one is there to collide with.
    if "AdminComment" in parsed.values and (
            not parsed.before("WorkDir", "AdminComment") or "WorkDir" in parsed.ambiguous
            or ("Comment" in parsed.values and not parsed.before("AdminComment", "Comment"))):
        parsed.ambiguous.add("AdminComment")
    return parsed


def job_records(text: str, job_id: int | None = None) -> list[str]:
    """The records of ``scontrol -o show job`` output, one string each (audit S-01).

    ``-o`` prints one record per line, but Slurm prints user-written values (JobName,
    Comment, WorkDir, 26.05's SubmitLine) raw, newlines included. A line that does not
    start a record (``JobId=``) continues the one before it; the newline stays inside the
    value, where it is not a key boundary. With ``job_id``, only that job's record: when
    user text forged a second ``JobId=<job_id>`` line, every line from the first such
    record to the end of the last is one record, so the forged keys collide with the real
    ones and are reported ambiguous instead of being believed.
    """
    records: list[str] = []
    for line in text.split("\n"):
        if line.startswith("JobId=") or not records:
            records.append(line)
        else:
            records[-1] += "\n" + line
    records = [r.rstrip("\n") for r in records if r.startswith("JobId=")]
    if job_id is None:
        return records
    mine = [i for i, r in enumerate(records) if record_job_id(r) == job_id]
    if not mine:
        return []
    return ["\n".join(records[mine[0]:mine[-1] + 1])]


def record_job_id(record: str) -> int | None:
    """The job id a record line starts with (``JobId=N``), None when it does not."""
    m = re.match(r"JobId=(\d+)(?:\s|$)", record)
    return int(m.group(1)) if m else None


def parse_node_line(line: str) -> Parsed:
    parsed = split_record(line, NODE_KEYS, NODE_FREE_TEXT)
    if "NodeName" not in parsed.values:
        raise ParseError(f"no NodeName in {line[:80]!r}")
    return parsed


def job_fields(parsed: Parsed) -> dict:
    """The JobRecord fields from a parsed job line (ambiguity is the caller's business).

    An ambiguous identity field (a forged copy seen first, e.g. ``UserId=x`` in the job
    name) that does not parse gets a placeholder instead of failing the whole record:
    the caller replaces it with squeue's answer, or refuses the record."""
    v, amb = parsed.values, parsed.ambiguous
    try:
        job_id = int(_first_word(v.get("JobId")))
    except ValueError:
        raise ParseError(f"JobId={v.get('JobId')!r} is not an integer") from None
    features = _first_word(v.get("Features"))
    return {
        "job_id": job_id,
        "state": _first_word(v.get("JobState")),
        "user_id": _lenient(parse_uid, v.get("UserId", ""), "UserId" in amb, -1),
        "nodes": _lenient(parse_nodelist, v.get("NodeList"), "NodeList" in amb, ()),
        "partition": _first_word(v.get("Partition")) or None,
        "features": "" if features in _NULLS else features,
        "admin_comment": _opt(v.get("AdminComment")),
        "comment": _opt(v.get("Comment")),
        "batch": _first_word(v.get("BatchFlag")) == "1",
        "segment_size": parse_segment_size(v.get("SegmentSize"),
                                           "SegmentSize" in amb),
        "oversubscribe": parse_oversubscribe(v.get("OverSubscribe"), "OverSubscribe" in amb),
        "het_job_id": _lenient(parse_het_job_id, v.get("HetJobId"), "HetJobId" in amb, None),
    }


def _lenient(parse, value, ambiguous: bool, placeholder):
    """``parse(value)``; for an ambiguous field a ParseError gives ``placeholder``."""
    try:
        return parse(value)
    except ParseError:
        if ambiguous:
            return placeholder
        raise


def parse_oversubscribe(value: str | None, ambiguous: bool = False) -> str | None:
    """``OverSubscribe=NO`` -> "NO" (upper case); None when absent, empty or seen twice
    (user text can carry ``OverSubscribe=``: a forged copy is never believed)."""
    word = _first_word(value).upper()
    if ambiguous or word in ("", "(NULL)", "N/A") or not word.isalpha():
        return None
    return word


def parse_het_job_id(value: str | None) -> int | None:
    """``HetJobId=9`` (printed for het components only) -> 9; absent -> None."""
    word = _first_word(value)
    if not word:
        return None
    if not word.isdigit() or not word.isascii() or int(word) <= 0:
        raise ParseError(f"HetJobId={value!r} is not a job id")
    return int(word)


def parse_segment_size(value: str | None, ambiguous: bool = False) -> int | None:
    """``SegmentSize=N`` (printed for a ``--segment`` job by 26.05; 24.11 prints nothing)
    -> N; absent -> 0.
    None when it cannot be trusted: seen twice (user text can carry ``SegmentSize=``) or
    not a number."""
    if ambiguous:
        return None
    word = _first_word(value)
    if not word:
        return 0
    return int(word) if word.isdigit() else None


def node_fields(parsed: Parsed) -> dict:
    v = parsed.values
    features = split_features(v.get("ActiveFeatures"))
    if "ActiveFeatures" not in v:
        features = split_features(v.get("AvailableFeatures", v.get("Features")))
    return {
        "name": _first_word(v["NodeName"]),
        "addr": _first_word(v.get("NodeAddr")),
        "hostname": _first_word(v.get("NodeHostName")),
        "state": _first_word(v.get("State")),
        "reason": strip_reason_stamp(_opt(v.get("Reason"))),
        "extra": _opt(v.get("Extra")),
        "features": features,
        "comment": _opt(v.get("Comment")),
    }


def node_table_fields(parsed: Parsed) -> dict:
    """node_fields plus what the cluster view needs: partitions and the reason's time."""
    v = parsed.values
    out = node_fields(parsed)
    parts = _first_word(v.get("Partitions"))
    out["partitions"] = () if parts in _NULLS else tuple(p for p in parts.split(",") if p)
    out["reason_time"] = reason_time(_opt(v.get("Reason")))
    return out


# The CLI backend asks scontrol for job records with SLURM_TIME_FORMAT=%s (epoch seconds:
# no time zone or daylight-saving guess); a fake or older scontrol may print local time.
JOB_TIME_FORMAT = "%s"
_SUBMIT_TIME = re.compile(r"(?:^|(?<=\s))SubmitTime=([0-9]{1,12}|\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?=\s|$)")


def submit_time(record: str) -> int | None:
    """A job record's SubmitTime (epoch s); None when it prints none. A user may write
    ``SubmitTime=`` into JobName or Comment: of every value in the record the latest
    counts, so a forged one can only make the job's own records look older (refused),
    never an earlier job's younger."""
    import time

    times: list[int] = []
    for value in _SUBMIT_TIME.findall(record or ""):
        if value.isdigit():
            times.append(int(value))
            continue
        try:   # local time: the earlier reading of an hour that occurs twice (DST end)
            tm = time.strptime(value, "%Y-%m-%dT%H:%M:%S")
            readings = [int(time.mktime(tm[:8] + (dst,))) for dst in (-1, 0, 1)]
            exact = [t for t in readings if time.localtime(t)[:6] == tm[:6]]
        except (ValueError, OverflowError):
            continue
        if exact:
            times.append(min(exact))
    return max(times) if times else None


def reason_time(reason: str) -> float | None:
    """``x [root@2026-11-22T08:24:15]`` -> epoch seconds (slurmctld's local time)."""
    import time

    m = re.search(r" \[[^\[\]\s@]*@(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)\]", reason)
    if not m:
        return None
    try:
        return time.mktime(time.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S"))
    except (ValueError, OverflowError):
        return None


def parse_config_value(text: str, key: str) -> str | None:
    """``SwitchType              = switch/none`` from ``scontrol show config``."""
    m = re.search(rf"^\s*{re.escape(key)}\s*=\s*(.*?)\s*$", text, re.MULTILINE)
    return m.group(1) if m else None


def parse_squeue_job(text: str, job_id: int) -> dict | None:
    """Job ``job_id`` in ``squeue -h -j N -t all -o SQUEUE_FORMAT`` output. ``-j`` of an
    array's or a het job's first id lists every element or component too (22.05.8), so
    the line is picked by ``%A``, never by position."""
    for job in parse_squeue_jobs(text):
        if job["job_id"] == job_id:
            return job
    return None


def parse_squeue_jobs(text: str) -> list[dict]:
    """Every well-formed job line of ``squeue -h -o SQUEUE_FORMAT`` (``%A|%i|%T|%U|%P|%N``):
    the plain job id from ``%A``; the het leader from ``%i`` (``leader+offset``)."""
    out = []
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) != 6:
            continue
        job_id, shown, state, uid, partition, nodes = parts
        if not (_ascii_digits(job_id) and _ascii_digits(uid)) or not state:
            continue
        leader, plus, offset = shown.partition("+")
        if plus and not (_ascii_digits(leader) and _ascii_digits(offset)):
            continue
        try:
            node_names = parse_nodelist(nodes)
        except ParseError:
            continue
        out.append({"job_id": int(job_id), "state": state, "user_id": int(uid),
                    "partition": partition or None, "nodes": node_names,
                    "het_job_id": int(leader) if plus else None})
    return out


def _ascii_digits(text: str) -> bool:
    return text.isascii() and text.isdigit()


__all__ = ["split_record", "job_records", "parse_job_line", "parse_node_line", "job_fields", "node_fields",
           "parse_config_value", "parse_squeue_job", "parse_uid", "strip_reason_stamp",
           "parse_squeue_jobs", "parse_oversubscribe", "parse_het_job_id", "ParseError", "Parsed",
           "NODE_KEYS", "JOB_KEYS", "JOB_CRITICAL", "JOB_IDENTITY", "SQUEUE_FORMAT"]


# `scontrol show resources JOBID` (Slurm 25.11+; 24.11 answers "invalid entity"): one line
# per node, e.g. "Node=tray01 AbstractCores=0x3 Memory=0 Channel=1" on 26.05.5 with
# switch/nvidia_imex (Channel= only when the switch plugin allocated one).
_RESOURCE_LINE = r"^Node=(\S+)\s(?:.*\s)?Channel=(\d+)(?:\s|$)"


def parse_resources(text: str) -> dict[str, int]:
    """Node -> IMEX channel Slurm allocated to the job there; nodes without one are left
    out. A line that is not a plain node record is ignored, never guessed at."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        m = re.match(_RESOURCE_LINE, line.strip())
        if m and re.fullmatch(r"[A-Za-z0-9._-]+", m[1]):
            out[m[1]] = int(m[2])
    return out
