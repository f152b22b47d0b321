"""The slurmctld host's config for PrologSlurmctld/EpilogSlurmctld tests: trays
tray[01-08] in its slurm.conf, every job wanting IMEX, channels chosen by the controller."""

from __future__ import annotations

from imexctl.base import log
from imexctl.config import parse_config
from tests.support.memory_slurm import FAKE_MUNGE


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
