"""TaskProlog: tell the job's tasks which IMEX domain they are in.

No IMEX peer tells a job its domain; communication libraries probe and guess. slurmd's
node prolog knows it (channel, members, clique, whether the domain came UP), writes it
to a per-job JSON file only root and the job's user can read
(``<run_dir>/job-<id>/imex-job.json``),
and the ``TaskProlog`` turns it into environment: slurmstepd runs the TaskProlog as the
job's user before every task and applies each ``export NAME=value`` line it prints
(``unset NAME`` removes one; ``print ...`` goes to the task's stdout; anything else is
ignored). It runs once per task, so this module is small, imports nothing heavy, reads
one or two files, never writes, and always succeeds: a job on a tray without a domain is
told ``IMEX_DOMAIN_STATE=NONE``.
"""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path

from imexctl.tray import jobdir

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Mapping

    from imexctl.base.jsontypes import Json
    from imexctl.config import Config

FORMAT = 1
MAX_FACTS_BYTES = 1 << 20
# Names exported to tasks (docs/multi-rack.md).
EXPORTS = ("IMEX_CHANNEL", "IMEX_CHANNEL_DEVICE", "IMEX_DOMAIN_NODES", "IMEX_CLIQUE",
           "IMEX_DOMAIN_STATE", "IMEX_DOMAIN_INFO")
_SAFE_VALUE = r"[A-Za-z0-9._,:/\[\]-]{1,4096}"


def facts_path(run_dir: Path, job_id: int) -> Path:
    return jobdir.path(Path(run_dir), job_id) / jobdir.FACTS


def job_facts(job_id: int, node: str, *, channel: int | None, channel_dir: Path | None,
              members: list[str] | tuple[str, ...] | None, clique: str | None,
              state: str, channel_mode: str = "imexctl", source: str = "controller",
              reason: str = "", digest: str = "") -> Json:
    """The facts of one tray's domain, as the node prolog knows them after wait-ready.

    ``state``: "UP" when the prolog saw the domain UP; "NONE" when this tray has no
    domain (not an IMEX tray, policy skip); ``members`` in Slurm's order.
    """
    from imexctl.slurm.hostlist import compress

    members = list(members or [])
    return {
        "format": FORMAT, "job_id": job_id, "node": node, "state": state,
        "channel": channel,
        "channel_device": (str(Path(channel_dir) / f"channel{channel}")
                           if channel is not None and channel_dir else None),
        "channel_mode": channel_mode, "clique": clique,
        "members": compress(members) if members else "", "member_count": len(members),
        "node_id": members.index(node) if node in members else None,
        "decision_source": source, "reason": reason, "digest": digest,
    }


def write_job_facts(run_dir: Path, job_id: int, facts: Json,
                    uid: int | None = None) -> Path:
    """Write the facts into the job's directory, readable by root and the job's user
    ``uid`` only (the TaskProlog runs as that user; another user must not learn the job's
    channel, audit S3-2): root's file, mode 0600, with a POSIX ACL entry for ``uid`` (or,
    without ACLs, given to ``uid`` with mode 0400). The directory (root-owned 0700, which
    ``uid`` may pass through) is the prolog's; its check and the atomic write are fsutil's."""
    from imexctl.base.fsutil import check_secure_dir, write_json

    path = facts_path(run_dir, job_id)
    check_secure_dir(path.parent)
    write_json(path, dict(facts), 0o600, durable=False, reader_uid=uid)
    return path


def _read_json(path: Path) -> object:
    """A small regular file as JSON; None when absent, unreadable, odd or malformed."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_FACTS_BYTES:
            return None
        with os.fdopen(fd, "rb", closefd=False) as handle:
            return json.loads(handle.read(MAX_FACTS_BYTES))
    except Exception:  # noqa: BLE001 - a bad file is "no facts"
        return None
    finally:
        os.close(fd)


def _denied(path: Path) -> bool:
    """``path`` exists but this user may not open it (the ownership record is root's)."""
    try:
        os.close(os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC))
    except PermissionError:
        return True
    except OSError:
        return False
    return False


def _from_record(record: object, job_id: int, channel_dir: Path) -> Json | None:
    """Facts from the node's ownership record, for nodes whose prolog wrote no file."""
    if not isinstance(record, dict) or record.get("job_id") != job_id:
        return None
    nodes = record.get("nodes")
    channel = record.get("channel")
    if not isinstance(nodes, list) or not all(isinstance(n, str) for n in nodes):
        return None
    if channel is not None and (type(channel) is not int or channel <= 0):
        return None
    from imexctl.slurm.hostlist import compress

    try:
        members = compress(nodes)
    except ValueError:
        return None
    phase = str(record.get("phase") or "unknown")
    return {"state": "UP" if phase == "ready" else phase.upper(),
            "channel": channel, "members": members, "clique": None,
            "channel_device": str(channel_dir / f"channel{channel}") if channel else None}


def _job_ids(env: Mapping[str, str]) -> list[int]:
    """The job ids this task's facts may be filed under: SLURM_JOB_ID, then (a het job's
    task carries the leader's id there) each component's ``SLURM_JOB_ID_HET_GROUP_<n>``;
    a tray is in one component, whose node prolog wrote the facts under its own id."""
    names = ["SLURM_JOB_ID", "SLURM_JOBID"] + sorted(
        (n for n in env if re.fullmatch(r"SLURM_JOB_ID_HET_GROUP_[0-9]{1,4}", n)),
        key=lambda n: int(n.rsplit("_", 1)[1]))
    ids: list[int] = []
    for name in names[:66]:
        value = env.get(name) or ""
        if re.fullmatch(r"[1-9][0-9]{0,9}", value) and int(value) not in ids:
            ids.append(int(value))
    return ids


def task_lines(cfg: Config, env: Mapping[str, str]) -> list[str]:
    """The lines to print for slurmstepd; never raises for bad files or environment."""
    ids = _job_ids(env)
    if not ids:
        return []
    facts: Json | None = None
    job_id, info = ids[0], ""
    for candidate in ids:
        path = facts_path(cfg.paths.run_dir, candidate)
        found = _read_json(path)
        if isinstance(found, dict) and found.get("job_id") == candidate:
            job_id, facts, info = candidate, found, str(path)
            break
    if facts is None:
        record = Path(cfg.paths.state_dir) / "domain.json"
        facts = _from_record(_read_json(record), job_id, Path(cfg.paths.channel_dir))
        if facts is None and _denied(record):   # root's only: a domain may be there
            facts = {"state": "UNKNOWN"}
        info = ""
    values: dict[str, object] = {"IMEX_DOMAIN_STATE": "NONE"}
    if facts:
        values.update({
            "IMEX_DOMAIN_STATE": facts.get("state") or "NONE",
            "IMEX_CHANNEL": facts.get("channel"),
            "IMEX_CHANNEL_DEVICE": facts.get("channel_device"),
            "IMEX_DOMAIN_NODES": facts.get("members"),
            "IMEX_CLIQUE": facts.get("clique"),
            "IMEX_DOMAIN_INFO": info,
        })
    lines = []
    for name in EXPORTS:
        value = values.get(name)
        if value is None or value == "" or isinstance(value, bool):
            lines.append(f"unset {name}")  # never inherit a stale value from the caller
            continue
        value = str(value)
        if re.fullmatch(_SAFE_VALUE, value):
            lines.append(f"export {name}={value}")
        else:
            lines.append(f"unset {name}")
    return lines


__all__ = ["task_lines", "job_facts", "write_job_facts", "facts_path", "EXPORTS"]
