"""``imexctl health``: Slurm's HealthCheckProgram (NHC style) for IMEX on this node.

Slurm only logs a failing health check, so a problem is reported by draining the node
with ``imexctl: health/<check>: <cause>``; a drain of ours from an earlier health run is
lifted once every check passes again (prolog and epilog drains stay for an admin). What
can be repaired safely is repaired and logged: a stale domain whose job no longer runs
here is torn down, leaked channel devices and job directories are removed.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any

from imexctl import log
from imexctl.channels import list_channels
from imexctl.config import Config
from imexctl.errors import EXIT_NODE_FAULT, EXIT_OK
from imexctl.imex import launcher
from imexctl.ownership import owner_alive
from imexctl.state import LockTimeout, RecordUnreadable, StateStore
from imexctl.teardown import remove_job_dir, teardown_domain
from imexctl.tray import local_identity, published_identity
from imexctl.topology import EXTRA_KEY, TrayUnfit

HEALTH_PREFIX = "imexctl: health/"
LOCK_WAIT_S = 2.0  # a prolog or epilog holding the lock is busy, not broken


@dataclass
class Report:
    problems: list[tuple[str, str]] = field(default_factory=list)   # (check, cause)
    repaired: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def fail(self, check: str, cause: str) -> None:
        self.problems.append((check, cause))


def check(cfg: Config, slurm: Any, drain: bool = True) -> int:
    """Run every check, repair what is safe, drain or resume; print one line per finding."""
    logger = log.get_logger()
    start = time.monotonic()
    report = Report()
    store = StateStore(cfg.paths.state_dir)
    _check_fabric(cfg, slurm, report)
    try:
        with store.locked(timeout_s=LOCK_WAIT_S):
            _check_domain(cfg, slurm, store, report)
    except LockTimeout:
        report.notes.append("a prolog or epilog holds the node lock; domain checks skipped")
    except RecordUnreadable as exc:
        report.fail("stale-domain", str(exc))
    except OSError as exc:  # state dir unusable (read-only, unsafe): say so, do not crash
        report.fail("state", str(exc))
    for text in report.repaired:
        print(f"imexctl health: repaired: {text}")
    for text in report.notes:
        print(f"imexctl health: note: {text}")
    duration = round((time.monotonic() - start) * 1000, 1)
    if report.problems:
        check_name, cause = report.problems[0]
        more = f" (+{len(report.problems) - 1} more)" if len(report.problems) > 1 else ""
        reason = f"{HEALTH_PREFIX}{check_name}: {cause}{more}"[:250]
        for name, text in report.problems:
            print(f"imexctl health: FAIL {name}: {text}")
        logger.error("health check failed", reason=reason, problems=report.problems,
                     duration_ms=duration)
        if drain:
            try:
                if slurm.drain(cfg.node, reason) is False:
                    print("imexctl health: node already drained by someone else; reason kept")
            except Exception as exc:  # report, do not hide the finding behind it
                logger.error("could not drain node", error=str(exc))
                print(f"imexctl health: could not drain {cfg.node}: {exc}")
        return EXIT_NODE_FAULT
    logger.info("health check passed", repaired=report.repaired, duration_ms=duration)
    print(f"imexctl health: OK ({cfg.node}, {duration:.0f} ms)")
    if drain:
        try:
            if slurm.resume_if_ours(cfg.node, prefix=HEALTH_PREFIX):
                print(f"imexctl health: resumed {cfg.node} (its health drain is resolved)")
                logger.info("health drain lifted")
        except Exception as exc:
            logger.error("could not resume node", error=str(exc))
    return EXIT_OK


def _check_fabric(cfg: Config, slurm: Any, report: Report) -> None:
    """Live GPUs fit for IMEX, and the identity Slurm holds for this tray still true."""
    try:
        ident = local_identity(cfg)
    except TrayUnfit as exc:
        report.fail("fabric", str(exc))
        return
    try:
        record = slurm.nodes([cfg.node]).get(cfg.node)
    except Exception as exc:
        report.notes.append(f"published identity not checked: {exc}")
        return
    published = published_identity(getattr(record, "extra", ""))
    if published is None or published.clique != ident.clique:
        slurm.extra_merge(cfg.node, EXTRA_KEY, ident.to_extra())
        was = published.clique if published else "nothing"
        report.repaired.append(f"published identity {ident.clique} (was {was})")


def _check_domain(cfg: Config, slurm: Any, store: StateStore, report: Report) -> None:
    """The ownership record against reality: stale owner, dead daemon, leaked leftovers."""
    record = store.load()
    if record is not None:
        try:
            alive = owner_alive(slurm, record, cfg.node)
        except Exception as exc:
            report.notes.append(f"owner of job {record.job_id} not checked: {exc}")
            return
        if not alive:
            failures = teardown_domain(cfg, record, store).failures
            if failures:
                step, cause = failures[0]
                report.fail("stale-domain", f"job {record.job_id} ended but its domain "
                                            f"could not be removed ({step}: {cause})")
                return
            report.repaired.append(f"tore down stale domain of ended job {record.job_id}")
            record = None
        elif record.phase == "ready" and record.daemon and not launcher.is_alive(record.daemon):
            report.fail("domain", f"nvidia-imex of running job {record.job_id} "
                                  f"(pid {record.daemon.pid}) is gone")
    owned = {record.channel} if record is not None and record.channel is not None else set()
    leaked = sorted(set(list_channels(cfg.paths.channel_dir)) - owned)
    if leaked:
        from imexctl.channels import remove_channels
        remove_channels(cfg.paths.channel_dir, set(leaked))
        left = sorted(set(leaked) & set(list_channels(cfg.paths.channel_dir)))
        if left:
            report.fail("channels", "leaked channel" + ",".join(map(str, left)) +
                        " cannot be removed")
        else:
            report.repaired.append("removed leaked channel" + ",".join(map(str, leaked)))
    keep = f"job-{record.job_id}" if record is not None else None
    run_dir = cfg.paths.run_dir
    for name in sorted(os.listdir(run_dir)) if run_dir.is_dir() else []:
        if name.startswith("job-") and name != keep and name[4:].isascii() and name[4:].isdigit():
            try:
                if remove_job_dir(cfg, int(name[4:])):
                    report.repaired.append(f"removed leftover {run_dir / name}")
            except OSError as exc:
                report.fail("files", f"{run_dir / name}: {exc.strerror or exc}")
            except Exception as exc:  # still present after removal
                report.fail("files", str(exc))
