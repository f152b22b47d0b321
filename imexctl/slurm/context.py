"""The job as a Slurm hook sees it: read from the hook's environment and validated.

slurmd runs ``Prolog``/``Epilog`` on every tray (hook="node"); slurmctld runs
``PrologSlurmctld``/``EpilogSlurmctld`` once per job (hook="controller"). The node list
arrives as ``SLURM_NODELIST`` in the slurmd hooks of Slurm 22.05 and as
``SLURM_JOB_NODELIST`` in the controller hooks and in newer slurmd hooks: both are
accepted everywhere. Nothing from the environment is used before it is checked: ids
are integers in range, names match Slurm's charset, the node list parses.
"""

from __future__ import annotations

import re

from imexctl.slurm.records import NODE_NAME
from imexctl.errors import EXIT_USAGE, ImexctlError
from imexctl.base.dataclass import dataclass
from imexctl.slurm.hostlist import expand

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Mapping

HOOKS = ("node", "controller")
MAX_JOB_ID = 0xFFFFFFFD   # uint32; 0xfffffffe/0xffffffff are Slurm's NO_VAL/INFINITE
MAX_ID = 0xFFFFFFFE       # uid_t/gid_t; (uid_t)-1 is not an id
USER_NAME_MAX = 1024      # no Slurm limit; only bounds what the record and logs hold
PARTITION_RE = r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,63}$"
MAX_NODELIST_LEN = 65536


class ContextError(ImexctlError):
    """The hook environment is missing a variable or holds a bad value.

    Exit code 2 (usage): the usual cause is running a hook subcommand by hand, outside
    Slurm. The message names the variable and shows the offending value.
    """

    exit_code = EXIT_USAGE

    def __init__(self, var: str, value: str | None, why: str):
        shown = "unset" if value is None else repr(value if len(value) <= 120
                                                    else value[:117] + "...")
        super().__init__(f"hook environment: {var}={shown}: {why}")
        self.var = var
        self.value = value
        self.why = why


@dataclass(frozen=True)
class JobContext:
    job_id: int
    uid: int
    user: str
    node: str                 # this tray's Slurm name; "" in controller hooks
    nodelist_expr: str        # the job's node list as Slurm wrote it (ranged)
    gid: int | None = None
    partition: str | None = None
    hook: str = "node"
    restart_count: int = 0
    script_context: str | None = None   # SLURM_SCRIPT_CONTEXT, e.g. "prolog_slurmd"
    exclusive: str | None = None        # SLURM_JOB_EXCLUSIVE (26.05+), upper case
    oversubscribe: str | None = None    # SLURM_JOB_OVERSUBSCRIBE (older), upper case
    het_job_id: int | None = None       # SLURM_HET_JOB_ID: a heterogeneous job's leader
    array_job_id: int | None = None     # SLURM_ARRAY_JOB_ID (controller hooks only)
    array_task_id: int | None = None    # SLURM_ARRAY_TASK_ID (controller hooks only)
    end_time: int | None = None         # SLURM_JOB_END_TIME (epoch s) where Slurm gives it
    cluster: str | None = None          # SLURM_CLUSTER_NAME (slurm.conf's ClusterName)

    @property
    def own_spec(self) -> str:
        """This job alone to scontrol/scancel: an array element that kept the array's id
        is ``<id>_<task>``, since the bare id names every element of the array."""
        if self.array_job_id == self.job_id and self.array_task_id is not None:
            return f"{self.job_id}_{self.array_task_id}"
        return str(self.job_id)

    @property
    def record_spec(self) -> str:
        """Where this job's own record is written: a het leader's ``<id>+0`` (an update
        by the bare leader id is applied to every component)."""
        return f"{self.job_id}+0" if self.het_job_id == self.job_id else self.own_spec

    @property
    def nodes(self) -> list[str]:
        """The job's node names, expanded, in Slurm's order ([] when Slurm gave none: an
        epilog's context may lack the list, see :func:`job_context_from_env`)."""
        return expand(self.nodelist_expr) if self.nodelist_expr else []


def _get(env: Mapping[str, str], var: str, required: bool) -> str | None:
    if required:
        return _required(env, var)
    return env.get(var) or None


def _required(env: Mapping[str, str], var: str) -> str:
    value = env.get(var)
    if value is None or value == "":
        raise ContextError(var, value, "required but not set")
    return value


def _int(var: str, value: str, lo: int, hi: int, what: str) -> int:
    if not re.fullmatch(r"[0-9]{1,10}", value):
        raise ContextError(var, value, f"not a valid {what} (expected an integer {lo}..{hi})")
    number = int(value)
    if not lo <= number <= hi:
        raise ContextError(var, value, f"{what} out of range {lo}..{hi}")
    return number


def _match(var: str, value: str, regex: str, what: str) -> str:
    if not re.fullmatch(regex, value):
        raise ContextError(var, value, f"not a valid {what}")
    return value


def _user(value: str | None, required: bool) -> str:
    """The job's user name as Slurm gave it. Slurm has already resolved it from the uid,
    and only the uid decides anything here (channel owner, ACLs, ownership): the name is
    kept for the record and logs. Directory-service names are accepted as they are
    (``CORP\\jdoe``, ``müller``, ``john smith``, over 64 characters: audit F3-4); only
    what no passwd name holds is refused: ``/``, NUL or another control character, or
    a length past ``USER_NAME_MAX``. Where the name is not ``required`` (the epilogs,
    which only clean up) an unusable or missing one is "" and never fails the hook."""
    if value is None:
        return ""
    if "/" in value or not value.isprintable() or len(value) > USER_NAME_MAX:
        if not required:
            return ""
        raise ContextError("SLURM_JOB_USER", value,
                           "not a valid user name (it holds '/' or a control character, "
                           f"or is longer than {USER_NAME_MAX} characters)")
    return value


def job_context_from_env(env: Mapping[str, str], hook: str = "node",
                         need_nodelist: bool = True,
                         user_required: bool | None = None) -> JobContext:
    """Build a validated JobContext from a hook's environment.

    hook="node": slurmd Prolog/Epilog, SLURMD_NODENAME required and must be in the node
    list. hook="controller": PrologSlurmctld/EpilogSlurmctld, node is "".
    ``need_nodelist=False`` (the Epilog): a missing node list gives ``nodelist_expr`` ""
    instead of an error. Slurm 22.05 ran the Epilog of a job killed while its prologs ran
    (trays not responding) with neither SLURM_JOB_NODELIST nor SLURM_NODELIST, and an
    epilog that exits 2 drains its tray; it needs only the job id and this tray's name.
    A node list that is present is checked as always.
    ``user_required`` (default: ``need_nodelist``, i.e. the prologs): whether a missing
    or unusable ``SLURM_JOB_USER`` is an error; the epilogs never fail on a name.
    Raises ContextError naming the variable and the bad value.
    """
    if user_required is None:
        user_required = need_nodelist
    if hook not in HOOKS:
        raise ValueError(f"hook must be one of {HOOKS}, got {hook!r}")

    job_var = "SLURM_JOB_ID"
    if not env.get(job_var) and env.get("SLURM_JOBID"):
        job_var = "SLURM_JOBID"  # older name, set by every Slurm version too
    job_id = _int(job_var, _required(env, job_var), 1, MAX_JOB_ID, "job id")
    uid = _int("SLURM_JOB_UID", _required(env, "SLURM_JOB_UID"), 0, MAX_ID, "uid")
    user = _user(_get(env, "SLURM_JOB_USER", user_required), user_required)

    gid_raw = _get(env, "SLURM_JOB_GID", False)
    gid = _int("SLURM_JOB_GID", gid_raw, 0, MAX_ID, "gid") if gid_raw is not None else None

    partition = _get(env, "SLURM_JOB_PARTITION", False)
    if partition is not None:
        _match("SLURM_JOB_PARTITION", partition, PARTITION_RE, "partition name")

    restart_raw = _get(env, "SLURM_JOB_RESTART_COUNT", False)
    restart = (_int("SLURM_JOB_RESTART_COUNT", restart_raw, 0, MAX_ID, "restart count")
               if restart_raw is not None else 0)

    end_raw = _get(env, "SLURM_JOB_END_TIME", False)
    # Only to bound a credential's life (imexctl/imex/auth.py): anything else is "unknown".
    end_time = int(end_raw) if end_raw and re.fullmatch(r"[1-9][0-9]{0,11}", end_raw) else None

    cluster = _get(env, "SLURM_CLUSTER_NAME", False)
    if cluster is not None:
        _match("SLURM_CLUSTER_NAME", cluster, r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}",
               "cluster name")

    het_raw = _get(env, "SLURM_HET_JOB_ID", False) or _get(env, "SLURM_PACK_JOB_ID", False)
    het = _int("SLURM_HET_JOB_ID", het_raw, 1, MAX_JOB_ID, "job id") if het_raw else None

    array = {}
    for var in ("SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID"):
        value = _get(env, var, False)
        if value:
            array[var] = _int(var, value, 0 if var.endswith("TASK_ID") else 1,
                              MAX_JOB_ID, "array id")

    script_context = _get(env, "SLURM_SCRIPT_CONTEXT", False)
    if script_context is not None:
        _match("SLURM_SCRIPT_CONTEXT", script_context, r"[a-z_]{1,32}",
               "script context")

    sharing = {}
    for var in ("SLURM_JOB_EXCLUSIVE", "SLURM_JOB_OVERSUBSCRIBE"):
        value = _get(env, var, False)
        if value is not None:
            sharing[var] = _match(var, value.strip().upper(), r"[A-Z0-9_]{1,16}",
                                  "sharing mode")

    nodelist, names = _nodelist(env, need_nodelist)
    node = ""
    if hook == "node":
        node = _match("SLURMD_NODENAME", _required(env, "SLURMD_NODENAME"), NODE_NAME,
                      "node name")
        if nodelist and node not in names:
            raise ContextError("SLURMD_NODENAME", node,
                               f"this node is not in the job's node list {nodelist!r}")

    return JobContext(job_id=job_id, uid=uid, user=user, node=node, nodelist_expr=nodelist,
                      gid=gid, partition=partition, hook=hook, restart_count=restart,
                      end_time=end_time, cluster=cluster,
                      script_context=script_context,
                      exclusive=sharing.get("SLURM_JOB_EXCLUSIVE"),
                      oversubscribe=sharing.get("SLURM_JOB_OVERSUBSCRIBE"),
                      het_job_id=het, array_job_id=array.get("SLURM_ARRAY_JOB_ID"),
                      array_task_id=array.get("SLURM_ARRAY_TASK_ID"))


def _nodelist(env: Mapping[str, str], required: bool) -> tuple[str, list[str]]:
    """The job's node list as Slurm wrote it and expanded; ("", []) when it is absent
    and not ``required``."""
    if env.get("SLURM_JOB_NODELIST"):
        nl_var = "SLURM_JOB_NODELIST"
    elif env.get("SLURM_NODELIST"):
        nl_var = "SLURM_NODELIST"
    elif required:
        raise ContextError("SLURM_JOB_NODELIST", None,
                           "required but not set (nor SLURM_NODELIST)")
    else:
        return "", []
    nodelist = env[nl_var]
    if len(nodelist) > MAX_NODELIST_LEN:
        raise ContextError(nl_var, nodelist, "node list too long")
    try:
        names = expand(nodelist)
    except ValueError as exc:
        raise ContextError(nl_var, nodelist, f"not a valid node list ({exc})") from None
    if not names:
        raise ContextError(nl_var, nodelist, "node list is empty")
    for name in names:
        if not re.fullmatch(NODE_NAME, name):
            raise ContextError(nl_var, nodelist, f"node name {name!r} is not valid")
    return nodelist, names


__all__ = ["JobContext", "ContextError", "job_context_from_env"]
