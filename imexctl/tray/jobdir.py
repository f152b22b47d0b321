"""Per-job directories under ``[paths] run_dir``: the one rule for their names and for
the names of the files in them.

A job's directory is exactly ``job-<id>``, the id in ASCII decimal without leading zeros
(audit F-18: ``int()`` would alias ``job-04242`` and ``job-٤٢`` onto a live domain's
directory), so a sweep removes only names this rule could have made. A job's daemon runs
as ``nvidia-imex -c <run_dir>/job-<id>/config.cfg``: :func:`config_arg` is that argument
as a pattern, the way the launcher finds a daemon nothing tracks any more."""

from __future__ import annotations

import re
from pathlib import Path

PREFIX = "job-"
JOB_ID = r"[1-9][0-9]{0,9}"        # Slurm job ids are below 2**32: at most 10 digits
JOB_DIR = PREFIX + JOB_ID

# The files of a job's directory.
CONFIG = "config.cfg"               # the daemon's config (nvidia-imex -c)
NODES_CONFIG = "nodes_config.cfg"   # the domain's members, byte-identical on every tray
DAEMON_LOG = "nvidia-imex.log"      # the daemon's LOG_FILE_NAME
STDIO = "daemon.stdio"              # the direct launcher's stdout and stderr of the daemon
FACTS = "imex-job.json"             # the domain's facts for the TaskProlog (the job's user reads it)

# The persistent domain's directory (issue 37, ``imex.lifetime = "persistent"``): one per
# tray, ``<run_dir>/persistent``, holding the same files as a job's directory. Not a job
# directory by :func:`is_job_dir`, so no sweep of job directories removes it.
PERSISTENT = "persistent"

# The longest path imexctl renders below run_dir (IMEX caps a path at 256 characters):
# config.MAX_RUN_DIR leaves room for it; a unit test holds the two equal.
LONGEST = f"/{PREFIX}4294967293/{NODES_CONFIG}"


def name(job_id: int) -> str:
    return f"{PREFIX}{job_id}"


def path(run_dir: Path, job_id: int) -> Path:
    return Path(run_dir) / name(job_id)


def persistent_path(run_dir: Path) -> Path:
    """The persistent domain's directory (:data:`PERSISTENT`)."""
    return Path(run_dir) / PERSISTENT


def is_job_dir(entry: str) -> bool:
    return re.fullmatch(JOB_DIR, entry, re.ASCII) is not None


def config_arg(run_dir: Path | None = None) -> re.Pattern[str]:
    """A job daemon's ``-c`` argument, ``<run_dir>/job-<id>/config.cfg``, group 1 the job
    id (``fullmatch`` it); without ``run_dir``, under any directory."""
    under = re.escape(str(run_dir)) if run_dir is not None else ".*"
    return re.compile(rf"{under}/{PREFIX}({JOB_ID})/{re.escape(CONFIG)}", re.ASCII)


def persistent_config_arg(run_dir: Path | None = None) -> re.Pattern[str]:
    """The persistent daemon's ``-c`` argument, ``<run_dir>/persistent/config.cfg``
    (``fullmatch`` it); without ``run_dir``, under any directory."""
    under = re.escape(str(run_dir)) if run_dir is not None else ".*"
    return re.compile(rf"{under}/{PERSISTENT}/{re.escape(CONFIG)}", re.ASCII)
