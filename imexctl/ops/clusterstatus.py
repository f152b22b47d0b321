"""``imexctl status --nodes LIST | --partition P``: the IMEX picture of many trays, from
Slurm alone (no login anywhere, no daemon queried).

Two queries for the whole cluster, whatever its size: the node table (published
identities in ``Extra``, drains with reason and time, partitions) and the active jobs
(with the controller's decision in ``AdminComment``); plus one ``scontrol show
resources`` per job whose channel Slurm's switch/nvidia_imex allocated. Everything else
is derived here.

The controller decision format belongs to :mod:`imexctl.rules.decision` (issue 10); this view
depends on it only through :data:`DecisionDecoder`: ``admin_comment -> [GroupView] | None``.
"""

from __future__ import annotations

import re
import time

from imexctl.config import Config
from imexctl.base.dataclass import dataclass
from imexctl.ops.status import SCHEMA
from imexctl.slurm import reasons
from imexctl.tray.ownership import PERSISTENT

TYPE_CHECKING = False
if TYPE_CHECKING:
    from imexctl.slurm.interface import SlurmAdapter
    from imexctl.slurm.records import JobRecord
    from typing import Callable, Iterable

    from imexctl.base.jsontypes import Json
    from imexctl.slurm.records import JobRecord

_stuck_texts: tuple[re.Pattern, re.Pattern] | None = None


def reason_names_stuck_daemon(reason: str | None) -> bool:
    """Whether a drain reason says the tray has a stuck daemon (visible from Slurm alone):
    a failed stop-daemon/ports step of the epilog or of a teardown (prolog, health and
    recover name its cause), or health's report of a record kept in phase ``stuck``
    (audit F-02). The texts are teardown's own, so the two cannot drift apart."""
    global _stuck_texts
    if not reason:
        return False
    from imexctl.lifecycle.teardown import DAEMON_STEPS, PORTS_HELD, STUCK_CAUSE, STUCK_RECORD
    if _stuck_texts is None:
        steps = "|".join(map(re.escape, DAEMON_STEPS))
        record = re.escape(STUCK_RECORD).replace(re.escape("{job_id}"), r"\d+")
        _stuck_texts = (re.compile(record), re.compile(
            rf"\((?:{steps}): |{re.escape(STUCK_CAUSE)}|{re.escape(PORTS_HELD)}"))
    stuck_record, in_cause = _stuck_texts
    parsed = reasons.parse(reason)
    if parsed is not None:
        hook, step, cause = parsed
        if step in DAEMON_STEPS or (hook, step) == ("health", "record") \
                and stuck_record.match(cause):
            return True
    return bool(in_cause.search(reason))


@dataclass(frozen=True)
class GroupView:
    """One IMEX domain of a job: its trays, their clique and the channel it uses."""
    nodes: tuple[str, ...]
    clique: str | None
    channel: int | None


if TYPE_CHECKING:
    DecisionDecoder = Callable[[str], "list[GroupView] | None"]


def default_decoder(admin_comment: str) -> list[GroupView] | None:
    """Groups of the controller's decision recorded in the job's AdminComment
    (imexctl.rules.decision); None when the comment holds no decision with groups."""
    from imexctl.rules import decision

    dec = decision.decode(admin_comment) if admin_comment else None
    if dec is None or not dec.groups:
        return None
    return [GroupView(tuple(g.members), g.key, g.channel) for g in dec.groups]


def collect(cfg: Config, slurm: SlurmAdapter, names: list[str] | None = None,
            partition: str | None = None, decode: DecisionDecoder = default_decoder,
            now: float | None = None) -> Json:
    """The cluster view as a JSON-ready dict (docs/status-json.md)."""
    from imexctl.rules.cliques import domain_split_text, identity_from_extra

    now = time.time() if now is None else now
    table = slurm.node_table(names, partition)
    jobs = slurm.active_jobs()
    published = {n: identity_from_extra(r.extra) for n, r in table.items()}
    nodes: list[Json] = []
    for name in sorted(table):
        rec, ident = table[name], published[name]
        nodes.append({
            "node": name, "state": rec.state, "reason": rec.reason,
            "reason_time": rec.reason_time, "drained": rec.drained,
            "imexctl_drain": rec.drained and rec.ours,
            "stuck_daemon": rec.drained and rec.ours and reason_names_stuck_daemon(rec.reason),
            "clique": ident.clique if ident and ident.imex else None,
            "imex_tray": ident.imex if ident else None,     # None: nothing published
            "gpu_count": ident.gpu_count if ident else None,
            "lifetime": (ident.lifetime or None) if ident and ident.imex else None,
            "domain": (ident.domain or None) if ident and ident.imex else None,
        })
    cliques: dict[str, list[str]] = {}
    for n in nodes:
        if n["clique"]:
            cliques.setdefault(n["clique"], []).append(n["node"])
    drains = [{"node": n["node"], "state": n["state"], "reason": n["reason"],
               "since": n["reason_time"],
               "age_s": round(now - n["reason_time"]) if n["reason_time"] else None,
               "stuck_daemon": n["stuck_daemon"]}
              for n in nodes if n["imexctl_drain"]]
    job_views = _jobs(cfg, jobs, set(table), published, decode)
    _slurm_channels(slurm, job_views)
    clique_views = [_clique_view(c, [n for n in nodes if n["clique"] == c], published)
                    for c in sorted(cliques)]
    return {
        "schema": SCHEMA, "view": "cluster", "generated_at": round(now, 3),
        "selection": {"nodes": names, "partition": partition},
        "nodes": nodes,
        "cliques": clique_views,
        "unpublished": [n["node"] for n in nodes if n["imex_tray"] is None],
        "not_imex": [n["node"] for n in nodes if n["imex_tray"] is False],
        "imexctl_drains": drains,
        "stuck_daemons": [n["node"] for n in nodes if n["stuck_daemon"]],
        "other_drains": [{"node": n["node"], "state": n["state"], "reason": n["reason"]}
                         for n in nodes if n["drained"] and not n["imexctl_drain"]],
        "jobs": job_views,
        "channels": _channel_use(job_views),
        "problems": [domain_split_text(c["clique"], c["persistent_domain"]["digests"])
                     for c in clique_views
                     if c["persistent_domain"] and c["persistent_domain"]["split"]],
    }


def _clique_view(clique: str, nodes: list[Json], published: dict) -> Json:
    """One clique: its trays, the lifetime they publish (``imex.lifetime``; ``mixed`` when
    they differ, which PrologSlurmctld refuses jobs for; null when none publishes one: an
    older imexctl) and, when persistent, its domain's members, which are drained by
    imexctl (out of the domain until health or an admin returns them) and the digests
    (``imex.domain``) its trays publish: more than one is a split domain."""
    from imexctl.rules.cliques import domain_digests

    lifetimes: dict[str, list[str]] = {}
    for n in nodes:
        if n["lifetime"]:
            lifetimes.setdefault(n["lifetime"], []).append(n["node"])
    lifetime = None if not lifetimes else next(iter(lifetimes)) if len(lifetimes) == 1 \
        else "mixed"
    out: Json = {"clique": clique, "nodes": [n["node"] for n in nodes], "lifetime": lifetime,
                 "lifetimes": lifetimes, "persistent_domain": None}
    members = lifetimes.get(PERSISTENT, [])
    if members:
        out["persistent_domain"] = {
            "members": members,
            "drained": [n["node"] for n in nodes if n["node"] in members and n["imexctl_drain"]]}
        digests = domain_digests({n: published[n] for n in out["nodes"]}, clique)
        out["persistent_domain"].update(digests=digests, split=len(digests) > 1)
    return out


def _jobs(cfg: Config, jobs: Iterable[JobRecord], selected: set[str], published: dict,
          decode: DecisionDecoder) -> list[Json]:
    """Active jobs on the selected trays that hold (or are due) IMEX domains."""
    from imexctl.rules.groups import channel_for_job
    from imexctl.rules.policy import wants_imex

    out = []
    for job in sorted(jobs, key=lambda j: j.job_id):
        here = [n for n in job.nodes if n in selected]
        if not here:
            continue
        groups = decode(job.admin_comment or "")
        if groups:
            source = "controller"
        elif wants_imex(cfg, job):
            # No controller decision: the node prologs' fallback (published cliques,
            # job-id channel rule), as they would compute it.
            source = "fallback"
            by_clique: dict[str | None, list[str]] = {}
            for n in job.nodes:
                ident = published.get(n)
                if ident is not None and not ident.imex:
                    continue    # a tray without NVLink fabric runs the job without a domain
                by_clique.setdefault(ident.clique if ident else None, []).append(n)
            if not by_clique:
                continue
            channel = None if cfg.channels.mode == "slurm" else \
                channel_for_job(job.job_id).number
            groups = [GroupView(tuple(ns), c, channel) for c, ns in by_clique.items()]
        else:
            continue
        out.append({
            "job_id": job.job_id, "state": job.state, "user_id": job.user_id,
            "partition": job.partition, "nodes": list(job.nodes), "decision_source": source,
            "domains": [{"nodes": list(g.nodes), "clique": g.clique, "channel": g.channel}
                        for g in groups],
        })
    return out


def _slurm_channels(slurm: SlurmAdapter, jobs: list[Json]) -> None:
    """Domains whose channel switch/nvidia_imex owns (none in the decision) get the one
    Slurm reports (`scontrol show resources`, 25.11+): one query per such job, none for
    jobs whose channel imexctl chose. Such a domain is marked ``channel_source: slurm``."""
    for job in jobs:
        if all(d["channel"] is not None for d in job["domains"]):
            continue
        try:
            per_node = slurm.job_channels(job["job_id"])
        except Exception:  # noqa: BLE001 - the view answers whatever Slurm does
            per_node = None
        if per_node is None:  # this Slurm cannot say, or cannot answer: ask no more
            return
        for dom in job["domains"]:
            seen = {per_node[n] for n in dom["nodes"] if n in per_node}
            if dom["channel"] is None and len(seen) == 1:
                dom["channel"], dom["channel_source"] = seen.pop(), "slurm"


def _channel_use(jobs: list[Json]) -> list[Json]:
    """Channels in use per clique; two domains of one clique on one channel collide."""
    use: dict[str, dict[int, list[int]]] = {}
    for job in jobs:
        for dom in job["domains"]:
            if dom["clique"] and dom["channel"] is not None:
                use.setdefault(dom["clique"], {}).setdefault(dom["channel"], []).append(
                    job["job_id"])
    return [{"clique": clique,
             "in_use": [{"channel": ch, "jobs": js} for ch, js in sorted(chans.items())],
             "collisions": [ch for ch, js in sorted(chans.items()) if len(js) > 1]}
            for clique, chans in sorted(use.items())]
