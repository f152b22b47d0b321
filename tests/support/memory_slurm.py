"""The in-memory Slurm: the third backend, beside the CLI and pyslurm ones.

Slurm is a system boundary: the real backends are tested against the real Slurm in
tests/integration; here the lifecycle's decisions are tested against a Slurm whose state
the test can read back (drains, comments, Extra). It is a backend like the others: it
keeps the same contract (tests/unit/slurm/test_contract.py runs it beside ``cli`` and
``pyslurm``), returns the product's :class:`JobRecord` and :class:`NodeRecord`, and
changes nodes by the product's own rules (:class:`NodeChanges`: drain, resume, Extra).
What it models of Slurm itself is only what slurmctld does with an update (a DRAIN adds
the flag, a RESUME drops it, an update by a het leader's or array's bare id reaches every
component or element) and which jobs are live (:mod:`imexctl.slurm.states`).

Its world is plain dicts of the product's records: ``jobs`` (id -> JobRecord),
``nodes_`` (name -> NodeRecord); a test changes them with :meth:`MemorySlurm.set_job`
and :meth:`MemorySlurm.set_node` and reads them back directly.
"""

from __future__ import annotations

import time
from pathlib import Path as _Path

from imexctl.base.dataclass import replace
from imexctl.errors import SlurmError
from imexctl.slurm import states
from imexctl.slurm.munge import MungeSeal
from imexctl.slurm.records import (JobRecord, NodeChanges, NodeRecord, SlurmNotFound,
                                   admin_comment_text, check_job_id, check_node_name)

# The stand-in for munge/unmunge (tests/unit/data/fakemunge): configs of unit-test worlds
# point paths.munge_bin_dir at it; SEAL seals and opens as the real seal does, as root.
FAKE_MUNGE = _Path(__file__).parents[1] / "unit" / "data" / "fakemunge"
SEAL = MungeSeal(FAKE_MUNGE, None, frozenset({0}))

# A job's SubmitTime unless a test says otherwise: before any record a test seals.
SUBMIT_TIME = 1795335854


def job_record(job_id: int, nodes: tuple[str, ...] | list[str], *, state: str = "RUNNING",
               user_id: int = 65534, partition: str | None = "trays", features: str = "",
               admin_comment: str = "", comment: str = "", batch: bool = True,
               oversubscribe: str | None = "NO", het_job_id: int | None = None,
               submit_time: int | None = SUBMIT_TIME, segment_size: int | None = 0,
               decision_text: str = "") -> JobRecord:
    """A job as Slurm would report it, with the defaults of a plain exclusive batch job
    of the test partition (``state``: Slurm's JobState, flags dropped as the backends do)."""
    return JobRecord(job_id=job_id, state=states.base_state(state), user_id=user_id,
                     nodes=tuple(nodes), partition=partition, features=features,
                     admin_comment=admin_comment, comment=comment, batch=batch,
                     segment_size=segment_size, decision_text=decision_text,
                     oversubscribe=oversubscribe, het_job_id=het_job_id,
                     submit_time=submit_time)


def node_record(name: str, addr: str, *, hostname: str = "", state: str = "IDLE",
                reason: str = "", extra: str = "", features: tuple[str, ...] = (),
                comment: str = "", reason_time: float | None = None,
                partitions: tuple[str, ...] = ("trays",)) -> NodeRecord:
    return NodeRecord(name=name, addr=addr, hostname=hostname or name, state=state,
                      reason=reason, extra=extra, features=features, comment=comment,
                      reason_time=reason_time, partitions=partitions)


class MemorySlurm(NodeChanges):
    """A Slurm of plain dicts behind :class:`~imexctl.slurm.interface.SlurmAdapter`.

    ``calls`` logs each adapter call (name first) for tests that count queries;
    ``reachable`` False: the live-job query cannot answer (slurmctld down);
    ``arrays``: job id -> (array job id, task id) of an array element;
    ``channels``: job id -> {node: channel} as switch/nvidia_imex allocated them, or
    None for a Slurm that has no such query (24.11)."""

    name = "memory"
    selection = "memory (tests)"

    def __init__(self, jobs: dict[int, JobRecord] | None = None,
                 nodes: dict[str, NodeRecord] | None = None, switch: str = "switch/none"):
        self.jobs: dict[int, JobRecord] = dict(jobs or {})
        self.nodes_: dict[str, NodeRecord] = dict(nodes or {})
        self.arrays: dict[int, tuple[int, int]] = {}
        self.channels: dict[int, dict[str, int]] | None = {}
        self.switch = switch
        self.calls: list[tuple] = []
        self.updates: list[tuple[str, tuple[str, ...]]] = []   # node writes, (node, fields)
        self.reachable = True

    # ------------------------------------------------------------------ the test's side
    def add_nodes(self, names_addrs: dict[str, str]) -> None:
        for name, addr in names_addrs.items():
            self.nodes_[name] = node_record(name, addr)

    def add_job(self, job_id: int, nodes: tuple[str, ...] | list[str], *,
                array: tuple[int, int] | None = None, **fields) -> JobRecord:
        """Put a job into the world (``job_record``'s fields; ``array``: (array job id,
        task id) of an array element)."""
        self.jobs[job_id] = job_record(job_id, nodes, **fields)
        if array is not None:
            self.arrays[job_id] = array
        return self.jobs[job_id]

    def set_job(self, job_id: int, **fields) -> None:
        if "state" in fields:
            fields["state"] = states.base_state(fields["state"])
        self.jobs[job_id] = replace(self.jobs[job_id], **fields)

    def set_node(self, name: str, **fields) -> None:
        self.nodes_[name] = replace(self.nodes_[name], **fields)

    def publish(self, node: str, ident: dict) -> None:
        """The node's identity in its Extra, as its slurmd start published it."""
        NodeChanges.extra_merge(self, node, "imex", ident)

    # ------------------------------------------------------------------ reading
    def job(self, job_id: int) -> JobRecord:
        """The job's record; its decision is looked for in its AdminComment (as pyslurm's)."""
        self.calls.append(("job", job_id))
        record = self._job(job_id)
        return replace(record, decision_text=record.admin_comment)

    def _job(self, job_id: int) -> JobRecord:
        record = self.jobs.get(check_job_id(job_id))
        if record is None:
            raise SlurmNotFound(f"Invalid job id specified: {job_id}")
        return record

    def job_state(self, job_id: int) -> tuple[str, tuple[str, ...]] | None:
        self.calls.append(("job_state", job_id))
        record = self.jobs.get(check_job_id(job_id))
        return None if record is None else (record.state, record.nodes)

    def job_channels(self, job_id: int) -> dict[str, int] | None:
        self.calls.append(("job_channels", job_id))
        self._job(job_id)
        if self.channels is None:
            return None
        return dict(self.channels.get(job_id, {}))

    def job_spec(self, job_id: int) -> str:
        array = self.arrays.get(job_id)
        if array is not None and array[0] == job_id:
            return f"{job_id}_{array[1]}"
        return str(job_id)

    def het_components(self, leader: int) -> list[dict]:
        """What squeue lists for het job ``leader`` (job-id order), as the CLI parses it."""
        self.calls.append(("het_components", leader))
        return [{"job_id": j.job_id, "state": j.state, "nodes": list(j.nodes),
                 "het_job_id": leader, "user_id": j.user_id, "partition": j.partition}
                for j in sorted(self.jobs.values(), key=lambda j: j.job_id)
                if j.het_job_id == leader]

    def live_job_ids(self) -> set[int] | None:
        """Jobs that may hold IMEX channels, and the leaders of their het jobs."""
        self.calls.append(("live_job_ids",))
        if not self.reachable:
            return None
        live = [j for j in self.jobs.values() if j.state in states.CHANNEL_HOLDING]
        return {j.job_id for j in live} | {j.het_job_id for j in live if j.het_job_id}

    def nodes(self, names: list[str]) -> dict[str, NodeRecord]:
        """The nodes' records; as both real backends', without the cluster view's fields
        (``reason_time``, ``partitions``: node_table's)."""
        self.calls.append(("nodes", tuple(names)))
        names = [check_node_name(n) for n in names]
        return {n: replace(self.nodes_[n], reason_time=None, partitions=())
                for n in names if n in self.nodes_}

    def _node(self, node: str) -> NodeRecord:
        record = self.nodes_.get(node)
        if record is None:
            raise SlurmNotFound(f"node {node} is unknown to Slurm")
        return record

    def node_table(self, names: list[str] | None = None,
                   partition: str | None = None) -> dict[str, NodeRecord]:
        if names is not None and not names:
            return {}
        self.calls.append(("node_table", tuple(names) if names is not None else None, partition))
        if names is not None:
            names = [check_node_name(n) for n in names]
        return {n: rec for n, rec in self.nodes_.items()
                if (names is None or n in names)
                and (not partition or partition in rec.partitions)}

    def active_jobs(self) -> list[JobRecord]:
        """Jobs that may hold IMEX domains; as both real backends' one query for all,
        without SubmitTime (the decision of a job is read from its own ``job``)."""
        self.calls.append(("active_jobs",))
        return [replace(j, submit_time=None) for j in self.jobs.values()
                if j.state in states.ACTIVE_JOB]

    def switch_type(self) -> str:
        return self.switch

    # ------------------------------------------------------------------ changing
    def drain(self, node: str, reason: str) -> bool:
        self.calls.append(("drain", node, reason))
        return super().drain(node, reason)

    def resume_if_ours(self, node: str, prefix: str = "imexctl:") -> bool:
        self.calls.append(("resume_if_ours", node, prefix))
        return super().resume_if_ours(node, prefix)

    def extra_merge(self, node: str, key: str, value: dict) -> bool:
        self.calls.append(("extra_merge", node, key))
        return super().extra_merge(node, key, value)

    def _update_node(self, node: str, **fields: str) -> None:
        """What slurmctld does with ``scontrol update NodeName=...``."""
        record = self._node(node)
        changes: dict = {k: v for k, v in fields.items() if k in ("reason", "extra")}
        state = fields.get("state")
        if state is not None:
            base, *flags = record.state.split("+")
            if state == "DRAIN":
                flags = [*flags, "DRAIN"] if "DRAIN" not in flags else flags
                changes["reason_time"] = time.time()
            elif state == "RESUME":
                flags = [f for f in flags if f != "DRAIN"]
                base = "IDLE" if base == "DOWN" else base
            else:
                raise SlurmError(f"Invalid node state specified: {state}")
            changes["state"] = "+".join([base, *flags])
        self.nodes_[node] = replace(record, **changes)
        self.updates.append((node, tuple(sorted(fields))))

    def set_admin_comment(self, job_id: int, text: str, spec: str | None = None) -> None:
        text = admin_comment_text(job_id, text)   # whole, or refused as both backends do
        self.calls.append(("set_admin_comment", job_id, text))
        for target in self._named(job_id, spec):
            self.set_job(target, admin_comment=text)

    def _named(self, job_id: int, spec: str | None) -> list[int]:
        """What slurmctld applies an update to: the bare id of a het leader or of an
        array element that kept the array's id names every component or element."""
        own = self._job(job_id)
        if spec is not None:
            return [job_id]
        array = self.arrays.get(job_id)
        return [j.job_id for j in self.jobs.values()
                if j.job_id == job_id
                or (own.het_job_id == job_id and j.het_job_id == job_id)
                or (array is not None and array[0] == job_id
                    and self.arrays.get(j.job_id, (0, 0))[0] == job_id)]

    def requeue_hold(self, job_id: int) -> None:
        self.calls.append(("requeue_hold", job_id))
        self._requeue(job_id, None)

    def requeue(self, job_id: int, spec: str | None = None) -> None:
        self.calls.append(("requeue", job_id))
        self._requeue(job_id, spec)

    def _requeue(self, job_id: int, spec: str | None) -> None:
        """Slurm refuses to requeue a job that is not a batch job (srun, salloc)."""
        if not self._job(job_id).batch:
            raise SlurmError(f"'scontrol requeue {job_id}' -> rc 1: Only batch jobs are accepted")
        for target in self._named(job_id, spec):
            self.set_job(target, state="PENDING")

    def cancel(self, job_id: int, spec: str | None = None) -> None:
        self.calls.append(("cancel", job_id))
        for target in self._named(job_id, spec):
            self.set_job(target, state="CANCELLED")


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
