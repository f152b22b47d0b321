"""The slurmctld host's config for PrologSlurmctld/EpilogSlurmctld tests: trays
tray[01-08] in its slurm.conf, every job wanting IMEX, channels chosen by the controller."""

from __future__ import annotations

from imexctl.base import log
from imexctl.config import parse_config
from tests.support.memory_slurm import FAKE_MUNGE, MemorySlurm


def make_cfg(tmp_path, switch="switch/none", **sections):
    (tmp_path / "slurm.conf").write_text(f"ClusterName=unit\nSwitchType={switch}\n"
                                         "NodeName=tray[01-08]\n")
    base = {"paths": {"state_dir": f"{tmp_path}/state", "log_file": f"{tmp_path}/log/x.log",
                      "controller_dir": f"{tmp_path}/ctld",
                      "munge_bin_dir": str(FAKE_MUNGE),
                      "slurm_conf": f"{tmp_path}/slurm.conf"},
            "policy": {"mode": "all"}, "channels": {"mode": "auto", "count": 16}}
    for name, values in sections.items():
        base.setdefault(name, {}).update(values)
    cfg = parse_config(base, None, "ctld")
    log.setup_logging(cfg.paths.log_file, "info", "ctld", stderr_level="critical")
    return cfg


def rack(tmp_path, monkeypatch, nodes):
    """(the controller's config, an in-memory Slurm holding ``nodes`` at 10.0.0.N) with no
    channel table lost to rebuild (no live job holds a channel)."""
    from imexctl.controller import slurmctld

    monkeypatch.setattr(slurmctld, "held_by_live_jobs", lambda cfg: {})
    slurm = MemorySlurm()
    slurm.add_nodes({n: f"10.0.0.{i}" for i, n in enumerate(nodes, 1)})
    return make_cfg(tmp_path), slurm
