"""The node prolog's allocation step: this tray's part of the job's IMEX domains.

What this tray does comes from the controller's decision (docs/multi-rack.md, "Node
prolog contract"): PrologSlurmctld sealed it into the job's AdminComment, which arrived
with the one job-record query the prolog made (its context step). Only when there is no
usable decision, and none is required (``policy.controller``), does the prolog ask Slurm
for the job's node records and group the trays itself (``decision.fallback_decision``), and
it says so. A tray that gets no domain ends the prolog here, and its tasks are told so
(:func:`write_facts`, also the record step's).
"""

from __future__ import annotations

import time

from imexctl.base import log
from imexctl.base.clock import when
from imexctl.base.fsutil import ensure_secure_dir
from imexctl.errors import JobFault, JobWait, NodeFault
from imexctl.imex.addresses import record_addrs
from imexctl.imex.identity import published as as_published
from imexctl.lifecycle.runner import Done
from imexctl.lifecycle.teardown import job_dir
from imexctl.rules.cliques import EXTRA_KEY, TrayIdentity
from imexctl.rules.policy import shared_node_refusal

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import NoReturn

    from imexctl.lifecycle.prolog import PrologRun
    from imexctl.rules.decision import Found, NodeDecision

UNPUBLISHED_WAIT_S = 3.0   # fallback only: how long a tray waits for peers to publish
CLOCK_WARN_S = 60          # a tray's clock this far behind slurmctld's is logged


def allocation(run: PrologRun) -> None:
    """This tray's part of the controller's sealed decision (in the job record already
    read). Where the controller decides (``policy.controller``), a job without one is
    refused and a job told to wait is requeued; elsewhere the same grouping is made here
    from published identities, with the job-id channel rule."""
    from imexctl.rules import decision

    ctx, logger, verdict = run.ctx, log.get_logger(), run.fabric_verdict()
    required, found = _sealed_decision(run)
    _clock(run, found.encoded)
    nd = decision.for_node(found.decision, ctx.node) if found.decision else None
    if verdict.kind == "not_imex":
        if nd is not None and nd.group is not None:
            _republish(run, TrayIdentity.not_imex(len(verdict.gpus)).to_extra())
            raise JobFault(f"{ctx.node} is in IMEX group {nd.group.key} of the controller's "
                           "decision but is not an IMEX tray (identity republished)")
        _no_domain(run, "not an IMEX tray: job runs without an IMEX domain",
                   detail=verdict.detail)
    if found.refused:     # a genuine record of another job instance: a replay
        raise JobFault(found.why)
    if found.legacy:
        raise JobWait(found.why)
    if nd is None and required:
        raise JobFault(f"{found.why}; only PrologSlurmctld decides IMEX groups and channels "
                       "here (policy.controller), so the job is not run on a guessed channel")
    if nd is not None and nd.action == "pending":
        _publish_own(run)
        raise JobWait(f"waiting for trays to publish their fabric identity ({nd.reason})")
    if nd is not None and nd.action == "wait":
        raise JobWait(f"waiting: {nd.reason or 'no free IMEX channel'}")
    het = ctx.het_job_id
    if nd is None and het is not None:
        from imexctl.rules.groups import HET_REFUSAL
        raise JobFault(f"{found.why}; {HET_REFUSAL}")
    if nd is not None and nd.het_job_id != het:
        raise JobFault(f"the controller's decision names het job {nd.het_job_id}, Slurm "
                       f"says {het}: not acted on")
    if nd is None:
        logger.warning(f"{found.why}: grouping trays from published identities (fallback; "
                       "no PrologSlurmctld decides here)")
        nd = _fallback_decision(run)
    run.decision = nd
    logger.info("decision", source=nd.source, action=nd.action,
                group=nd.group.key if nd.group else None, channel_mode=nd.channel_mode)
    if nd.action == "refuse":
        raise JobFault(nd.reason or "the controller refused the job's allocation")
    if nd.action == "pending":
        raise JobFault(nd.reason or "some trays never published their fabric identity")
    if nd.action != "domains" or nd.group is None:
        _no_domain(run, f"no IMEX domain for this tray (decision {nd.action}, "
                        f"from {nd.source})", reason=nd.reason)
    refusal = shared_node_refusal(ctx.exclusive, ctx.oversubscribe,
                                  run.job_record().oversubscribe)
    if refusal:
        raise JobFault(refusal)
    if run.tray().clique != nd.group.key:
        _clique_mismatch(run, nd)


def _clock(run: PrologRun, sealed_at: int) -> None:
    """This tray's clock against slurmctld's: the controller sealed the job's decision
    (at ``sealed_at``, its clock) before this prolog ran, so a seal from this tray's future
    means this tray's clock is behind. Under ``imex.auth`` a tray more than
    CLOCK_BEHIND_S behind is drained before its job's daemons refuse each other's
    certificates (audit S4-3); without auth it is a warning. A clock ahead cannot be told
    from a prolog that started late, and the job certificates tolerate it."""
    behind = sealed_at - time.time() if sealed_at else 0.0
    if behind <= CLOCK_WARN_S:
        return
    cause = (f"this tray's clock is {behind:.0f} s behind slurmctld's (the job's decision "
             f"was sealed at {when(sealed_at)} by its clock): check chrony/NTP")
    if run.cfg.imex.auth.on:
        from imexctl.imex.auth import CLOCK_BEHIND_S
        if behind > CLOCK_BEHIND_S:
            raise NodeFault(cause)
    log.get_logger().warning(cause, behind_s=round(behind))


def _clique_mismatch(run: PrologRun, nd: NodeDecision) -> NoReturn:
    """The decision puts this tray in a clique it is not in. When the tray's published
    identity is its live one, the controller read this clique and the record is not one
    made for this allocation (a replayed or foreign record): the job is refused, nothing
    drains. Only when what the tray published differs from what it is (its own identity
    changed) is it a node fault: it republishes and drains (audit F4-2)."""
    from imexctl.rules.cliques import identity_from_extra

    live = run.tray()
    key = nd.group.key if nd.group is not None else "none"
    try:
        record = run.slurm.nodes([run.ctx.node]).get(run.ctx.node)
        published = identity_from_extra(record.extra if record is not None else "")
    except Exception:  # noqa: BLE001 - cannot tell: treat as this tray's change
        published = None
    if published is not None and published.clique == live.clique:
        raise JobFault(f"the controller's decision puts {run.ctx.node} in clique "
                       f"{key}, but the tray is and published {live.clique}: "
                       "a decision record not made for this allocation")
    _republish(run, as_published(run.cfg, live).to_extra())
    raise NodeFault(f"live clique {live.clique} differs from the decision's "
                    f"{key} ({nd.source}; identity republished)")


def _sealed_decision(run: PrologRun) -> tuple[bool, Found]:
    """(whether the controller must decide, what ``decision.find`` made of the job
    record). Opening a seal asks the local munged; when it cannot answer, nothing the
    controller decided can be believed on this tray: a node fault. So is a local
    slurm.conf that cannot be read under ``policy.controller = auto``."""
    from imexctl.rules import decision
    from imexctl.slurm import localconf
    from imexctl.slurm.munge import SealError, cluster_name, seal_for

    try:
        conf, unread = localconf.load(run.cfg.paths.slurm_conf, nodes=()), None
    except localconf.LocalConfError as exc:
        conf, unread = None, exc
    required = decision.controller_required(run.cfg, conf)
    if required is None:    # audit F4-9: a fallback channel may be one the table handed out
        raise NodeFault(f"cannot tell whether PrologSlurmctld decides IMEX channels here "
                        f"(policy.controller = auto): {unread}") from None
    job, ctx = run.job_record(), run.ctx
    text = job.decision_text or job.admin_comment
    if not decision.candidates(text):
        return required, decision.Found(None, "no controller decision in the job record")
    try:
        found = decision.find(text, seal_for(run.cfg, conf), ctx.job_id, ctx.restart_count,
                              list(job.nodes), cluster=cluster_name(ctx, conf),
                              submit_time=job.submit_time, admin_comment=job.admin_comment)
    except SealError as exc:
        raise NodeFault(f"cannot open the controller's sealed decision: {exc}") from None
    if found.decision is None:
        log.get_logger().warning("no sealed controller decision", why=found.why,
                                 candidates=found.candidates)
    return required, found


def _republish(run: PrologRun, identity: dict) -> None:
    """Publish this tray's identity in its node's Extra. Extra holding the site's own
    text (not JSON) is a setup fault of this tray (owned drain), not a Slurm failure."""
    from imexctl.slurm.records import ExtraNotOurs

    try:
        run.slurm.extra_merge(run.ctx.node, EXTRA_KEY, identity)
    except ExtraNotOurs as exc:
        raise NodeFault(f"{exc}: put the site's text into a JSON object "
                        "(scontrol update nodename=N Extra='{\"site\": ...}') or clear it"
                        ) from None


def _publish_own(run: PrologRun) -> None:
    """Publish this tray's live identity (the controller found some trays unpublished);
    best effort: the job waits either way."""
    try:
        run.slurm.extra_merge(run.ctx.node, EXTRA_KEY,
                              as_published(run.cfg, run.tray()).to_extra())
    except Exception as exc:  # noqa: BLE001 - health and recover publish it too
        log.get_logger().warning("could not publish this tray's identity", error=str(exc))


def _fallback_decision(run: PrologRun) -> NodeDecision:
    """Publish this tray if needed, give unpublished peers a moment (on the first job
    after a reboot every tray publishes itself here), then group. The only path that
    reads node records from slurmctld."""
    from imexctl.rules import decision, groups
    from imexctl.tray.channels import read_driver_params
    from imexctl.slurm import localconf
    from imexctl.rules.cliques import identity_from_extra

    cfg, ctx, nodes, live = run.cfg, run.ctx, list(run.job_record().nodes), run.tray()
    records = run.slurm.nodes(nodes)
    run.slurm_addrs.update(record_addrs(records))
    ids = {n: identity_from_extra(records[n].extra if n in records else "") for n in nodes}
    mine = ids.get(ctx.node)
    if mine is None or mine.clique != live.clique:
        _republish(run, as_published(run.cfg, live).to_extra())
        if mine is not None:
            raise NodeFault(f"live clique {live.clique} differs from published "
                            f"{mine.clique} (republished)")
        ids[ctx.node] = live
    deadline = time.monotonic() + UNPUBLISHED_WAIT_S
    missing = [n for n, ident in ids.items() if ident is None]
    while missing and time.monotonic() < deadline:
        time.sleep(0.25)
        fresh = run.slurm.nodes(missing)
        ids.update({n: identity_from_extra(fresh[n].extra if n in fresh else "")
                    for n in missing})
        missing = [n for n, ident in ids.items() if ident is None]
    try:
        slurm_channels = localconf.slurm_owns_channels(cfg)
    except localconf.LocalConfError as exc:
        raise NodeFault(f"cannot tell whether Slurm manages IMEX channels "
                        f"(SwitchType): {exc}") from None
    count = read_driver_params(cfg.channels.params_file).channel_count
    return decision.fallback_decision(ctx.job_id, nodes, ids, ctx.node,
                                      policy=groups.policy_for(cfg, run.job_record().partition),
                                      slurm_channels=slurm_channels, channel_count=count)


def _no_domain(run: PrologRun, message: str, **fields: object) -> NoReturn:
    """End the prolog without a domain: the job runs, and its tasks are told so."""
    from imexctl.rules import decision

    nd = run.decision
    log.get_logger().info(message, **{k: v for k, v in fields.items() if v})
    write_facts(run, state="NONE", channel=None, members=None, clique=None,
                 source=nd.source if nd else decision.CONTROLLER,
                 mode=nd.channel_mode if nd else "imexctl",
                 reason=str(fields.get("reason") or fields.get("detail") or message))
    raise Done


def write_facts(run: PrologRun, *, state: str, channel: int | None,
                 members: list[str] | tuple[str, ...] | None,
                 clique: str | None, source: str, mode: str, reason: str = "",
                 digest: str = "") -> None:
    """The job's facts for its tasks (TaskProlog). Best effort: without the file the
    TaskProlog reads the ownership record, or says NONE."""
    from imexctl.lifecycle import taskprolog

    cfg, ctx = run.cfg, run.ctx
    facts = taskprolog.job_facts(ctx.job_id, ctx.node, channel=channel,
                                 channel_dir=cfg.paths.channel_dir, members=members,
                                 clique=clique, state=state, channel_mode=mode,
                                 source=source, reason=reason, digest=digest)
    try:
        ensure_secure_dir(cfg.paths.run_dir)
        ensure_secure_dir(job_dir(cfg, ctx.job_id), 0o700, search_uid=ctx.uid,
                          warn=log.get_logger().warning)
        taskprolog.write_job_facts(cfg.paths.run_dir, ctx.job_id, facts, uid=ctx.uid)
    except OSError as exc:  # UnsafePathError included
        log.get_logger().warning("job facts for the TaskProlog not written", error=str(exc))


__all__ = ["allocation", "write_facts"]
