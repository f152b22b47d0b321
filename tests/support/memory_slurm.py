"""An in-memory Slurm behind imexctl's adapter interface, for unit tests of the lifecycle.

Slurm is a system boundary: the real adapters are tested against the real Slurm in
tests/integration and by their own contract tests; here the lifecycle's decisions are
tested against a Slurm whose state the test can read back (drains, comments, Extra).
"""

from __future__ import annotations

from pathlib import Path as _Path

from imexctl.errors import SlurmError
from imexctl.slurm.munge import MungeSeal

# The stand-in for munge/unmunge (tests/unit/data/fakemunge): configs of unit-test worlds
# point paths.munge_bin_dir at it; SEAL seals and opens as the real seal does, as root.
FAKE_MUNGE = _Path(__file__).parents[1] / "unit" / "data" / "fakemunge"
SEAL = MungeSeal(FAKE_MUNGE, None, frozenset({0}))

import json
import time
from dataclasses import dataclass, field

from imexctl.base.dataclass import replace

from imexctl.slurm.records import SlurmNotFound, admin_comment_text


@dataclass
class Job:
    job_id: int
    nodes: tuple[str, ...]
    state: str = "RUNNING+CONFIGURING"
    user_id: int = 65534
    partition: str = "trays"
    features: str = ""
    admin_comment: str = ""
    comment: str = ""
    batch: bool = True
    oversubscribe: str | None = "NO"    # the job record's OverSubscribe= (NO: exclusive)
    het_job_id: int | None = None
    array_job_id: int | None = None
    array_task_id: int | None = None
    submit_time: int | None = 1795335854   # SubmitTime: before any record a test seals


@dataclass
class Node:
    name: str
    addr: str
    hostname: str = ""
    state: str = "IDLE"
    reason: str = ""
    extra: str = ""
    features: str = ""
    reason_time: float | None = None
    partitions: tuple[str, ...] = ("trays",)

    @property
    def drained(self) -> bool:
        return "DRAIN" in self.state

    @property
    def ours(self) -> bool:
        return self.reason.startswith("imexctl:")


@dataclass
class FakeSlurm:
    jobs: dict[int, Job] = field(default_factory=dict)
    nodes_: dict[str, Node] = field(default_factory=dict)
    switch: str = "switch/none"
    calls: list[tuple] = field(default_factory=list)
    reachable: bool = True     # False: live_job_ids cannot answer (slurmctld down)

    def add_nodes(self, names_addrs: dict[str, str]) -> None:
        for name, addr in names_addrs.items():
            self.nodes_[name] = Node(name, addr, hostname=name)

    def publish(self, node: str, ident: dict) -> None:
        self.extra_merge(node, "imex", ident)
        self.calls.pop()

    # adapter interface ---------------------------------------------------------------
    def job(self, job_id: int) -> Job:
        self.calls.append(("job", job_id))
        if job_id not in self.jobs:
            raise SlurmNotFound(f"Invalid job id specified: {job_id}")
        return self.jobs[job_id]

    def nodes(self, names: list[str]) -> dict[str, Node]:
        self.calls.append(("nodes", tuple(names)))
        return {n: replace(self.nodes_[n]) for n in names if n in self.nodes_}

    def drain(self, node: str, reason: str) -> bool:
        self.calls.append(("drain", node, reason))
        n = self.nodes_[node]
        if "DRAIN" in n.state and not n.reason.startswith("imexctl:"):
            return False
        n.state, n.reason, n.reason_time = "IDLE+DRAIN", reason, time.time()
        return True

    def resume_if_ours(self, node: str, prefix: str = "imexctl:") -> bool:
        self.calls.append(("resume_if_ours", node, prefix))
        n = self.nodes_[node]
        if "DRAIN" in n.state and n.reason.startswith(prefix):
            n.state, n.reason = "IDLE", ""
            return True
        return False

    def extra_merge(self, node: str, key: str, value: dict) -> None:
        self.calls.append(("extra_merge", node, key))
        from imexctl.slurm.records import merged_extra

        n = self.nodes_[node]
        text = merged_extra(node, n.extra, key, value)   # as the adapters: site text refused
        if text is not None:
            n.extra = text

    def switch_type(self) -> str:
        return self.switch

    def live_job_ids(self) -> set[int] | None:
        """Jobs that may hold IMEX channels (what the controller's squeue answers)."""
        self.calls.append(("live_job_ids",))
        if not self.reachable:
            return None
        ended = ("PENDING", "CANCELLED", "COMPLETED", "FAILED", "TIMEOUT", "NODE_FAIL")
        live = [j for j in self.jobs.values() if j.state.split("+")[0] not in ended]
        # squeue's %i names a live component's het leader: its channels stay held
        return {j.job_id for j in live} | {j.het_job_id for j in live if j.het_job_id}

    def het_components(self, leader: int) -> list[dict]:
        """What squeue lists for het job ``leader`` (job-id order)."""
        self.calls.append(("het_components", leader))
        return [{"job_id": j.job_id, "state": j.state.split("+")[0], "nodes": list(j.nodes),
                 "het_job_id": leader, "user_id": j.user_id, "partition": j.partition}
                for j in sorted(self.jobs.values(), key=lambda j: j.job_id)
                if j.het_job_id == leader]
    def node_table(self, names: list[str] | None = None,
                   partition: str | None = None) -> dict[str, Node]:
        self.calls.append(("node_table", tuple(names) if names is not None else None, partition))
        return {n: replace(rec) for n, rec in self.nodes_.items()
                if (names is None or n in names)
                and (partition is None or partition in rec.partitions)}

    def active_jobs(self) -> list[Job]:
        self.calls.append(("active_jobs",))
        return [replace(j) for j in self.jobs.values()
                if j.state.split("+")[0] in ("RUNNING", "CONFIGURING", "COMPLETING",
                                             "SUSPENDED")]

    def set_admin_comment(self, job_id: int, text: str, spec: str | None = None) -> None:
        text = admin_comment_text(job_id, text)   # whole, or refused as both backends do
        self.calls.append(("set_admin_comment", job_id, text))
        for job in self._named(job_id, spec):
            job.admin_comment = text

    def _named(self, job_id: int, spec: str | None) -> list[Job]:
        """What slurmctld applies an update to: the bare id of a het leader or of an
        array element that kept the array's id names every component or element."""
        if spec is not None:
            return [self.jobs[job_id]]
        own = self.jobs[job_id]
        return [j for j in self.jobs.values()
                if j is own or (own.het_job_id == job_id and j.het_job_id == job_id)
                or (own.array_job_id == job_id and j.array_job_id == job_id)]

    def job_spec(self, job_id: int) -> str:
        job = self.jobs[job_id]
        if job.array_job_id == job_id and job.array_task_id is not None:
            return f"{job_id}_{job.array_task_id}"
        return str(job_id)

    def requeue_hold(self, job_id: int) -> None:
        self.calls.append(("requeue_hold", job_id))
        self.jobs[job_id].state = "PENDING"

    def requeue(self, job_id: int, spec: str | None = None) -> None:
        """Slurm refuses to requeue a job that is not a batch job (srun, salloc)."""
        self.calls.append(("requeue", job_id))
        if not self.jobs[job_id].batch:
            raise SlurmError(f"'scontrol requeue {job_id}' -> rc 1: Only batch jobs are accepted")
        for job in self._named(job_id, spec):
            job.state = "PENDING"

    def cancel(self, job_id: int, spec: str | None = None) -> None:
        self.calls.append(("cancel", job_id))
        for job in self._named(job_id, spec):
            job.state = "CANCELLED"


def tray_view(text, node, job_id=None, job_nodes=None, restart_count=None):
    """A tray's part of a sealed decision record (``decision.find`` without the scan):
    None unless ``text`` is one record sealed by SEAL and, where given, for this job,
    attempt and node list."""
    from imexctl.rules import decision as dec

    d = dec.decode(text)
    if d is None or not dec.sealed(text, SEAL):
        return None
    if job_id is not None and d.job_id != job_id:
        return None
    if restart_count is not None and d.restart_count != restart_count:
        return None
    if job_nodes is not None and (d.nodes_hash != dec.nodes_hash(list(job_nodes))
                                  or node not in job_nodes):
        return None
    return dec.for_node(d, node)
