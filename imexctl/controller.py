"""PrologSlurmctld: refuse a job whose trays span NVLink cliques before any tray is touched.

Runs once per job as SlurmUser. It must never fail to express a job fault (a failing
PrologSlurmctld requeues a batch job forever), and ``scancel`` kills this very process,
so the reason is written first and the cancel is the last act.
"""

from __future__ import annotations

from typing import Any

from imexctl import log
from imexctl.config import Config
from imexctl.errors import EXIT_OK
from imexctl.policy import wants_imex
from imexctl.tray import published_identity
from imexctl.topology import allocation_mismatch


def prolog_slurmctld(cfg: Config, slurm: Any, ctx: Any) -> int:
    logger = log.get_logger()
    job = slurm.job(ctx.job_id)
    if not wants_imex(cfg, job):
        logger.info("job does not want IMEX; nothing to check")
        return EXIT_OK
    records = slurm.nodes(list(job.nodes))
    published = {n: published_identity(getattr(records.get(n), "extra", "")) for n in job.nodes}
    known = {n: ident for n, ident in published.items() if ident is not None}
    # Trays that never published are judged by their own prolog, which publishes live data.
    reason = allocation_mismatch(known) if len(known) > 1 else None
    if reason is None:
        logger.info("allocation is one NVLink clique", trays=len(job.nodes),
                    unpublished=sorted(set(published) - set(known)))
        return EXIT_OK
    text = f"imexctl: {reason}"
    logger.error("job refused: allocation spans cliques", reason=text)
    slurm.set_admin_comment(ctx.job_id, text)
    slurm.cancel(ctx.job_id)  # kills this process: nothing may follow
    return EXIT_OK
