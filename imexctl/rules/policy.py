"""Site policy: which jobs get an IMEX domain (``[policy] mode``)."""

from __future__ import annotations

import re

from imexctl.config import Config

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Protocol, Sequence

    class PolicySubject(Protocol):
        """What the policy reads of a job: a JobRecord, or the controller's early view of
        it from the hook environment (nodes and partition; no features there)."""
        @property
        def nodes(self) -> Sequence[str]: ...
        @property
        def partition(self) -> str | None: ...
        @property
        def features(self) -> str: ...

# Slurm's --constraint grammar: features joined by & (and), | (or), [..] (matching or),
# (..) groups, a count as name*N, and ! for "not". Separators split; counts are stripped.
_CONSTRAINT_SPLIT = r"[&|,\[\]()\s]+"
_COUNT = r"\*\d+$"


def wants_imex(cfg: Config, job: PolicySubject) -> bool:
    mode = cfg.policy.mode
    if mode == "none":
        return False
    if mode == "all":
        return True
    if mode == "multi-node":
        return len(job.nodes) > 1
    if mode == "partitions":
        return (job.partition or "") in cfg.policy.partitions
    if mode == "feature":
        return cfg.policy.feature in constraint_features(job.features)
    return False


def constraint_features(text: str) -> set[str]:
    """The features a constraint asks for (``imex*2`` and ``(imex&fast)`` ask for imex;
    ``!imex`` does not)."""
    words = (re.sub(_COUNT, "", w) for w in re.split(_CONSTRAINT_SPLIT, text))
    return {w for w in words if w and not w.startswith("!")}


# Slurm tells a node prolog whether the job has its nodes to itself: SLURM_JOB_EXCLUSIVE
# from 26.05 (TOPO moved there), SLURM_JOB_OVERSUBSCRIBE before (NO and TOPO: whole
# nodes). USER and MCS exclusivity still let other jobs of the same user or label in.
_EXCLUSIVE_YES = frozenset({"YES", "1", "TRUE", "NODE", "TOPO"})  # 26.05: --exclusive -> NODE
_OVERSUBSCRIBE_EXCLUSIVE = frozenset({"NO", "TOPO"})
# Slurm 22.05 and 23.02 set neither variable; the job record's OverSubscribe= tells
# instead. Measured on 22.05.8 (harness, select/cons_tres, CR_Core): --exclusive -> NO;
# a default job in a partition without OverSubscribe= -> OK; --oversubscribe -> YES; any
# job in a partition with OverSubscribe=EXCLUSIVE -> NO (--oversubscribe included).
# USER and MCS are what --exclusive=user|mcs print. Only NO means whole nodes there.
_RECORD_EXCLUSIVE = frozenset({"NO"})
_FIX = "per-job IMEX needs node-exclusive jobs (--exclusive)"


def shared_node_refusal(exclusive: str | None, oversubscribe: str | None,
                        record: str | None) -> str | None:
    """Why this job may share its trays with other jobs (the reason for refusing it), or
    None when Slurm says it does not. Arguments: the hook's SLURM_JOB_EXCLUSIVE and
    SLURM_JOB_OVERSUBSCRIBE (JobContext), upper case, and the job record's OverSubscribe=
    (JobRecord.oversubscribe; None when unknown or forged). The record decides only when
    the hook got neither variable (Slurm 22.05, 23.02): there a job whose record does not
    say NO is refused too, since a non-IMEX job of another user could share its trays
    (audit F3-19)."""
    if exclusive:
        if exclusive in _EXCLUSIVE_YES:
            return None
        return f"job may share its trays with other jobs (SLURM_JOB_EXCLUSIVE={exclusive}); {_FIX}"
    if oversubscribe:
        if oversubscribe in _OVERSUBSCRIBE_EXCLUSIVE:
            return None
        return (f"job may share its trays with other jobs (SLURM_JOB_OVERSUBSCRIBE="
                f"{oversubscribe}); {_FIX}")
    if record in _RECORD_EXCLUSIVE:
        return None
    fix = (f"{_FIX} or a partition with OverSubscribe=EXCLUSIVE (this Slurm tells the prolog "
           "nothing else)")
    if record is None:
        return ("cannot tell whether the job may share its trays with other jobs (no "
                f"SLURM_JOB_EXCLUSIVE or SLURM_JOB_OVERSUBSCRIBE, job record's OverSubscribe= "
                f"unreadable); {fix}")
    return f"job may share its trays with other jobs (job record OverSubscribe={record}); {fix}"
