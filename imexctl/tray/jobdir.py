"""Per-job directories under ``[paths] run_dir``: the one rule for their names.

A job's directory is exactly ``job-<id>``, the id in ASCII decimal without leading zeros
(audit F-18: ``int()`` would alias ``job-04242`` and ``job-٤٢`` onto a live domain's
directory), so a sweep removes only names this rule could have made."""

from __future__ import annotations

import re
from pathlib import Path

JOB_DIR = r"job-[1-9][0-9]{0,9}"   # Slurm job ids are below 2**32: at most 10 digits


def name(job_id: int) -> str:
    return f"job-{job_id}"


def path(run_dir: Path, job_id: int) -> Path:
    return Path(run_dir) / name(job_id)


def is_job_dir(entry: str) -> bool:
    return re.fullmatch(JOB_DIR, entry, re.ASCII) is not None
