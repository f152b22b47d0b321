"""The simulated nvidia-imex (imexctl-sim-imex), run for real by unit tests of the
lifecycle: a tray config that starts it, and the daemons a test left running."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import psutil

from tests.support.lifecycle import make_cfg

BIN = Path(sys.executable).parent
# Per-job ports below Linux's ephemeral range (32768-60999): a busy machine's outgoing
# connections (and their TIME-WAIT sockets) would otherwise take a job's port at random.
OUTSIDE_EPHEMERAL = {"server_port_base": 20480, "cmd_port_base": 24576, "port_span": 4096}


def sim_cfg(tmp_path, faults=None, policy="multi-node", **imex):
    (tmp_path / "faults.json").write_text(json.dumps(faults or {}))
    # The simulator's knobs reach the daemon and the ctl through imex.environment_file.
    (tmp_path / "imex.env").write_text(f"IMEXCTL_SIM_FAULTS={tmp_path}/faults.json\n"
                                       f"IMEXCTL_SIM_RUN_DIR={tmp_path}/sim-run\n"
                                       "IMEXCTL_SIM_TIME_SCALE=0.01\n")
    return make_cfg(tmp_path, policy={"mode": policy}, paths={"imex_binary": str(BIN / "imexctl-sim-imex"),
                                     "imex_ctl_binary": str(BIN / "imexctl-sim-imex-ctl")},
                    imex={"ready_timeout_s": 4, "stop_grace_s": 1, "environment_file": str(tmp_path / "imex.env"),
                          **OUTSIDE_EPHEMERAL, **imex})


def sim_processes(tmp_path) -> list[psutil.Process]:
    out = []
    for p in psutil.process_iter(["cmdline"]):
        if str(tmp_path) in " ".join(p.info["cmdline"] or []) and "imexctl-sim-imex" in \
                " ".join(p.info["cmdline"] or []):
            out.append(p)
    return out
