"""A tray for ``imexctl status`` against Slurm: its config, fabric file (clique ``clique``
of UUID) and an in-memory Slurm of two trays with tray01's identity published."""

from __future__ import annotations

from imexctl.config import parse_config
from tests.support.fabric import simulated_tray, write_fabric_file
from tests.support.memory_slurm import MemorySlurm

UUID = "11111111-2222-3333-4444-555555555555"


def slurm_world(tmp_path, clique=1, **node_kw):
    write_fabric_file(tmp_path / "fabric.json", simulated_tray(UUID, clique))
    cfg = parse_config({"paths": {"state_dir": f"{tmp_path}/state", "run_dir": f"{tmp_path}/run",
                                  "channel_dir": f"{tmp_path}/ch",
                                  "slurm_conf": f"{tmp_path}/no-slurm.conf",
                                  "imex_ctl_binary": f"{tmp_path}/no-ctl"},
                        "fabric": {"source": "file", "file": f"{tmp_path}/fabric.json"}},
                       None, "tray01")
    slurm = MemorySlurm()
    slurm.add_nodes({"tray01": "10.0.0.1", "tray02": "10.0.0.2"})
    slurm.publish("tray01", {"cluster_uuid": UUID, "clique_id": 1, "gpu_count": 4})
    if node_kw:
        slurm.set_node("tray01", **node_kw)
    return cfg, slurm
