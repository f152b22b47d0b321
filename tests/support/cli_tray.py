"""One tray for tests of the real command line (``python -m imexctl``): its files under a
temp dir, Slurm faked by tests/support/fakeslurm.py (its CLI), and how to run a hook
with its stdout/stderr in any state."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support.fabric import simulated_tray, write_fabric_file
from tests.support import fakeslurm

UUID = "5b1b3a1e-1c1a-4d0e-9a5e-000000000001"
PROC_DEVICES = "Character devices:\n195 nvidia\n234 nvidia-caps-imex-channels\n"


class Tray:
    """One tray's files under tmp_path, Slurm faked by tests/support/fakeslurm.py (its CLI)."""

    def __init__(self, root: Path, policy: str = "all", job: dict | None = None):
        self.root = root
        os.chmod(root, 0o755)
        (root / "proc-devices").write_text(PROC_DEVICES)
        (root / "channels").mkdir()
        write_fabric_file(root / "fabric.json", simulated_tray(UUID, 1))
        self.state = root / "slurm-state.json"
        fakeslurm.save(self.state, fakeslurm.new_state(
            {"tray01": {"NodeAddr": "127.0.0.1"}},
            {4242: {"NodeList": "tray01", **(job or {})}}))
        fakeslurm.install_bin(root / "bin", self.state)
        self.config = root / "imexctl.toml"
        self.config.write_text(f"""[paths]
state_dir = "{root}/state"
run_dir = "{root}/run"
log_file = "{root}/log/imexctl.log"
channel_dir = "{root}/channels"
proc_devices = "{root}/proc-devices"
slurm_bin_dir = "{root}/bin"
imex_binary = "{root}/no-imex"
imex_ctl_binary = "{root}/no-ctl"
[fabric]
source = "file"
file = "{root}/fabric.json"
[policy]
mode = "{policy}"
[slurm]
backend = "cli"
timeout_s = 5
attempts = 1
""")

    def env(self) -> dict[str, str]:
        return {"PATH": "/usr/bin:/bin", "IMEXCTL_CONFIG": str(self.config),
                "SLURMD_NODENAME": "tray01", "SLURM_JOB_ID": "4242", "SLURM_JOB_UID": "65534",
                "SLURM_JOB_USER": "nobody", "SLURM_NODELIST": "tray01"}

    def node(self) -> dict:
        return fakeslurm.load(self.state)["nodes"]["tray01"]

    def calls(self, tool: str) -> list[list[str]]:
        return [c for c in fakeslurm.load(self.state)["calls"] if c[0] == tool]


def run_hook(args, env, *, stdout="pipe", stderr="pipe"):
    """Run ``python -m imexctl ARGS``; a stream given as "gone" is a pipe whose reader has
    exited, "closed" a descriptor closed before the interpreter starts."""
    fds, keep, close = {}, [], []
    for name, how in (("stdout", stdout), ("stderr", stderr)):
        if how == "pipe":
            fds[name] = subprocess.PIPE
        elif how == "gone":
            r, w = os.pipe()
            os.close(r)
            fds[name] = w
            keep.append(w)
        else:
            fds[name] = subprocess.DEVNULL
            close.append(1 if name == "stdout" else 2)
    proc = subprocess.Popen([sys.executable, "-m", "imexctl", *args], env=env, text=True,
                            cwd=Path(__file__).resolve().parents[2],
                            preexec_fn=(lambda: [os.close(fd) for fd in close]) if close else None,
                            **fds)
    for fd in keep:
        os.close(fd)
    out, err = proc.communicate(timeout=60)
    return proc.returncode, out or "", err or ""
