"""Prolog and epilog of one job's IMEX domain on one tray, as named steps.

Outcome rules (design §2): a job fault (allocation spans cliques, node owned by another
live job) drains nothing — the job is cancelled with an ``imexctl:`` AdminComment and
the hook exits 0, because a non-zero node prolog makes Slurm drain the node. A node
fault drains this node with ``imexctl: <hook>/<step>: <cause>``, cleans up what this run
created and exits 1 (Slurm keeps our reason, fails an srun and requeue-holds a batch job).
"""

from __future__ import annotations

import json
import os
import pwd
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import psutil

from imexctl import log
from imexctl.channels import (ChannelError, channel_for_job, create_channel, list_channels,
                              read_major, remove_channels)
from imexctl.config import Config
from imexctl.errors import EXIT_NODE_FAULT, EXIT_OK, JobFault, NodeFault
from imexctl.fsutil import (UnsafePathError, atomic_write, ensure_secure_dir, read_json,
                             remove_path, write_json)
from imexctl.imex import ctl, launcher
from imexctl.imex.render import (domain_digest, job_ports, load_template,
                                 render_daemon_config, render_nodes_config)
from imexctl.state import DomainRecord, LockTimeout, StateStore
from imexctl.topology import (EXTRA_KEY, TrayIdentity, TrayUnfit, allocation_mismatch,
                              tray_identity)

SWITCH_TYPE_CACHE = "switch-type.json"
SWITCH_TYPE_TTL_S = 600.0
UNPUBLISHED_WAIT_S = 3.0  # how long a tray waits for peers to publish their identity
LIVE_JOB_STATES = {"RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED", "PENDING",
                   "REQUEUED", "RESIZING", "SIGNALING", "STAGE_OUT"}


def job_dir(cfg: Config, job_id: int) -> Path:
    return cfg.paths.run_dir / f"job-{job_id}"


def wants_imex(cfg: Config, job: Any) -> bool:
    """Site policy: which jobs get an IMEX domain."""
    mode = cfg.policy.mode
    if mode == "none":
        return False
    if mode == "all":
        return True
    if mode == "multi-node":
        return len(job.nodes) > 1
    if mode == "partitions":
        return (job.partition or "") in cfg.policy.partitions
    if mode == "feature":
        return cfg.policy.feature in _words(getattr(job, "features", "") or "")
    return False


def _words(text: str) -> set[str]:
    return {w for w in text.replace("&", ",").replace("|", ",").replace("[", ",")
            .replace("]", ",").split(",") if w}


def published_identity(extra: str | None) -> TrayIdentity | None:
    """The identity a tray published in its Slurm Extra field, if any and well-formed."""
    if not extra:
        return None
    try:
        raw = json.loads(extra)
        return TrayIdentity.from_extra(raw[EXTRA_KEY])
    except (ValueError, KeyError, TypeError):
        return None


def local_identity(cfg: Config) -> TrayIdentity:
    from imexctl.fabric import FabricError, read_fabric
    try:
        gpus = read_fabric(cfg.fabric.source, str(cfg.fabric.file) if cfg.fabric.file else None)
    except FabricError as exc:
        raise TrayUnfit(str(exc)) from None
    return tray_identity(gpus)


def sim_env(cfg: Config) -> dict[str, str]:
    env = {}
    if cfg.sim.faults_file:
        env["IMEXCTL_SIM_FAULTS"] = str(cfg.sim.faults_file)
    if cfg.sim.sim_run_dir:
        env["IMEXCTL_SIM_RUN_DIR"] = str(cfg.sim.sim_run_dir)
    if cfg.sim.time_scale != 1.0:
        env["IMEXCTL_SIM_TIME_SCALE"] = str(cfg.sim.time_scale)
    return env


def ports_in_use(ports: list[int]) -> dict[int, int | None]:
    """Which of ``ports`` have a listening or connected TCP socket here (port -> pid)."""
    busy: dict[int, int | None] = {}
    try:
        conns = psutil.net_connections(kind="tcp")
    except psutil.AccessDenied:
        return busy
    for conn in conns:
        if conn.laddr and conn.laddr.port in ports and conn.status in (
                psutil.CONN_LISTEN, psutil.CONN_ESTABLISHED):
            busy.setdefault(conn.laddr.port, conn.pid)
    return busy


@dataclass
class Run:
    """Book-keeping of one hook run: timings and what this run created."""
    timings: dict[str, float] = field(default_factory=dict)
    created: list[Callable[[], None]] = field(default_factory=list)


class Lifecycle:
    def __init__(self, cfg: Config, slurm: Any):
        self.cfg = cfg
        self.slurm = slurm
        self.store = StateStore(cfg.paths.state_dir)
        self.log = log.get_logger()

    # ------------------------------------------------------------------ prolog
    def prolog(self, ctx: Any) -> int:
        run = Run()
        start = time.monotonic()
        step = "context"
        try:
            with log.timed_step("context", run.timings):
                job = self.slurm.job(ctx.job_id)
                if not wants_imex(self.cfg, job):
                    self.log.info("job does not want IMEX (policy %s); nothing to do"
                                  % self.cfg.policy.mode)
                    return EXIT_OK
            step = "fabric"
            with log.timed_step(step, run.timings):
                try:
                    ident = local_identity(self.cfg)
                except TrayUnfit as exc:
                    raise NodeFault(step, str(exc)) from None
            step = "allocation"
            with log.timed_step(step, run.timings):
                records = self.slurm.nodes(list(job.nodes))
                published = {n: published_identity(getattr(records.get(n), "extra", ""))
                             for n in job.nodes}
                mine = published.get(ctx.node)
                if mine is None or mine.clique != ident.clique:
                    self.slurm.extra_merge(ctx.node, EXTRA_KEY, ident.to_extra())
                    if mine is not None:
                        raise NodeFault(step, f"live clique {ident.clique} differs from "
                                              f"published {mine.clique} (republished)")
                    published[ctx.node] = ident
                reason = self._allocation_verdict(job, published)
                if reason:
                    raise JobFault(reason)
            with self.store.locked():
                step = "ownership"
                with log.timed_step(step, run.timings):
                    self._take_ownership(ctx)
                step = "render"
                with log.timed_step(step, run.timings):
                    record = self._render(ctx, job, records, run)
                step = "channel"
                with log.timed_step(step, run.timings):
                    self._channel(ctx, record, run)
                record.phase = "starting"
                self.store.save(record)
                run.created.append(self.store.clear)
                step = "start"
                with log.timed_step(step, run.timings):
                    self._start(record, run)
                    self.store.save(record)
                step = "wait-ready"
                with log.timed_step(step, run.timings):
                    self._wait_ready(record, job.nodes)
                    launcher.refresh_exe(record.daemon)
                record.phase = "ready"
                record.steps_ms = dict(run.timings)
                self.store.save(record)
            self._outcome(ctx, "prolog", "ok", "", run, start)
            self.log.info("IMEX domain ready", digest=record.digest,
                          duration_ms=round((time.monotonic() - start) * 1000, 1))
            return EXIT_OK
        except JobFault as exc:
            self._undo(run)
            return self._job_fault(ctx, str(exc), run, start)
        except NodeFault as exc:
            self._undo(run)
            return self._node_fault(ctx, "prolog", exc.step, exc.cause, run, start)
        except (OSError, ChannelError, launcher.LaunchError, LockTimeout) as exc:
            self._undo(run)
            return self._node_fault(ctx, "prolog", step, str(exc), run, start)

    def _allocation_verdict(self, job: Any, published: dict) -> str | None:
        """allocation_mismatch, but trays that have not published yet get a moment: on the
        first job after a reboot every tray publishes itself in this same step."""
        deadline = time.monotonic() + UNPUBLISHED_WAIT_S
        while True:
            reason = allocation_mismatch(published)
            missing = [n for n, ident in published.items() if ident is None]
            if not missing or time.monotonic() > deadline:
                return reason
            time.sleep(0.25)
            fresh = self.slurm.nodes(missing)
            published.update({n: published_identity(getattr(fresh.get(n), "extra", ""))
                              for n in missing})

    def _take_ownership(self, ctx: Any) -> None:
        record = self.store.load()
        if record is None:
            return
        if record.job_id == ctx.job_id:
            self.log.warning("prolog re-run for the same job: tearing down its old domain")
        elif self._owner_alive(record, ctx.node):
            raise JobFault(f"node {ctx.node} IMEX domain is owned by running job "
                           f"{record.job_id}; per-job IMEX needs node-exclusive jobs")
        else:
            self.log.warning("stale IMEX domain of ended job found: tearing it down",
                             stale_job=record.job_id)
        failures = self._teardown(record)
        if failures:
            raise NodeFault("ownership", f"stale domain of job {record.job_id} could not be "
                                         f"removed: {failures[0][1]}")

    def _owner_alive(self, record: DomainRecord, node: str) -> bool:
        from imexctl.slurm.adapter import SlurmNotFound
        try:
            owner = self.slurm.job(record.job_id)
        except SlurmNotFound:  # unknown to Slurm: it ended long ago
            return False
        # Any other SlurmError propagates: an unreachable slurmctld is not "job gone",
        # and tearing down a live job's domain on that guess would break the job.
        return owner.state.split("+")[0] in LIVE_JOB_STATES and node in owner.nodes

    def _render(self, ctx: Any, job: Any, records: dict, run: Run) -> DomainRecord:
        cfg = self.cfg
        missing = [n for n in job.nodes if not getattr(records.get(n), "addr", "")]
        if missing:
            raise NodeFault("render", f"no NodeAddr for {','.join(missing)}")
        addresses = [records[n].addr for n in job.nodes]
        nodes_cfg = render_nodes_config(addresses)
        ports = job_ports(ctx.job_id, cfg.imex.server_port_base, cfg.imex.cmd_port_base,
                          cfg.imex.port_span)
        busy = ports_in_use([ports.server, ports.cmd])
        if busy:
            desc = ", ".join(f"{p} (pid {pid})" for p, pid in busy.items())
            raise NodeFault("render", f"port {desc} already in use")
        channel = None if self._slurm_manages_channels() else channel_for_job(ctx.job_id)
        ensure_secure_dir(cfg.paths.run_dir)
        jdir = job_dir(cfg, ctx.job_id)
        remove_path(jdir)
        jdir.mkdir(mode=0o755)
        run.created.append(lambda: remove_path(jdir))
        template = load_template(cfg.paths.imex_config_template)
        atomic_write(jdir / "nodes_config.cfg", nodes_cfg)
        atomic_write(jdir / "config.cfg", render_daemon_config(
            template, nodes_config=jdir / "nodes_config.cfg", ports=ports,
            log_file=jdir / "nvidia-imex.log", wait_for_quorum=cfg.imex.wait_for_quorum))
        return DomainRecord(
            job_id=ctx.job_id, uid=ctx.uid, user=ctx.user, nodes=list(job.nodes),
            addresses=addresses, node_id=list(job.nodes).index(ctx.node),
            digest=domain_digest(nodes_cfg, ports, channel.number if channel else None),
            server_port=ports.server, cmd_port=ports.cmd,
            channel=channel.number if channel else None,
            channel_rule=channel.rule if channel else "slurm switch/nvidia_imex",
            job_dir=str(jdir))

    def _slurm_manages_channels(self) -> bool:
        mode = self.cfg.channels.mode
        if mode == "auto":
            return "nvidia_imex" in self._switch_type()
        return mode == "slurm"

    def _switch_type(self) -> str:
        """Slurm's SwitchType, cached in the state dir for SWITCH_TYPE_TTL_S: every prolog
        on every tray needs it, and it changes only with a slurmctld restart."""
        cache = self.cfg.paths.state_dir / SWITCH_TYPE_CACHE
        try:
            cached = read_json(cache)
        except (OSError, ValueError):
            cached = None
        if cached and time.time() - float(cached.get("at", 0)) < SWITCH_TYPE_TTL_S:
            return str(cached.get("value", ""))
        try:
            value = self.slurm.switch_type() or ""
        except Exception as exc:
            if cached:  # better a stale answer than guessing who owns channels
                return str(cached.get("value", ""))
            raise NodeFault("render", "cannot tell whether Slurm manages IMEX channels "
                                      f"(SwitchType): {exc}") from None
        ensure_secure_dir(self.cfg.paths.state_dir)
        write_json(cache, {"value": value, "at": time.time()})
        return value

    def _channel(self, ctx: Any, record: DomainRecord, run: Run) -> None:
        if record.channel is None:
            return
        cfg = self.cfg
        major = read_major(cfg.paths.proc_devices)
        gid = getattr(ctx, "gid", None)
        if gid is None:
            try:
                gid = pwd.getpwuid(ctx.uid).pw_gid
            except KeyError:
                gid = ctx.uid
        path = create_channel(cfg.paths.channel_dir, record.channel, major, ctx.uid, gid,
                              cfg.channels.file_mode)
        run.created.append(lambda: remove_path(path))
        self.log.info("channel created", channel=record.channel, path=str(path),
                      rule=record.channel_rule)

    def _start(self, record: DomainRecord, run: Run) -> None:
        jdir = Path(record.job_dir)
        if self.cfg.imex.launcher == "systemd":
            ident = launcher.start_systemd(record.job_id)
        else:
            ident = launcher.start_direct(self.cfg.paths.imex_binary, jdir / "config.cfg",
                                          jdir / "daemon.stdio", sim_env(self.cfg))
        record.daemon = ident
        run.created.insert(0, lambda: launcher.stop(ident, self.cfg.imex.stop_grace_s))
        self.log.info("daemon started", pid=ident.pid, launcher=ident.launcher)

    def _wait_ready(self, record: DomainRecord, nodes: list[str]) -> None:
        import tenacity

        cfg = self.cfg
        config = Path(record.job_dir) / "config.cfg"
        last: dict[str, Any] = {"local": "?", "view": None}

        def check() -> bool:
            if not launcher.is_alive(record.daemon):
                raise NodeFault("wait-ready", "nvidia-imex exited during start-up (see "
                                              f"{record.job_dir}/nvidia-imex.log)")
            last["local"] = ctl.query_local(cfg.paths.imex_ctl_binary, config)
            if last["local"] != "READY":
                return False
            view = ctl.query_domain(cfg.paths.imex_ctl_binary, config)
            last["view"] = view
            return view.up

        retry = tenacity.Retrying(
            stop=tenacity.stop_after_delay(cfg.imex.ready_timeout_s),
            wait=tenacity.wait_exponential(multiplier=0.05, min=0.05, max=1.0),
            retry=tenacity.retry_if_result(lambda ok: not ok), reraise=True)
        try:
            retry(check)
        except tenacity.RetryError:
            view = last["view"]
            timeout = f"{cfg.imex.ready_timeout_s:g}s"
            if last["local"] != "READY":
                raise NodeFault("wait-ready", f"local daemon {last['local']} after "
                                              f"{timeout}") from None
            names = dict(zip(record.addresses, nodes))
            problems = [self._name_hosts(p, names) for p in view.problems()] if view else []
            detail = f" ({'; '.join(problems[:4])})" if problems else ""
            status = view.status if view else "UNKNOWN"
            # This tray is READY; a peer is not. The peer's own prolog drains the peer, so
            # draining here too would take healthy trays out with it: refuse the job instead.
            raise JobFault(f"IMEX domain {status} after {timeout}{detail}") from None

    @staticmethod
    def _name_hosts(text: str, names: dict[str, str]) -> str:
        for addr, node in names.items():
            text = text.replace(addr, node)
        return text

    def _undo(self, run: Run) -> None:
        for action in reversed(run.created):
            try:
                action()
            except Exception as exc:  # keep undoing the rest
                self.log.error("cleanup step failed", error=str(exc))
        run.created.clear()

    def _job_fault(self, ctx: Any, reason: str, run: Run, start: float) -> int:
        text = f"imexctl: {reason}"
        self.log.error("job refused", reason=text)
        self._outcome(ctx, "prolog", "job-fault", text, run, start)
        # Every tray of the job reaches the same verdict at about the same time: the first
        # one cancels, the others find the job already ending. Only a job that is still
        # starting and could not be cancelled makes this hook fail (it must not run).
        try:
            if self._job_starting(ctx.job_id):
                self.slurm.set_admin_comment(ctx.job_id, text)
                self.slurm.cancel(ctx.job_id)
        except Exception as exc:
            try:
                starting = self._job_starting(ctx.job_id)
            except Exception:
                starting = True
            if starting:
                self.log.error("could not cancel refused job", error=str(exc))
                return EXIT_NODE_FAULT
        return EXIT_OK

    def _job_starting(self, job_id: int) -> bool:
        from imexctl.slurm.adapter import SlurmNotFound
        try:
            state = self.slurm.job(job_id).state.split("+")[0]
        except SlurmNotFound:
            return False
        if state not in ("RUNNING", "CONFIGURING"):
            # Already requeued (another tray's prolog failed), cancelled or ended.
            self.log.info("job no longer starting; leaving it as it is", job_state=state)
            return False
        return True

    def _node_fault(self, ctx: Any, hook: str, step: str, cause: str, run: Run,
                    start: float) -> int:
        reason = f"imexctl: {hook}/{step}: {cause}"[:250]
        self.log.error("node fault", reason=reason)
        self._outcome(ctx, hook, "node-fault", reason, run, start)
        try:
            drained = self.slurm.drain(ctx.node, reason)
            if drained is False:
                self.log.warning("node already drained by someone else; reason kept")
        except Exception as exc:
            self.log.error("could not drain node", error=str(exc))
        return EXIT_NODE_FAULT

    def _outcome(self, ctx: Any, hook: str, result: str, reason: str, run: Run,
                 start: float) -> None:
        try:
            self.store.save_outcome({
                "job_id": ctx.job_id, "hook": hook, "result": result, "reason": reason,
                "steps_ms": run.timings, "finished_at": time.time(),
                "duration_ms": round((time.monotonic() - start) * 1000, 1)})
        except (OSError, UnsafePathError) as exc:
            self.log.error("cannot record outcome", error=str(exc))

    # ------------------------------------------------------------------ epilog
    def epilog(self, ctx: Any) -> int:
        run = Run()
        start = time.monotonic()
        try:
            with self.store.locked():
                record = self.store.load()
                if record is None or record.job_id != ctx.job_id:
                    failures = self._scrub_job_files(ctx.job_id)
                    if not failures and record is None:
                        failures = self._scrub_orphan_channels()
                    if not failures:
                        self.log.info("no IMEX domain of this job here; nothing to do")
                        return EXIT_OK
                else:
                    failures = self._teardown(record, run.timings)
        except LockTimeout as exc:
            failures = [("lock", str(exc))]
        if failures:
            step, cause = failures[0]
            more = f" (+{len(failures) - 1} more)" if len(failures) > 1 else ""
            return self._node_fault(ctx, "epilog", step, cause + more, run, start)
        self._outcome(ctx, "epilog", "ok", "", run, start)
        self.log.info("IMEX domain torn down and verified",
                      duration_ms=round((time.monotonic() - start) * 1000, 1))
        return EXIT_OK

    def _teardown(self, record: DomainRecord,
                  timings: dict[str, float] | None = None) -> list[tuple[str, str]]:
        """Every step runs even when an earlier one failed; failures are returned."""
        failures: list[tuple[str, str]] = []
        timings = {} if timings is None else timings

        def attempt(step: str, action: Callable[[], str | None]) -> None:
            try:
                with log.timed_step(step, timings):
                    problem = action()
                if problem:
                    failures.append((step, problem))
            except Exception as exc:
                failures.append((step, str(exc) or type(exc).__name__))

        record.phase = "tearing-down"

        def stop_daemon() -> str | None:
            if record.daemon is None:
                return None
            result = launcher.stop(record.daemon, self.cfg.imex.stop_grace_s)
            self.log.info("daemon stop", outcome=result.outcome, detail=result.detail)
            return None if result.ok else f"daemon {result.outcome}: {result.detail}"

        def ports_free() -> str | None:
            deadline = time.monotonic() + 5
            ports = [record.server_port, record.cmd_port]
            while True:
                busy = {p: pid for p, pid in ports_in_use(ports).items()}
                listening = {p: pid for p, pid in busy.items() if pid is not None}
                if not listening or time.monotonic() > deadline:
                    break
                time.sleep(0.1)
            if listening:
                return "ports still in use: " + ", ".join(
                    f"{p} (pid {pid})" for p, pid in listening.items())
            return None

        def channel() -> str | None:
            if record.channel is None:
                return None
            remove_channels(self.cfg.paths.channel_dir, {record.channel})
            if record.channel in list_channels(self.cfg.paths.channel_dir):
                return f"channel{record.channel} still present"
            return None

        def files() -> str | None:
            jdir = job_dir(self.cfg, record.job_id)
            remove_path(jdir)
            return f"{jdir} still present" if os.path.lexists(jdir) else None

        def record_gone() -> str | None:
            self.store.clear()
            return None

        attempt("stop-daemon", stop_daemon)
        attempt("ports", ports_free)
        attempt("channel", channel)
        attempt("files", files)
        attempt("record", record_gone)
        return failures

    def _scrub_job_files(self, job_id: int) -> list[tuple[str, str]]:
        jdir = job_dir(self.cfg, job_id)
        try:
            if remove_path(jdir):
                self.log.warning("removed leftover job directory", path=str(jdir))
        except OSError as exc:
            return [("files", f"{jdir}: {exc.strerror}")]
        return []

    def _scrub_orphan_channels(self) -> list[tuple[str, str]]:
        """No domain is owned here, so any channel node left behind is a leak."""
        try:
            removed = remove_channels(self.cfg.paths.channel_dir)
        except OSError as exc:
            return [("channel", f"cannot remove leaked channels: {exc.strerror}")]
        if removed:
            self.log.warning("removed leaked channels", channels=removed)
        return []


__all__ = ["Lifecycle", "wants_imex", "published_identity", "job_dir"]
