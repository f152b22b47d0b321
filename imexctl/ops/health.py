"""``imexctl health``: Slurm's HealthCheckProgram for IMEX, as small named checks.

Each check is one function below; its name (``stale_domain`` -> ``stale-domain``) is
what ``[health] skip`` takes and what a drain reason names. One runner runs them in
order under a watchdog and returns a :class:`Report`; the CLI renders it.

Slurm only logs a failing health check, so a problem drains the node with
``imexctl: health/<check>: <cause>``. Health drains and lifts only its own drains: a
node that is already drained for any other reason, an ``imexctl:`` prolog or epilog
drain included, keeps that drain and its reason (they wait for an admin, audit F-01).
What can be repaired safely is repaired and listed: a stale domain whose job no longer
runs here, a domain an earlier boot left, channel devices and per-job directories no
domain owns. The node lock is never held while Slurm is asked something (audit S-04).

Checks only look and plan: each adds its findings and the changes it would make
(:class:`recover.Action`, one line each) to a plan and hands it to ``HealthRun.apply``,
the one place where changes are made or, in a run that changes nothing, only listed.
Modes: ``full`` (repair, drain, lift), ``repair-only`` (repair, never drain or lift:
NHC drains), ``no-drain`` and ``dry-run`` (change nothing at all: no file, device node,
process or Slurm node record; dry-run lists what a full run would do).

Exit codes (for NHC and Slurm; ``imexctl health --help`` lists them): 0 healthy, repairs
listed; 1 a problem was found (drained in a full run unless another drain is kept);
2 usage error; 3 configuration error.
"""

from __future__ import annotations

import signal
import threading
import time
from contextlib import ExitStack, contextmanager
from pathlib import Path

from imexctl.tray import expected
from imexctl.base import log
from imexctl.ops import metrics
from imexctl.ops import recover
from imexctl.config import Config
from imexctl.errors import EXIT_NODE_FAULT, EXIT_OK
from imexctl.base.dataclass import dataclass, field
from imexctl.slurm import states
from imexctl.tray import bootid, jobdir

TYPE_CHECKING = False
# --------------------------------------------------------------------------- interface
# What health needs from the prolog/epilog lifecycle. The integrator wires the step
# runner's shared teardown in here; everything below only calls these two (types for
# type checkers only, like typing itself).
if TYPE_CHECKING:
    from imexctl.slurm.interface import SlurmAdapter
    from imexctl.slurm.records import NodeRecord
    from imexctl.tray.gpus import GpuFabric
    from imexctl.tray.ownership import DomainRecord
    from typing import Any, Callable, Iterator

    Teardown = recover.Teardown                  # record -> [(step, cause)], verified
    OwnerAlive = Callable[[Any], bool]           # record -> job still runs here; raises
                                                 # when Slurm cannot tell


def default_teardown(cfg: Config, slurm: SlurmAdapter | None = None) -> Teardown:
    from imexctl.tray.ownership import StateStore
    from imexctl.lifecycle.teardown import teardown_domain
    store = StateStore(cfg.paths.state_dir)
    return lambda record: teardown_domain(cfg, record, store).failures


def default_owner_alive(cfg: Config, slurm: SlurmAdapter) -> OwnerAlive:
    from imexctl.tray.ownership import owner_alive
    return lambda record: owner_alive(slurm, record, cfg.node)


HEALTH_PREFIX = "imexctl: health/"

FULL, REPAIR_ONLY, NO_DRAIN, DRY_RUN = "full", "repair-only", "no-drain", "dry-run"
MODES = (FULL, REPAIR_ONLY, NO_DRAIN, DRY_RUN)
CHANGES_NOTHING = (NO_DRAIN, DRY_RUN)
# What a post-reboot run (HealthCheckNodeState=REBOOT_ONLY) runs whatever [health] skip says.
POST_REBOOT_CHECKS = ("reboot", "channels", "job-dirs")


@dataclass(frozen=True)
class Problem:
    check: str
    cause: str


@dataclass
class Report:
    node: str
    problems: list[Problem] = field(default_factory=list)
    repaired: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)   # by [health] skip
    ran: list[str] = field(default_factory=list)
    drain: str = "none"          # none | drained | kept: <reason> | resumed | failed: <error>
    #                              | deferred: <why> (a hook holds the drain lock)
    #                              | would drain | would resume (a run that changes nothing)
    duration_ms: float = 0.0
    mode: str = FULL
    would: list[str] = field(default_factory=list)     # "<check>: <change>", not made
    budget_s: float = 0.0                              # the checks' deadline
    slurm_facts: dict[str, str] = field(default_factory=dict)  # what slurmd/slurm.conf said

    @property
    def reason(self) -> str:
        """The drain reason for the first problem (Slurm keeps 250 characters)."""
        if not self.problems:
            return ""
        first = self.problems[0]
        more = f" (+{len(self.problems) - 1} more)" if len(self.problems) > 1 else ""
        return f"{HEALTH_PREFIX}{first.check}: {first.cause}{more}"[:250]

    @property
    def exit_code(self) -> int:
        return EXIT_NODE_FAULT if self.problems else EXIT_OK


@dataclass
class HealthRun:
    """What the checks share: the world, the report, and facts found on the way."""
    cfg: Config
    slurm: SlurmAdapter
    teardown: Teardown
    owner_alive: OwnerAlive
    report: Report
    boot_id: str | None
    unsafe: set[Path] = field(default_factory=set)
    imex_tray: bool | None = None     # None: not known (fabric skipped or unreadable)
    record: DomainRecord | None = None
    record_ok: bool = True
    lock_busy: bool = False
    undecided: list[str] = field(default_factory=list)   # checks that stood down: no lift
    mode: str = FULL
    stale_found: int = 0
    fabric_seen: list[GpuFabric] | None = None   # the GPUs read, for the metrics (published at the end)

    @property
    def changes(self) -> bool:
        """Whether this run may change anything (no-drain and dry-run change nothing)."""
        return self.mode not in CHANGES_NOTHING

    @property
    def store(self):
        from imexctl.tray.ownership import StateStore
        return StateStore(self.cfg.paths.state_dir)

    def fail(self, check: str, cause: str) -> None:
        self.report.problems.append(Problem(check, cause))

    @contextmanager
    def locked(self, check: str) -> Iterator[bool]:
        """The node lock for a quick local change: yields False (and notes it once) when a
        prolog or epilog holds it, so the check stands down instead of waiting."""
        from imexctl.tray.ownership import LOCK, LockTimeout
        with ExitStack() as stack:
            held = not self.lock_busy and self.cfg.paths.state_dir not in self.unsafe
            if held and not self.changes and not (self.store.dir / LOCK).exists():
                pass   # a look that changes nothing makes no lock file (no hook ran yet)
            elif held:
                try:
                    stack.enter_context(self.store.locked(timeout_s=self.cfg.health.lock_wait_s))
                except LockTimeout:
                    held, self.lock_busy = False, True
                    self.undecided.append(check)
                    self.report.notes.append("a prolog or epilog holds the node lock; "
                                             f"{check} and later domain checks skipped")
            yield held

    def projected_record(self) -> DomainRecord | None:
        """The record as this run leaves it: read again after changes were made; in a run
        that changes nothing, as the checks left it planning (None once they planned its
        teardown). The sweeps read the record as it is: a planned teardown removes its
        channel and job directory itself."""
        return self.store.load() if self.changes else self.record

    def apply(self, plan: recover.Recovery) -> bool:
        """The one place a health run changes anything: make the plan's actions (a run
        that changes nothing lists them in ``would`` instead) and take in its findings.
        True when every action was made, or would be, without a failure."""
        if self.changes:
            recover.apply(plan)
        else:
            self.report.would += [f"{a.step}: {a.what}" for a in plan.actions]
            plan.actions = []
        self.absorb(plan)
        return not plan.failures

    def absorb(self, done: recover.Recovery) -> None:
        self.report.repaired += done.repaired
        self.report.notes += done.notes
        for step, cause in done.failures:
            self.fail(step, cause)
        self.stale_found += done.stale_found


# --------------------------------------------------------------------------- the checks
def dirs(run: HealthRun) -> None:
    """imexctl's directories are root-owned, not links, not writable by others (F-16):
    the hooks refuse unsafe ones, so a tray with one cannot run a job."""
    from imexctl.base.fsutil import check_secure_dir
    paths = run.cfg.paths
    for path in (paths.state_dir, paths.run_dir, paths.channel_dir):
        try:
            check_secure_dir(path)
        except FileNotFoundError:
            continue  # created by tmpfiles or the first prolog
        except OSError as exc:
            run.unsafe.add(path)
            run.fail("dirs", str(exc))


def fabric(run: HealthRun) -> None:
    """The live GPUs are fit for IMEX, judged as the prolog judges them (``fabric.judge``
    under ``fabric.on_degraded``); a tray without NVLink fabric, or without an NVIDIA
    driver, is simply not an IMEX tray (no domain, never drained for it)."""
    from imexctl.tray.gpus import FabricError, NoNvidiaDriver
    from imexctl.tray.fabric import judge, read_fabric
    cfg = run.cfg
    try:
        gpus = read_fabric(cfg.fabric.source, str(cfg.fabric.file) if cfg.fabric.file else None)
    except NoNvidiaDriver as exc:
        run.imex_tray = False
        run.report.notes.append(f"not an IMEX tray ({exc})")
        return
    except FabricError as exc:
        run.fail("fabric", str(exc))
        return
    run.fabric_seen = gpus
    verdict = judge(gpus, cfg.fabric.on_degraded, on_fabric_manager=cfg.fabric.on_fabric_manager)
    run.imex_tray = verdict.kind != "not_imex"
    if verdict.kind == "not_imex":
        run.report.notes.append(verdict.detail)
    elif verdict.kind == "unfit":
        run.fail("fabric", verdict.detail)
    elif verdict.degraded:
        run.report.notes.append(verdict.detail)


def identity(run: HealthRun) -> None:
    """The identity Slurm holds for this tray is still true; republished when not.
    Best effort: a non-JSON Extra or a failed update is a note, never a stop (F-12)."""
    if run.imex_tray is False or any(p.check == "fabric" for p in run.report.problems):
        return  # nothing true to publish
    run.apply(recover.plan_identity(run.cfg, run.slurm))


def record(run: HealthRun) -> None:
    """The ownership record loads (F-03): an unreadable one may hide a live daemon, so it
    is reported, not repaired, and the checks that depend on it stand down. A ``stuck``
    record (the epilog could not verify its daemon gone, F-02) is reported too, whether or
    not the job still runs; stale-domain withdraws that finding if it tears it down."""
    with run.locked("record") as held:
        if not held:
            return
        try:
            run.record = run.store.load()
        except (OSError, ValueError, TypeError, AttributeError) as exc:
            run.record_ok = False
            run.fail("record", f"ownership record unreadable ({type(exc).__name__}: {exc}); "
                               "inspect and remove it by hand")
            return
    rec = run.record
    if rec is not None and rec.phase == "stuck":  # F-02: reported even while the job runs
        pid = f"pid {rec.daemon.pid}" if rec.daemon else "pid unknown"
        from imexctl.lifecycle.teardown import STUCK_RECORD
        run.fail("record", f"{STUCK_RECORD.format(job_id=rec.job_id)}: the epilog could not verify "
                           f"its nvidia-imex ({pid}) gone; it may hold ports "
                           f"{rec.server_port}/{rec.cmd_port} (docs/runbook.md#stuck-daemon)")


def reboot(run: HealthRun) -> None:
    """A domain an earlier boot left (its boot id is not this boot's) is torn down."""
    if not run.record_ok or run.record is None:
        return
    with run.locked("reboot") as held:
        if held:
            plan = recover.plan_old_boot(run.store, run.teardown, run.boot_id)
            if plan.actions:
                run.record = None            # what the later checks see once it is done
            if not run.apply(plan):
                run.record = run.store.load()


def stale_domain(run: HealthRun) -> None:
    """A domain whose job no longer runs here is torn down with the epilog's verified
    steps. Slurm is asked without the node lock; the lock is taken only to tear down,
    after checking the record is still the one asked about."""
    rec = run.record
    if rec is None or not run.record_ok:
        return
    try:
        alive = run.owner_alive(rec)
    except Exception as exc:  # noqa: BLE001 - Slurm could not tell: not "job gone"
        run.report.notes.append(f"owner of job {rec.job_id} not checked: {exc}")
        run.undecided.append("stale-domain")
        return
    if alive:
        return
    with run.locked("stale-domain") as held:
        if not held:
            return
        now = run.store.load()
        if now is None or (now.job_id, now.started_at) != (rec.job_id, rec.started_at):
            run.record = now
            run.report.notes.append(f"record of job {rec.job_id} changed while checking; "
                                    "left to the next run")
            return
        run.record = None                    # what the later checks see once it is done
        run.apply(recover.Recovery(stale_found=1, actions=[recover.Action(
            "stale-domain", f"tear down the stale domain of ended job {rec.job_id}",
            lambda: _tear_down_stale(run, now))]))


def _tear_down_stale(run: HealthRun, rec: DomainRecord) -> recover.Recovery:
    """stale-domain's change: the epilog's verified teardown of an ended job's domain."""
    out = recover.Recovery()
    failures = run.teardown(rec)
    if failures:
        step, cause = failures[0]
        run.record = rec
        out.failures.append(("stale-domain", f"job {rec.job_id} ended but its domain could not "
                                             f"be removed ({step}: {cause})"))
        return out
    out.repaired.append(f"tore down stale domain of ended job {rec.job_id}")
    if rec.phase == "stuck":  # verified gone now: the record check's finding is resolved
        run.report.problems = [p for p in run.report.problems if p.check != "record"]
    return out


def domain(run: HealthRun) -> None:
    """The daemon of a running job's ready domain is still there, and the domain is still
    UP. A domain no longer UP is noted, never drained for: a member that left the job (the
    job shrank, audit S3-8) keeps it DEGRADED until the job ends, and a member still in
    the job that is not READY is that tray's fault, found by its own health."""
    from imexctl.imex import launcher
    rec = run.record
    if rec is None or rec.phase != "ready" or not rec.daemon:
        return
    if not launcher.is_alive(rec.daemon):
        run.fail("domain", f"nvidia-imex of running job {rec.job_id} "
                           f"(pid {rec.daemon.pid}) is gone")
        return
    note = _domain_not_up(run, rec)
    if note:
        run.report.notes.append(note)
        log.get_logger().warning("domain not UP", job_id=rec.job_id, detail=note)


def _domain_not_up(run: HealthRun, rec: Any) -> str:
    """What a running job's domain lacks, by tray, when ``nvidia-imex-ctl -N -j`` does not
    say UP (empty when it does). Trays the job no longer has (asked of Slurm, best effort)
    are named as such."""
    from imexctl.imex import launcher
    from imexctl.imex.ctl import CtlClient
    view = CtlClient(run.cfg.paths.imex_ctl_binary, Path(rec.job_dir) / "config.cfg",
                     launcher.environment_file(run.cfg.imex.environment_file)).domain()
    if view.up:
        return ""
    head = f"domain of running job {rec.job_id} is {view.status}"
    if view.error:
        return f"{head}: {view.error}"
    nodes = list(rec.nodes)
    lacking = []
    for idx, node in enumerate(nodes):
        member = view.members.get(idx)
        if member is None or member["status"] != "READY":
            lacking.append((node, member["status"] if member else "not listed"))
    if not lacking:
        return f"{head}: {'; '.join(view.problems()[:4]) or 'every member READY'}"
    try:
        now = set(run.slurm.job(rec.job_id).nodes)
    except Exception:  # noqa: BLE001 - Slurm could not tell: name the trays only
        now = None
    left = [n for n, _ in lacking if now is not None and n not in now]
    still = [f"{n} {st}" for n, st in lacking if n not in left]
    parts = []
    if left:
        parts.append(f"{', '.join(left)} left the job (it shrank): the domain stays "
                     f"{view.status} until the job ends")
    if still:
        parts.append(f"{', '.join(still)} (that tray's own health finds its fault)")
    return f"{head}: " + "; ".join(parts)


def channels(run: HealthRun) -> None:
    """Channel devices no domain owns are removed (one that stays is a problem); the
    driver's world-usable channel0 is reported, or removed with channels.channel0 = remove."""
    if not run.record_ok or run.cfg.paths.channel_dir in run.unsafe:
        return
    with run.locked("channels") as held:
        if held:
            from imexctl.tray.channels import (apply_channel0_policy, channel0_present,
                                               channel0_warning)
            channel_dir = run.cfg.paths.channel_dir
            if run.cfg.channels.channel0 == "remove" and channel0_present(channel_dir):
                run.apply(recover.Recovery(actions=[recover.Action(
                    "channels", f"remove the driver's {channel_dir}/channel0 "
                                "(channels.channel0 = remove)",
                    lambda: _done(apply_channel0_policy(channel_dir, "remove")))]))
            else:
                warning = channel0_warning(channel_dir)
                if warning:  # the site's module option: a warning, not a drain
                    run.report.notes.append(warning)
            rec = run.store.load()
            keep = {rec.channel} if rec is not None and rec.channel is not None else set()
            if keep:
                _tighten_channel(run, rec)
            run.apply(recover.sweep_channels(channel_dir, keep))


def _done(_: Any = None) -> recover.Recovery:
    return recover.Recovery()


def _tighten_channel(run: HealthRun, rec: Any) -> None:
    """The domain's channel is owner-only again if its owner widened it (audit S3-1): a
    repair, not a drain (the job's own user would otherwise drain the tray at will)."""
    from imexctl.tray.channels import tighten_channel, widened_channel
    channel_dir, mode = run.cfg.paths.channel_dir, run.cfg.channels.file_mode
    try:
        found = widened_channel(channel_dir, rec.channel, rec.uid, mode)
    except OSError as exc:
        run.fail("channels", f"channel{rec.channel} of job {rec.job_id} could not be "
                             f"checked: {exc}")
        return
    if not found:
        return
    log.get_logger().warning("channel widened by its owner", job_id=rec.job_id,
                             channel=rec.channel, detail=found)

    def do() -> recover.Recovery:
        out = recover.Recovery()
        try:
            done = tighten_channel(channel_dir, rec.channel, rec.uid, mode)
        except OSError as exc:
            out.failures.append(("channels", f"channel{rec.channel} of job {rec.job_id} is not "
                                             f"owner-only and could not be restored: {exc}"))
            return out
        if done:
            out.repaired.append(f"{done} (job {rec.job_id}; its owner had widened it)")
        return out

    run.apply(recover.Recovery(actions=[recover.Action(
        "channels", f"make channel{rec.channel} of job {rec.job_id} owner-only again "
                    f"({found})", do)]))


def daemons(run: HealthRun) -> None:
    """A daemon started on a job config that no record names (found by its argv, audit
    F3-20) is stopped once Slurm says its job ended here; while the job runs it is a
    problem for an admin. Slurm is asked without the node lock, the verdict is made under
    it (a prolog holds the lock from before its spawn until the record names the daemon)."""
    from types import SimpleNamespace

    from imexctl.lifecycle.teardown import describe_untracked, untracked_daemons
    if not run.record_ok:
        return
    alive: dict[int, bool] = {}
    for job_id, pids in untracked_daemons(run.cfg, getattr(run.record, "job_id", None)).items():
        try:
            alive[job_id] = bool(run.owner_alive(SimpleNamespace(job_id=job_id)))
        except Exception as exc:  # noqa: BLE001 - Slurm could not tell: leave it
            run.report.notes.append(f"{describe_untracked(job_id, pids)} not checked: {exc}")
    if not alive:
        return
    with run.locked("daemons") as held:
        if not held:
            return
        rec = run.store.load()
        plan = recover.Recovery()
        for job_id, pids in untracked_daemons(run.cfg, rec.job_id if rec else None).items():
            what = describe_untracked(job_id, pids)
            if alive.get(job_id, True) is True:   # running, or not asked: never stopped
                if job_id in alive:
                    run.fail("daemons", f"{what}: the job runs here but no ownership "
                                        "record names it (docs/runbook.md#untracked-daemon)")
                continue
            plan.actions.append(recover.Action("daemons", f"stop {what}: its job ended",
                                               _stopper(run, job_id, what)))
        run.apply(plan)


def _stopper(run: HealthRun, job_id: int, what: str) -> Callable[[], recover.Recovery]:
    def do() -> recover.Recovery:
        from imexctl.lifecycle.teardown import stop_job_daemons
        out = recover.Recovery()
        _, left = stop_job_daemons(run.cfg, job_id, None)
        if left:
            out.failures.append(("daemons", f"{what} of an ended job could not be stopped: "
                                            f"{left}"))
        else:
            out.repaired.append(f"stopped {what}: its job ended")
        return out
    return do


def foreign_imex(run: HealthRun) -> None:
    """An IMEX daemon imexctl did not start (the packaged nvidia-imex.service, another
    orchestrator's) is a second owner of IMEX on this tray: a drain that says what to
    mask (the prolog refuses to start a domain beside one, too). Only root's count: a
    user's process named ``nvidia-imex`` is a note, never a drain (audit F4-3)."""
    from imexctl.imex.launcher import find_foreign_daemons, not_an_owner, second_owner

    owners, lookalikes = find_foreign_daemons(run.cfg.paths.imex_binary)
    if owners:
        run.fail("foreign-imex", second_owner(owners))
    if lookalikes:
        run.report.notes.append(not_an_owner(lookalikes))


def auth(run: HealthRun) -> None:
    """``imex.auth``'s files (not with auth off): an unreadable, mismatched or expired
    site file, a bad secret or job certificate is a problem; a site certificate near its
    end a note. Site files changed since the job's daemon loaded them are reloaded with
    SIGUSR1 (docs/security.md, "Rotation")."""
    if run.cfg.imex.auth == "off":
        return
    from imexctl.ops import authinfo
    rec = run.record if run.record_ok else None
    faults, warnings = authinfo.problems(run.cfg, rec)
    for cause in faults:
        run.fail("auth", cause)
    run.report.notes += warnings
    daemon = getattr(rec, "daemon", None)
    if run.cfg.imex.auth != "site" or faults or rec is None or daemon is None \
            or not rec.job_dir:
        return
    job_id: int = rec.job_id
    job_dir = Path(rec.job_dir)
    fingerprint = authinfo.reload_due(run.cfg, job_dir, daemon.create_time)
    if fingerprint is None:
        return
    from imexctl.imex.launcher import find_process
    pid = find_process(daemon)
    if pid is None:
        return

    def do() -> recover.Recovery:
        out = recover.Recovery()
        why = authinfo.reload_daemon(job_dir, pid, fingerprint)
        if why:
            out.failures.append(("auth", why))
        else:
            out.repaired.append(f"sent SIGUSR1 to nvidia-imex pid {pid} of job {job_id}: "
                                "the site's TLS files changed")
        return out
    run.apply(recover.Recovery(actions=[recover.Action(
        "auth", f"send SIGUSR1 to nvidia-imex pid {pid} of job {job_id} (site TLS files "
                "changed)", do)]))


def job_dirs(run: HealthRun) -> None:
    """``run_dir/job-<id>`` directories no domain owns are removed, each by its own exact
    name (F-18); anything else in run_dir is left alone."""
    if not run.record_ok or run.cfg.paths.run_dir in run.unsafe:
        return
    with run.locked("job-dirs") as held:
        if held:
            rec = run.store.load()
            keep = jobdir.name(rec.job_id) if rec is not None else None
            run.apply(recover.sweep_job_dirs(run.cfg.paths.run_dir, keep))


CHECKS: tuple[Callable[[HealthRun], None], ...] = (
    dirs, fabric, identity, record, reboot, stale_domain, domain, daemons, foreign_imex,
    channels, job_dirs, auth)


def check_name(fn: Callable[..., Any]) -> str:
    """A check's name is its function's (config.HEALTH_CHECKS lists them for validation)."""
    return fn.__name__.replace("_", "-")


# --------------------------------------------------------------------------- the runner
class _Watchdog(BaseException):
    """Raised in the main thread when the whole run exceeds ``[health] timeout_s``."""


def run_checks(cfg: Config, slurm: SlurmAdapter, *, mode: str = FULL,
               teardown: Teardown | None = None, owner_alive: OwnerAlive | None = None,
               boot_id: str | None = None, slurmd: SlurmdFacts | None = None) -> Report:
    """Run every check not skipped, then drain or lift our drain; return the report.

    ``mode``: see the module's docstring. ``slurmd``: what slurmd and the local
    slurm.conf say about this run (:func:`slurmd_facts`; read when not given)."""
    if mode not in MODES:
        raise ValueError(f"unknown health mode {mode!r}; one of {', '.join(MODES)}")
    logger = log.get_logger()
    start = time.monotonic()
    facts = slurmd if slurmd is not None else slurmd_facts(cfg)
    report = Report(node=cfg.node, mode=mode, slurm_facts=facts.describe())
    run = HealthRun(cfg=cfg, slurm=slurm, report=report, mode=mode,
                    teardown=teardown or default_teardown(cfg, slurm),
                    owner_alive=owner_alive or default_owner_alive(cfg, slurm),
                    boot_id=boot_id or bootid.current_boot_id(cfg))
    timeout = report.budget_s = budget_s(cfg, facts)
    logger.info("health budget", deadline_s=timeout, mode=mode, **facts.describe())
    skip = set(cfg.health.skip)
    if facts.post_reboot and skip & set(POST_REBOOT_CHECKS):
        skip -= set(POST_REBOOT_CHECKS)
        report.notes.append("post-reboot run (HealthCheckNodeState=REBOOT_ONLY): "
                            f"{', '.join(POST_REBOOT_CHECKS)} run whatever [health] skip says")
    current = "-"
    with _watchdog(timeout):
        try:
            for fn in CHECKS:
                current = check_name(fn)
                if current in skip:
                    report.skipped.append(current)
                    continue
                try:
                    with log.timed_step(f"health/{current}"):
                        fn(run)
                except Exception as exc:  # noqa: BLE001 - a finding, never a traceback
                    from imexctl.base.subproc import fd_error_text
                    run.fail(current, fd_error_text(exc)
                             or f"internal error: {type(exc).__name__}: {exc}")
                report.ran.append(current)
        except _Watchdog:
            run.fail("watchdog", f"checks still running after {timeout:g}s (in {current}); "
                                 "later checks not run")
    _reconcile_expected(run)
    report.duration_ms = round((time.monotonic() - start) * 1000, 1)
    if mode == REPAIR_ONLY:
        report.drain = "none"        # NHC drains and lifts (docs/health.md)
    else:
        _drain_or_resume(run, facts)
    if run.changes:          # before the verdict line: a metrics error is not the last word
        _publish_metrics(run)
    if report.problems:
        logger.error("health check failed", reason=report.reason, mode=mode,
                     problems=[(p.check, p.cause) for p in report.problems],
                     would=report.would, notes=report.notes,
                     duration_ms=report.duration_ms)
    else:       # slurmd keeps no HealthCheckProgram output: the notes are logged
        logger.info("health check passed", repaired=report.repaired, mode=mode,
                    would=report.would, notes=report.notes, duration_ms=report.duration_ms)
    return report


def _publish_metrics(run: HealthRun) -> None:
    cfg, report = run.cfg, run.report
    if run.fabric_seen is not None:
        metrics.remember_fabric(cfg, run.fabric_seen)
    if run.stale_found:
        metrics.count(cfg, "stale_domains_found", run.stale_found)
    metrics.observe(cfg, "health", "node-fault" if report.problems else "ok",
                    duration_ms=report.duration_ms, reason=report.reason)


# --------------------------------------------------------------------------- Slurm's side
@dataclass(frozen=True)
class SlurmdFacts:
    """What slurmd and the local slurm.conf tell a HealthCheckProgram (Slurm 26.05+):
    ``node_is_healthy`` from ``SLURM_NODE_IS_HEALTHY`` (yes/no; None when unset: older
    Slurm, a start-up run, or 26.05 without SlurmctldParameters=health_check_report),
    ``timeout_s`` from ``HealthCheckTimeout`` (None when unset: before 26.05 slurmd
    kills the program after a fixed 60 s), ``post_reboot`` when
    ``HealthCheckNodeState=REBOOT_ONLY`` (slurmd then runs the program only when the node
    registers after a reboot Slurm issued; no variable says so, the setting does)."""
    node_is_healthy: bool | None = None
    timeout_s: int | None = None
    post_reboot: bool = False
    conf: str = ""                       # the slurm.conf read, or why none

    def describe(self) -> dict[str, str]:
        out = {}
        if self.node_is_healthy is not None:
            out["SLURM_NODE_IS_HEALTHY"] = "yes" if self.node_is_healthy else "no"
        if self.timeout_s is not None:
            out["HealthCheckTimeout"] = str(self.timeout_s)
        if self.post_reboot:
            out["HealthCheckNodeState"] = "REBOOT_ONLY"
        return out


def slurmd_facts(cfg: Config, env: Any = None) -> SlurmdFacts:
    """Read :class:`SlurmdFacts` from the environment and the local slurm.conf (no
    slurm.conf: the Slurm settings are unknown, and health behaves as before 26.05)."""
    import os

    from imexctl.slurm import localconf
    from imexctl.slurm.healthcheck import node_is_healthy
    env = os.environ if env is None else env
    try:
        conf = localconf.load(cfg.paths.slurm_conf, nodes=())
    except Exception as exc:  # noqa: BLE001 - facts are best effort: never a traceback
        return SlurmdFacts(node_is_healthy(env), conf=str(exc))
    return SlurmdFacts(node_is_healthy(env), conf.health_check_timeout_s,
                       conf.health_check_reboot_only, str(conf.path))


def budget_s(cfg: Config, facts: SlurmdFacts) -> float:
    """The checks' deadline: ``[health] timeout_s``, and under Slurm's HealthCheckTimeout
    T that less a margin for the drain and exit (max(5 s, T/5), at most T/2), so slurmd
    never kills a run halfway. Without HealthCheckTimeout: ``[health] timeout_s`` alone."""
    own = cfg.health.timeout_s
    if facts.timeout_s is None:
        return own
    limit = facts.timeout_s
    return round(min(own, limit - min(max(5.0, limit / 5), limit / 2)), 1)


class _watchdog:
    """SIGALRM after ``timeout`` seconds raises _Watchdog in the main thread; elsewhere
    (tests in threads) it is a no-op."""

    def __init__(self, timeout: float):
        self.timeout = timeout
        self.armed = threading.current_thread() is threading.main_thread()

    def __enter__(self) -> None:
        if self.armed:
            self.old = signal.signal(signal.SIGALRM, self._fire)
            signal.setitimer(signal.ITIMER_REAL, self.timeout)

    @staticmethod
    def _fire(_signum: int, _frame: Any) -> None:
        raise _Watchdog()

    def __exit__(self, *exc: Any) -> None:
        if self.armed:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, self.old)


def _drain_or_resume(run: HealthRun, facts: SlurmdFacts) -> None:
    """Drain for our problems unless another drain is in place (kept, reason and all);
    lift only a drain whose reason starts ``imexctl: health/``, and only after a run in
    which every check ran (a check that stood down for a busy lock or a Slurm that could
    not tell may still have its finding). A passing run whose slurmd says
    ``SLURM_NODE_IS_HEALTHY=yes`` (the node is not drained, down, failing or in
    maintenance) has no drain to lift and asks Slurm nothing. A run that changes nothing
    says what it would do and takes no lock."""
    from imexctl.lifecycle.outcome import HEALTH_DRAIN_LOCK_WAIT_S, drain_guard

    report = run.report
    if not report.problems and run.undecided:  # a check stood down: its finding may
        return                                 # still stand; the health drain stays
    if not report.problems and facts.node_is_healthy:
        return                                 # slurmctld: nothing drained to lift
    try:
        if not run.changes:
            _would_drain_or_resume(run)
            return
        # Read and write under the tray's drain lock: a prolog or epilog drain set between
        # the read and the write would otherwise be overwritten (Slurm has no conditional
        # update); with the lock, a hook's drain comes before the read or after the write.
        guard = drain_guard(run.store, HEALTH_DRAIN_LOCK_WAIT_S, quiet_busy=True)
        with guard:
            if guard.busy:    # a hook is draining now: this run neither drains nor lifts
                report.drain = "deferred: another imexctl holds the drain lock"
                log.get_logger().warning("drain deferred: the drain lock is busy")
                return
            action = _drain_action(run)
            if action is not None:
                action.do()
    except Exception as exc:  # noqa: BLE001 - report, do not hide the findings behind it
        report.drain = f"failed: {exc}"
        log.get_logger().error("could not drain or resume node", error=str(exc))


def _would_drain_or_resume(run: HealthRun) -> None:
    """A run that changes nothing says what it would do; where Slurm cannot be asked (a
    tray without Slurm, slurmctld down) it says so instead of failing (platform check
    2026-11-28: ``health --dry-run`` on a machine without Slurm)."""
    report = run.report
    try:
        action = _drain_action(run)
    except Exception as exc:  # noqa: BLE001 - the findings stand; Slurm's state is unknown
        if report.problems:
            report.would.append(f"drain: drain {run.cfg.node}: {report.reason} (unless "
                                f"another drain is in place; Slurm not asked: {exc})")
            report.drain = "would drain"
        return
    if action is not None:
        report.would.append(f"{action.step}: {action.what}")
        report.drain = f"would {action.step}"


def _drain_action(run: HealthRun) -> recover.Action | None:
    """The drain or lift this run's findings call for (None: nothing; a drain that is not
    ours is kept and said so). Reads the node from Slurm."""
    report, slurm, node = run.report, run.slurm, run.cfg.node
    current = slurm.nodes([node]).get(node)
    if report.problems:
        other = _other_drain(current)
        if other is not None:
            report.drain = f"kept: {other}"
            return None

        def drain() -> recover.Recovery:
            report.drain = ("kept: drained by someone else"
                            if slurm.drain(node, report.reason) is False else "drained")
            return recover.Recovery()
        return recover.Action("drain", f"drain {node}: {report.reason}", drain)
    if current is None or not _our_drain(current):
        return None

    def resume() -> recover.Recovery:
        if slurm.resume_if_ours(node, prefix=HEALTH_PREFIX):
            report.drain = "resumed"
            log.get_logger().info("health drain lifted")
        return recover.Recovery()
    return recover.Action("resume", f"lift {node}'s health drain ({current.reason})", resume)


def _our_drain(node: NodeRecord) -> bool:
    reason = node.reason
    return bool(states.node_words(node.state) & states.UNAVAILABLE) \
        and reason.startswith(HEALTH_PREFIX)


def _other_drain(node: NodeRecord | None) -> str | None:
    """The reason (or state) of a drain/down that is not a health drain, else None."""
    if node is None:
        return None
    reason = node.reason
    if not states.node_words(node.state) & states.UNAVAILABLE or reason.startswith(HEALTH_PREFIX):
        return None
    return reason or str(node.state)


def _reconcile_expected(run: HealthRun) -> None:
    """Make the expected-state file true again where a hook could not (a crash, a
    reboot, a repair here). A prolog in progress and a failure are left as written."""
    cfg = run.cfg
    if not run.record_ok:
        return
    try:
        rec = run.projected_record()
    except (OSError, ValueError, TypeError, AttributeError):
        return
    now = expected.read(cfg)
    want: tuple[str, int | None] | None = None
    if run.imex_tray is False and rec is None:
        want = (expected.NOT_IMEX, None)
    elif rec is None:
        if now is None or now.state in (expected.STARTING, expected.UP, expected.NOT_IMEX):
            want = (expected.IDLE, None)
    elif rec.phase == "ready" and not any(p.check == "domain" for p in run.report.problems):
        want = (expected.UP, rec.job_id)
    if want and (now is None or (now.state, now.job_id) != want):
        state, job_id = want
        was = f"{now.state}" + (f" job {now.job_id}" if now and now.job_id else "") \
            if now else "none"

        def write() -> recover.Recovery:
            expected.write(cfg, state, job_id=job_id)
            return recover.Recovery()
        run.apply(recover.Recovery(actions=[recover.Action(
            "expected", f"write the expected state {state}"
                        + (f" job {job_id}" if job_id else "") + f" (was {was})", write)]))


# --------------------------------------------------------------------------- rendering


__all__ = ["run_checks", "Report", "Problem", "CHECKS", "check_name",
           "HEALTH_PREFIX", "MODES", "FULL", "REPAIR_ONLY", "NO_DRAIN", "DRY_RUN",
           "SlurmdFacts", "slurmd_facts", "budget_s"]
