"""Per-job directories ``run_dir/job-<id>/``: listed and removed only through a checked
run_dir, and only under their exact names.

The epilog and the health check delete here as root, so ``run_dir`` gets the same
check_secure_dir as in the prolog before anything is listed or removed (a symlinked,
foreign or writable run_dir is refused, never followed), and an entry is removed by the
very name that was listed: ``job-04242`` is not job 4242's directory.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from imexctl.fsutil import check_secure_dir, remove_path

JOB_DIR = re.compile(r"job-([1-9][0-9]{0,18})", re.ASCII)


def job_dir(run_dir: Path, job_id: int) -> Path:
    return run_dir / f"job-{job_id}"


def list_job_dirs(run_dir: Path) -> dict[str, int]:
    """Entry name -> job id for every canonical ``job-<id>`` entry; none when run_dir is
    missing. Raises UnsafePathError for an unsafe run_dir."""
    try:
        check_secure_dir(run_dir)
        names = os.listdir(run_dir)
    except FileNotFoundError:
        return {}
    found = {}
    for name in names:
        match = JOB_DIR.fullmatch(name)
        if match:
            found[name] = int(match.group(1))
    return dict(sorted(found.items()))


def remove_job_dir(run_dir: Path, name: str) -> bool:
    """Remove ``run_dir/name`` (a listed ``job-<id>`` name) without following links; True
    when something was removed."""
    if not JOB_DIR.fullmatch(name):
        raise ValueError(f"not a job directory name: {name!r}")
    try:
        check_secure_dir(run_dir)
    except FileNotFoundError:
        return False
    return remove_path(run_dir / name)
