"""Site policy: which jobs get an IMEX domain (``[policy] mode``)."""

from __future__ import annotations

import re
from typing import Any

from imexctl.config import Config

# Slurm's --constraint grammar: features joined by & (and), | (or), [..] (matching or),
# (..) groups, a count as name*N, and ! for "not". Separators split; counts are stripped.
_CONSTRAINT_SPLIT = re.compile(r"[&|,\[\]()\s]+")
_COUNT = re.compile(r"\*\d+$")


def wants_imex(cfg: Config, job: Any) -> bool:
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
        return cfg.policy.feature in constraint_features(getattr(job, "features", "") or "")
    return False


def constraint_features(text: str) -> set[str]:
    """The features a constraint asks for (``imex*2`` and ``(imex&fast)`` ask for imex;
    ``!imex`` does not)."""
    words = (_COUNT.sub("", w) for w in _CONSTRAINT_SPLIT.split(text))
    return {w for w in words if w and not w.startswith("!")}
