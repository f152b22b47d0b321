"""The checks of ``imexctl health``: small named units, run in order by :mod:`imexctl.ops.health`.

Each check is one function ``name(run: HealthRun) -> None``; its name (``stale_domain``
-> ``stale-domain``) is what ``[health] skip`` takes and what a drain reason names
(``imexctl: health/<check>: <cause>``, formatted by :mod:`imexctl.slurm.reasons`). A
check says what failed and nothing more, one way: ``run.fail(check, cause)``; a remark
goes to ``run.report.notes``. A check only looks and plans: each change it would make is
an :class:`~imexctl.ops.plan.Action` in a :class:`~imexctl.ops.plan.Recovery` handed to
``run.apply``, the one place where changes are made or, in a run that changes nothing,
only listed. Draining, lifting and the watchdog are the runner's (:mod:`imexctl.ops.health`),
which imports this module, never the reverse. The node lock is never held while Slurm is
asked something (audit S-04).
"""

from __future__ import annotations

from contextlib import ExitStack, contextmanager
from pathlib import Path

from imexctl.base import log
from imexctl.base.dataclass import dataclass, field
from imexctl.config import AuthMode, Config
from imexctl.errors import EXIT_NODE_FAULT, EXIT_OK
from imexctl.ops import recover
from imexctl.ops.plan import Action, Recovery, apply as apply_plan
from imexctl.slurm import reasons
from imexctl.tray import jobdir

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Callable, Iterator

    from imexctl.ops.plan import Teardown
    from imexctl.slurm.interface import SlurmAdapter
    from imexctl.tray.gpus import GpuFabric
    from imexctl.tray.ownership import DomainRecord, StateStore

    # What health needs from the prolog/epilog lifecycle (the runner wires the step
    # runner's shared teardown in): a record -> [(step, cause)], verified; and whether the
    # job of a record still runs here (raises when Slurm cannot tell).
    from imexctl.tray.ownership import OfJob
    OwnerAlive = Callable[[OfJob], bool]
    Check = Callable[["HealthRun"], None]

HOOK = "health"          # the hook a health drain names: ``imexctl: health/<check>: ...``

FULL, REPAIR_ONLY, NO_DRAIN, DRY_RUN = "full", "repair-only", "no-drain", "dry-run"
MODES = (FULL, REPAIR_ONLY, NO_DRAIN, DRY_RUN)
CHANGES_NOTHING = (NO_DRAIN, DRY_RUN)


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
        """The drain reason for the first problem (cut to what Slurm keeps)."""
        if not self.problems:
            return ""
        first = self.problems[0]
        more = f" (+{len(self.problems) - 1} more)" if len(self.problems) > 1 else ""
        return reasons.bounded(reasons.format(HOOK, first.check, f"{first.cause}{more}"))

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
    persistent_restarts: int = 0                 # persistent daemon started anew (metrics)

    @property
    def changes(self) -> bool:
        """Whether this run may change anything (no-drain and dry-run change nothing)."""
        return self.mode not in CHANGES_NOTHING

    @property
    def store(self) -> StateStore:
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

    def apply(self, plan: Recovery) -> bool:
        """The one place a health run changes anything: make the plan's actions (a run
        that changes nothing lists them in ``would`` instead) and take in its findings.
        True when every action was made, or would be, without a failure."""
        if self.changes:
            apply_plan(plan)
        else:
            self.report.would += [f"{a.step}: {a.what}" for a in plan.actions]
            plan.actions = []
        self.absorb(plan)
        return not plan.failures

    def absorb(self, done: Recovery) -> None:
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
        run.apply(Recovery(stale_found=1, actions=[Action(
            "stale-domain", f"tear down the stale domain of ended job {rec.job_id}",
            lambda: _tear_down_stale(run, now))]))


def _tear_down_stale(run: HealthRun, rec: DomainRecord) -> Recovery:
    """stale-domain's change: the epilog's verified teardown of an ended job's domain."""
    out = Recovery()
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


def persistent(run: HealthRun) -> None:
    """On a tray with ``imex.lifetime = "persistent"`` (issue 37): its persistent daemon
    runs and answers ``-q`` READY within 5 s, or is healed. A dead daemon, one of an
    earlier boot (the tray rebooted) or none at all is started anew (persist.dat
    forgotten) on the clique's members, a repair; a live daemon that does not answer READY
    is replaced only while no job holds a channel here: with one it drains, naming the job
    (replacing it would break the job's imports; a dead one broke them already). A READY
    daemon whose links are down while every member accepts peers is nudged (SIGUSR1), so
    a peer restarted elsewhere joins without waiting out the back-off. What cannot be
    healed drains: ``imexctl: health/persistent: <why>``."""
    from imexctl.config import Lifetime
    from imexctl.imex import persistent as domain_of
    from imexctl.imex.launcher import is_alive
    from imexctl.tray.ownership import RecordUnreadable

    cfg = run.cfg
    if cfg.imex.lifetime != Lifetime.PERSISTENT or run.imex_tray is False \
            or not run.record_ok or any(p.check == "fabric" for p in run.report.problems):
        return
    try:
        rec = run.store.load_persistent()
    except RecordUnreadable as exc:
        run.fail("persistent", str(exc))
        return
    job = run.record          # a job of this tray holding a channel (ended ones are gone)
    replace = ""
    if rec is not None and rec.daemon is not None and rec.boot_id == run.boot_id \
            and is_alive(rec.daemon):
        state = domain_of.local_state(cfg)
        if state == domain_of.READY and rec.phase != "ready":
            _persistent_ready_now(run, rec.daemon.pid)   # READY after recover stopped waiting
        elif state == domain_of.READY:
            if run.changes:
                said = domain_of.nudge(cfg, rec)
                if said:
                    run.report.repaired.append(said)
        if state == domain_of.READY:
            return
        replace = (f"the persistent nvidia-imex (pid {rec.daemon.pid}) did not answer READY "
                   f"within {domain_of.ANSWER_WITHIN_S:g}s (-q: {state})")
        if job is not None:
            run.fail("persistent", f"{replace}; not restarted while job {job.job_id} holds "
                                   f"channel{job.channel} here")
            return
    elif rec is not None and job is not None and rec.boot_id == run.boot_id:
        run.report.notes.append(f"job {job.job_id}'s imports died with the persistent "
                                "nvidia-imex; its channel stays until the job ends")
    plan = recover.plan_persistent(cfg, run.slurm, run.boot_id, cfg.health.lock_wait_s,
                                   replace_live=replace)
    if replace and not plan.actions and not plan.failures:   # e.g. its members changed
        plan.failures.append(("persistent", f"{replace}; not restarted: "
                              + ("; ".join(plan.notes) or "nothing to start it with")))
        plan.notes = []
    run.apply(plan)           # a run that changes nothing lists the start instead
    run.persistent_restarts += recover.persistent_restarts(plan)


def _persistent_ready_now(run: HealthRun, pid: int) -> None:
    """A persistent daemon that got READY after recover stopped waiting for it (its
    record kept phase ``starting``, which the prolog refuses) is recorded ready."""
    def do() -> Recovery:
        out = Recovery()
        with run.locked("persistent") as held:
            now = run.store.load_persistent() if held else None
            if now is None or now.daemon is None or now.daemon.pid != pid:
                return out
            now.phase = "ready"
            run.store.save_persistent(now)
            out.repaired.append(f"the persistent nvidia-imex (pid {pid}) is READY: "
                                "recorded phase ready")
        return out
    run.apply(Recovery(actions=[Action(
        "persistent", f"record the persistent domain ready (pid {pid} answers READY)", do)]))


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


def _domain_not_up(run: HealthRun, rec: DomainRecord) -> str:
    """What a running job's domain lacks, by tray, when ``nvidia-imex-ctl -N -j`` does not
    say UP (empty when it does). Trays the job no longer has (asked of Slurm, best effort)
    are named as such."""
    from imexctl.imex import launcher
    from imexctl.imex.ctl import CtlClient
    view = CtlClient(run.cfg.paths.imex_ctl_binary, Path(rec.job_dir) / jobdir.CONFIG,
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
                run.apply(Recovery(actions=[Action(
                    "channels", f"remove the driver's {channel_dir}/channel0 "
                                "(channels.channel0 = remove)",
                    lambda: _done(apply_channel0_policy(channel_dir, "remove")))]))
            else:
                warning = channel0_warning(channel_dir)
                if warning:  # the site's module option: a warning, not a drain
                    run.report.notes.append(warning)
            rec = run.store.load()
            keep: set[int] = set()
            if rec is not None and rec.channel is not None:
                keep = {rec.channel}
                _tighten_channel(run, rec, rec.channel)
            run.apply(recover.sweep_channels(channel_dir, keep))


def _done(_: object = None) -> Recovery:
    return Recovery()


def _tighten_channel(run: HealthRun, rec: DomainRecord, channel: int) -> None:
    """The domain's channel is owner-only again if its owner widened it (audit S3-1): a
    repair, not a drain (the job's own user would otherwise drain the tray at will)."""
    from imexctl.tray.channels import tighten_channel, widened_channel
    channel_dir, mode = run.cfg.paths.channel_dir, run.cfg.channels.file_mode
    try:
        found = widened_channel(channel_dir, channel, rec.uid, mode)
    except OSError as exc:
        run.fail("channels", f"channel{channel} of job {rec.job_id} could not be "
                             f"checked: {exc}")
        return
    if not found:
        return
    log.get_logger().warning("channel widened by its owner", job_id=rec.job_id,
                             channel=channel, detail=found)

    def do() -> Recovery:
        out = Recovery()
        try:
            done = tighten_channel(channel_dir, channel, rec.uid, mode)
        except OSError as exc:
            out.failures.append(("channels", f"channel{channel} of job {rec.job_id} is not "
                                             f"owner-only and could not be restored: {exc}"))
            return out
        if done:
            out.repaired.append(f"{done} (job {rec.job_id}; its owner had widened it)")
        return out

    run.apply(Recovery(actions=[Action(
        "channels", f"make channel{channel} of job {rec.job_id} owner-only again "
                    f"({found})", do)]))


@dataclass(frozen=True)
class _Job:
    """The job of a daemon no record names, asked about as a record's would be."""
    job_id: int


def daemons(run: HealthRun) -> None:
    """A daemon started on a job config that no record names (found by its argv, audit
    F3-20) is stopped once Slurm says its job ended here; while the job runs it is a
    problem for an admin. Slurm is asked without the node lock, the verdict is made under
    it (a prolog holds the lock from before its spawn until the record names the daemon)."""
    from imexctl.lifecycle.teardown import describe_untracked, untracked_daemons
    if not run.record_ok:
        return
    alive: dict[int, bool] = {}
    recorded = run.record.job_id if run.record is not None else None
    for job_id, pids in untracked_daemons(run.cfg, recorded).items():
        try:
            alive[job_id] = bool(run.owner_alive(_Job(job_id)))
        except Exception as exc:  # noqa: BLE001 - Slurm could not tell: leave it
            run.report.notes.append(f"{describe_untracked(job_id, pids)} not checked: {exc}")
    if not alive:
        return
    with run.locked("daemons") as held:
        if not held:
            return
        rec = run.store.load()
        plan = Recovery()
        for job_id, pids in untracked_daemons(run.cfg, rec.job_id if rec else None).items():
            what = describe_untracked(job_id, pids)
            if alive.get(job_id, True) is True:   # running, or not asked: never stopped
                if job_id in alive:
                    run.fail("daemons", f"{what}: the job runs here but no ownership "
                                        "record names it (docs/runbook.md#untracked-daemon)")
                continue
            plan.actions.append(Action("daemons", f"stop {what}: its job ended",
                                               _stopper(run, job_id, what)))
        run.apply(plan)


def _stopper(run: HealthRun, job_id: int, what: str) -> Callable[[], Recovery]:
    def do() -> Recovery:
        from imexctl.lifecycle.teardown import stop_job_daemons
        out = Recovery()
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
    if not run.cfg.imex.auth.on:
        return
    from imexctl.ops import authinfo
    rec = run.record if run.record_ok else None
    faults, warnings = authinfo.problems(run.cfg, rec)
    for cause in faults:
        run.fail("auth", cause)
    run.report.notes += warnings
    daemon = rec.daemon if rec is not None else None
    if run.cfg.imex.auth != AuthMode.SITE or faults or rec is None or daemon is None \
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

    def do() -> Recovery:
        out = Recovery()
        why = authinfo.reload_daemon(job_dir, pid, fingerprint)
        if why:
            out.failures.append(("auth", why))
        else:
            out.repaired.append(f"sent SIGUSR1 to nvidia-imex pid {pid} of job {job_id}: "
                                "the site's TLS files changed")
        return out
    run.apply(Recovery(actions=[Action(
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


CHECKS: tuple[Check, ...] = (
    dirs, fabric, identity, record, reboot, stale_domain, persistent, domain, daemons,
    foreign_imex, channels, job_dirs, auth)


def check_name(fn: Check) -> str:
    """A check's name is its function's (config.HEALTH_CHECKS lists them for validation)."""
    return fn.__name__.replace("_", "-")


__all__ = ["HOOK", "MODES", "FULL", "REPAIR_ONLY", "NO_DRAIN", "DRY_RUN", "CHANGES_NOTHING",
           "Problem", "Report", "HealthRun", "CHECKS", "check_name"]
