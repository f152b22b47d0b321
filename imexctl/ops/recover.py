"""``imexctl recover``: clear what an earlier boot (or a crashed slurmd) left behind.

After a reboot the ownership record in the state dir still names the job of the old
boot, although its daemon, channel and per-job files are gone or meaningless. A record
is from an old boot when its ``boot_id`` differs from this boot's
(``/proc/sys/kernel/random/boot_id``); a record written before records were stamped
counts as old when it started before this boot did. Recovery tears such a record down
with the epilog's verified teardown, removes per-job directories and channel devices no
current domain owns, and republishes the tray's fabric identity.

The boot-time oneshot (``imexctl-recover.service``, before slurmd) and ``imexctl health``
both run it; running it again changes nothing. The primitives here return what they
did: the caller reports it.
"""

from __future__ import annotations

import os
from contextlib import ExitStack
from pathlib import Path

from imexctl.config import Lifetime
from imexctl.ops.plan import Action, Recovery, apply
from imexctl.tray import jobdir
from imexctl.tray.bootid import current_boot_id

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Callable

    from imexctl.config import Config
    from imexctl.imex.persistent import PersistentDomain
    from imexctl.ops.plan import Teardown
    from imexctl.slurm.interface import SlurmAdapter
    from imexctl.tray.ownership import DomainRecord, StateStore
    from imexctl.base.jsontypes import Json


def boot_time() -> float:
    from imexctl.base.proc import boot_time as kernel_boot_time
    return kernel_boot_time()


def record_boot_id(record: DomainRecord, raw: Json | None = None) -> str | None:
    """The boot id a record was written in: the record's field once the record has one,
    else the raw JSON's key (older DomainRecord classes drop unknown keys)."""
    value = record.boot_id or (raw or {}).get("boot_id")
    return value if isinstance(value, str) and value else None


def from_old_boot(record: DomainRecord, raw: Json | None, current_boot: str | None,
                  booted_at: float) -> bool:
    recorded = record_boot_id(record, raw)
    if recorded and current_boot:
        return recorded != current_boot
    started = record.started_at
    return isinstance(started, (int, float)) and started < booted_at


def old_boot_record(store: StateStore, current_boot: str | None,
                    booted_at: float | None = None) -> DomainRecord | None:
    """The ownership record when an earlier boot wrote it, else None (reads only)."""
    from imexctl.base.fsutil import read_json
    from imexctl.tray.ownership import RECORD

    record = store.load()
    if record is None:
        return None
    raw = read_json(store.dir / RECORD)
    booted_at = boot_time() if booted_at is None else booted_at
    if not from_old_boot(record, raw if isinstance(raw, dict) else None, current_boot,
                         booted_at):
        return None
    return record


def plan_old_boot(store: StateStore, teardown: Teardown, current_boot: str | None,
                  booted_at: float | None = None) -> Recovery:
    """The teardown of a record an earlier boot wrote, planned (reads only). Hold the node
    lock from this call until the plan is applied (or dropped)."""
    out = Recovery()
    record = old_boot_record(store, current_boot, booted_at)
    if record is None:
        return out
    out.stale_found = 1

    def do() -> Recovery:   # the caller holds the node lock from planning to doing
        done = Recovery()
        failures = teardown(record)
        if failures:
            step, cause = failures[0]
            done.failures.append(("reboot", f"domain of job {record.job_id} left by an earlier "
                                            f"boot could not be removed ({step}: {cause})"))
        else:
            done.repaired.append(f"tore down the domain of job {record.job_id} left by an "
                                 "earlier boot")
        return done

    out.actions.append(Action("reboot", f"tear down the domain of job {record.job_id} left by "
                                        "an earlier boot", do))
    return out


def tear_down_old_boot(store: StateStore, teardown: Teardown, current_boot: str | None,
                       booted_at: float | None = None) -> Recovery:
    """With the node lock held: tear down the record if an old boot wrote it."""
    return apply(plan_old_boot(store, teardown, current_boot, booted_at))


def sweep_job_dirs(run_dir: Path, keep: str | None) -> Recovery:
    """Plan removing ``run_dir/job-<id>`` entries other than ``keep``, each by its own name.

    Anything else in run_dir (expected.json, names that merely look like job dirs) stays.
    """
    from imexctl.base.fsutil import check_secure_dir, remove_path

    out = Recovery()
    try:
        check_secure_dir(run_dir)
        names = sorted(os.listdir(run_dir))
    except FileNotFoundError:
        return out
    except OSError as exc:
        out.failures.append(("job-dirs", str(exc)))
        return out

    def remover(path: Path) -> Callable[[], Recovery]:
        def do() -> Recovery:
            done = Recovery()
            try:
                if remove_path(path):
                    done.repaired.append(f"removed leftover {path}")
            except OSError as exc:
                done.failures.append(("job-dirs", f"{path}: {exc.strerror or exc}"))
            return done
        return do

    for name in names:
        if name == keep or not jobdir.is_job_dir(name):
            continue
        path = run_dir / name
        out.actions.append(Action("job-dirs", f"remove leftover {path}", remover(path)))
    return out


def sweep_channels(channel_dir: Path, keep: set[int]) -> Recovery:
    """Plan removing channel devices that no domain of this boot owns."""
    from imexctl.tray.channels import list_channels, remove_channels
    from imexctl.base.fsutil import check_secure_dir

    out = Recovery()
    try:
        check_secure_dir(channel_dir)
        leaked = set(list_channels(channel_dir)) - keep
    except FileNotFoundError:
        return out
    except OSError as exc:
        out.failures.append(("channels", str(exc)))
        return out
    if not leaked:
        return out

    def do() -> Recovery:
        done = Recovery()
        try:
            removed = remove_channels(channel_dir, leaked)
            if removed:
                done.repaired.append("removed leaked channel" + ",".join(map(str, removed)))
            left = sorted(leaked & set(list_channels(channel_dir)))
            if left:
                done.failures.append(("channels", "leaked channel" + ",".join(map(str, left))
                                      + " cannot be removed"))
        except FileNotFoundError:
            pass
        except OSError as exc:
            done.failures.append(("channels", str(exc)))
        return done

    out.actions.append(Action("channels", "remove leaked channel"
                              + ",".join(map(str, sorted(leaked))), do))
    return out


def plan_identity(cfg: Config, slurm: SlurmAdapter, maintain: bool = True) -> Recovery:
    """Plan publishing this tray's live identity when Slurm holds another (reads only).

    Best effort: an Extra that is not JSON, or a Slurm that does not answer, is a note.
    ``maintain``: on a tray that Slurm shows drained by ``imexctl maintain``, first bring
    its persistent domain to the maintenance (:func:`plan_persistent`: its daemon
    restarted once per maintenance, or on a changed membership, with no job here; on a
    tray switched to ``lifetime = "job"``, :func:`plan_persistent_leftover` removes it),
    then publish what it runs: health's identity check does this at each run, so each
    tray applies a maintenance itself (ops/maintain.py). ``recover`` passes False (it
    plans the persistent domain after the identity anyway).
    """
    from imexctl.rules.cliques import identity_from_extra
    from imexctl.tray.identity import local_identity
    from imexctl.rules.cliques import EXTRA_KEY, TrayUnfit
    from imexctl.imex.identity import published as with_auth
    from imexctl.ops.maintain import maintenance_token

    out = Recovery()
    try:
        ident = with_auth(cfg, local_identity(cfg))
    except TrayUnfit as exc:
        out.notes.append(f"identity not published: {exc}")
        return out
    try:
        node = slurm.nodes([cfg.node]).get(cfg.node)
        published = identity_from_extra(node.extra if node is not None else "")
    except Exception as exc:  # noqa: BLE001 - republishing is best effort (audit F-12)
        out.notes.append(f"identity not republished: {exc}")
        return out
    if maintain and maintenance_token(node):
        # switched to "job" while drained: the persistent daemon left goes now
        restart = (plan_persistent(cfg, slurm, current_boot_id(cfg), cfg.health.lock_wait_s)
                   if cfg.imex.lifetime == Lifetime.PERSISTENT else
                   plan_persistent_leftover(cfg, cfg.health.lock_wait_s))
        out.merge(restart)
        if restart.actions:       # publish what runs once it runs, not what ran before
            out.actions.append(Action(
                "identity", f"publish the persistent domain in {cfg.node}'s Extra once it "
                            "runs (or is gone)", lambda: apply(plan_identity(cfg, slurm, False))))
            return out
    # The auth, lifetime and domain tags too: a rotated or replaced secret, a changed
    # imex.lifetime, or a persistent daemon (re)started on another membership is
    # published within one health run.
    if published is not None and (published.clique, published.auth, published.lifetime,
                                  published.domain, published.maintenance) \
            == (ident.clique, ident.auth, ident.lifetime, ident.domain, ident.maintenance):
        return out
    if published is not None and published.clique == ident.clique:
        tags = [(f"imex.{key}", now or "none", then or "unpublished")
                for key, now, then in (
                    ("auth", ident.auth, published.auth),
                    ("lifetime", ident.lifetime, published.lifetime),
                    ("domain", ident.domain, published.domain),
                    ("maintenance", ident.maintenance, published.maintenance))
                if now != then]
        what = ", ".join(f"{key} {now}" for key, now, _ in tags)
        was = ", ".join(then for _, _, then in tags)
    else:
        what, was = f"identity {ident.clique}", published.clique if published else "nothing"

    def do() -> Recovery:
        done = Recovery()
        try:
            slurm.extra_merge(cfg.node, EXTRA_KEY, ident.to_extra())
        except Exception as exc:  # noqa: BLE001 - best effort (audit F-12)
            done.notes.append(f"identity not republished: {exc}")
            return done
        done.repaired.append(f"published {what} (was {was})")
        return done

    out.actions.append(Action("identity", f"publish {what} in {cfg.node}'s Extra (was {was})",
                              do))
    return out


def republish_identity(cfg: Config, slurm: SlurmAdapter) -> tuple[str | None, str | None]:
    """Publish this tray's live identity; (what changed or None, why not or None)."""
    done = apply(plan_identity(cfg, slurm, maintain=False))
    return (done.repaired[0] if done.repaired else None), (done.notes[0] if done.notes else None)


def recover(cfg: Config, teardown: Teardown, slurm: SlurmAdapter | None = None,
            current_boot: str | None = None, lock_wait_s: float = 30.0,
            dry_run: bool = False) -> Recovery:
    """The whole recovery: old-boot record, unowned job dirs and channels, identity.

    ``dry_run``: plan only; the returned ``actions`` say what a run would do, and
    nothing is changed (no lock file, record, directory, channel, metric or Slurm
    node record)."""
    from imexctl.tray import expected
    from imexctl.ops import metrics
    from imexctl.tray.ownership import LOCK, LockTimeout, StateStore

    out = Recovery()
    store = StateStore(cfg.paths.state_dir)
    current_boot = current_boot or current_boot_id(cfg)
    try:
        with ExitStack() as stack:
            if not dry_run:
                stack.enter_context(store.locked(timeout_s=lock_wait_s))
            elif (store.dir / LOCK).exists():   # a read-only look: no lock file made
                stack.enter_context(store.locked(timeout_s=lock_wait_s))
            plan = plan_old_boot(store, teardown, current_boot)
            if dry_run:   # what the sweeps would see once the old record is torn down
                record = None if plan.actions else store.load()
            else:         # a teardown that failed keeps its record, job dir and channel
                apply(plan)
                record = store.load()
            keep_dir = jobdir.name(record.job_id) if record is not None else None
            keep_channels = {record.channel} if record and record.channel is not None else set()
            plan.merge(sweep_job_dirs(cfg.paths.run_dir, keep_dir))
            plan.merge(sweep_channels(cfg.paths.channel_dir, keep_channels))
            out.merge(plan if dry_run else apply(plan))
    except LockTimeout as exc:
        out.failures.append(("lock", str(exc)))
        record = None
    except (OSError, ValueError, TypeError) as exc:  # unreadable record, unusable state dir
        out.failures.append(("record", f"ownership record unusable: {exc}"))
        record = None
    if not out.failures and record is None:
        now = expected.read(cfg)
        if not expected.is_current(cfg, now, expected.IDLE):
            out.actions.append(Action("expected", "write the expected state "
                                      f"{expected.IDLE} (was {now.state if now else 'none'})",
                                      lambda: _write_expected(cfg, expected.IDLE)))
    if slurm is not None:
        out.merge(plan_identity(cfg, slurm, maintain=False))
    if cfg.imex.lifetime == Lifetime.JOB:
        out.merge(plan_persistent_leftover(cfg, lock_wait_s))
    if dry_run:
        if slurm is not None and cfg.imex.lifetime == Lifetime.PERSISTENT:
            out.merge(plan_persistent(cfg, slurm, current_boot, lock_wait_s))
        return out
    apply(out)
    # After the identity is published: the persistent domain's members are read from
    # the identities Slurm holds (issue 37).
    if slurm is not None and cfg.imex.lifetime == Lifetime.PERSISTENT:
        started = apply(plan_persistent(cfg, slurm, current_boot, lock_wait_s))
        out.merge(started)
        restarts = persistent_restarts(started)
        if restarts:
            metrics.count(cfg, "persistent_restarts", restarts)
        if started.repaired:   # its digest (imex.domain) is published once it is READY
            out.merge(apply(plan_identity(cfg, slurm, maintain=False)))
    if out.stale_found:
        metrics.count(cfg, "stale_domains_found", out.stale_found)
    return out


STARTED = "started the persistent IMEX domain"
RESTARTED = "restarted the persistent IMEX domain"
"""How a repair line begins when the persistent daemon was started anew (counted in
``imexctl_persistent_restarts_total``)."""


def plan_persistent(cfg: Config, slurm: SlurmAdapter, current_boot: str | None,
                    lock_wait_s: float = 30.0, replace_live: str = "") -> Recovery:
    """Plan bringing up this tray's persistent IMEX domain (``imex.lifetime =
    "persistent"``, issue 37; reads only). Its members come from one node-table query:
    every tray published in this tray's clique as persistent (``imex.persistent``). A
    daemon of this boot that is alive and runs the same members is left alone: a changed
    membership is reported, not applied (nvidia-imex reads its node list only at start, and
    restarting one tray's daemon breaks the clique's jobs: the maintenance command's work).
    ``replace_live``: why a live daemon of this boot is replaced all the same (health: it
    does not answer READY and no job holds a channel here); the start is then refused if a
    job's record appeared meanwhile."""
    from imexctl.imex import persistent
    from imexctl.imex.addresses import local_conf, member_addresses, record_addrs
    from imexctl.imex.launcher import is_alive
    from imexctl.imex.ready import effective_ready_timeout
    from imexctl.ops.maintain import maintenance_token
    from imexctl.rules.cliques import TrayUnfit, persistent_members
    from imexctl.slurm.hostlist import compress, natural_key
    from imexctl.tray.identity import local_identity
    from imexctl.tray.ownership import LockTimeout, RecordUnreadable, StateStore
    from imexctl.errors import NodeFault

    out = Recovery()
    store = StateStore(cfg.paths.state_dir)
    try:
        clique = local_identity(cfg).clique
        record = store.load_persistent()
        table = slurm.node_table()
    except TrayUnfit as exc:
        out.failures.append(("persistent", f"no persistent domain: {exc}"))
        return out
    except RecordUnreadable as exc:
        out.failures.append(("persistent", str(exc)))
        return out
    except Exception as exc:  # noqa: BLE001 - any Slurm error: the members are unknown
        out.failures.append(("persistent", f"cannot read the clique's members from Slurm: "
                                           f"{exc}"))
        return out
    # This tray is a member whether or not Slurm shows its identity yet (the identity
    # step of this run publishes it): its peers list it once they read it.
    members = sorted(set(persistent_members({n: r.extra for n, r in table.items()}, clique))
                     | {cfg.node}, key=natural_key)
    try:
        conf = local_conf(cfg, members)
        addrs = member_addresses(members, conf, record_addrs(table))
        domain = persistent.render(cfg, clique, members, addrs)
    except NodeFault as exc:
        out.failures.append(("persistent", exc.cause))
        return out
    said = f"clique {clique}, {len(members)} trays {compress(members)}, digest {domain.digest}"
    live = record is not None and record.boot_id == (current_boot or "") \
        and record.daemon is not None and is_alive(record.daemon)
    maintenance = maintenance_token(table.get(cfg.node))
    restart = ""     # why a live daemon is started anew: a maintenance (ops/maintain.py)
    if live and record is not None and record.daemon is not None:
        if record.digest != domain.digest or maintenance not in ("", record.maintenance):
            changed = (f"the persistent domain's members changed (now {said}; the daemon "
                       f"pid {record.daemon.pid} runs digest {record.digest})"
                       if record.digest != domain.digest else
                       f"the clique is drained for maintenance {maintenance}")
            why_not = _maintenance_restart_refused(maintenance, store)
            if why_not:
                out.notes.append(f"{changed}: {why_not}")
                return out
            restart = (f"for maintenance {maintenance}; was pid {record.daemon.pid}, digest "
                       f"{record.digest}; ")
        elif not replace_live:
            state = persistent.ctl(cfg).local()
            if state != persistent.READY:
                out.failures.append(("persistent", f"the persistent nvidia-imex (pid "
                                     f"{record.daemon.pid}) is not READY (-q: {state})"))
            return out
    budget_s = effective_ready_timeout(cfg, conf)
    if record is None:
        verb, why = STARTED, ""
    elif restart:
        verb, why = RESTARTED, restart
    elif replace_live and live:
        verb, why = RESTARTED, f"{replace_live}; "
    elif record.boot_id != (current_boot or ""):
        verb, why = RESTARTED, "this tray rebooted since it last ran; "
    else:
        pid = record.daemon.pid if record.daemon is not None else "unknown"
        verb, why = RESTARTED, f"its nvidia-imex (pid {pid}) was gone; "

    def do() -> Recovery:
        done = Recovery()
        try:
            with store.locked(timeout_s=lock_wait_s):
                job = store.load() if (replace_live or restart) and live else None
                if job is not None:
                    done.failures.append(("persistent", f"{why}not restarted: job "
                                          f"{job.job_id} started here meanwhile"))
                    return done
                started = _start_persistent(cfg, store, clique, domain, current_boot or "",
                                            budget_s, maintenance)
        except NodeFault as exc:
            done.failures.append(("persistent", exc.cause))
            return done
        except LockTimeout:   # a prolog or epilog runs: the next run starts it
            done.notes.append(f"a prolog or epilog holds the node lock: did not {verb.replace('ed the', ' the', 1)} "
                              f"({why}{said})")
            return done
        except Exception as exc:  # noqa: BLE001 - lock, state dir, run dir: reported
            done.failures.append(("persistent", f"{type(exc).__name__}: {exc}"))
            return done
        done.repaired.append(f"{verb} ({why}{said}; pid {started})")
        return done

    out.actions.append(Action("persistent", f"{verb.replace('ed the', ' the', 1)} ({why}{said})",
                              do))
    return out


def _maintenance_restart_refused(maintenance: str, store: StateStore) -> str:
    """Why this tray may not restart its persistent daemon now ("" when it may): only
    while Slurm shows it drained by the maintenance command (``maintenance``: the token of
    its ``imexctl: maintain/...`` drain, ops/maintain.py) and no job's domain record is on
    it. A restart at any other time breaks the imports of the clique's running jobs."""
    if not maintenance:
        return ("restarting it needs the clique's daemons restarted together: imexctl "
                "maintain --membership")
    try:
        job = store.load()
    except Exception:  # noqa: BLE001 - an unreadable job record: a job may be here
        return "a job's record on this tray is unreadable: not restarted"
    if job is not None:
        return f"job {job.job_id} still runs on this tray: restarted once it ends"
    return ""


def persistent_restarts(done: Recovery) -> int:
    """How many times the persistent daemon was started anew in ``done`` (its repair lines)."""
    return sum(1 for line in done.repaired if line.startswith(RESTARTED))


def plan_persistent_leftover(cfg: Config, lock_wait_s: float = 30.0) -> Recovery:
    """On a tray with ``imex.lifetime = "job"``: plan removing a persistent domain left
    from an earlier ``"persistent"`` (its daemon, found by its record or its config, its
    directory and its record; reads only). Without it the daemon would run on beside the
    job daemons, unseen: the foreign-daemon check counts a persistent daemon as imexctl's."""
    from imexctl.imex import launcher
    from imexctl.tray.ownership import PERSISTENT_RECORD, RecordUnreadable, StateStore

    out = Recovery()
    store = StateStore(cfg.paths.state_dir)
    pdir = jobdir.persistent_path(cfg.paths.run_dir)
    try:
        record = store.load_persistent()
    except RecordUnreadable:
        record = None       # removed below all the same: this tray runs no persistent domain
    daemons = launcher.find_by_config(pdir / jobdir.CONFIG)
    if record is not None and record.daemon is not None and launcher.is_alive(record.daemon):
        daemons = [record.daemon] + [d for d in daemons if d.pid != record.daemon.pid]
    if not daemons and not pdir.exists() and not (store.dir / PERSISTENT_RECORD).exists():
        return out
    pids = ",".join(str(d.pid) for d in daemons)

    def do() -> Recovery:
        from imexctl.base.fsutil import remove_path

        done = Recovery()
        try:
            with store.locked(timeout_s=lock_wait_s):
                stuck = [d.pid for d in daemons
                         if not launcher.stop(d, cfg.imex.stop_grace_s).ok]
                if stuck:
                    done.failures.append(("persistent", "the persistent nvidia-imex (pid "
                                          f"{','.join(map(str, stuck))}) cannot be stopped"))
                    return done
                remove_path(pdir)
                store.clear_persistent()
        except Exception as exc:  # noqa: BLE001 - lock, state dir, run dir: reported
            done.failures.append(("persistent", f"{type(exc).__name__}: {exc}"))
            return done
        done.repaired.append("removed the persistent IMEX domain left from imex.lifetime = "
                             f"persistent{f' (stopped pid {pids})' if pids else ''}")
        return done

    out.actions.append(Action("persistent", "remove the persistent IMEX domain left from "
                                            "imex.lifetime = persistent"
                              + (f" (stop pid {pids})" if pids else ""), do))
    return out


def _start_persistent(cfg: Config, store: StateStore, clique: str, domain: PersistentDomain,
                      boot_id: str, budget_s: float, maintenance: str = "") -> int:
    """Write the persistent domain's files, start its daemon (recorded before it is waited
    for, so health and status see a daemon that never gets READY) and wait for local
    ``-q`` READY. Leftover daemons of that config (no record names them) are stopped
    first: one persistent daemon per tray. NodeFault naming what failed."""
    from imexctl.errors import NodeFault
    from imexctl.imex import launcher, persistent

    pdir = jobdir.persistent_path(cfg.paths.run_dir)
    for ident in launcher.find_by_config(pdir / jobdir.CONFIG):
        if not launcher.stop(ident, cfg.imex.stop_grace_s).ok:
            raise NodeFault(f"a leftover persistent nvidia-imex (pid {ident.pid}) cannot be "
                            "stopped")
    persistent.write(cfg, domain)
    record = persistent.new_record(cfg, clique, domain, boot_id)
    record.maintenance = maintenance     # started while drained for that maintenance
    store.save_persistent(record)
    record.daemon = persistent.start(cfg)
    store.save_persistent(record)
    persistent.wait_local_ready(cfg, record.daemon, budget_s)
    record.phase = "ready"
    store.save_persistent(record)
    return record.daemon.pid


def _write_expected(cfg: Config, state: str, job_id: int | None = None) -> Recovery:
    from imexctl.tray import expected
    expected.write(cfg, state, job_id=job_id)
    return Recovery()
