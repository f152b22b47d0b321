"""SlurmAdapter over the Slurm CLI: ``scontrol``, ``scancel`` and ``squeue``.

Works on Slurm 22.05 (Debian 12) and newer. Commands are run by absolute path from
``paths.slurm_bin_dir`` (hooks get no PATH) as argument lists (never a shell), each
bounded by ``slurm.timeout_s`` and retried ``slurm.attempts`` times with a short
exponential back-off when slurmctld is unreachable or slow; then SlurmError names the
command and what it printed. Parsing lives in :mod:`imexctl.slurm.scontrol`.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from imexctl.errors import SlurmError
from imexctl.slurm import scontrol as sc
from imexctl.slurm import states
from imexctl.slurm.records import ADMIN_COMMENT_KEY, JobRecord, JobRecordError, NodeChanges, NodeRecord, SlurmNotFound, admin_comment_text, check_job_id, check_node_name
from imexctl.slurm.hostlist import compress
from imexctl.slurm.retry import Transient, is_transient, with_retries
from imexctl.base.subproc import Completed

TYPE_CHECKING = False
if TYPE_CHECKING:
    from imexctl.base.subproc import Started
    from imexctl.config import Config

# The jobs that may hold IMEX channels, one squeue RPC: only states that may hold channels
# (a busy cluster's pending jobs stay out). %i names a het component's leader
# (``leader+offset``): a het job's channels are its leader's, live while any component is.
LIVE_JOBS_QUERY = ("squeue", "-h", "-r", "-t", states.CHANNEL_HOLDING_CODES, "-o", "%A|%T|%i")

NOT_FOUND = (r"Invalid job id specified|Invalid node name specified|"
             r"not found|does not exist")   # matched ignoring case
# Settings in the caller's environment that would change what scontrol prints.
_DROP_ENV = ("SLURM_TIME_FORMAT", "SCONTROL_ALL", "SLURM_CLUSTERS", "SQUEUE_FORMAT",
             "SQUEUE_FORMAT2", "SQUEUE_SORT")


class CliBackend(NodeChanges):
    name = "cli"
    selection = ""     # why this backend was picked (get_adapter), shown by ``status``

    def __init__(self, cfg: Config):
        self.cfg = cfg
        self.bin_dir = Path(cfg.paths.slurm_bin_dir)
        self.timeout_s = float(cfg.slurm.timeout_s)
        self.attempts = int(cfg.slurm.attempts)
        env = {k: v for k, v in os.environ.items() if k not in _DROP_ENV}
        env.setdefault("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        self.env = env
        # job records: times as epoch seconds (SubmitTime binds a decision record)
        self.job_env = {**env, "SLURM_TIME_FORMAT": sc.JOB_TIME_FORMAT}
        self._sent: dict[tuple[str, ...], Started] = {}   # prestart(): argv -> its run

    def prestart(self, tool: str, *args: str) -> None:
        """Send the first attempt of ``run(tool, *args)`` now and return at once; the
        ``run`` with the same arguments reads its answer (retries, errors and parsing as
        ever). PrologSlurmctld sends its queries before it imports what its decision
        needs. A query never read is left to end with this process."""
        from imexctl.base.subproc import Bounded, start

        argv = [str(self.bin_dir / tool), *args]
        started = start(argv, self.timeout_s, self._env(argv))
        if not isinstance(started, Bounded):   # not started: run() tries afresh
            self._sent[tuple(argv)] = started

    def _env(self, argv: list[str]) -> dict[str, str]:
        """The environment of one query: job records are asked with epoch times."""
        return self.job_env if argv[1:] and "job" in argv[-3:] and "show" in argv else self.env

    def prestart_job(self, job_id: int) -> None:
        """:meth:`prestart` of the query :meth:`job` makes for ``job_id``."""
        self.prestart(*self._job_query(check_job_id(job_id)))

    def prestart_nodes(self, names: list[str]) -> None:
        """:meth:`prestart` of the query :meth:`nodes` makes for ``names``."""
        names = [check_node_name(n) for n in names]
        if names:
            self.prestart(*self._nodes_query(names))

    def prestart_live_jobs(self) -> None:
        """:meth:`prestart` of the query :meth:`live_job_ids` makes."""
        self.prestart(*LIVE_JOBS_QUERY)

    # ------------------------------------------------------------------ running
    def _once(self, argv: list[str]) -> Completed:
        from imexctl.base.subproc import Bounded, run_text

        sent = self._sent.pop(tuple(argv), None)
        res = (sent.finish_text() if sent is not None
               else run_text(argv, self.timeout_s, self._env(argv)))
        if isinstance(res, Bounded):
            if res.timed_out:
                raise Transient(res.error)
            raise SlurmError(res.error)
        if res.returncode != 0 and is_transient(res.stderr):
            raise Transient(_last_line(res.stderr))
        return res

    def run(self, tool: str, *args: str, ok_not_found: bool = False) -> Completed:
        """Run ``bin_dir/tool args`` with retries; SlurmError on failure.

        With ``ok_not_found`` a "not found" failure is returned instead of raised.
        """
        argv = [str(self.bin_dir / tool), *args]
        cmd = " ".join([tool, *map(_shown, args)])
        try:
            res = self._with_retries(argv)
        except Transient as exc:
            raise SlurmError(f"'{cmd}' failed after {self.attempts} attempt(s): {exc}") from None
        if res.returncode != 0:
            msg = _last_line(res.stderr) or _last_line(res.stdout) or "no output"
            # 22.05 prints "Node X not found" on stdout, beside the nodes it did find.
            if re.search(NOT_FOUND, (res.stderr or "") + (res.stdout or ""), re.IGNORECASE):
                if ok_not_found:
                    return res
                raise SlurmNotFound(f"'{cmd}' -> rc {res.returncode}: {msg}")
            raise SlurmError(f"'{cmd}' -> rc {res.returncode}: {msg}")
        return res

    def _with_retries(self, argv: list[str]) -> Completed:
        return with_retries(lambda: self._once(argv), self.attempts)

    # ------------------------------------------------------------------ reading
    @staticmethod
    def _job_query(job_id: int) -> tuple[str, ...]:
        # --local: the job runs on this cluster, so libslurm skips asking slurmctld for
        # federation info first (one RPC instead of two; bench/slurmctld_load.py).
        return ("scontrol", "--local", "-o", "show", "job", str(job_id))

    def job(self, job_id: int) -> JobRecord:
        res = self.run(*self._job_query(check_job_id(job_id)))
        for record in sc.job_records(res.stdout, job_id):  # other array elements left out
            try:
                parsed = sc.parse_job_line(record)
                fields = sc.job_fields(parsed)
            except sc.ParseError as exc:
                raise JobRecordError(f"scontrol show job {job_id}: {exc}") from None
            # The whole answer: user text can move the real AdminComment into what looks
            # like another record; decision.find opens only this job's sealed records.
            fields["decision_text"] = res.stdout
            fields["submit_time"] = sc.submit_time(record)
            return self._resolve_ambiguity(job_id, parsed, fields)
        raise SlurmNotFound(f"scontrol show job {job_id}: job not in output")

    def job_channels(self, job_id: int) -> dict[str, int] | None:
        """The IMEX channel Slurm's switch/nvidia_imex allocated to the job, per node
        (`scontrol show resources`, 25.11+); None where this Slurm has no such query."""
        check_job_id(job_id)
        try:
            res = self.run("scontrol", "show", "resources", str(job_id))
        except SlurmError as exc:
            if "invalid entity" in str(exc):
                return None          # 24.11 and older: "invalid entity:resources ..."
            raise
        return sc.parse_resources(res.stdout)

    def _resolve_ambiguity(self, job_id: int, parsed: sc.Parsed, fields: dict) -> JobRecord:
        """A job's user can put ``Key=`` text in JobName, Comment, WorkDir...; a critical
        key seen twice is re-read from squeue (fields without spaces) or distrusted. A
        record squeue cannot confirm is the job's own fault (JobRecordError: the prolog
        refuses the job and drains nothing), never a Slurm failure."""
        bad = parsed.ambiguous & sc.JOB_CRITICAL
        if bad & sc.JOB_IDENTITY:
            res = self.run(*self._confirm_query(job_id))
            trusted = sc.parse_squeue_job(res.stdout, job_id)
            if trusted is None:
                raise JobRecordError(f"job {job_id}: scontrol output is ambiguous "
                                     f"({', '.join(sorted(bad))}) and squeue did not confirm it")
            fields.update(trusted)
        if "AdminComment" in bad:
            fields["admin_comment"] = ""   # cannot be told from a forged copy
        if "BatchFlag" in bad:
            fields["batch"] = False
        if "Features" in bad:
            fields["features"] = ""
        if "OverSubscribe" in bad:
            fields["oversubscribe"] = None
        return JobRecord(**fields)

    @staticmethod
    def _confirm_query(job_id: int) -> tuple[str, ...]:
        return ("squeue", "-h", "-j", str(job_id), "-t", "all", "-o", sc.SQUEUE_FORMAT)

    def het_components(self, leader: int) -> list[dict]:
        """Every component of het job ``leader`` (``job_id``, ``state``, ``nodes``...), from
        one squeue RPC whose fields hold no user text, in job-id order."""
        res = self.run(*self._confirm_query(check_job_id(leader)))
        return sorted((j for j in sc.parse_squeue_jobs(res.stdout) if j["het_job_id"] == leader),
                      key=lambda j: j["job_id"])

    def job_state(self, job_id: int) -> tuple[str, tuple[str, ...]] | None:
        """(state, nodes) of ``job_id`` from squeue, whose fields hold no user text: for a
        job whose ``scontrol`` record its own text made unreadable. None when Slurm no
        longer knows the job."""
        try:
            res = self.run(*self._confirm_query(check_job_id(job_id)))
        except SlurmNotFound:
            return None
        found = sc.parse_squeue_job(res.stdout, job_id)
        return (found["state"], found["nodes"]) if found else None

    def live_job_ids(self) -> set[int] | None:
        """Ids of the jobs that may hold IMEX channels now, and the leaders of their het
        jobs (one squeue RPC); None when Slurm cannot say (no answer, or not the shape
        asked for: then nothing may be dropped)."""
        try:
            res = self.run(*LIVE_JOBS_QUERY)
        except Exception:  # noqa: BLE001 - no answer means "do not drop anything"
            return None
        live: set[int] = set()
        for line in res.stdout.splitlines():
            job, sep, rest = line.strip().partition("|")
            state, _, shown = rest.partition("|")
            if not sep or not job.isdigit():
                return None  # not the shape asked for: trust none of it
            if states.base_state(state) in states.CHANNEL_HOLDING:
                live.add(int(job))
                leader, plus, _ = shown.strip().partition("+")
                if plus and leader.isascii() and leader.isdigit():
                    live.add(int(leader))
        return live

    def nodes(self, names: list[str]) -> dict[str, NodeRecord]:
        names = [check_node_name(n) for n in names]
        if not names:
            return {}
        res = self.run(*self._nodes_query(names), ok_not_found=True)
        wanted = set(names)
        return {r.name: r for r in _node_records(res.stdout, sc.node_fields)
                if r.name in wanted}

    @staticmethod
    def _nodes_query(names: list[str]) -> tuple[str, ...]:
        return ("scontrol", "-o", "show", "node", compress(sorted(set(names))))

    def node_table(self, names: list[str] | None = None,
                   partition: str | None = None) -> dict[str, NodeRecord]:
        """Nodes (all, or ``names``), optionally only those of ``partition``: one
        ``scontrol show node`` for the whole set, never one call per node."""
        args = ["scontrol", "-o", "show", "node"]
        if names is not None:
            names = [check_node_name(n) for n in names]
            if not names:
                return {}
            args.append(compress(sorted(set(names))))
        res = self.run(*args, ok_not_found=True)
        return {r.name: r for r in _node_records(res.stdout, sc.node_table_fields)
                if (names is None or r.name in names)
                and (not partition or partition in r.partitions)}

    def active_jobs(self) -> list[JobRecord]:
        """Jobs that may hold IMEX domains (running, configuring, completing, suspended):
        one ``scontrol show job`` for all; a job whose identity fields are ambiguous
        (forged text in a user field) is confirmed by one ``squeue`` for all of them,
        matched by ``%A`` (array elements and het components included)."""
        res = self.run("scontrol", "-o", "show", "job")
        found: list[tuple[sc.Parsed, dict]] = []
        for record in sc.job_records(res.stdout):
            try:
                parsed = sc.parse_job_line(record)
                found.append((parsed, sc.job_fields(parsed)))
            except sc.ParseError:
                continue  # one unreadable record must not hide the others
        trusted: dict[int, dict] = {}
        if any(p.ambiguous & sc.JOB_IDENTITY for p, _ in found):
            sq = self.run("squeue", "-h", "-t", "all", "-o", sc.SQUEUE_FORMAT)
            trusted = {j["job_id"]: j for j in sc.parse_squeue_jobs(sq.stdout)}
        out = []
        for parsed, fields in found:
            if parsed.ambiguous & sc.JOB_IDENTITY:
                if fields["job_id"] not in trusted:
                    continue
                fields.update(trusted[fields["job_id"]])
            if "AdminComment" in parsed.ambiguous:
                fields["admin_comment"] = ""
            if "Features" in parsed.ambiguous:
                fields["features"] = ""
            if "OverSubscribe" in parsed.ambiguous:
                fields["oversubscribe"] = None
            if fields["state"] in states.ACTIVE_JOB:
                out.append(JobRecord(**fields))
        return out

    def switch_type(self) -> str:
        res = self.run("scontrol", "show", "config")
        value = sc.parse_config_value(res.stdout, "SwitchType")
        return "" if value in (None, "(null)") else value

    # ------------------------------------------------------------------ changing
    def _update_node(self, node: str, **fields: str) -> None:
        args = [f"{key.capitalize()}={value}" for key, value in fields.items()]
        self.run("scontrol", "update", f"NodeName={node}", *args)

    def job_spec(self, job_id: int) -> str:
        """How to name only this job to scontrol/scancel: an array element that kept the
        array's id is ``<id>_<task>`` (the bare id means every element of the array);
        anything else its id. One squeue RPC, asked only to refuse or requeue a job."""
        try:
            res = self.run(*self._confirm_query(check_job_id(job_id)))
        except SlurmError:
            return str(job_id)
        for line in res.stdout.splitlines():   # SQUEUE_FORMAT: %A|%i|...
            parts = line.strip().split("|")
            if len(parts) == 6 and parts[0] == str(job_id) and "_" in parts[1] \
                    and job_spec_ok(job_id, parts[1]):
                return parts[1]
        return str(job_id)

    def set_admin_comment(self, job_id: int, text: str, spec: str | None = None) -> None:
        """``spec``: this job alone where its bare id names more (a het leader's
        ``<id>+0``, an array element's ``<id>_<task>``: slurmctld's update_job_str
        applies an update by the bare id to every component or element). The text is
        written whole, or refused (CommentTooLarge) before scontrol runs."""
        target = _target(job_id, spec)
        self.run("scontrol", "update", f"JobId={target}",
                 ADMIN_COMMENT_KEY + admin_comment_text(job_id, text))

    def requeue_hold(self, job_id: int) -> None:
        check_job_id(job_id)
        self.run("scontrol", "requeuehold", str(job_id))

    def requeue(self, job_id: int, spec: str | None = None) -> None:
        self.run("scontrol", "requeue", _target(job_id, spec))

    def cancel(self, job_id: int, spec: str | None = None) -> None:
        self.run("scancel", _target(job_id, spec))


def _node_records(stdout: str, fields) -> list[NodeRecord]:
    """Every node record of ``scontrol -o show node`` output, built with ``fields``."""
    out = []
    for line in stdout.splitlines():
        if line.startswith("NodeName="):
            try:
                out.append(NodeRecord(**fields(sc.parse_node_line(line))))
            except sc.ParseError as exc:
                raise SlurmError(f"scontrol show node: {exc}") from None
    return out


def _shown(arg: str) -> str:
    """An argument as an error names it: a long one (a whole decision record) by its start
    and length."""
    return arg if len(arg) <= 200 else f"{arg[:80]}...({len(arg)} characters)"


def _last_line(text: str | None) -> str:
    lines = [ln.strip() for ln in (text or "").splitlines() if ln.strip()]
    return lines[-1][:300] if lines else ""



def job_spec_ok(job_id: int, spec: str) -> bool:
    """Whether ``spec`` names job ``job_id`` alone: ``<id>``, ``<id>+0`` or ``<id>_<task>``."""
    head, sep, tail = spec.partition("+") if "+" in spec else spec.partition("_")
    return head == str(job_id) and (not sep or (tail.isascii() and tail.isdigit()
                                                and (sep == "_" or tail == "0")))


def _target(job_id: int, spec: str | None) -> str:
    check_job_id(job_id)
    if spec is None:
        return str(job_id)
    if not job_spec_ok(job_id, spec):
        raise ValueError(f"job spec {spec!r} does not name job {job_id}")
    return spec


__all__ = ["CliBackend"]
