"""A tray's world for the prolog and epilog: its config (real files under tmp_path), its
local slurm.conf, the hook context, a published identity, and what a hook leaves behind."""

from __future__ import annotations

import os

from imexctl.config import parse_config
from imexctl.slurm.context import JobContext, job_context_from_env
from tests.support.fabric import simulated_tray, write_fabric_file
from tests.support.memory_slurm import FAKE_MUNGE

UUID = "5b1b3a1e-1c1a-4d0e-9a5e-000000000001"
PROC_DEVICES = "Character devices:\n  1 mem\n195 nvidia\n234 nvidia-caps-imex-channels\n\n" \
               "Block devices:\n  7 loop\n"


def make_cfg(tmp_path, **sections):
    base = {
        "paths": {"state_dir": f"{tmp_path}/state", "run_dir": f"{tmp_path}/run",
                  "log_file": f"{tmp_path}/log/imexctl.log",
                  "channel_dir": f"{tmp_path}/dev/channels",
                  "proc_devices": f"{tmp_path}/proc-devices",
                  "imex_binary": f"{tmp_path}/no-such-imex",
                  "imex_ctl_binary": f"{tmp_path}/no-such-ctl",
                  "imex_persist_file": f"{tmp_path}/imex-run/persist.dat",
                  "slurm_conf": f"{tmp_path}/slurm.conf",
                  "munge_bin_dir": str(FAKE_MUNGE)},
        "fabric": {"source": "file", "file": f"{tmp_path}/fabric.json"},
        "imex": {"ready_timeout_s": 3, "stop_grace_s": 1},
        "channels": {"mode": "imexctl"},
        "policy": {"mode": "multi-node"},
    }
    for name, values in sections.items():
        base.setdefault(name, {}).update(values)
    (tmp_path / "proc-devices").write_text(PROC_DEVICES)
    if not (tmp_path / "slurm.conf").exists():
        write_slurm_conf(tmp_path)
    (tmp_path / "dev" / "channels").mkdir(parents=True, exist_ok=True)
    write_fabric_file(tmp_path / "fabric.json", simulated_tray(UUID, 1))
    return parse_config(base, None, "tray01")


def write_slurm_conf(tmp_path, addrs=None, extra=""):
    """The tray's local slurm.conf: where the prolog finds addresses and SwitchType."""
    addrs = addrs or {"tray01": "127.0.0.1", "tray02": "127.0.0.2", "tray03": "127.0.0.3"}
    lines = ["ClusterName=unit", "SwitchType=switch/none", extra]
    lines += [f"NodeName={n} NodeAddr={a} CPUs=1" for n, a in addrs.items()]
    (tmp_path / "slurm.conf").write_text("\n".join(lines) + "\n")


def hook_env(job_id, nodes="tray[01-02]", node="tray01", restart_count=0, exclusive=None,
             oversubscribe=None, end_time=None, partition=None, het_job_id=None,
             array=None, cluster=None, uid=65534, user="nobody", gid=65534) -> dict[str, str]:
    """The environment Slurm gives a job's hooks (``node`` None: slurmctld's)."""
    env = {"SLURM_JOB_ID": str(job_id), "SLURM_JOB_UID": str(uid), "SLURM_JOB_USER": user,
           "SLURM_JOB_GID": str(gid), "SLURM_JOB_RESTART_COUNT": str(restart_count)}
    optional = {"SLURM_JOB_NODELIST": nodes, "SLURMD_NODENAME": node,
                "SLURM_JOB_EXCLUSIVE": exclusive, "SLURM_JOB_OVERSUBSCRIBE": oversubscribe,
                "SLURM_JOB_END_TIME": end_time, "SLURM_JOB_PARTITION": partition,
                "SLURM_HET_JOB_ID": het_job_id, "SLURM_CLUSTER_NAME": cluster}
    if array is not None:
        optional["SLURM_ARRAY_JOB_ID"], optional["SLURM_ARRAY_TASK_ID"] = array
    env.update({k: str(v) for k, v in optional.items() if v is not None})
    return env


def ctx_for(job_id=42, node="tray01", nodes="tray[01-02]", restart_count=0, exclusive=None,
            oversubscribe=None, end_time=None, **env) -> JobContext:
    """The node prolog's context of a job, built as the hook builds it (from the
    environment slurmd gives; ``nodes`` None: an epilog's environment without a node list)."""
    return job_context_from_env(hook_env(job_id, nodes, node, restart_count, exclusive,
                                         oversubscribe, end_time, **env),
                                hook="node", need_nodelist=nodes is not None)


def controller_ctx(job_id, nodes=None, restart_count=0, **env) -> JobContext:
    """PrologSlurmctld's/EpilogSlurmctld's context, as the hook builds it from slurmctld's
    environment (``nodes``: the allocation, ranged or as a list; None: not given)."""
    if nodes is not None and not isinstance(nodes, str):
        nodes = ",".join(nodes)
    return job_context_from_env(hook_env(job_id, nodes, None, restart_count, **env),
                                hook="controller", need_nodelist=nodes is not None)


def controller_ctx_of(slurm, job_id, restart_count=0, **env) -> JobContext:
    """The controller context slurmctld gives job ``job_id`` of the in-memory Slurm: its
    node list, partition, het leader and array ids, as in the job's record."""
    job = slurm.jobs[job_id]
    env.setdefault("partition", job.partition)
    env.setdefault("het_job_id", job.het_job_id)
    env.setdefault("array", slurm.arrays.get(job_id))
    return controller_ctx(job_id, list(job.nodes), restart_count, **env)


def published(clique=1, uuid=UUID, auth="off", lifetime="job"):
    """A tray's identity in Extra as imexctl publishes it (``auth``: its imex.auth tag,
    ``lifetime``: its imex.lifetime; "" leaves it out, as an older imexctl)."""
    ident = {"cluster_uuid": uuid, "clique_id": clique, "gpu_count": 4, "state": "Completed",
             "observed": 1.0, "auth": auth}
    return {**ident, "lifetime": lifetime} if lifetime else ident


def leftovers(tmp_path):
    """Everything a failed or finished hook must not leave behind."""
    run = tmp_path / "run"
    # expected.json is the node's "IMEX expected here" signal, kept across jobs
    return {"job_dirs": sorted(set(os.listdir(run)) - {"expected.json"}) if run.exists()
            else [],
            "channels": sorted(os.listdir(tmp_path / "dev" / "channels")),
            "record": (tmp_path / "state" / "domain.json").exists()}


CLEAN = {"job_dirs": [], "channels": [], "record": False}
