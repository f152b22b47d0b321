"""The node prolog: bring up this tray's share of a job's IMEX domains, as declared steps.

``PROLOG_STEPS`` is the whole prolog; ``runner.run_steps`` runs it, names the step of any
fault and undoes what the steps recorded in the journal (newest first: daemon, channel,
files, record). Outcome rules are in ``outcome.py``: a job fault (the site refuses the
job's allocation, a job that may share its trays, node owned by another job) refuses the
job and drains nothing; a node fault drains this tray with
``imexctl: prolog/<step>: <cause>``.

What this tray does comes from the controller's decision (docs/multi-rack.md, "Node
prolog contract"), which arrives with the one job-record query the prolog makes; the
``allocation`` step (``allocation.py``) reads it, or groups the trays itself where no
controller decides. Addresses, ``SwitchType`` and the prolog
timeout come from the local slurm.conf, never from slurmctld.
"""

from __future__ import annotations

import os
from pathlib import Path

from imexctl import __version__
from imexctl.base import log
from imexctl.base.clock import when
from imexctl.config import AuthMode, Config, Lifetime
from imexctl.errors import JobFault, NodeFault
from imexctl.base.fsutil import atomic_write, ensure_secure_dir, remove_path
from imexctl.lifecycle.allocation import allocation, write_facts
from imexctl.lifecycle.outcome import conclude
from imexctl.tray.ownership import owner_alive
from imexctl.rules.policy import wants_imex
from imexctl.base.dataclass import dataclass, field
from imexctl.lifecycle.runner import Done, RunContext, Step, run_steps
from imexctl.tray.ownership import (RECORD, DomainRecord, LockTimeout, RecordUnreadable,
                                    StateStore)
from imexctl.lifecycle.teardown import forget_importers, job_dir, stop_job_daemons, teardown_domain
from imexctl.imex.addresses import local_conf, member_addresses, record_addrs
from imexctl.imex import persistent
from imexctl.imex.launcher import is_alive, kept_log_note
from imexctl.imex.ready import effective_ready_timeout, wait_ready
from imexctl.tray import jobdir
from imexctl.tray.bootid import current_boot_id
from imexctl.tray.ports import check_ports_free

TYPE_CHECKING = False
if TYPE_CHECKING:
    from imexctl.slurm.context import JobContext
    from imexctl.slurm.interface import SlurmAdapter
    from imexctl.slurm.localconf import LocalSlurmConf
    from imexctl.rules.cliques import TrayIdentity
    from imexctl.rules.decision import GroupDecision, NodeDecision
    from imexctl.slurm.records import JobRecord
    from imexctl.tray.fabric import FabricVerdict

@dataclass(kw_only=True)
class PrologRun(RunContext):
    cfg: Config
    slurm: SlurmAdapter
    ctx: JobContext
    store: StateStore
    job: JobRecord | None = None
    verdict: FabricVerdict | None = None    # this tray's live fabric verdict
    decision: NodeDecision | None = None    # this tray's part of the job's decision
    conf: LocalSlurmConf | None = None
    slurm_addrs: dict[str, str] = field(default_factory=dict)  # NodeAddr of records read
    record: DomainRecord | None = None
    persistent: DomainRecord | None = None  # the tray's persistent domain (persistent path)
    ready_timeout_s: float = 0.0

    def domain(self) -> DomainRecord:
        """This job's record, which the render step made: every later step has one."""
        if self.record is None:
            raise RuntimeError("no domain record before the render step")
        return self.record

    def job_record(self) -> JobRecord:
        """The job as Slurm said, which the context step read."""
        if self.job is None:
            raise RuntimeError("no job record before the context step")
        return self.job

    def fabric_verdict(self) -> FabricVerdict:
        """This tray's verdict, which the fabric step found."""
        if self.verdict is None:
            raise RuntimeError("no fabric verdict before the fabric step")
        return self.verdict

    def tray(self) -> TrayIdentity:
        """This IMEX tray's live identity (the fabric step let only an IMEX tray on)."""
        clique = self.fabric_verdict().clique
        if clique is None:
            raise RuntimeError("no live identity: not an IMEX tray")
        return clique

    def group(self) -> tuple[NodeDecision, GroupDecision]:
        """This tray's decision and its group: the allocation step goes on only with both."""
        if self.decision is None or self.decision.group is None:
            raise RuntimeError("no IMEX group before the allocation step")
        return self.decision, self.decision.group


def run_prolog(cfg: Config, slurm: SlurmAdapter, ctx: JobContext) -> int:
    """Run the prolog for ``ctx`` (validated hook context); returns the hook's exit code."""
    run = PrologRun(cfg=cfg, slurm=slurm, ctx=ctx, store=StateStore(cfg.paths.state_dir))
    steps = PERSISTENT_PROLOG_STEPS if cfg.imex.lifetime == Lifetime.PERSISTENT else PROLOG_STEPS
    result = run_steps("prolog", steps, run)
    code = conclude(slurm, run.store, ctx, result)
    if result.result == "ok" and run.record is not None:
        log.get_logger().info("IMEX domain ready", digest=run.record.digest,
                              duration_ms=result.duration_ms)
    return code


def lock_wait_s(cfg: Config) -> float:
    """How long the prolog waits for the node lock: longer than ``imexctl health`` can
    hold it (ask Slurm about the owner, then tear a stale domain down), so only another
    job's prolog or epilog, never a health run, makes a job wait in vain."""
    return cfg.slurm.timeout_s * cfg.slurm.attempts + cfg.imex.stop_grace_s + 15.0


# ---------------------------------------------------------------------------- steps
def _context(run: PrologRun) -> None:
    from imexctl.slurm.records import JobRecordError

    try:
        run.job = job = run.slurm.job(run.ctx.job_id)  # the one slurmctld query of the common path
    except JobRecordError as exc:  # the job's own text broke it: refuse the job, drain nothing
        raise JobFault(f"job record unreadable: {exc}") from None
    if not wants_imex(run.cfg, job):
        log.get_logger().info(f"job does not want IMEX (policy {run.cfg.policy.mode}); "
                              "nothing to do")
        raise Done
    if run.ctx.node not in job.nodes:
        raise NodeFault(f"this tray ({run.ctx.node}) is not in the job's node list "
                        "from Slurm")


def _fabric(run: PrologRun) -> None:
    """This tray's verdict: an IMEX tray joins (degraded bandwidth is a warning unless the
    site drains for it); an unfit one is a node fault; a tray without NVLink fabric is
    not an IMEX tray: no domain, no drain, unless the job asked for IMEX by feature."""
    from imexctl.tray.fabric import local_verdict

    verdict = local_verdict(run.cfg)
    if verdict.kind == "not_imex":
        if run.cfg.policy.mode == "feature":
            raise JobFault(f"job asked for IMEX but {run.ctx.node} is not an IMEX tray "
                           f"({verdict.detail})")
    elif verdict.kind != "imex" or verdict.clique is None:
        raise NodeFault(verdict.detail)
    elif verdict.degraded:
        log.get_logger().warning("IMEX tray with a fabric warning",
                                 detail=verdict.detail)
    run.verdict = verdict


def _ownership(run: PrologRun) -> None:
    from imexctl.tray import expected

    node = run.ctx.node
    try:
        run.stack.enter_context(run.store.locked(timeout_s=lock_wait_s(run.cfg)))
    except LockTimeout as exc:
        # Another job's prolog or epilog is working on this node: the node is fine, the
        # job is not node-exclusive (or raced a teardown). Refuse it; drain nothing.
        raise JobFault(f"node {node} is busy with another IMEX domain ({exc}); per-job "
                       "IMEX needs node-exclusive jobs") from None
    run.store.sweep_temp()
    run.journal.add("record", lambda: _undo_record(run))
    record = run.store.load()   # RecordUnreadable: a node fault naming this step
    if record is not None:
        logger = log.get_logger()
        if record.job_id == run.ctx.job_id:
            logger.warning("prolog re-run for the same job: tearing down its old domain")
        elif owner_alive(run.slurm, record, node):
            raise JobFault(f"node {node} IMEX domain is owned by running job "
                           f"{record.job_id}; per-job IMEX needs node-exclusive jobs")
        else:
            logger.warning("stale IMEX domain of ended job found: tearing it down",
                           stale_job=record.job_id)
        report = teardown_domain(run.cfg, record, run.store)
        if not report.ok:
            raise NodeFault(f"stale domain of job {record.job_id} could not be removed: "
                            f"{report.failures[0][1]}")
    _one_owner(run)
    # The node is this job's now: IMEX is expected here (cli's after-hook writes the
    # outcome: up, failed or idle).
    expected.write(run.cfg, expected.STARTING, job_id=run.ctx.job_id)


def _one_owner(run: PrologRun) -> None:
    """No domain is started beside an IMEX daemon imexctl did not start (the packaged
    nvidia-imex.service, another orchestrator's): a node fault that says what to stop.
    A user's process only named so is no owner: a log line (audit F4-3)."""
    from imexctl.imex.launcher import find_foreign_daemons, not_an_owner, second_owner

    owners, lookalikes = find_foreign_daemons(run.cfg.paths.imex_binary)
    if owners:
        raise NodeFault(second_owner(owners))
    if lookalikes:
        log.get_logger().info(not_an_owner(lookalikes))


def _render(run: PrologRun) -> None:
    from imexctl.imex.render import (RenderError, domain_digest, job_ports, load_template,
                                     node_entries, render_daemon_config,
                                     render_nodes_config)

    cfg, ctx, (nd, group) = run.cfg, run.ctx, run.group()
    members = list(group.members)
    run.conf = local_conf(cfg, members)
    run.ready_timeout_s = effective_ready_timeout(cfg, run.conf)
    slurm_addrs = member_addresses(members, run.conf, run.slurm_addrs,
                                   ask_slurm=lambda names: record_addrs(run.slurm.nodes(names)))
    node_id = members.index(ctx.node)
    try:
        got = node_entries(slurm_addrs, node_id, labels=members,
                           host_names=cfg.imex.node_entries == "hostname")
        nodes_cfg = render_nodes_config(got.entries)
    except RenderError as exc:
        raise NodeFault(str(exc)) from None
    ports = job_ports(nd.domain_id, cfg.imex.server_port_base, cfg.imex.cmd_port_base,
                      cfg.imex.port_span)
    check_ports_free([ports.server, ports.cmd], got.cmd_bind_ip)
    template = load_template(cfg.paths.imex_config_template, auth=cfg.imex.auth.on)
    ensure_secure_dir(cfg.paths.run_dir)
    jdir = job_dir(cfg, ctx.job_id)
    run.journal.add("files", lambda: _undo_files(jdir))
    remove_path(jdir)
    ensure_secure_dir(jdir, 0o700, search_uid=ctx.uid, warn=log.get_logger().warning)  # the job's user: its facts only
    atomic_write(jdir / jobdir.NODES_CONFIG, nodes_cfg, 0o600, durable=False)
    auth = _auth_settings(run, jdir, (got.entries[node_id], got.cmd_bind_ip)) \
        if cfg.imex.auth.on else None
    atomic_write(jdir / jobdir.CONFIG, render_daemon_config(
        template, nodes_config=jdir / jobdir.NODES_CONFIG, ports=ports,
        log_file=jdir / jobdir.DAEMON_LOG, wait_for_quorum=cfg.imex.wait_for_quorum,
        cmd_bind_ip=got.cmd_bind_ip, grace_time=cfg.imex.node_disconnected_grace_time,
        auth=auth), 0o600, durable=False)
    number = group.channel if nd.channel_mode == "imexctl" else None
    run.record = DomainRecord(
        job_id=ctx.job_id, uid=ctx.uid, user=ctx.user, nodes=members,
        addresses=list(got.entries), node_id=node_id,
        digest=domain_digest(nodes_cfg, ports, number),
        server_port=ports.server, cmd_port=ports.cmd, channel=number,
        channel_rule=nd.channel_rule, job_dir=str(jdir),
        boot_id=current_boot_id(cfg) or "", decision_source=nd.source,
        clique=group.key, imexctl_version=__version__)
    run.store.save(run.record)


def _auth_settings(run: PrologRun, jdir: Path, own: tuple[str, str]) -> dict[str, str]:
    """config.cfg's authentication keys (imex.auth): the site's checked files, or this
    job's credentials written into ``jdir``. A file that cannot serve is a node fault
    naming it (a tray without the site secret or with an expired certificate). ``own``:
    this tray's nodes_config.cfg entry and command address."""
    from imexctl.imex import auth
    from imexctl.imex.render import auth_settings

    imex, (nd, group) = run.cfg.imex, run.group()
    try:
        if imex.auth == AuthMode.SITE:
            site = auth.load_site(imex, address=own[0])
            auth.remember_site_loaded(jdir, auth.site_fingerprint(imex))
            return auth_settings(key=site.key, cert=site.cert.path, ca=site.ca.path,
                                 target=imex.auth_target)
        cluster = imex.auth_cluster or (run.conf.get("ClusterName") if run.conf else None) or ""
        creds = auth.issue_job_credentials(
            jdir, imex.auth_secret_file, cluster=cluster, job_id=nd.domain_id,
            restart=run.ctx.restart_count, group=group.key, node=run.ctx.node,
            incarnation=_incarnation(run), addresses=own,
            end_time=run.ctx.end_time, lifetime_h=imex.auth_cert_lifetime_h)
    except auth.AuthError as exc:
        raise NodeFault(str(exc)) from None
    return auth_settings(key=creds.key, cert=creds.cert, ca=creds.ca, target=creds.target)


def _incarnation(run: PrologRun) -> int:
    """What tells this job instance from an earlier job with the same id, identically on
    every tray of the domain (audit S4-1): the SubmitTime of the job whose id keys the
    domain. A het job's components each have their own SubmitTime, so every component's
    trays read the leader's (one query, het components other than the leader only)."""
    if run.decision is None or run.job is None:
        raise RuntimeError("no decision before the allocation step")
    domain_id = run.decision.domain_id
    job = run.job_record() if domain_id == run.ctx.job_id else run.slurm.job(domain_id)
    submitted = job.submit_time
    if not isinstance(submitted, int) or submitted <= 0:
        raise JobFault(f"job {domain_id}'s SubmitTime is unknown: no job credentials "
                       "can be derived for this instance of the job id")
    return submitted


def _channel(run: PrologRun) -> None:
    from imexctl.tray.channels import (apply_channel0_policy, create_channel, read_driver_params,
                                  read_major)

    cfg, ctx, record = run.cfg, run.ctx, run.domain()
    number = record.channel
    if number is None:
        _check_slurm_channels(cfg)
        return
    warning = apply_channel0_policy(cfg.paths.channel_dir, cfg.channels.channel0)
    if warning:
        log.get_logger().warning(warning)
    major = read_major(cfg.paths.proc_devices)
    count = read_driver_params(cfg.channels.params_file).channel_count
    _remove_leaked_channel(cfg, record)
    run.journal.add("channel", lambda: _undo_channel(cfg, number))
    path = create_channel(cfg.paths.channel_dir, number, major, ctx.uid,
                          cfg.channels.file_mode, count=count)
    log.get_logger().info("channel created", channel=record.channel, path=str(path),
                          rule=record.channel_rule)


def _check_slurm_channels(cfg: Config) -> None:
    """switch/nvidia_imex owns the channel: it only works where the driver registers the
    channel major. Without it slurmd logs "major device not found, plugin disabled" and
    runs the job with no channel at all; say so on this tray instead."""
    from imexctl.tray.channels import read_major
    from imexctl.rules.groups import ChannelError

    try:
        read_major(cfg.paths.proc_devices)
    except ChannelError as exc:
        raise NodeFault(f"Slurm's switch/nvidia_imex owns the channel but cannot make one "
                        f"on this tray: {exc}") from None


def _remove_leaked_channel(cfg: Config, record: DomainRecord) -> None:
    """Channel devices no domain owns are leaks of earlier jobs (the node lock is held, the
    only record is this job's, and IMEX jobs are node-exclusive): remove them rather than
    drain a healthy tray for one of our number, or leave the others for health."""
    from imexctl.tray.channels import list_channels, remove_channels

    present = list_channels(cfg.paths.channel_dir)
    leaked = {n for n, st in present.items()
              if n != record.channel or st.st_uid != record.uid}
    if leaked:
        remove_channels(cfg.paths.channel_dir, leaked)
        log.get_logger().warning("removed leaked channels no domain owns",
                                 channels=sorted(leaked))


def _start(run: PrologRun) -> None:
    from imexctl.imex import launcher

    cfg, record = run.cfg, run.domain()
    jdir = Path(record.job_dir)
    record.phase = "starting"
    run.store.save(record)
    # Journalled before the spawn: a daemon (or unit) that comes up although the start
    # reported a failure is still stopped, found by its argv or unit name.
    # A per-job domain has nothing to recover: a persist.dat left by a daemon killed
    # uncleanly (ours after a crash, or another tool's) would hold this one in
    # WAITING_FOR_RECOVERY. The node lock is held and IMEX jobs are node-exclusive.
    forget_importers(cfg)
    run.journal.add("daemon", lambda: stop_job_daemons(
        cfg, record.job_id, record.daemon, jdir / jobdir.CONFIG)[1])
    try:
        if cfg.imex.launcher == "systemd":
            ident = launcher.start_systemd(record.job_id)
        else:
            ident = launcher.start_direct(cfg.paths.imex_binary, jdir / jobdir.CONFIG,
                                          jdir / jobdir.STDIO,
                                          launcher.environment_file(cfg.imex.environment_file))
    except NodeFault as exc:
        raise NodeFault(exc.cause + kept_log_note(cfg, jdir)) from None
    record.daemon = ident
    run.store.save(record)
    log.get_logger().info("daemon started", pid=ident.pid, launcher=ident.launcher)


def _wait_ready(run: PrologRun) -> None:
    from imexctl.imex import launcher

    record = run.domain()
    try:
        wait_ready(run.cfg, record, list(record.nodes), run.ready_timeout_s, run.ctx.node)
    except NodeFault as exc:
        raise NodeFault(exc.cause + kept_log_note(run.cfg, Path(record.job_dir))) from None
    if record.daemon is not None:
        launcher.refresh_exe(record.daemon)


def _record(run: PrologRun) -> None:
    record, (nd, group) = run.domain(), run.group()
    write_facts(run, state="UP", channel=record.channel, members=record.nodes,
                 clique=group.key, source=nd.source, mode=nd.channel_mode,
                 reason=nd.reason, digest=record.digest)
    record.phase = "ready"
    record.steps_ms = dict(run.timings)
    run.store.save(record)


PROLOG_STEPS: list[Step] = [
    Step("context", _context),
    Step("fabric", _fabric),
    Step("allocation", allocation),
    Step("ownership", _ownership),
    Step("render", _render),
    Step("channel", _channel),
    Step("start", _start),
    Step("wait-ready", _wait_ready),
    Step("record", _record),
]


# ------------------------------------------------------------ the persistent tray's path
# ``imex.lifetime = "persistent"`` (issue 37): the tray's daemon, started by ``imexctl
# recover``, serves every job; a job gets only its channel (the controller's decision, as
# on the per-job path), its job directory with its facts, and a record of its own in
# domain.json (no daemon, the persistent domain's members, digest and ports) so that the
# epilog knows what to remove. The prolog never starts, stops or restarts the shared daemon.
def _persistent_ownership(run: PrologRun) -> None:
    """The node lock, and domain.json free for this job: a running job's record refuses
    the job (jobs are node-exclusive: one job's channel per tray); an ended job's channel
    and files are removed (never a daemon: none is a job's here)."""
    node = run.ctx.node
    try:
        run.stack.enter_context(run.store.locked(timeout_s=lock_wait_s(run.cfg)))
    except LockTimeout as exc:
        raise JobFault(f"node {node} is busy with another IMEX job ({exc}); IMEX needs "
                       "node-exclusive jobs") from None
    run.store.sweep_temp()
    run.journal.add("record", lambda: _undo_record(run))
    record = run.store.load()
    if record is None:
        _persistent_owner(run)
        return
    logger = log.get_logger()
    if record.job_id == run.ctx.job_id:
        logger.warning("prolog re-run for the same job: removing its old channel and files")
    elif owner_alive(run.slurm, record, node):
        raise JobFault(f"node {node} IMEX channel is held by running job {record.job_id}; "
                       "IMEX needs node-exclusive jobs")
    else:
        logger.warning("channel and files of an ended job found: removing them",
                       stale_job=record.job_id)
    report = teardown_domain(run.cfg, record, run.store)
    if not report.ok:
        raise NodeFault(f"channel or files of job {record.job_id} could not be removed: "
                        f"{report.failures[0][1]}")
    _persistent_owner(run)


def _persistent_owner(run: PrologRun) -> None:
    """No IMEX daemon imexctl did not start runs beside the persistent one (the packaged
    nvidia-imex.service would fight it for the fabric); IMEX is expected here from now on
    (the after-hook writes up, failed or idle)."""
    from imexctl.tray import expected

    _one_owner(run)
    expected.write(run.cfg, expected.STARTING, job_id=run.ctx.job_id)


def _persistent_ready(run: PrologRun) -> None:
    """The tray's persistent domain is the one of this job's clique and serves: its record
    in persistent.json (started this boot), its daemon alive, local ``-q`` READY. Anything
    else is a node fault naming it; the shared daemon is never (re)started here (recover
    and health own it)."""
    cfg, (_, group) = run.cfg, run.group()
    try:
        record = run.store.load_persistent()
    except RecordUnreadable as exc:
        raise NodeFault(f"persistent domain record unreadable: {exc}") from None
    if record is None:
        raise NodeFault("no persistent IMEX domain on this tray (imexctl recover starts it)")
    if record.clique != group.key:
        raise NodeFault(f"the persistent IMEX domain here is clique {record.clique}, "
                        f"not the job's clique {group.key}")
    boot = current_boot_id(cfg) or ""
    if record.boot_id and boot and record.boot_id != boot:
        raise NodeFault("the persistent IMEX domain was started in an earlier boot "
                        "(imexctl recover starts it anew)")
    if record.phase != "ready" or record.daemon is None:
        raise NodeFault(f"the persistent IMEX domain is not ready (phase {record.phase})")
    if not is_alive(record.daemon):
        raise NodeFault(f"the persistent nvidia-imex (pid {record.daemon.pid}) is not running")
    state = persistent.ctl(cfg).local()
    if state != persistent.READY:
        raise NodeFault(f"the persistent nvidia-imex (pid {record.daemon.pid}) is not "
                        f"READY (-q: {state})")
    # The job's trays, not the whole clique: a tray rebooting elsewhere holds no job.
    job_nodes = list(group.members)
    budget_s = effective_ready_timeout(cfg, local_conf(cfg, job_nodes))
    lacking = persistent.wait_job_trays_up(cfg, record, job_nodes, budget_s)
    if lacking:
        mine = [w for w in lacking if w.split(" ", 1)[0] == run.ctx.node]
        shown = "; ".join(lacking[:4]) + ("; ..." if len(lacking) > 4 else "")
        what = (f"the job's trays are not UP in the persistent IMEX domain after "
                f"{budget_s:.0f}s ({shown})")
        if mine:      # this tray's own row or links: its fault
            raise NodeFault(what)
        raise JobFault(what)     # another tray's: its own prolog or health names it
    run.persistent = record


def _persistent_claim(run: PrologRun) -> None:
    """This job's record (domain.json) and job directory: what the epilog removes."""
    cfg, ctx, (nd, group) = run.cfg, run.ctx, run.group()
    domain = run.persistent
    if domain is None:
        raise RuntimeError("no persistent domain before the persistent-ready step")
    ensure_secure_dir(cfg.paths.run_dir)
    jdir = job_dir(cfg, ctx.job_id)
    run.journal.add("files", lambda: _undo_files(jdir))
    remove_path(jdir)
    ensure_secure_dir(jdir, 0o700, search_uid=ctx.uid, warn=log.get_logger().warning)
    number = group.channel if nd.channel_mode == "imexctl" else None
    run.record = DomainRecord(
        job_id=ctx.job_id, uid=ctx.uid, user=ctx.user, nodes=list(domain.nodes),
        addresses=list(domain.addresses), node_id=domain.node_id, digest=domain.digest,
        server_port=domain.server_port, cmd_port=domain.cmd_port, channel=number,
        channel_rule=nd.channel_rule, job_dir=str(jdir), phase="starting",
        boot_id=current_boot_id(cfg) or "", decision_source=nd.source, clique=group.key,
        imexctl_version=__version__, on_persistent=True)
    run.store.save(run.record)


PERSISTENT_PROLOG_STEPS: list[Step] = [
    Step("context", _context),
    Step("fabric", _fabric),
    Step("allocation", allocation),
    Step("ownership", _persistent_ownership),
    Step("persistent-ready", _persistent_ready),
    Step("claim", _persistent_claim),
    Step("channel", _channel),
    Step("record", _record),
]


# ---------------------------------------------------------------------------- undo
def _undo_record(run: PrologRun) -> str | None:
    """Clear this run's record; keep it (phase ``stuck``) when the daemon could not be
    stopped, so status, health and the next prolog still see it."""
    if run.record is None:
        return None
    if any(what == "daemon" for what, _ in run.journal.problems):
        run.record.phase = "stuck"
        run.store.save(run.record)
        return None
    run.store.clear()
    path = run.store.dir / RECORD
    return f"{path} still present" if os.path.lexists(path) else None


def _undo_files(jdir: Path) -> str | None:
    remove_path(jdir)
    return f"{jdir} still present" if os.path.lexists(jdir) else None


def _undo_channel(cfg: Config, number: int) -> str | None:
    from imexctl.tray.channels import list_channels, remove_channels
    remove_channels(cfg.paths.channel_dir, {number})
    if number in list_channels(cfg.paths.channel_dir):
        return f"channel{number} still present"
    return None


