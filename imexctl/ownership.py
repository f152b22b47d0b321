"""Whether the job named in this node's ownership record still holds the node."""

from __future__ import annotations


from imexctl.state import DomainRecord

TYPE_CHECKING = False   # typing is imported for type checkers only: ~3 ms of start-up
if TYPE_CHECKING:
    from typing import Any

LIVE_JOB_STATES = {"RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED", "PENDING",
                   "REQUEUED", "RESIZING", "SIGNALING", "STAGE_OUT"}


def owner_alive(slurm: Any, record: DomainRecord, node: str) -> bool:
    """True while Slurm says the owner job is live on ``node``. Any SlurmError but "not
    found" propagates: an unreachable slurmctld is not "job gone", and tearing down a live
    job's domain on that guess would break the job."""
    from imexctl.slurm.adapter import JobRecordError, SlurmNotFound
    try:
        owner = slurm.job(record.job_id)
    except SlurmNotFound:  # unknown to Slurm: it ended long ago
        return False
    except JobRecordError:  # its own user text broke the record: ask squeue (audit F3-22)
        return _confirmed_alive(slurm, record.job_id, node)
    return owner.state.split("+")[0] in LIVE_JOB_STATES and node in owner.nodes


def _confirmed_alive(slurm: Any, job_id: int, node: str) -> bool:
    """Whether squeue (fields without user text) shows ``job_id`` live on ``node``. An
    ended job whose record its own name made unreadable must not hold the tray until
    slurmctld purges it; only a backend that cannot ask (no ``job_state``) still assumes
    the job alive."""
    job_state = getattr(slurm, "job_state", None)
    if job_state is None:
        return True
    found = job_state(job_id)
    if found is None:   # Slurm no longer knows it
        return False
    state, nodes = found
    return state.split("+")[0] in LIVE_JOB_STATES and node in nodes
