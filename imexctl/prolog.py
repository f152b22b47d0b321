"""The node prolog: bring up one job's IMEX domain on this tray, as declared steps.

``PROLOG_STEPS`` is the whole prolog; ``runner.run_steps`` runs it, names the step of any
fault and undoes what the steps recorded in the journal (newest first: daemon, channel,
files, record). Outcome rules are in ``outcome.py``: a job fault (allocation spans
cliques, node owned by another job) refuses the job and drains nothing; a node fault
drains this tray with ``imexctl: prolog/<step>: <cause>``.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from imexctl import log
from imexctl.config import Config
from imexctl.errors import JobFault, NodeFault
from imexctl.fsutil import atomic_write, ensure_secure_dir, read_json, remove_path, \
    tail_bytes, write_json
from imexctl.outcome import conclude
from imexctl.ownership import owner_alive
from imexctl.policy import wants_imex
from imexctl.runner import Done, RunContext, Step, run_steps
from imexctl.state import FAILED_DAEMON_LOG, RECORD, DomainRecord, LockTimeout, StateStore
from imexctl.teardown import job_dir, stop_job_daemons, teardown_domain
from imexctl.topology import EXTRA_KEY, allocation_mismatch
from imexctl.tray import published_identity

SWITCH_TYPE_CACHE = "switch-type.json"
SWITCH_TYPE_TTL_S = 600.0
UNPUBLISHED_WAIT_S = 3.0   # how long a tray waits for peers to publish their identity
FAILED_LOG_TAIL = 32 * 1024  # bytes kept of each daemon log of a failed start
DAEMON_LOGS = ("nvidia-imex.log", "daemon.stdio")


@dataclass(kw_only=True)
class PrologRun(RunContext):
    cfg: Config
    slurm: Any
    ctx: Any
    store: StateStore
    job: Any = None
    ident: Any = None                       # this tray's live fabric identity
    node_records: dict[str, Any] | None = None
    record: DomainRecord | None = None


def run_prolog(cfg: Config, slurm: Any, ctx: Any) -> int:
    """Run the prolog for ``ctx`` (validated hook context); returns the hook's exit code."""
    run = PrologRun(cfg=cfg, slurm=slurm, ctx=ctx, store=StateStore(cfg.paths.state_dir))
    result = run_steps("prolog", PROLOG_STEPS, run)
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
    run.job = run.slurm.job(run.ctx.job_id)
    if not wants_imex(run.cfg, run.job):
        log.get_logger().info(f"job does not want IMEX (policy {run.cfg.policy.mode}); "
                              "nothing to do")
        raise Done


def _fabric(run: PrologRun) -> None:
    """This tray's verdict: an IMEX tray joins (degraded bandwidth is a warning unless the
    site drains for it); an unfit one is a node fault; a tray without NVLink fabric is
    not an IMEX tray: no domain, no drain, unless the job asked for IMEX by feature."""
    from imexctl.fabric import local_verdict

    verdict = local_verdict(run.cfg)
    logger = log.get_logger()
    if verdict.kind == "not_imex":
        if run.cfg.policy.mode == "feature":
            raise JobFault(f"job asked for IMEX but {run.ctx.node} is not an IMEX tray "
                           f"({verdict.detail})")
        logger.info("not an IMEX tray: job runs without an IMEX domain", detail=verdict.detail)
        raise Done
    if verdict.kind != "imex" or verdict.clique is None:
        raise NodeFault(verdict.detail)
    if verdict.degraded:
        logger.warning("IMEX tray with degraded fabric bandwidth", detail=verdict.detail)
    run.ident = verdict.clique


def _allocation(run: PrologRun) -> None:
    job, node, ident = run.job, run.ctx.node, run.ident
    run.node_records = records = run.slurm.nodes(list(job.nodes))
    published = {n: published_identity(getattr(records.get(n), "extra", ""))
                 for n in job.nodes}
    mine = published.get(node)
    if mine is None or mine.clique != ident.clique:
        run.slurm.extra_merge(node, EXTRA_KEY, ident.to_extra())
        if mine is not None:
            raise NodeFault(f"live clique {ident.clique} differs from published "
                            f"{mine.clique} (republished)")
        published[node] = ident
    reason = _allocation_verdict(run.slurm, published)
    if reason:
        raise JobFault(reason)


def _allocation_verdict(slurm: Any, published: dict) -> str | None:
    """allocation_mismatch, but trays that have not published yet get a moment: on the
    first job after a reboot every tray publishes itself in this same step."""
    deadline = time.monotonic() + UNPUBLISHED_WAIT_S
    while True:
        reason = allocation_mismatch(published)
        missing = [n for n, ident in published.items() if ident is None]
        if not missing or time.monotonic() > deadline:
            return reason
        time.sleep(0.25)
        fresh = slurm.nodes(missing)
        published.update({n: published_identity(getattr(fresh.get(n), "extra", ""))
                          for n in missing})


def _ownership(run: PrologRun) -> None:
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
    if record is None:
        return
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


def _render(run: PrologRun) -> None:
    from imexctl.channels import channel_for_job, read_driver_params
    from imexctl.imex.render import (RenderError, domain_digest, job_ports, load_template,
                                     node_entries, render_daemon_config,
                                     render_nodes_config)
    from imexctl.recover import current_boot_id

    cfg, ctx, nodes = run.cfg, run.ctx, list(run.job.nodes)
    slurm_addrs = node_addresses(nodes, run.node_records or {}, ctx.node)
    try:
        got = node_entries(slurm_addrs, nodes.index(ctx.node), labels=nodes,
                           host_names=cfg.imex.node_entries == "hostname")
        nodes_cfg = render_nodes_config(got.entries)
    except RenderError as exc:
        raise NodeFault(str(exc)) from None
    addresses = list(got.entries)
    ports = job_ports(ctx.job_id, cfg.imex.server_port_base, cfg.imex.cmd_port_base,
                      cfg.imex.port_span)
    check_ports_free([ports.server, ports.cmd], got.cmd_bind_ip)
    channel = None
    if not _slurm_manages_channels(run):
        count = read_driver_params(cfg.channels.params_file).channel_count
        channel = channel_for_job(ctx.job_id, count)
    template = load_template(cfg.paths.imex_config_template)
    ensure_secure_dir(cfg.paths.run_dir)
    jdir = job_dir(cfg, ctx.job_id)
    run.journal.add("files", lambda: _undo_files(jdir))
    remove_path(jdir)
    jdir.mkdir(mode=0o755)
    atomic_write(jdir / "nodes_config.cfg", nodes_cfg)
    atomic_write(jdir / "config.cfg", render_daemon_config(
        template, nodes_config=jdir / "nodes_config.cfg", ports=ports,
        log_file=jdir / "nvidia-imex.log", wait_for_quorum=cfg.imex.wait_for_quorum,
        cmd_bind_ip=got.cmd_bind_ip))
    number = channel.number if channel else None
    run.record = DomainRecord(
        job_id=ctx.job_id, uid=ctx.uid, user=ctx.user, nodes=nodes, addresses=addresses,
        node_id=nodes.index(ctx.node), digest=domain_digest(nodes_cfg, ports, number),
        server_port=ports.server, cmd_port=ports.cmd, channel=number,
        channel_rule=channel.rule if channel else "slurm switch/nvidia_imex",
        job_dir=str(jdir), boot_id=current_boot_id(cfg) or "")
    run.store.save(run.record)


def _channel(run: PrologRun) -> None:
    from imexctl.channels import (apply_channel0_policy, create_channel, read_driver_params,
                                  read_major)

    cfg, ctx, record = run.cfg, run.ctx, run.record
    if record.channel is None:
        return
    warning = apply_channel0_policy(cfg.paths.channel_dir, cfg.channels.channel0)
    if warning:
        log.get_logger().warning(warning)
    major = read_major(cfg.paths.proc_devices)
    count = read_driver_params(cfg.channels.params_file).channel_count
    _remove_leaked_channel(cfg, record)
    run.journal.add("channel", lambda: _undo_channel(cfg, record.channel))
    path = create_channel(cfg.paths.channel_dir, record.channel, major, ctx.uid,
                          cfg.channels.file_mode, count=count)
    log.get_logger().info("channel created", channel=record.channel, path=str(path),
                          rule=record.channel_rule)


def _remove_leaked_channel(cfg: Config, record: DomainRecord) -> None:
    """A device of our channel number that no domain owns is a leak of an earlier job (the
    node lock is held and the only record is this job's; jobs are node-exclusive):
    remove it rather than drain a healthy tray for it, as health would."""
    from imexctl.channels import list_channels, remove_channels

    found = list_channels(cfg.paths.channel_dir).get(record.channel)
    if found is None or found.st_uid == record.uid:
        return  # absent, or ours from a re-run prolog: create_channel checks it
    remove_channels(cfg.paths.channel_dir, {record.channel})
    log.get_logger().warning("removed leaked channel no domain owns", channel=record.channel,
                             owner_uid=found.st_uid)


def _start(run: PrologRun) -> None:
    from imexctl.imex import launcher

    cfg, record = run.cfg, run.record
    jdir = Path(record.job_dir)
    record.phase = "starting"
    run.store.save(record)
    # Journalled before the spawn: a daemon (or unit) that comes up although the start
    # reported a failure is still stopped, found by its argv or unit name.
    run.journal.add("daemon", lambda: stop_job_daemons(
        cfg, record.job_id, record.daemon, jdir / "config.cfg")[1])
    try:
        if cfg.imex.launcher == "systemd":
            ident = launcher.start_systemd(record.job_id)
        else:
            ident = launcher.start_direct(cfg.paths.imex_binary, jdir / "config.cfg",
                                          jdir / "daemon.stdio", sim_env(cfg))
    except NodeFault as exc:
        raise NodeFault(exc.cause + _kept_log_note(cfg, jdir)) from None
    record.daemon = ident
    run.store.save(record)
    log.get_logger().info("daemon started", pid=ident.pid, launcher=ident.launcher)


def _wait_ready(run: PrologRun) -> None:
    from imexctl.imex import launcher

    record = run.record
    try:
        wait_ready(run.cfg, record, list(run.job.nodes), run.cfg.imex.ready_timeout_s,
                   run.ctx.node)
    except NodeFault as exc:
        raise NodeFault(exc.cause + _kept_log_note(run.cfg, Path(record.job_dir))) from None
    launcher.refresh_exe(record.daemon)


def _record(run: PrologRun) -> None:
    run.record.phase = "ready"
    run.record.steps_ms = dict(run.timings)
    run.store.save(run.record)


PROLOG_STEPS: list[Step] = [
    Step("context", _context),
    Step("fabric", _fabric),
    Step("allocation", _allocation),
    Step("ownership", _ownership),
    Step("render", _render),
    Step("channel", _channel),
    Step("start", _start),
    Step("wait-ready", _wait_ready),
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
    from imexctl.channels import list_channels, remove_channels
    remove_channels(cfg.paths.channel_dir, {number})
    if number in list_channels(cfg.paths.channel_dir):
        return f"channel{number} still present"
    return None


# ---------------------------------------------------------------------------- helpers
def node_addresses(nodes: list[str], records: dict[str, Any], node: str) -> list[str]:
    """The job's tray addresses in job order; NodeFault when Slurm's answer cannot make
    one domain (a tray without NodeAddr, two trays on one address, this tray missing)."""
    if node not in nodes:
        raise NodeFault(f"this tray ({node}) is not in the job's node list from Slurm")
    missing = [n for n in nodes if not getattr(records.get(n), "addr", "")]
    if missing:
        raise NodeFault(f"no NodeAddr for {','.join(missing)}")
    return [records[n].addr for n in nodes]


def check_ports_free(ports: list[int], bind_ip: str) -> None:
    """Only a listener that would stop the daemon binding on this tray's address counts
    (an outgoing connection on the same number does not)."""
    from imexctl.ports import describe, listeners
    busy = listeners(ports, addresses=[bind_ip])
    if busy:
        raise NodeFault(f"port {describe(busy)} already in use")


def sim_env(cfg: Config) -> dict[str, str]:
    """Settings of the simulated daemon, passed as environment."""
    env = {}
    if cfg.sim.faults_file:
        env["IMEXCTL_SIM_FAULTS"] = str(cfg.sim.faults_file)
    if cfg.sim.sim_run_dir:
        env["IMEXCTL_SIM_RUN_DIR"] = str(cfg.sim.sim_run_dir)
    if cfg.sim.time_scale != 1.0:
        env["IMEXCTL_SIM_TIME_SCALE"] = str(cfg.sim.time_scale)
    return env


def _slurm_manages_channels(run: PrologRun) -> bool:
    mode = run.cfg.channels.mode
    if mode == "auto":
        return "nvidia_imex" in _switch_type(run)
    return mode == "slurm"


def _switch_type(run: PrologRun) -> str:
    """Slurm's SwitchType, cached in the state dir for SWITCH_TYPE_TTL_S: every prolog on
    every tray needs it, and it changes only with a slurmctld restart. A cache that cannot
    be used (not ours, wrong shape, from the future) is a miss."""
    cache = run.cfg.paths.state_dir / SWITCH_TYPE_CACHE
    try:
        cached = read_json(cache)
    except (OSError, ValueError):
        cached = None
    ok = (isinstance(cached, dict) and isinstance(cached.get("value"), str)
          and isinstance(cached.get("at"), (int, float)) and not isinstance(cached["at"], bool))
    age = time.time() - cached["at"] if ok else -1.0
    if ok and 0 <= age < SWITCH_TYPE_TTL_S:
        return cached["value"]
    try:
        value = run.slurm.switch_type() or ""
    except Exception as exc:
        if ok and age >= 0:  # better a stale answer than guessing who owns channels
            return cached["value"]
        raise NodeFault("cannot tell whether Slurm manages IMEX channels "
                        f"(SwitchType): {exc}") from None
    try:
        ensure_secure_dir(run.cfg.paths.state_dir)
        write_json(cache, {"value": str(value), "at": time.time()})
    except OSError as exc:
        log.get_logger().warning("cannot cache SwitchType", error=str(exc))
    return str(value)


def _kept_log_note(cfg: Config, jdir: Path) -> str:
    kept = keep_daemon_log(cfg, jdir)
    return f" (daemon log kept in {kept})" if kept else ""


def keep_daemon_log(cfg: Config, jdir: Path) -> Path | None:
    """Copy the tail of a failed daemon's logs to ``state_dir/failed-daemon.log`` (bounded,
    replaced by the next failure) before the undo removes the job directory."""
    parts = []
    for name in DAEMON_LOGS:
        try:
            data = tail_bytes(jdir / name, FAILED_LOG_TAIL)
        except OSError:
            continue
        if data:
            parts.append(f"==> {jdir / name} (last {len(data)} bytes) <==\n".encode() + data)
    if not parts:
        return None
    target = cfg.paths.state_dir / FAILED_DAEMON_LOG
    try:
        ensure_secure_dir(cfg.paths.state_dir)
        atomic_write(target, b"\n".join(parts), 0o640)
    except OSError as exc:
        log.get_logger().warning("cannot keep failed daemon log", error=str(exc))
        return None
    return target


def wait_ready(cfg: Config, record: DomainRecord, nodes: list[str], budget_s: float,
               local: str) -> None:
    """Wait (``imex.ready.wait_until_up``: one ctl call per check, SIGUSR1 nudges) until
    the domain is UP. NodeFault when this tray's daemon fails; JobFault when this tray
    is READY but a peer is not (the peer's own prolog drains the peer)."""
    from imexctl.imex import launcher
    from imexctl.imex.ctl import CtlClient
    from imexctl.imex.ready import Member, sigusr1_nudge, wait_until_up

    client = CtlClient(cfg.paths.imex_ctl_binary, Path(record.job_dir) / "config.cfg",
                       sim_env(cfg))
    members = [Member(n, a) for n, a in zip(nodes, record.addresses)]
    res = wait_until_up(client, members, budget_s, local=local,
                        nudge=sigusr1_nudge(record.daemon),
                        alive=lambda: launcher.is_alive(record.daemon))
    log.get_logger().info("wait-ready result", up=res.up, checks=res.checks,
                          nudges=res.nudges, elapsed_ms=round(res.elapsed_s * 1000, 1))
    if res.up:
        return
    if res.daemon_exited:
        raise NodeFault("nvidia-imex exited during start-up")
    if not res.local_ready:
        raise NodeFault(res.reason(budget_s))
    raise JobFault(f"IMEX {res.reason(budget_s)}")
