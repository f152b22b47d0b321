"""SlurmAdapter over pyslurm (the 24.11 and 25.11 API, see docs reference pyslurm-api.md).

pyslurm is imported lazily, on first use: its import runs slurm_init(), which kills the
process when no slurm.conf is readable, so :func:`imexctl.slurm.adapter.get_adapter`
only picks this backend after a child process proved the import and an RPC work.

Every pyslurm call runs in a forked child bounded by ``slurm.timeout_s`` (like the CLI
backend's commands): libslurm blocks in C, where no signal handler can stop it, so the
parent kills the child instead. Only picklable records cross back. Nodes are loaded by
name, one RPC each, never the whole node table.

Reads and node changes go through pyslurm. Job changes (AdminComment, requeue-hold,
cancel) and ``show config`` go through the CLI backend: they are one RPC either way,
and those pyslurm calls are not verified against a real cluster yet.
Known pyslurm limits kept in mind: ``Nodes([Node, ...])`` raises KeyError (names are
used), empty strings cannot clear fields (Extra is only ever merged, never cleared),
the reason survives RESUME (drained is read from ``state``).
"""

from __future__ import annotations

import os
import pickle
import select
import signal
import time

from imexctl.errors import SlurmError
from imexctl.slurm.records import JobRecord, NodeChanges, NodeRecord, SlurmNotFound, check_job_id, check_node_name
from imexctl.slurm.retry import Transient, is_transient, with_retries
from imexctl.slurm.hostlist import expand

TYPE_CHECKING = False
if TYPE_CHECKING:
    from imexctl.config import Config
    from typing import Any

NOT_FOUND_TEXT = ("does not exist", "Invalid job id", "Invalid node name")


class PyslurmBackend(NodeChanges):
    name = "pyslurm"
    selection = ""     # why this backend was picked (get_adapter), shown by ``status``

    def __init__(self, cfg: Config, cli: Any = None, isolate: bool = True):
        self.cfg = cfg
        self.attempts = int(cfg.slurm.attempts)
        self.timeout_s = float(cfg.slurm.timeout_s)
        self.isolate = isolate  # False only for tests that spy on an in-memory fake
        self._pyslurm = None
        self._cli = cli

    @property
    def ps(self):
        if self._pyslurm is None:
            import pyslurm  # noqa: PLC0415 - lazy on purpose (see module docstring)
            self._pyslurm = pyslurm
        return self._pyslurm

    @property
    def cli(self):
        if self._cli is None:
            from imexctl.slurm.cli_backend import CliBackend
            self._cli = CliBackend(self.cfg)
        return self._cli

    # ------------------------------------------------------------------ calling
    def _call(self, what: str, fn, *args):
        rpc_error = getattr(self.ps, "RPCError", Exception)

        def once():
            try:
                if self.isolate:
                    return _in_child(lambda: fn(*args), self.timeout_s)
                return fn(*args)
            except (rpc_error, _ChildFailed) as exc:
                if is_transient(str(exc)):
                    raise Transient(str(exc)) from None
                raise

        try:
            return with_retries(once, self.attempts)
        except Transient as exc:
            raise SlurmError(f"pyslurm {what} failed after {self.attempts} attempt(s): "
                             f"{exc}") from None
        except SlurmError:
            raise
        except Exception as exc:  # RPCError, ValueError from pyslurm
            text = str(exc) or type(exc).__name__
            cls = SlurmNotFound if any(t in text for t in NOT_FOUND_TEXT) else SlurmError
            raise cls(f"pyslurm {what}: {text}") from None

    # ------------------------------------------------------------------ reading
    def job(self, job_id: int) -> JobRecord:
        check_job_id(job_id)
        record = self._call(f"Job.load({job_id})",
                            lambda: self._job_record(self.ps.Job.load(job_id), job_id))
        if record.job_id != job_id:
            # Job.load of an array's first element (whose id is the array's) can answer
            # with another element: that element's AdminComment is not this job's
            # decision. scontrol asks for exactly this job.
            return self.cli.job(job_id)
        return record

    @staticmethod
    def _job_record(j: Any, job_id: int) -> JobRecord:
        alloc = getattr(j, "allocated_nodes", None) or ""
        try:
            nodes = tuple(expand(alloc)) if alloc and alloc != "(null)" else ()
        except ValueError as exc:
            raise SlurmError(f"job {job_id}: allocated_nodes {alloc!r}: {exc}") from None
        constraints = getattr(j, "constraints", None)
        if isinstance(constraints, (list, tuple)):
            features = ",".join(str(c) for c in constraints)
        else:
            features = str(constraints or "")
        state = str(getattr(j, "state", "") or "")
        return JobRecord(
            job_id=int(getattr(j, "id", job_id) or job_id),
            state=state.split("+")[0].split(" ")[0],
            user_id=int(getattr(j, "user_id")),
            nodes=nodes,
            partition=getattr(j, "partition", None) or None,
            features=features,
            admin_comment=getattr(j, "admin_comment", None) or "",
            decision_text=getattr(j, "admin_comment", None) or "",
            comment=getattr(j, "comment", None) or "",
            batch=bool(getattr(j, "is_batch_job", False)),
            # pyslurm 24.11's Job has no segment_size: None, and the controller asks scontrol
            segment_size=_int_or_none(getattr(j, "segment_size", None)),
            # The same words scontrol prints as OverSubscribe= (both use libslurm's
            # job_share_string); None where this pyslurm has no such attribute.
            oversubscribe=_share_word(getattr(j, "resource_sharing", None)),
            het_job_id=_positive_or_none(getattr(j, "hetjob_id", None)),
            submit_time=_positive_or_none(getattr(j, "submit_time", None)),
        )

    @staticmethod
    def _record(n: Any) -> NodeRecord:
        features = getattr(n, "active_features", None) or getattr(n, "available_features",
                                                                   None) or []
        if isinstance(features, str):
            features = [f for f in features.split(",") if f]
        return NodeRecord(
            name=n.name, addr=getattr(n, "address", None) or "",
            hostname=getattr(n, "hostname", None) or "",
            state=str(getattr(n, "state", "") or ""),
            reason=getattr(n, "reason", None) or "",
            extra=getattr(n, "extra", None) or "",
            features=tuple(str(f) for f in features),
            comment=getattr(n, "comment", None) or "")

    def nodes(self, names: list[str]) -> dict[str, NodeRecord]:
        names = [check_node_name(n) for n in names]
        if not names:
            return {}
        wanted = list(dict.fromkeys(names))
        return self._call(f"Node.load({','.join(wanted)})", self._load_nodes, wanted)

    def _load_nodes(self, names: list[str]) -> dict[str, NodeRecord]:
        """One Node.load per name (never Nodes.load(), the whole table); unknown names are left out."""
        rpc_error = getattr(self.ps, "RPCError", Exception)
        out = {}
        for name in names:
            try:
                out[name] = self._record(self.ps.Node.load(name))
            except rpc_error as exc:
                if not any(t in str(exc) for t in NOT_FOUND_TEXT):
                    raise
        return out

    def switch_type(self) -> str:
        """SwitchType from slurmctld's config (pyslurm.slurmctld.Config), else `scontrol show config`."""
        config = getattr(getattr(self.ps, "slurmctld", None), "Config", None)
        if config is None:
            return self.cli.switch_type()
        return self._call("slurmctld.Config.load()", lambda: str(config.load().switch_type or ""))

    def node_table(self, names: list[str] | None = None,
                   partition: str | None = None) -> dict[str, NodeRecord]:
        return self.cli.node_table(names, partition)   # needs reason time and partitions

    def active_jobs(self) -> list[JobRecord]:
        return self.cli.active_jobs()

    def job_state(self, job_id: int) -> tuple[str, tuple[str, ...]] | None:
        return self.cli.job_state(job_id)   # squeue: fields without user text

    def het_components(self, leader: int) -> list[dict]:
        return self.cli.het_components(leader)   # squeue: fields without user text

    def job_channels(self, job_id: int) -> dict[str, int] | None:
        return self.cli.job_channels(job_id)   # pyslurm 24.11 has no resource layout call

    def live_job_ids(self) -> set[int] | None:
        return self.cli.live_job_ids()   # squeue: one RPC for the whole cluster

    # ------------------------------------------------------------------ changing
    def _update_node(self, node: str, **changes: str) -> None:
        ps = self.ps
        self._call(f"Node({node}).modify({', '.join(changes)})",
                   lambda: ps.Node(node).modify(ps.Node(**changes)))

    def set_admin_comment(self, job_id: int, text: str, spec: str | None = None) -> None:
        """Through the CLI, as its docstring says: written whole, or CommentTooLarge before
        anything runs (a decision record is never cut); read back whole by :meth:`job`."""
        self.cli.set_admin_comment(job_id, text, spec)

    def job_spec(self, job_id: int) -> str:
        return self.cli.job_spec(job_id)

    def requeue_hold(self, job_id: int) -> None:
        self.cli.requeue_hold(job_id)

    def requeue(self, job_id: int, spec: str | None = None) -> None:
        self.cli.requeue(job_id, spec)

    def cancel(self, job_id: int, spec: str | None = None) -> None:
        self.cli.cancel(job_id, spec)


class _ChildFailed(Exception):
    """An exception raised by the call in the child, carried back as its type name and text."""


def _in_child(fn, timeout_s: float):
    """Run fn() in a forked child; its result (pickled) or exception text comes back. The
    child is SIGKILLed after timeout_s and that counts as transient (like a CLI timeout)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        code = 0
        try:
            os.close(r)
            try:
                payload = pickle.dumps(("ok", fn()))
            except BaseException as exc:  # noqa: BLE001 - everything goes back to the parent
                payload = pickle.dumps(("err", f"{type(exc).__name__}: {exc}" if not str(exc) else str(exc)))
            with os.fdopen(w, "wb") as f:
                f.write(payload)
        except BaseException:  # noqa: BLE001
            code = 1
        finally:
            os._exit(code)
    os.close(w)
    chunks, deadline = [], time.monotonic() + timeout_s
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([r], [], [], left)[0]:
                os.kill(pid, signal.SIGKILL)
                raise Transient(f"timed out after {timeout_s:g}s")
            chunk = os.read(r, 65536)
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(r)
        os.waitpid(pid, 0)
    try:
        kind, value = pickle.loads(b"".join(chunks))
    except Exception as exc:  # noqa: BLE001 - the child died before answering
        raise _ChildFailed(f"the pyslurm call ended without an answer ({type(exc).__name__})") from None
    if kind == "err":
        raise _ChildFailed(value)
    return value


def _int_or_none(value: Any) -> int | None:
    try:
        return int(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def _share_word(value: Any) -> str | None:
    """pyslurm's ``resource_sharing`` ("NO", "OK", "YES", ...) upper case; None when absent
    or not a plain word."""
    word = str(value).strip().upper() if isinstance(value, str) else ""
    return word if word.isascii() and word.isalpha() else None


def _positive_or_none(value: Any) -> int | None:
    """A job id; None for 0 (no het job), None, or anything else."""
    number = _int_or_none(value) if not isinstance(value, bool) else None
    return number if number and number > 0 else None


__all__ = ["PyslurmBackend"]
