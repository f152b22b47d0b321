"""Per-job directories ``run_dir/job-<id>/``: removed only through a checked run_dir, and
only under their exact names.

The epilog deletes here as root, so ``run_dir`` gets the same check_secure_dir as in the
prolog before anything is removed (a symlinked, foreign or writable run_dir is refused,
never followed), and an entry is removed by the very name asked for: ``job-04242`` is not
job 4242's directory. (Sweeping every unowned directory is ``recover.sweep_job_dirs``.)
"""

from __future__ import annotations

import re
from pathlib import Path

from imexctl.fsutil import check_secure_dir, remove_path
from imexctl.lazyre import lazy

JOB_DIR = lazy(r"job-[1-9][0-9]{0,18}", re.ASCII)


def job_dir(run_dir: Path, job_id: int) -> Path:
    return run_dir / f"job-{job_id}"


def remove_job_dir(run_dir: Path, name: str) -> bool:
    """Remove ``run_dir/name`` (a ``job-<id>`` name) without following links; True when
    something was removed. Raises UnsafePathError for an unsafe run_dir."""
    if not JOB_DIR.fullmatch(name):
        raise ValueError(f"not a job directory name: {name!r}")
    try:
        check_secure_dir(run_dir)
    except FileNotFoundError:
        return False
    return remove_path(run_dir / name)
