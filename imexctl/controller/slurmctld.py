"""PrologSlurmctld and EpilogSlurmctld: the cluster-wide decisions, made once per job.

PrologSlurmctld runs once per job as SlurmUser, before any node prolog (PrologFlags=
Alloc). It groups the job's trays by published clique, applies the partition's
multi-clique policy, picks one channel per group from the channel table, and records
the decision in the job's AdminComment (docs/multi-rack.md), where every node prolog
reads it with the one job-record query it already makes.

It never fails: a non-zero PrologSlurmctld requeues a batch job forever, so every error
is logged and the hook exits 0 (the node prologs then fall back to published
identities). A refusal is expressed by cancelling the job, and ``scancel`` kills this
very process, so the reason is written first and the cancel is the last act.
EpilogSlurmctld gives the job's channels back; the table also reconciles itself with
Slurm's live jobs, so a missed epilog never leaks a channel.
"""

from __future__ import annotations

import time

from imexctl.base import log
from imexctl.config import Config
from imexctl.controller.table_source import (held_by_live_jobs, record_cluster, table_dir,
                                             table_location)
from imexctl.errors import EXIT_OK
from imexctl.slurm import reasons

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Protocol, TypeGuard

    from imexctl.base.log import EventLog, LogLine

    from imexctl.controller.channel_table import ChannelTable, LiveJobs
    from imexctl.controller.counters import Tally
    from imexctl.slurm.context import JobContext
    from imexctl.slurm.interface import SlurmAdapter
    from imexctl.slurm.localconf import LocalSlurmConf
    from imexctl.slurm.records import JobRecord

    class Prestarting(SlurmAdapter, Protocol):
        """A backend that sends queries early (CliBackend): answers read by the same query."""
        def prestart_live_jobs(self) -> None: ...
        def prestart_job(self, job_id: int) -> None: ...
        def prestart_nodes(self, names: list[str]) -> None: ...


class Steps:
    """The wall time of each step of one controller hook run, in ms, for its last log line
    (``steps_ms``, beside the run's ``duration_ms``), as the node hooks log theirs.
    :meth:`lap` closes the step begun at the previous lap (the hook's start first);
    :meth:`within` notes a wait inside the current step (the live-job query, answered
    while the table is allocated), which the lap then leaves out, so the steps add up to
    the duration."""

    def __init__(self, started: float | None = None):
        self.started = self.last = time.monotonic() if started is None else started
        self.ms: dict[str, float] = {}
        self._inner = 0.0

    def lap(self, name: str) -> None:
        now = time.monotonic()
        self.ms[name] = round(self.ms.get(name, 0.0) + (now - self.last - self._inner) * 1000, 1)
        self.last, self._inner = now, 0.0

    def within(self, name: str, seconds: float) -> None:
        self.ms[name] = round(self.ms.get(name, 0.0) + seconds * 1000, 1)
        self._inner += seconds

    def fields(self) -> dict[str, object]:
        return {"duration_ms": round((time.monotonic() - self.started) * 1000, 1),
                "steps_ms": dict(self.ms)}


def channel_table(cfg: Config, tally: Tally | None = None):
    """The channel table, rebuilt from the live jobs' records when it must be
    (:func:`held_by_live_jobs`); its first use and any rebuild are logged (and a
    rebuild counted in ``tally``)."""
    from imexctl.controller.channel_table import ChannelTable
    from imexctl.tray.bootid import read_boot_id

    directory, where = table_location(cfg)
    return ChannelTable(directory, count=cfg.channels.count,
                        reconcile_every_s=cfg.channels.reconcile_every_s,
                        boot=read_boot_id(cfg.paths.boot_id_file),
                        rebuild_from=lambda: held_by_live_jobs(cfg),
                        report=lambda event, fields: _report_table(event, fields, where,
                                                                   tally))


def _report_table(event: str, fields: dict, where: str, tally: Tally | None = None) -> None:
    first_start = fields.get("why") == "missing" and not fields.get("asked")
    if event == "rebuilt" and tally is not None and not first_start:
        from imexctl.controller.counters import rebuild_class

        tally.rebuilds.append(rebuild_class(str(fields.get("why", ""))))
    logger = log.get_logger()
    if event == "rebuilt" and not (fields.get("why") == "missing" and not fields.get("asked")):
        logger.warning("channel table rebuilt from the live jobs' decision records",
                       where=where, **fields)
    elif event == "rebuilt":   # a first start: no other job ran, so none holds a channel
        logger.info("channel table started: no other job runs", where=where, **fields)
    elif where.startswith("host-local"):
        logger.warning("channel table is host-local: a backup slurmctld would not see it",
                       where=where, **fields)
    else:
        logger.debug("channel table", where=where, **fields)


def prolog_slurmctld(cfg: Config, slurm: SlurmAdapter, ctx: JobContext, sent: Sent | None = None,
                     started: float | None = None, steps: Steps | None = None) -> int:
    """Decide and record; always EXIT_OK (audit F-08). ``sent``: what
    :func:`send_queries` already asked (the CLI calls it before logging is set up);
    ``started``: the hook's ``time.monotonic()`` start, for its duration metric;
    ``steps``: the run's step clock, already holding the CLI's steps."""
    logger = log.get_logger()
    tally = new_tally(cfg, "prolog-slurmctld", started)
    steps = steps or Steps(started)
    last: tuple[str, dict[str, object]] | None = None
    try:
        last = _decide(cfg, slurm, ctx, logger, sent, tally, steps)
    except Exception as exc:  # noqa: BLE001 - fail open, whatever happened
        tally.failed_open = True
        try:
            logger.error("prolog-slurmctld failed open: the node prologs decide",
                         error=f"{type(exc).__name__}: {exc}")
        except Exception:  # noqa: BLE001 - logging may be what failed
            pass
    save_tally(tally, logger)
    steps.lap("metrics")
    if last is not None:
        try:
            logger.info(last[0], **last[1], **steps.fields())
        except Exception:  # noqa: BLE001 - the decision is recorded; a log line is not it
            pass
    return EXIT_OK


def new_tally(cfg: Config, hook: str, started: float | None = None) -> Tally:
    """The counters of one controller hook run, kept beside the channel table."""
    from imexctl.controller.counters import Tally

    return Tally(lambda: table_dir(cfg), hook, started)


def save_tally(tally: Tally, logger: EventLog) -> None:
    """Count the run (controller metrics); a failure is logged, never raised."""
    try:
        error = tally.save()
        if error:
            logger.error("controller metrics not recorded", error=error)
    except Exception:  # noqa: BLE001 - metrics never change what a hook does
        pass


def _decide(cfg: Config, slurm: SlurmAdapter, ctx: JobContext, logger: EventLog, sent: Sent | None,
            tally: Tally, steps: Steps) -> tuple[str, dict[str, object]] | None:
    """Decide and record; returns the run's last log line (event, fields), which the
    caller writes after the metrics with the run's step times; None when a refusal
    already wrote its own."""
    # The Slurm queries are this hook's longest waits: they are sent first, and the
    # modules the decision needs are imported while slurmctld answers.
    if sent is None:
        sent = send_queries(cfg, slurm, ctx)
        steps.lap("send-queries")
    if sent.unwanted:   # the allocation says so: no job record asked, nothing imported
        tally.decided("not-imex", "not-wanted")
        steps.lap("job")
        return "job does not want IMEX; nothing to decide", {}
    early, local_owner = sent.early, sent.local_owner
    node_records = slurm.nodes      # reads the answer to the query already sent
    live_jobs = sent.live_jobs(slurm, steps)

    from imexctl.rules import decision as dec
    from imexctl.rules.groups import (DOMAINS, REFUSE, SKIP, WAIT, group_trays, judge,
                                      policy_for, segments_spanning_cliques)
    from imexctl.rules.policy import wants_imex
    from imexctl.slurm.localconf import slurm_owns_channels
    from imexctl.rules.cliques import identity_from_extra
    # The environment is the allocation (slurmctld's job_common_env_vars): when it already
    # says the job wants IMEX, the job record is asked only if a multi-clique job needs
    # its segment size. One RPC fewer per job start, and one fewer on the critical path.
    from imexctl.slurm.munge import seal_for
    steps.lap("imports")
    job = _EnvJob(ctx, slurm) if early else slurm.job(ctx.job_id)
    if not wants_imex(cfg, job):
        tally.decided("not-imex", "not-wanted")
        steps.lap("job")
        return "job does not want IMEX; nothing to decide", {}
    nodes = list(job.nodes)
    het = ctx.het_job_id
    domain_nodes = nodes
    if het is not None:     # one decision over every component's trays, keyed by the leader
        domain_nodes, refusal = het_domain_nodes(slurm, het, ctx.job_id, nodes)
        if refusal:
            _refuse(slurm, ctx.job_id, refusal, logger, ctx, tally, "het-job", steps)
            return None
    steps.lap("job")
    records = node_records(domain_nodes)
    steps.lap("node-records")
    identities = {n: identity_from_extra(records[n].extra if n in records else "")
                  for n in domain_nodes}
    grouping = group_trays(domain_nodes, identities)
    verdict = judge(grouping, policy_for(cfg, job.partition))
    if verdict.action == REFUSE:
        _refuse(slurm, ctx.job_id, verdict.reason, logger, ctx, tally, "spans-cliques", steps)
        return None
    slurm_channels = (local_owner if local_owner is not None
                      else slurm_owns_channels(cfg, slurm))   # no local slurm.conf: ask Slurm
    action, note = verdict.action, verdict.reason
    waited = ""     # why the job waits (metrics)
    if action == DOMAINS:
        from imexctl.controller import trayauth
        refusal = trayauth.lifetime_refusal(grouping, identities)
        if refusal:     # a clique of per-job and persistent trays: nothing drained
            _refuse(slurm, ctx.job_id, refusal, logger, ctx, tally, trayauth.LIFETIME_WHY, steps)
            return None
        auth = trayauth.check_auth(slurm, grouping, identities, logger)
        if auth.refusal:
            _refuse(slurm, ctx.job_id, auth.refusal, logger, ctx, tally, trayauth.WHY, steps)
            return None
        if auth.wait:
            action, waited, note = WAIT, trayauth.WHY, auth.note
    if action == SKIP:
        note = f"warning: {note}"
    # One clique: no segment can span cliques, and the segment size is not needed.
    segment = _segment_size(cfg, slurm, job, logger) if len(grouping.groups) > 1 else 0
    spans = segments_spanning_cliques(grouping, segment or 0)
    if segment is None:
        note = " ".join(filter(None, [note, "warning: segment size unknown: not checked "
                                            "against the cliques"]))
    if spans:
        logger.warning("a segment of the job spans NVLink cliques", segment_size=segment,
                       groups=spans)
        note = " ".join(filter(None, [note, "warning: a segment spans cliques:", *spans]))
    steps.lap("group")
    table = channel_table(cfg, tally)
    owner = het or ctx.job_id     # whose channels: a het job's are its leader's, for all
    channels: dict[str, int | None] = {}
    if action == DOMAINS and not slurm_channels:
        from imexctl.controller.channel_table import ChannelTableError
        try:
            channels = table.allocate(owner, [g.key for g in grouping.groups],
                                      live_jobs=live_jobs, due=sent.due)
        except (ChannelTableError, OSError) as exc:  # unusable table dir included
            # Never a number the table may have handed out: the job waits (requeued by
            # its node prologs) until a channel is free or the table is usable again.
            action, note = WAIT, f"no IMEX channel allocated: {exc}"
            logger.error("channel allocation failed; the job waits", error=str(exc))
            waited = "table-full" if table.exhausted else "table-unusable"
        steps.lap("allocate")
    groups = tuple(dec.GroupDecision(g.key, channels.get(g.key), g.members)
                   for g in grouping.groups) if action == DOMAINS else ()
    mode = "slurm" if slurm_channels else "imexctl"
    try:
        text = dec.encode(dec.Decision(action=action, groups=groups, note=note,
                                       job_id=ctx.job_id, channel_mode=mode,
                                       restart_count=ctx.restart_count,
                                       nodes_hash=dec.nodes_hash(nodes), het_job_id=het,
                                       cluster=record_cluster(cfg, ctx, sent.conf)),
                          seal_for(cfg, sent.conf))
    except dec.DecisionTooLarge as exc:
        _release(table, ctx.job_id, het, logger)
        _refuse(slurm, ctx.job_id, str(exc), logger, ctx, tally, "record-too-large", steps)
        return None
    except Exception:
        _release(table, ctx.job_id, het, logger)  # no record: the trays refuse the job
        raise
    steps.lap("seal")
    try:
        # a het leader's or array element's bare id would overwrite its siblings' records
        slurm.set_admin_comment(ctx.job_id, text, spec=_spec(ctx.job_id, ctx.record_spec))
    except Exception:
        _release(table, ctx.job_id, het, logger)  # the trays will not use them: no leak
        raise
    steps.lap("record")
    tally.decided(*_outcome(action, mode, waited))
    return "decision recorded", dict(
        action=action, channel_mode=mode, het_job_id=het,
        groups=[(g.key, g.channel, len(g.members)) for g in groups],
        non_imex=list(grouping.non_imex), unpublished=list(grouping.unpublished),
        note=note, dropped_dead_jobs=list(table.last_reconcile.dropped))


def _outcome(action: str, mode: str, waited: str) -> tuple[str, str]:
    """(outcome, reason class) of a recorded decision, for the controller metrics
    (docs/monitoring.md): granted with channels from the table or from Slurm; waiting
    for a channel; pending (trays not yet published); fallback (policy skip: the job
    runs without IMEX); none (no IMEX tray)."""
    from imexctl.controller import counters as c

    if action == "domains":
        return c.GRANTED, "slurm-channels" if mode == "slurm" else "channel-table"
    if action == "wait":
        return c.WAITING, waited or "table-unusable"
    if action == "pending":
        return c.PENDING, "unpublished"
    if action == "skip":
        return c.FALLBACK, "policy-skip"
    return c.NONE, "no-imex-tray"


class _EnvJob:
    """The job as the hook's environment gives it (node list, partition, restart count);
    the job record is asked for, once, only when something else is needed."""

    def __init__(self, ctx: JobContext, slurm: SlurmAdapter):
        self.job_id, self.nodes, self.partition = ctx.job_id, tuple(ctx.nodes), ctx.partition
        self.features = ""        # policy "feature" never takes this path
        self._slurm = slurm
        self._record: JobRecord | None = None

    def record(self) -> JobRecord:
        if self._record is None:
            self._record = self._slurm.job(self.job_id)
        return self._record

    @property
    def segment_size(self) -> int | None:
        return self.record().segment_size


def _segment_size(cfg: Config, slurm: SlurmAdapter, job: JobRecord | _EnvJob, logger: EventLog) -> int | None:
    """The job's ``--segment`` size: 0 for none (Slurm 24.11 prints it nowhere, so 0 there
    too); None when it cannot be told. pyslurm 24.11's Job has no such field (None): then
    ``scontrol`` is asked, as Slurm 26.05 prints ``SegmentSize``."""
    segment = job.segment_size
    if segment is None and slurm.name == "pyslurm":
        try:
            from imexctl.slurm.cli_backend import CliBackend

            segment = CliBackend(cfg).job(job.job_id).segment_size
        except Exception as exc:  # noqa: BLE001 - a warning in the record, not a failure
            logger.warning("segment size unknown", error=f"{type(exc).__name__}: {exc}")
            return None
    if segment is None:
        logger.warning("segment size unknown: a segment spanning cliques cannot be told")
    return segment


class Sent:
    """What :func:`send_queries` found and asked before the decision's modules were
    imported: whether the environment says the job wants IMEX (``early``) or that it
    does not (``unwanted``: nothing more is asked), who owns the channels per the local
    slurm.conf, when the live-job query went out, and whether the table was due a
    reconciliation (``due``; None: not read, the allocation reads it)."""

    def __init__(self, early: bool, local_owner: bool | None, live_asked_at: float | None,
                 due: bool | None = None, unwanted: bool = False,
                 conf: LocalSlurmConf | None = None):
        self.early, self.local_owner, self.live_asked_at = early, local_owner, live_asked_at
        self.due, self.unwanted = due, unwanted
        self.conf = conf    # the local slurm.conf as read once (None: not read, or unreadable)

    def live_jobs(self, slurm: SlurmAdapter, steps: Steps | None = None) -> LiveJobs:
        """The channel table's live-job snapshot. When its query went out early, the
        snapshot is as old as the question (``asked_at``), not the answer: chanalloc
        drops only entries older than that, so a job that allocated meanwhile stays.
        ``steps``: where the wait for the answer is noted (``live-jobs``)."""
        from imexctl.controller.channel_table import LiveJobs

        def ask() -> set[int] | None:
            t0 = time.monotonic()
            try:
                return slurm.live_job_ids()
            finally:
                if steps is not None:
                    steps.within("live-jobs", time.monotonic() - t0)
        return LiveJobs(ask, self.live_asked_at)


# The most compute trays one NVLink clique holds (GB200/GB300 NVL72: 18 trays x 4 GPUs). A
# job on more trays spans cliques unless some of its trays are not IMEX trays, and then
# its job record is asked for the segment size, so that query goes out with the node
# query instead of after it. Where a clique is bigger (some future rack), a one-clique job
# of more than 18 trays pays one query it does not read; nothing else changes.
CLIQUE_TRAYS_MAX = 18


def send_queries(cfg: Config, slurm: SlurmAdapter, ctx: JobContext) -> Sent:
    """Send PrologSlurmctld's Slurm queries now, side by side, without waiting: the node
    records of the environment's node list, the job record when the job has more trays
    than a clique holds, and the live jobs when imexctl allocates the channels and the
    table is due a reconciliation. The node list and partition come from the environment
    (slurmctld's job_common_env_vars); a job whose environment does not say it wants IMEX
    costs no RPC at all. Only the CLI backend sends early (pyslurm answers in-process);
    what is sent is read by the same query later (``run``)."""
    wants = _env_wants_imex(cfg, slurm, ctx)
    if wants is False:      # the environment tells: the job record would say the same
        return Sent(False, None, None, unwanted=True)
    early = wants is True
    # slurm.conf read once per hook: who owns the channels, where the table is, the seal
    conf = _local_conf(cfg)
    if conf is not None:
        table_location(cfg, conf)
    if not early or not _prestarts(slurm):
        return Sent(early, _local_channel_owner(cfg, conf), None, conf=conf)
    slurm.prestart_nodes(list(ctx.nodes))
    if len(ctx.nodes) > CLIQUE_TRAYS_MAX:   # spans cliques: its segment size will be asked
        slurm.prestart_job(ctx.job_id)
    local_owner = _local_channel_owner(cfg, conf)
    asked_at, due = None, None
    if local_owner is False:
        due = channel_table(cfg).reconcile_due()   # read once: the allocation is told
        if due:
            asked_at = time.time()
            slurm.prestart_live_jobs()
    return Sent(early, local_owner, asked_at, due, conf=conf)


def _prestarts(slurm: SlurmAdapter) -> TypeGuard[Prestarting]:
    """Whether the backend sends a query now and reads its answer later (the CLI's)."""
    return slurm.name == "cli"


def _env_wants_imex(cfg: Config, slurm: SlurmAdapter, ctx: JobContext) -> bool | None:
    """Whether the job wants IMEX, as the hook's environment (the allocation's node list
    and partition) tells it: True, so a query may start before the job record is read;
    False, so nothing is asked at all; None when the environment cannot tell. None for
    policy ``feature`` (the constraint is in the job record), for ``partitions`` without
    SLURM_JOB_PARTITION, and with pyslurm, whose calls fork a child each: no fork beside
    another thread."""
    from imexctl.rules.policy import wants_imex

    if (not ctx.nodelist_expr or cfg.policy.mode == "feature"
            or (cfg.policy.mode == "partitions" and not ctx.partition)
            or slurm.name == "pyslurm"):
        return None
    return wants_imex(cfg, _EnvJob(ctx, slurm))   # asks nothing: nodes and partition


def _local_conf(cfg: Config) -> LocalSlurmConf | None:
    """The local slurm.conf without its node lines (SwitchType, SlurmUser, AuthInfo), read
    once for the hook; None when it cannot be read (each user then says what it does
    without: ask Slurm, MUNGE's defaults)."""
    from imexctl.slurm.localconf import load

    try:
        return load(cfg.paths.slurm_conf, nodes=())
    except Exception:  # noqa: BLE001 - LocalConfError, or a file that fails later, as before
        return None


def _local_channel_owner(cfg: Config, conf: LocalSlurmConf | None = None) -> bool | None:
    """Whether Slurm owns the channels, from the configuration and the local slurm.conf
    alone (``conf``, when read); None when no local slurm.conf can be read (then Slurm
    is asked, later)."""
    from imexctl.slurm.localconf import LocalConfError, slurm_owns_channels

    try:
        return slurm_owns_channels(cfg, conf=conf)
    except LocalConfError:
        return None
    except Exception:  # noqa: BLE001 - an unreadable file fails later, where it did before
        return None


def _refuse(slurm: SlurmAdapter, job_id: int, reason: str, logger: EventLog, ctx: JobContext | None = None,
            tally: Tally | None = None, why: str = "", steps: Steps | None = None) -> None:
    """Cancel the job with ``imexctl: reason`` as AdminComment. ``scancel`` kills this
    very process (slurmctld ends the job's PrologSlurmctld), so it is the last act, and
    the refusal is counted (``why``: its reason class) before it. An array element is
    named alone (``<id>_<task>``); a het job is refused whole."""
    text = reasons.ours(reason)
    logger.error("job refused", reason=text, **(steps.fields() if steps is not None else {}))
    spec = _spec(ctx.job_id, ctx.own_spec) if ctx is not None else None
    slurm.set_admin_comment(job_id, text, spec=spec)
    if tally is not None:
        tally.decided("refused", why)
        save_tally(tally, logger)
    slurm.cancel(job_id, spec=spec)


def _spec(job_id: int, spec: str) -> str | None:
    """A context's ``own_spec``/``record_spec`` where it differs from the bare id, else None."""
    return spec if spec != str(job_id) else None


def het_domain_nodes(slurm: SlurmAdapter, leader: int, job_id: int,
                     own: list[str]) -> tuple[list[str], str]:
    """(every tray of het job ``leader``, components in job-id order; a refusal or "").
    From squeue (fields without user text); this component must be among them with the
    node list its environment gave, and no tray may be in two components (one tray
    runs one daemon per job)."""
    parts = slurm.het_components(leader)
    mine = next((p for p in parts if p["job_id"] == job_id), None)
    if mine is None or list(mine["nodes"]) != list(own):
        return [], (f"het job {leader}: squeue does not list component {job_id} on its "
                    "allocated trays; no IMEX domain can be decided")
    union: list[str] = []
    seen: dict[str, int] = {}
    for part in parts:
        for node in part["nodes"]:
            if node in seen:
                return [], (f"het job {leader}: tray {node} is in components {seen[node]} "
                            f"and {part['job_id']}; IMEX needs each tray in one component")
            seen[node] = part["job_id"]
            union.append(node)
    return union, ""


def _release(table: ChannelTable, job_id: int, het: int | None, logger: EventLog) -> None:
    """Give back what the job allocated. A het job's channels are its leader's and
    serve every component: they are left to reconciliation (dropped once no component
    runs), never released while another component may use them."""
    if het is not None:
        return
    try:
        table.release(job_id)
    except Exception as exc:  # noqa: BLE001 - reconciliation frees it later
        logger.error("could not release channels", error=str(exc))


class _FirstLine:
    """EpilogSlurmctld's logger, bound to the job and set up by the first line written
    (the CLI starts its logging deferred): the hook of a job that held no channel writes
    none and sets up no logging (3-4 ms of CPU, at every job end of the cluster)."""

    def __init__(self, **bound: object):
        self.bound: dict[str, object] = bound
        self.real: EventLog | None = None

    def _log(self) -> EventLog:
        if self.real is None:
            log.bind(**self.bound)
            self.real = log.get_logger()
        return self.real

    # A level is looked up before its line is made: the set-up is timed by the caller's
    # step clock (``logging``), not inside the line.
    @property
    def debug(self) -> LogLine:
        return self._log().debug

    @property
    def info(self) -> LogLine:
        return self._log().info

    @property
    def warning(self) -> LogLine:
        return self._log().warning

    @property
    def error(self) -> LogLine:
        return self._log().error


def epilog_slurmctld(cfg: Config, slurm: SlurmAdapter, ctx: JobContext,
                     started: float | None = None, steps: Steps | None = None) -> int:
    """Give the job's channels back; always EXIT_OK (nothing here may hold a job)."""
    logger = _FirstLine(job_id=ctx.job_id, restart_count=ctx.restart_count,
                        hook="epilog-slurmctld")
    tally = new_tally(cfg, "epilog-slurmctld", started)
    steps = steps or Steps(started)
    het = ctx.het_job_id
    if het is not None:
        save_tally(tally, logger)
        steps.lap("metrics")
        line = logger.info
        steps.lap("logging")
        line("het job component ended: its leader's channels are kept until no "
             "component runs (reconciliation)", het_job_id=het, **steps.fields())
        return EXIT_OK
    released: dict[str, int] = {}
    try:
        live = Sent(True, None, None).live_jobs(slurm, steps)
        released = channel_table(cfg).release(ctx.job_id, live_jobs=live)
        steps.lap("release")
    except Exception as exc:  # noqa: BLE001 - reconciliation on the next allocation frees it
        tally.failed_open = True
        try:
            logger.error("epilog-slurmctld could not release channels",
                         error=f"{type(exc).__name__}: {exc}")
        except Exception:  # noqa: BLE001
            pass
    save_tally(tally, logger)
    steps.lap("metrics")
    if released:    # a job that held nothing writes no line
        try:
            line = logger.info
            steps.lap("logging")
            line("channels released", channels=released, **steps.fields())
        except Exception:  # noqa: BLE001 - the release is done; a log line is not it
            pass
    return EXIT_OK


__all__ = ["prolog_slurmctld", "epilog_slurmctld", "new_tally", "save_tally", "Steps"]
