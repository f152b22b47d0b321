"""A fake Slurm world for the adapter tests: a state file of four trays and two jobs, the
fake Slurm executables reading it (tests/support/fakeslurm.py), and a backend on it;
or the same world held by the in-memory backend (:class:`MemoryWorld`), so that the
contract suite runs all three backends on one description of Slurm."""

from __future__ import annotations

from pathlib import Path

from imexctl.config import parse_config
import time

from tests.support import fakeslurm
from tests.support.memory_slurm import MemorySlurm, job_record, node_record

NODES = {
    "tray01": {"NodeAddr": "10.77.0.11"},
    "tray02": {"NodeAddr": "10.77.0.12"},
    "tray03": {"NodeAddr": "10.77.0.13"},
    "tray04": {"NodeAddr": "10.77.0.14"},
}
JOBS = {
    7: {"NodeList": "tray[01-04]", "Features": "imex", "Comment": "user text"},
    8: {"NodeList": "tray[03-04]", "BatchFlag": 0, "JobName": "interactive"},
}


class World:
    def __init__(self, root: Path):
        self.root = root
        self.state_path = root / "slurm-state.json"
        self.bin_dir = root / "bin"
        fakeslurm.save(self.state_path, fakeslurm.new_state(NODES, JOBS))
        fakeslurm.install_bin(self.bin_dir, self.state_path)

    def state(self) -> dict:
        return fakeslurm.load(self.state_path)

    def edit(self, fn) -> None:
        state = self.state()
        fn(state)
        fakeslurm.save(self.state_path, state)

    def node(self, name: str) -> dict:
        return self.state()["nodes"][name]

    def set_node(self, name: str, **fields) -> None:
        self.edit(lambda s: s["nodes"][name].update(fields))

    def set_job(self, job_id: int, **fields) -> None:
        self.edit(lambda s: s["jobs"][str(job_id)].update(fields))

    def fault(self, tool: str, mode: str, count: int = -1, **kw) -> None:
        self.edit(lambda s: s["faults"].__setitem__(tool, {"mode": mode, "count": count, **kw}))

    def add_fault(self, tool: str, mode: str, count: int = -1, **kw) -> None:
        """One more fault for ``tool``: the first of its faults that applies acts."""
        def add(s):
            old = s["faults"].get(tool) or []
            s["faults"][tool] = [*(old if isinstance(old, list) else [old]),
                                 {"mode": mode, "count": count, **kw}]
        self.edit(add)

    def calls(self, tool: str | None = None) -> list[list]:
        return [c for c in self.state()["calls"] if tool is None or c[0] == tool]

    def clear_calls(self) -> None:
        self.edit(lambda s: s.__setitem__("calls", []))

    def config(self, **slurm):
        from tests.support.memory_slurm import FAKE_MUNGE

        raw = {"paths": {"slurm_bin_dir": str(self.bin_dir), "munge_bin_dir": str(FAKE_MUNGE)},
               "slurm": {"backend": "cli", "timeout_s": 10.0, "attempts": 3, **slurm}}
        return parse_config(raw, None, "tray01")


class MemoryWorld(World):
    """The same world, held by a :class:`MemorySlurm`: ``state()`` shows its records in the
    fake Slurm's state schema (Slurm's own field names), ``edit`` writes them back."""

    def __init__(self, root: Path):
        super().__init__(root)
        self.slurm = MemorySlurm()
        self._apply(fakeslurm.load(self.state_path))

    def state(self) -> dict:
        m = self.slurm
        nodes = {n: _node_fields(r) for n, r in m.nodes_.items()}
        jobs = {str(j): _job_fields(r, m) for j, r in m.jobs.items()}
        config = {"SwitchType": m.switch, **({"NoShowResources": True}
                                             if m.channels is None else {})}
        calls = [["memory", *c] for c in m.calls] + [["memory", "update", *u] for u in m.updates]
        return {"nodes": nodes, "jobs": jobs, "config": config, "faults": {}, "calls": calls}

    def edit(self, fn) -> None:
        state = self.state()
        fn(state)
        self._apply(state)

    def _apply(self, state: dict) -> None:
        m = self.slurm
        m.nodes_ = {n: _node_of(n, f) for n, f in state["nodes"].items()}
        m.jobs, m.arrays = {}, {}
        channels: dict[int, dict[str, int]] = {}
        for key, f in state["jobs"].items():
            m.jobs[int(key)] = _job_of(int(key), f)
            if f.get("ArrayJobId") is not None:
                m.arrays[int(key)] = (int(f["ArrayJobId"]), int(f.get("ArrayTaskId", 0)))
            if f.get("Channels"):
                channels[int(key)] = dict(f["Channels"])
        m.channels = None if state["config"].get("NoShowResources") else channels
        m.switch = state["config"].get("SwitchType") or ""
        m.calls = [tuple(c[1:]) for c in state["calls"] if c[1] != "update"]
        m.updates = [(c[2], tuple(c[3])) for c in state["calls"] if c[1] == "update"]

    def fault(self, tool: str, mode: str, count: int = -1, **kw) -> None:
        raise AssertionError("the in-memory backend has no transport to fail")

    add_fault = fault

    def config(self, **slurm):
        if slurm.get("backend") == "memory":
            slurm["backend"] = "cli"
        return super().config(**slurm)


def _text(value) -> str:
    return "" if value in (None, "(null)") else str(value)


def _node_fields(r) -> dict:
    return {**fakeslurm.NODE_DEFAULT, "NodeAddr": r.addr, "NodeHostName": r.hostname,
            "State": r.state, "Reason": r.reason or None, "Comment": r.comment or None,
            "Extra": r.extra or None, "Features": ",".join(r.features),
            "Partitions": ",".join(r.partitions),
            "ReasonTime": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(r.reason_time))
            if r.reason_time is not None else None}


def _node_of(name: str, f: dict):
    reason_time = None
    if f.get("Reason") and f.get("ReasonTime"):
        reason_time = time.mktime(time.strptime(f["ReasonTime"], "%Y-%m-%dT%H:%M:%S"))
    return node_record(name, _text(f.get("NodeAddr")) or name,
                       hostname=_text(f.get("NodeHostName")) or name,
                       state=f.get("State") or "IDLE", reason=_text(f.get("Reason")),
                       extra=_text(f.get("Extra")), comment=_text(f.get("Comment")),
                       features=tuple(x for x in _text(f.get("Features")).split(",") if x),
                       partitions=tuple(x for x in _text(f.get("Partitions")).split(",") if x),
                       reason_time=reason_time)


def _job_fields(r, m: MemorySlurm) -> dict:
    from imexctl.slurm.hostlist import compress

    array = m.arrays.get(r.job_id)
    return {**fakeslurm.JOB_DEFAULT, "JobState": r.state, "UserId": r.user_id,
            "Partition": r.partition or "(null)",
            "NodeList": compress(list(r.nodes)) if r.nodes else "(null)",
            "BatchFlag": int(r.batch), "Features": r.features or "(null)",
            "AdminComment": r.admin_comment or None, "Comment": r.comment or None,
            "OverSubscribe": r.oversubscribe, "HetJobId": r.het_job_id,
            "SubmitTime": r.submit_time, "SegmentSize": r.segment_size,
            **({"ArrayJobId": array[0], "ArrayTaskId": array[1]} if array else {}),
            **({"Channels": m.channels.get(r.job_id, {})} if m.channels is not None else {})}


def _job_of(job_id: int, f: dict):
    from imexctl.slurm.hostlist import expand

    nodelist = _text(f.get("NodeList"))
    return job_record(job_id, tuple(expand(nodelist)) if nodelist else (),
                      state=f.get("JobState") or "RUNNING", user_id=int(f.get("UserId", 0)),
                      partition=_text(f.get("Partition")) or None,
                      features=_text(f.get("Features")),
                      admin_comment=_text(f.get("AdminComment")),
                      comment=_text(f.get("Comment")), batch=bool(int(f.get("BatchFlag", 1))),
                      oversubscribe=f.get("OverSubscribe", "OK"),
                      het_job_id=f.get("HetJobId"),
                      submit_time=f.get("SubmitTime", fakeslurm.SUBMIT_TIME),
                      segment_size=int(f.get("SegmentSize") or 0))


def new_world(kind: str, root: Path) -> World:
    return MemoryWorld(root) if kind == "memory" else World(root)


def make_backend(kind: str, world: World, **slurm):
    if kind == "memory":
        assert isinstance(world, MemoryWorld)
        return world.slurm
    cfg = world.config(**slurm)
    if kind == "cli":
        from imexctl.slurm.cli_backend import CliBackend
        return CliBackend(cfg)
    from imexctl.slurm.pyslurm_backend import PyslurmBackend
    return PyslurmBackend(cfg)
