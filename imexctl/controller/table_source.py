"""Where the controller's channel table lives, and what it is rebuilt from.

The table sits in ``<StateSaveLocation>/imexctl`` (or ``paths.controller_dir``), which a
backup slurmctld shares. A table that is missing, corrupt or another host's is rebuilt
from the live jobs' sealed decision records (:func:`held_by_live_jobs`): two RPCs, only
for a rebuild. PrologSlurmctld binds each record it seals to the cluster
(:func:`record_cluster`); the rebuild opens only records bound to this one.
"""

from __future__ import annotations

from imexctl.base import log
from imexctl.config import Config

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path

    from imexctl.rules.decision import JobText
    from imexctl.slurm.context import JobContext
    from imexctl.slurm.localconf import LocalSlurmConf

# Where each configuration's table lives, decided once per process: the controller
# prolog asks twice (before and after logging is set up), and slurm.conf is read once.
_LOCATIONS: dict[tuple, tuple[Path, str]] = {}
# Every job's record, one RPC: a channel table that must be rebuilt is rebuilt from the
# sealed decisions in them.
ALL_JOBS_QUERY = ("scontrol", "--local", "-o", "show", "job")


def table_dir(cfg: Config) -> Path:
    """Where PrologSlurmctld keeps its channel table (owned by SlurmUser); the one place
    that decides (the hooks, doctor)."""
    return table_location(cfg)[0]


def table_location(cfg: Config, conf: LocalSlurmConf | None = None) -> tuple[Path, str]:
    """The table's directory and why there: ``paths.controller_dir`` when set, else
    ``<StateSaveLocation>/imexctl`` from the local slurm.conf, which Slurm requires a
    backup slurmctld to share (and SlurmUser to own), so a failover finds the table
    (audit F3-12). Only when no slurm.conf (or no StateSaveLocation in it) can be read,
    the host-local ``<state_dir>/slurmctld`` of earlier releases. ``conf``: the local
    slurm.conf when the caller has read it already."""
    import os

    if cfg.paths.controller_dir:
        return cfg.paths.controller_dir, "paths.controller_dir"
    key = (cfg.paths.state_dir, cfg.paths.slurm_conf, os.environ.get("SLURM_CONF"))
    found = _LOCATIONS.get(key)
    if found is None:
        found = _LOCATIONS[key] = _default_location(cfg, conf)
    return found


def _default_location(cfg: Config, conf: LocalSlurmConf | None = None) -> tuple[Path, str]:
    from pathlib import Path

    from imexctl.slurm.localconf import LocalConfError, load

    local = cfg.paths.state_dir / "slurmctld"
    try:
        if conf is None:
            conf = load(cfg.paths.slurm_conf, nodes=())   # no node line is parsed
    except (LocalConfError, OSError, ValueError) as exc:
        return local, f"host-local: no slurm.conf read ({exc})"
    save = (conf.get("StateSaveLocation") or "").strip()
    if not save.startswith("/"):
        return local, f"host-local: no absolute StateSaveLocation in {conf.path}"
    return Path(save) / "imexctl", f"StateSaveLocation in {conf.path}"


def held_by_live_jobs(cfg: Config) -> dict[int, dict[str, int]] | None:
    """{job id: {clique key: channel}} of the live jobs, from their sealed decision
    records: what a missing, corrupt or other host's channel table is rebuilt from.
    Two RPCs (every job's record, then the live job ids), only for a rebuild, never on
    the common path. It fails closed (audit F4-1): None, and the job waits rather than
    get a channel a running job may hold, when Slurm or MUNGE cannot say, when a live
    job has a record that does not verify (a forged copy in its own fields, a record
    sealed under a rotated ``munge.key``) or when the seals to open pass
    ``decision.MAX_REBUILD_OPENS``. A record counts only in the line of the job it
    names, so copies in another job's fields cost the rebuild nothing."""
    try:
        from imexctl.rules import decision as dec
        from imexctl.slurm.cli_backend import CliBackend
        from imexctl.slurm.munge import seal_for

        cli = CliBackend(cfg)
        text = cli.run(*ALL_JOBS_QUERY).stdout
        live = cli.live_job_ids()   # after the records: a job that ended meanwhile is out
        if live is None:
            raise RuntimeError("the live-job query (squeue) gave no usable answer")
        jobs = _live_job_texts(text, live)
        rebuilt = dec.find_all(jobs, seal_for(cfg), cluster=record_cluster(cfg, None)) \
            if jobs else dec.Rebuilt(())
    except Exception as exc:  # noqa: BLE001 - whatever failed, Slurm did not say
        log.get_logger().error("live jobs' channels unknown: the channel table is not "
                               "rebuilt", error=f"{type(exc).__name__}: {exc}")
        return None
    if rebuilt.unverified or rebuilt.capped:
        log.get_logger().error(
            "live jobs' channels unknown: a running job's decision record does not verify "
            "(forged copies in its fields, munge.key rotated, another cluster's record); "
            "the channel table is not rebuilt and IMEX jobs wait until it can be",
            unverified_jobs=list(rebuilt.unverified)[:20], capped=rebuilt.capped)
        return None
    held: dict[int, dict[str, int]] = {}
    for decision in rebuilt.decisions:
        channels = {g.key: g.channel for g in decision.groups if g.channel is not None}
        owner = decision.het_job_id or decision.job_id   # a het job's are its leader's
        if decision.job_id in live and channels:
            held.setdefault(owner, {}).update(channels)
    return held


def _live_job_texts(text: str, live: set[int]) -> list[JobText]:
    """``decision.JobText`` of each live job's record in ``scontrol -o show job``
    output: its line, its AdminComment where the line reads unambiguously, and its
    SubmitTime. Lines of jobs that are not live are never parsed."""
    from imexctl.rules.decision import JobText
    from imexctl.slurm import scontrol as sc

    jobs = []
    for record in sc.job_records(text):
        job_id = sc.record_job_id(record)
        if job_id is None or job_id not in live:
            continue
        try:
            parsed = sc.parse_job_line(record)
            admin = "" if "AdminComment" in parsed.ambiguous \
                else sc.job_fields(parsed)["admin_comment"]
        except (sc.ParseError, ValueError):
            admin = ""
        jobs.append(JobText(job_id, record, admin, sc.submit_time(record)))
    return jobs


def record_cluster(cfg: Config, ctx: JobContext | None, conf: LocalSlurmConf | None = None
                    ) -> str:
    """The cluster name decision records are bound to (``munge.cluster_name``): the
    hook environment's, else the local slurm.conf's ClusterName (``conf`` when this job
    start already read it; read only then otherwise)."""
    import os

    from imexctl.slurm.munge import cluster_name

    named = cluster_name(ctx, None) or os.environ.get("SLURM_CLUSTER_NAME", "")
    if named:
        return named
    if conf is not None:
        return cluster_name(None, conf)
    from imexctl.slurm.localconf import LocalConfError, load

    try:
        return cluster_name(None, load(cfg.paths.slurm_conf, nodes=()))
    except (LocalConfError, OSError, ValueError):
        return ""


__all__ = ["table_dir", "table_location", "held_by_live_jobs", "record_cluster",
           "ALL_JOBS_QUERY"]
