"""A fake Slurm for unit tests: one JSON state file served two ways.

* as executables ``scontrol``, ``scancel`` and ``squeue`` (Python scripts written into a
  temp dir) that print what Slurm 22.05 prints (``-o`` one-line records, ``show config``)
  and apply ``update`` / ``requeuehold`` / ``scancel`` to the state;
* as a fake ``pyslurm`` module with the documented 25.11 API subset.

Every call is recorded in ``state["calls"]``. Faults are switched in ``state["faults"]``:
``{"scontrol": {"mode": "timeout"|"transient"|"error", "count": N, "message": str,
"match": word}}`` (count -1 = forever; with ``match`` only calls holding that argument
fail; a list of such faults: the first that applies); for the module the tool name is
``"pyslurm"`` and the words are like "Node.modify". Mode ``"stdout"`` answers rc 0 with
``stdout`` as the whole output (a Slurm that answers, but not what was asked).
Two modes make concurrency a fact instead of a timing: ``"touch"`` creates ``file`` and
``"await"`` waits up to ``sleep`` seconds for ``file`` to exist, appending "seen" or
"missed" to ``file + ".result"``; both then answer normally.
"""

from __future__ import annotations

import json
import os
import sys
import time
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

NODE_DEFAULT = {"NodeAddr": "", "NodeHostName": "", "State": "IDLE", "Reason": None,
                "Comment": None, "Extra": None, "Features": "tray", "ReasonUser": "root",
                "Partitions": "trays", "ReasonTime": "2026-11-22T08:24:15"}
JOB_DEFAULT = {"JobName": "wrap", "User": "nobody", "UserId": 65534, "JobState": "RUNNING",
               "Partition": "trays", "NodeList": "(null)", "BatchFlag": 1,
               "Features": "(null)", "AdminComment": None, "Comment": None,
               "WorkDir": "/tmp", "StdOut": None}

# A job's SubmitTime (epoch s) unless its state says otherwise ("SubmitTime"): before any
# record a test seals, as a real job's is before its PrologSlurmctld's.
SUBMIT_TIME = 1795335854   # 2026-11-22T08:24:14Z


def _time_text(epoch: int) -> str:
    """A time as scontrol prints it: SLURM_TIME_FORMAT's strftime, else ISO local time."""
    fmt = os.environ.get("SLURM_TIME_FORMAT") or "%Y-%m-%dT%H:%M:%S"
    return time.strftime(fmt, time.localtime(int(epoch)))


# --------------------------------------------------------------------------- state
def load(path: str | Path) -> dict:
    return json.loads(Path(path).read_text())


def save(path: str | Path, state: dict) -> None:
    tmp = Path(str(path) + ".tmp")
    tmp.write_text(json.dumps(state, indent=1))
    os.replace(tmp, path)


def new_state(nodes: dict | None = None, jobs: dict | None = None,
              switch_type: str = "switch/none") -> dict:
    return {"nodes": {n: {**NODE_DEFAULT, **v} for n, v in (nodes or {}).items()},
            "jobs": {str(j): {**JOB_DEFAULT, **v} for j, v in (jobs or {}).items()},
            "config": {"SwitchType": switch_type}, "faults": {}, "calls": []}


def take_fault(state: dict, tool: str, call: list | None = None) -> dict | None:
    """The tool's first fault that applies to ``call`` (a tool may have a list of them)."""
    faults = state["faults"].get(tool) or []
    for fault in faults if isinstance(faults, list) else [faults]:
        if fault.get("count", 0) == 0:
            continue
        if fault.get("match") and fault["match"] not in [str(c) for c in (call or [])]:
            continue
        if fault["count"] > 0:
            fault["count"] -= 1
        return fault
    return None


def node_update(state: dict, name: str, changes: dict, via: str = "scontrol") -> str | None:
    """Apply a node update like slurmctld; returns an error text or None."""
    node = state["nodes"].get(name)
    if node is None:
        return "Invalid node name specified"
    st = changes.get("State")
    if st is not None:
        st = st.upper()
        base, *flags = node["State"].split("+")
        if st == "DRAIN":
            if via == "scontrol" and not changes.get("Reason"):
                return "You must specify a reason when DRAINING a node"
            if "DRAIN" not in flags:
                flags.append("DRAIN")
        elif st in ("RESUME", "UNDRAIN"):
            flags = [f for f in flags if f != "DRAIN"]
            if st == "RESUME" and base == "DOWN":
                base = "IDLE"
        elif st == "DOWN":
            base = "DOWN"
        else:
            return "Invalid node state specified"
        node["State"] = "+".join([base, *flags])
    for key in ("Reason", "Extra", "Comment"):
        if key in changes:
            value = changes[key]
            if via == "pyslurm" and value == "":
                continue  # pyslurm cannot clear a field
            node[key] = value or None
    return None


# --------------------------------------------------------------------------- rendering
def render_node(name: str, n: dict) -> str:
    feats = n["Features"] or "(null)"
    parts = [
        f"NodeName={name} Arch=x86_64 CoresPerSocket=1",
        "CPUAlloc=0 CPUEfctv=2 CPUTot=2 CPULoad=0.01",
        f"AvailableFeatures={feats}", f"ActiveFeatures={feats}", "Gres=(null)",
        f"NodeAddr={n['NodeAddr'] or name} NodeHostName={n['NodeHostName'] or name} "
        "Version=22.05.8",
        "OS=Linux 6.1.0-18-amd64 #1 SMP PREEMPT_DYNAMIC Debian 6.1.76-1 (2024-02-01)",
        "RealMemory=1000 AllocMem=0 FreeMem=1487 Sockets=2 Boards=1",
        f"State={n['State']} ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A",
        f"Partitions={n.get('Partitions') or 'trays'}",
        "BootTime=2026-11-22T07:59:01 SlurmdStartTime=2026-11-22T08:20:01",
        "LastBusyTime=2026-11-22T08:24:15",
        "CfgTRES=cpu=2,mem=1000M,billing=2", "AllocTRES=",
        "CapWatts=n/a",
        "CurrentWatts=0 AveWatts=0",
        "ExtSensorsJoules=n/s ExtSensorsWatts=0 ExtSensorsTemp=n/s",
    ]
    if n.get("Reason"):
        parts.append(f"Reason={n['Reason']} [{n.get('ReasonUser') or 'root'}"
                     f"@{n.get('ReasonTime') or '2026-11-22T08:24:15'}]")
    if n.get("Comment"):
        parts.append(f"Comment={n['Comment']}")
    if n.get("Extra"):
        parts.append(f"Extra={n['Extra']}")
    return " ".join(parts)


def render_job(job_id: str, j: dict) -> str:
    stdout = j.get("StdOut") or f"/tmp/slurm-{job_id}.out"
    head = f"JobId={job_id}"
    if j.get("ArrayJobId") is not None:
        head += f" ArrayJobId={j['ArrayJobId']} ArrayTaskId={j.get('ArrayTaskId', 0)}"
    if j.get("HetJobId") is not None:   # 22.05.8: right after JobId, HetJobIdSet after JobName
        head += f" HetJobId={j['HetJobId']} HetJobOffset={j.get('HetJobOffset', 0)}"
    parts = [
        f"{head} JobName={j['JobName']}"
        + (f" HetJobIdSet={j['HetJobIdSet']}" if j.get("HetJobIdSet") else ""),
        f"UserId={j['User']}({j['UserId']}) GroupId=nogroup(65534) MCS_label=N/A",
        "Priority=4294901757 Nice=0 Account=(null) QOS=(null)",
        f"JobState={j['JobState']} Reason=None Dependency=(null)",
        f"Requeue=1 Restarts=0 BatchFlag={j['BatchFlag']} Reboot=0 ExitCode=0:0",
        "RunTime=00:00:01 TimeLimit=UNLIMITED TimeMin=N/A",
        f"SubmitTime={_time_text(j.get('SubmitTime', SUBMIT_TIME))} "
        "EligibleTime=2026-11-22T08:24:14",
        "AccrueTime=2026-11-22T08:24:14",
        "StartTime=2026-11-22T08:24:15 EndTime=Unknown Deadline=N/A",
        "SuspendTime=None SecsPreSuspend=0 LastSchedEval=2026-11-22T08:24:15 Scheduler=Main",
        f"Partition={j['Partition']} AllocNode:Sid=vm:4242",
        "ReqNodeList=(null) ExcNodeList=(null)",
        f"NodeList={j['NodeList']}",
        "BatchHost=tray01",
        "NumNodes=4 NumCPUs=4 NumTasks=4 CPUs/Task=1 ReqB:S:C:T=0:0:*:*",
        "TRES=cpu=4,node=4,billing=4",
        "Socks/Node=* NtasksPerN:B:S:C=0:0:*:* CoreSpec=*",
        "MinCPUsNode=1 MinMemoryNode=0 MinTmpDiskNode=0",
        f"Features={j['Features']} DelayBoot=00:00:00",
        f"OverSubscribe={j.get('OverSubscribe', 'OK')} Contiguous=0 Licenses=(null) Network=(null)",
        "Command=(null)",
        f"WorkDir={j['WorkDir']}",
    ]
    if j.get("AdminComment"):
        parts.append(f"AdminComment={j['AdminComment']}")
    if j.get("Comment"):
        parts.append(f"Comment={j['Comment']}")
    parts += [f"StdErr={stdout}", "StdIn=/dev/null", f"StdOut={stdout}", "Power="]
    if j.get("SegmentSize"):  # 24.05+ prints it for a --segment job only
        parts.append(f"SegmentSize={j['SegmentSize']}")
    return " ".join(parts)


# --------------------------------------------------------------------------- executables
def _kv(args: list[str]) -> dict[str, str]:
    out = {}
    for a in args:
        k, _, v = a.partition("=")
        out[k[:1].upper() + k[1:]] = v
    return out


def main(argv: list[str], state_path: str) -> int:
    """One call, holding the state's lock (calls sent side by side must not lose each
    other's entries) except while a fault makes it wait."""
    import fcntl

    tool = os.path.basename(argv[0])
    args = argv[1:]
    with open(f"{state_path}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        state = load(state_path)
        state["calls"].append([tool, *args])
        fault = take_fault(state, tool, args)
        save(state_path, state)
        if fault and fault["mode"] in ("touch", "await", "timeout"):
            fcntl.flock(lock, fcntl.LOCK_UN)
            if fault["mode"] == "timeout":
                time.sleep(fault.get("sleep", 60))
                return 0
            _rendezvous(fault)
            fault = None
            fcntl.flock(lock, fcntl.LOCK_EX)
            state = load(state_path)
        return _answer(tool, args, state, state_path, fault)


def _answer(tool: str, args: list[str], state: dict, state_path: str, fault: dict | None) -> int:
    if fault and fault["mode"] == "stdout":   # answers, but with this text
        print(fault.get("stdout", ""), end="")
        return 0
    if fault:
        msg = fault.get("message") or (
            "slurm_load_jobs error: Unable to contact slurm controller (connect failure)"
            if fault["mode"] == "transient" else "scontrol: error: something broke")
        print(msg, file=sys.stderr)
        return 1
    args = [a for a in args if a not in ("-o", "--local")]
    if tool == "scancel":
        return _set_job(state_path, state, args[0], {"JobState": "CANCELLED"})
    if tool == "squeue":
        return _squeue(args, state)
    if tool != "scontrol":
        return 127
    if args == ["show", "job"]:  # all jobs, one record per line
        if not state["jobs"]:
            print("No jobs in the system")
        for job_id, j in state["jobs"].items():
            print(render_job(job_id, j))
        return 0
    if args == ["show", "node"]:
        for name, n in state["nodes"].items():
            print(render_node(name, n))
        return 0
    if args[:2] == ["show", "job"]:
        j = state["jobs"].get(args[2])
        if j is None:
            print("slurm_load_jobs error: Invalid job id specified", file=sys.stderr)
            return 1
        print(render_job(args[2], j))
        return 0
    if args[:2] == ["show", "resources"]:  # 25.11+; 24.11 refuses it (NoShowResources)
        if state["config"].get("NoShowResources"):
            print("invalid entity:resources for keyword:show", file=sys.stderr)
            return 1
        j = state["jobs"].get(args[2])
        if j is None:
            print("slurm_load_jobs error: Invalid job id specified", file=sys.stderr)
            return 1
        sys.path.insert(0, str(ROOT))
        from imexctl.slurm.hostlist import expand
        for name in expand(j["NodeList"]):  # as 26.05.5 prints it; Channel= with the switch
            channel = j.get("Channels", {}).get(name)
            print(f"Node={name} AbstractCores=0x3 Memory=0"
                  + (f" Channel={channel}" if channel is not None else ""))
        return 0
    if args[:2] == ["show", "node"]:
        sys.path.insert(0, str(ROOT))
        from imexctl.slurm.hostlist import expand
        rc = 0
        for name in expand(args[2]):
            if name in state["nodes"]:
                print(render_node(name, state["nodes"][name]))
            else:
                print(f"Node {name} not found")  # 22.05: on stdout, not stderr
                rc = 1
        return rc
    if args[:2] == ["show", "config"]:
        print("Configuration data as of 2026-11-22T08:30:00")
        print("AccountingStorageBackupHost = (null)")
        for k, v in state["config"].items():
            print(f"{k:<23} = {v}")
        print("SwitchParameters        = (null)")
        return 0
    if args[:1] == ["update"]:
        kv = _kv(args[1:])
        if "NodeName" in kv:
            name = kv.pop("NodeName")
            err = node_update(state, name, kv)
            if err:
                print(f"slurm_update error: {err}", file=sys.stderr)
                return 1
            save(state_path, state)
            return 0
        if "JobId" in kv:
            job_id = kv.pop("JobId")
            return _set_job(state_path, state, job_id,
                            {k: (v or None) for k, v in kv.items()})
    if args[:1] == ["requeuehold"]:
        j = state["jobs"].get(args[1])
        if j and not j["BatchFlag"]:
            print(f"Requeue of job {args[1]} failed: Only batch jobs are accepted or processed",
                  file=sys.stderr)
            return 1
        return _set_job(state_path, state, args[1], {"JobState": "PENDING", "Held": True})
    print(f"fake scontrol: unsupported {args}", file=sys.stderr)
    return 2


def squeue_field(job_id: str, j: dict, letter: str) -> str:
    """One squeue ``%X`` field as 22.05.8 prints it: ``%i`` is ``3_2`` for an array element
    and ``leader+offset`` for a het component, ``%A`` always the plain job id."""
    if letter == "A":
        return job_id
    if letter == "i":
        if j.get("HetJobId") is not None:
            return f"{j['HetJobId']}+{j.get('HetJobOffset', 0)}"
        if j.get("ArrayJobId") is not None:
            return f"{j['ArrayJobId']}_{j.get('ArrayTaskId', 0)}"
        return job_id
    if letter == "T":
        return j["JobState"]
    if letter == "U":
        return str(j["UserId"])
    if letter == "P":
        return j["Partition"]
    if letter == "N":
        return "" if j["NodeList"] == "(null)" else j["NodeList"]
    return "?"


def _squeue(args: list[str], state: dict) -> int:
    """``squeue -h [-j ID] [-t ...] -o FORMAT``: ``-j`` of an array's or het job's first id
    lists every element or component (as 22.05.8 does); an unknown id fails."""
    fmt = next((a for a in args if "%" in a), "%i|%T|%U|%P|%N")   # "-o" is dropped before
    jobs = list(state["jobs"].items())
    if "-j" in args:
        want = args[args.index("-j") + 1]
        jobs = [(jid, j) for jid, j in jobs
                if jid == want or str(j.get("ArrayJobId")) == want
                or str(j.get("HetJobId")) == want]
        if not jobs:
            print("slurm_load_jobs error: Invalid job id specified", file=sys.stderr)
            return 1
    for jid, j in jobs:
        out, i = [], 0
        while i < len(fmt):
            if fmt[i] == "%" and i + 1 < len(fmt):
                out.append(squeue_field(jid, j, fmt[i + 1]))
                i += 2
            else:
                out.append(fmt[i])
                i += 1
        print("".join(out))
    return 0


def _rendezvous(fault: dict) -> None:
    marker = Path(fault["file"])
    if fault["mode"] == "touch":
        marker.touch()
        return
    deadline = time.monotonic() + fault.get("sleep", 5.0)
    while not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    with open(str(marker) + ".result", "a") as out:
        out.write("seen\n" if marker.exists() else "missed\n")


def _set_job(state_path, state, job_id, changes) -> int:
    if job_id not in state["jobs"]:
        print("Invalid job id specified", file=sys.stderr)
        return 1
    state["jobs"][job_id].update(changes)
    save(state_path, state)
    return 0


SCRIPT = """#!{python}
import sys
sys.path.insert(0, {root!r})
from tests.support.fakeslurm import main
sys.exit(main(sys.argv, {state!r}))
"""


def install_bin(bin_dir: Path, state_path: Path) -> None:
    bin_dir.mkdir(parents=True, exist_ok=True)
    for tool in ("scontrol", "scancel", "squeue"):
        path = bin_dir / tool
        path.write_text(SCRIPT.format(python=sys.executable, root=str(ROOT),
                                      state=str(state_path)))
        path.chmod(0o755)


# --------------------------------------------------------------------------- fake pyslurm
def pyslurm_module(state_path: Path) -> types.ModuleType:
    mod = types.ModuleType("pyslurm")
    mod.__version__ = "25.11.2"

    class RPCError(Exception):
        pass

    def _enter(call: list) -> dict:
        state = load(state_path)
        state["calls"].append(["pyslurm", *call])
        fault = take_fault(state, "pyslurm", call)
        save(state_path, state)
        if fault:
            raise RPCError(fault.get("message") or
                           "Unable to contact slurm controller (connect failure)")
        return state

    class Node:
        def __init__(self, name=None, **changes):
            self.name = name
            self._changes = changes
            for k, v in changes.items():
                setattr(self, k, v)

        @classmethod
        def _from(cls, name, n):
            obj = cls(name)
            feats = [f for f in (n["Features"] or "").split(",") if f]
            obj.address = n["NodeAddr"] or name
            obj.hostname = n["NodeHostName"] or name
            obj.state = n["State"]
            obj.reason = n["Reason"]
            obj.extra = n["Extra"]
            obj.comment = n["Comment"]
            obj.available_features = list(feats)
            obj.active_features = list(feats)
            return obj

        @classmethod
        def load(cls, name):
            state = _enter(["Node.load", name])
            if name not in state["nodes"]:
                raise RPCError(f"Node '{name}' does not exist")
            return cls._from(name, state["nodes"][name])

        def modify(self, changes):
            state = _enter(["Node.modify", self.name, changes._changes])
            names = {"state": "State", "reason": "Reason", "extra": "Extra",
                     "comment": "Comment"}
            mapped = {names[k]: v for k, v in changes._changes.items()}
            if "State" in mapped and mapped["State"].upper() not in (
                    "DRAIN", "DOWN", "RESUME", "UNDRAIN"):
                raise ValueError(f"Invalid Node state: {mapped['State']}")
            err = node_update(state, self.name, mapped, via="pyslurm")
            if err:
                raise RPCError(err)
            save(state_path, state)

    class Nodes(dict):
        @classmethod
        def load(cls):
            state = _enter(["Nodes.load"])
            return cls({n: Node._from(n, v) for n, v in state["nodes"].items()})

    class Job:
        def __init__(self, job_id=None):
            self.id = job_id

        @classmethod
        def load(cls, job_id):
            state = _enter(["Job.load", job_id])
            j = state["jobs"].get(str(job_id))
            if j is None:
                raise RPCError("Invalid job id specified")
            obj = cls(int(job_id))
            obj.state = j["JobState"]
            obj.user_id = j["UserId"]
            obj.user_name = j["User"]
            obj.partition = j["Partition"]
            obj.allocated_nodes = None if j["NodeList"] == "(null)" else j["NodeList"]
            obj.constraints = [] if j["Features"] == "(null)" else j["Features"].split(",")
            obj.admin_comment = j["AdminComment"]
            obj.comment = j["Comment"]
            obj.is_batch_job = bool(j["BatchFlag"])
            obj.name = j["JobName"]
            # pyslurm 24.11's words for OverSubscribe= and HetJobId= (0: not a het job)
            obj.resource_sharing = j.get("OverSubscribe", "OK")
            obj.hetjob_id = j.get("HetJobId") or 0
            obj.submit_time = int(j.get("SubmitTime", SUBMIT_TIME))
            return obj

    mod.RPCError = RPCError
    mod.Node = Node
    mod.Nodes = Nodes
    mod.Job = Job
    return mod
