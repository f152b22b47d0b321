"""A tray's world for the prolog and epilog: its config (real files under tmp_path), its
local slurm.conf, the hook context, a published identity, and what a hook leaves behind."""

from __future__ import annotations

import os
from types import SimpleNamespace

from imexctl.config import parse_config
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


def ctx_for(job_id=42, node="tray01", nodes="tray[01-02]", restart_count=0, exclusive=None,
            oversubscribe=None, end_time=None):
    return SimpleNamespace(job_id=job_id, uid=65534, user="nobody", gid=65534, node=node,
                           nodelist_expr=nodes, restart_count=restart_count,
                           exclusive=exclusive, oversubscribe=oversubscribe,
                           end_time=end_time)


def published(clique=1, uuid=UUID):
    return {"cluster_uuid": uuid, "clique_id": clique, "gpu_count": 4, "state": "Completed",
            "observed": 1.0}


def leftovers(tmp_path):
    """Everything a failed or finished hook must not leave behind."""
    run = tmp_path / "run"
    # expected.json is the node's "IMEX expected here" signal, kept across jobs
    return {"job_dirs": sorted(set(os.listdir(run)) - {"expected.json"}) if run.exists()
            else [],
            "channels": sorted(os.listdir(tmp_path / "dev" / "channels")),
            "record": (tmp_path / "state" / "domain.json").exists()}


CLEAN = {"job_dirs": [], "channels": [], "record": False}
