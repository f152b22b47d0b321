"""``imexctl maintain``: change a clique's IMEX domain without draining racks by hand.

``nvidia-imex`` reads ``nodes_config.cfg`` only at start, so a changed membership (a tray
added, replaced or renumbered) or TLS change needs every daemon of a persistent clique
restarted together, and a restart breaks the imports of every running job of the clique;
switching a clique between ``imex.lifetime = "job"`` and ``"persistent"`` under live
domains broke jobs for 8 min 41 s in the DRA driver (#1486). imexctl has no remote
execution: the trays are separate machines. So the change is asked for in Slurm and each
tray applies it itself:

1. the command drains the clique's trays with ``imexctl: maintain/<change>: ...``, the
   reason carrying the maintenance's token (the UTC time of the first drain); a tray
   drained or down for another reason is left alone (never drained over, never resumed);
   a lifetime switch is refused while any job runs on the clique's trays, naming the
   jobs, before anything is drained;
2. once a tray runs no job, its own ``imexctl health`` (HealthCheckProgram, root, on the
   tray) or ``imexctl recover`` sees the maintenance drain and (re)starts its persistent
   daemon once for that token, on the membership Slurm shows now
   (``ops.recover.plan_persistent``), and publishes the daemon's digest and the token it
   started under (``imex.domain``, ``imex.maintenance``) once it is READY;
3. the command waits until every tray it maintains publishes the lifetime asked for and,
   for a persistent clique, the token and one and the same digest, then resumes the trays
   it drained, and only those.

Each call of :func:`step` does what can be done now and says what is left, so a run
without waiting (``--no-wait``) and a later run continue the same maintenance (the token is
read back from the drains). Library code: returns data, prints nothing.
"""

from __future__ import annotations

import re
import time

from imexctl.base.dataclass import asdict, dataclass, field, replace
from imexctl.config import Lifetime
from imexctl.errors import EXIT_USAGE, ImexctlError, SlurmError
from imexctl.rules.cliques import MAINTENANCE_TAG_RE, TrayIdentity, identity_from_extra
from imexctl.slurm import reasons
from imexctl.slurm.hostlist import compress, natural_key
from imexctl.slurm.states import node_words

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Callable

    from imexctl.base.jsontypes import Json
    from imexctl.slurm.interface import SlurmAdapter
    from imexctl.slurm.records import NodeRecord

HOOK = "maintain"
PREFIX = reasons.hook_prefix(HOOK)          # "imexctl: maintain/": our maintenance drains
MEMBERSHIP = "membership"
TLS = "tls"              # as a membership change: every persistent daemon restarts
LIFETIME = "lifetime"
_TOKEN = re.compile(r"\(maintenance (" + MAINTENANCE_TAG_RE + r")\)")

# What a pass ends in (Progress.phase).
REFUSED = "refused"              # a lifetime switch under live jobs: nothing drained
WAITING_JOBS = "waiting-jobs"    # drained; jobs still run on the clique's trays
WAITING_TRAYS = "waiting-trays"  # no job left; trays not yet on the change
DONE = "done"                    # every maintained tray runs the change; resumed
DEADLINE = "deadline"            # --deadline passed while waiting: trays left drained


class MaintainError(ImexctlError):
    """The command line names no clique imexctl knows (exit 2)."""

    exit_code = EXIT_USAGE


def drained_for_maintenance(node: NodeRecord) -> bool:
    """Drained (or draining) by the maintenance command."""
    return node.drained and node.reason.startswith(PREFIX)


def maintenance_token(node: NodeRecord | None) -> str:
    """The token of the maintenance ``node`` is drained for; "" when it is not drained
    for one (what a tray's health or recover asks before it restarts its daemon)."""
    if node is None or not drained_for_maintenance(node):
        return ""
    match = _TOKEN.search(node.reason)
    return match.group(1) if match else ""


def new_token(now: float) -> str:
    """A maintenance's token: the UTC time it began (``20261128T030000Z``)."""
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))


@dataclass(frozen=True)
class Change:
    """What the maintenance changes: ``membership`` (every persistent daemon restarts on
    the membership Slurm shows), ``tls`` (the same, for new TLS files) or ``lifetime``
    (the clique switches to ``lifetime``)."""
    kind: str
    lifetime: str = Lifetime.PERSISTENT.value    # what the clique runs afterwards

    @classmethod
    def membership(cls) -> "Change":
        return cls(MEMBERSHIP)

    @classmethod
    def tls(cls) -> "Change":
        return cls(TLS)

    @classmethod
    def switch(cls, lifetime: Lifetime) -> "Change":
        return cls(LIFETIME, lifetime.value)

    def reason(self, clique: str, token: str) -> str:
        """The drain reason: ``imexctl: maintain/<kind>: ... (maintenance <token>)``."""
        if self.kind == MEMBERSHIP:
            cause = f"clique {clique} restarts its persistent IMEX daemons"
        elif self.kind == TLS:
            cause = f"clique {clique} restarts its persistent IMEX daemons on new TLS files"
        else:
            cause = f"clique {clique} switches to imex.lifetime = {self.lifetime}"
        return reasons.one_line(reasons.format(HOOK, self.kind,
                                               f"{cause} (maintenance {token})"))


@dataclass
class Tray:
    """One tray of the clique as this pass saw it."""
    name: str
    state: str                   # Slurm's node state
    reason: str                  # Slurm's reason ("" when none)
    lifetime: str                # published imex.lifetime ("" unpublished)
    domain: str                  # published imex.domain (persistent digest, "" none)
    maintenance: str             # published imex.maintenance ("" none)
    held: bool = False           # drained or down for another reason: left alone
    jobs: list[int] = field(default_factory=list)
    waiting: str = ""            # what this tray still lacks ("" when it runs the change)


@dataclass
class Progress:
    """What one pass found and did."""
    clique: str
    change: Change
    token: str
    phase: str
    trays: list[Tray]
    jobs: dict[int, list[str]]   # jobs holding the clique's trays: job id -> its trays there
    drained: list[str] = field(default_factory=list)    # drained by this pass
    resumed: list[str] = field(default_factory=list)    # resumed by this pass
    would: list[str] = field(default_factory=list)      # a dry run's changes
    digest: str = ""             # the persistent domain's digest every tray runs, when done
    error: str = ""              # Slurm did not answer this look (a later one is tried)

    @property
    def maintained(self) -> list[str]:
        return [t.name for t in self.trays if not t.held]

    @property
    def held(self) -> list[Tray]:
        return [t for t in self.trays if t.held]

    def job_list(self) -> str:
        """``job 12 (tray[1-2]), job 14 (tray3)``."""
        return ", ".join(f"job {job} ({compress(nodes)})" for job, nodes in
                         sorted(self.jobs.items()))

    def to_json(self) -> Json:
        return {**asdict(self), "jobs": {str(k): v for k, v in self.jobs.items()},
                "maintained": self.maintained}


def find_clique(table: dict[str, NodeRecord], clique: str | None = None,
                node: str | None = None) -> tuple[str, list[str]]:
    """The clique asked for (by key, or the clique ``node`` publishes) and its trays in
    natural order; MaintainError when Slurm shows none."""
    idents = {name: identity_from_extra(rec.extra) for name, rec in table.items()}
    if node is not None:
        if node not in table:
            raise MaintainError(f"node {node} is unknown to Slurm")
        ident = idents[node]
        if ident is None or not ident.imex:
            raise MaintainError(f"{node} publishes no NVLink clique (imexctl identity show "
                                f"{node})")
        clique = ident.clique
    trays = sorted((n for n, i in idents.items() if i is not None and i.clique == clique),
                   key=natural_key)
    if not trays:
        raise MaintainError(f"no tray publishes clique {clique} (imexctl identity show "
                            "lists the cliques)")
    return str(clique), trays


def _tray(rec: NodeRecord, ident: TrayIdentity | None) -> Tray:
    return Tray(rec.name, rec.state, rec.reason, ident.lifetime if ident else "",
                ident.domain if ident else "", ident.maintenance if ident else "",
                held=rec.unavailable and not drained_for_maintenance(rec))


def _waiting(change: Change, token: str, tray: Tray) -> str:
    """What ``tray`` still lacks to run ``change`` ("" when it runs it)."""
    down = node_words(tray.state) & {"DOWN", "FAIL", "FAILING"}
    if down and (tray.lifetime != change.lifetime or tray.maintenance != token
                 or change.lifetime == Lifetime.JOB.value):
        return (f"is {tray.state} in Slurm: it applies the maintenance once it is back (its "
                "boot's imexctl recover), or take it out of the clique")
    if tray.lifetime != change.lifetime:
        return (f"publishes imex.lifetime {tray.lifetime or 'none'}, not {change.lifetime} "
                f"(deploy imex.lifetime = \"{change.lifetime}\" in its imexctl.toml; its "
                "health applies it)")
    if change.lifetime == Lifetime.JOB.value:
        return "" if not tray.domain else (f"still publishes a persistent domain "
                                           f"({tray.domain}): its next health run or "
                                           "imexctl recover removes it")
    if tray.maintenance != token or not tray.domain:
        return (f"its persistent daemon has not restarted for maintenance {token} (it "
                f"publishes digest {tray.domain or 'none'}, maintenance "
                f"{tray.maintenance or 'none'}; its next health run or imexctl recover "
                "restarts it)")
    return ""


def step(slurm: SlurmAdapter, change: Change, *, clique: str | None = None,
         node: str | None = None, dry_run: bool = False,
         now: Callable[[], float] = time.time) -> Progress:
    """One pass: read the clique (one node-table and one job query), refuse, drain, see
    what is left, and resume the trays this maintenance drained once every tray runs the
    change. ``dry_run``: change nothing; ``would`` says what a pass would do."""
    table = slurm.node_table()
    key, names = find_clique(table, clique, node)
    idents = {n: identity_from_extra(table[n].extra) for n in names}
    trays = [_tray(table[n], idents[n]) for n in names]
    members = set(names)
    jobs: dict[int, list[str]] = {}
    for job in slurm.active_jobs():
        here = sorted(set(job.nodes) & members, key=natural_key)
        if here:
            jobs[job.job_id] = here
    for tray in trays:
        tray.jobs = sorted(j for j, nodes in jobs.items() if tray.name in nodes)
    tokens = sorted({maintenance_token(table[n]) for n in names} - {""})
    token = tokens[-1] if tokens else new_token(now())
    started = bool(tokens)
    progress = Progress(key, change, token, WAITING_JOBS, trays, jobs)
    if change.kind == LIFETIME and jobs and not started:
        progress.phase = REFUSED
        return progress
    reason = change.reason(key, token)
    for tray in trays:
        if tray.held or maintenance_token(table[tray.name]) == token:
            continue        # (a drain of an earlier, given-up maintenance is renewed)
        if dry_run:
            progress.would.append(f"drain {tray.name}: {reason}")
        elif slurm.drain(tray.name, reason):
            progress.drained.append(tray.name)
            tray.state, tray.reason = "DRAIN", reason
        else:       # drained or downed by someone else since the table was read
            tray.held = True
    if jobs:
        return progress
    kept = [t for t in trays if not t.held]
    for tray in kept:
        tray.waiting = _waiting(change, token, tray)
    digests = {t.domain for t in kept}
    if change.lifetime == Lifetime.PERSISTENT.value and len(digests) > 1 \
            and not any(t.waiting for t in kept):
        for tray in kept:
            tray.waiting = (f"runs digest {tray.domain}; the clique's trays run "
                            f"{', '.join(sorted(digests))} (its next health run restarts "
                            "it on the membership Slurm shows)")
    if any(t.waiting for t in kept):
        progress.phase = WAITING_TRAYS
        return progress
    progress.phase = DONE
    progress.digest = next(iter(digests), "") if len(digests) == 1 else ""
    for tray in kept:
        if dry_run:
            progress.would.append(f"resume {tray.name}")
        elif slurm.resume_if_ours(tray.name, PREFIX):
            progress.resumed.append(tray.name)
    return progress


def run(slurm: SlurmAdapter, change: Change, *, clique: str | None = None,
        node: str | None = None, wait: bool = True, deadline_s: float | None = None,
        poll_s: float = 10.0, dry_run: bool = False,
        on_pass: Callable[[Progress], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep) -> Progress:
    """Passes of :func:`step` every ``poll_s`` until the maintenance is done or refused,
    or ``deadline_s`` has passed (phase DEADLINE: the trays stay drained, a later run
    continues). ``wait`` off or ``dry_run``: one pass. ``on_pass`` sees each pass (the CLI
    shows what changed). Slurm not answering a look after the first (a slurmctld restart
    during a long wait) is kept in ``error`` and the next look tried; at the first it
    raises (nothing was drained)."""
    began, last = clock(), None
    while True:
        try:
            progress = step(slurm, change, clique=clique, node=node, dry_run=dry_run)
        except SlurmError as exc:
            if last is None:          # nothing drained yet: the caller says so
                raise
            progress = replace(last, error=str(exc), drained=[], resumed=[], would=[])
        last = progress
        if on_pass is not None:
            on_pass(progress)
        if dry_run or not wait or progress.phase in (DONE, REFUSED):
            return progress
        if deadline_s is not None and clock() - began >= deadline_s:
            progress.phase = DEADLINE
            return progress
        sleep(poll_s if deadline_s is None
              else max(0.0, min(poll_s, deadline_s - (clock() - began))))


def abandon(slurm: SlurmAdapter, *, clique: str | None = None,
            node: str | None = None) -> tuple[str, list[str]]:
    """Give up the clique's maintenance: resume the trays drained by ``imexctl:
    maintain/`` (only those). (clique key, trays resumed)."""
    table = slurm.node_table()
    key, names = find_clique(table, clique, node)
    return key, [n for n in names if drained_for_maintenance(table[n])
                 and slurm.resume_if_ours(n, PREFIX)]


__all__ = ["Change", "DEADLINE", "DONE", "LIFETIME", "MEMBERSHIP", "MaintainError", "PREFIX",
           "Progress", "REFUSED", "TLS",
           "Tray", "WAITING_JOBS", "WAITING_TRAYS", "abandon", "drained_for_maintenance",
           "find_clique", "maintenance_token", "new_token", "run", "step"]
