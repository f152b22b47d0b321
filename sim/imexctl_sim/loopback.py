"""A domain of simulated trays on 127.x.y.z loopback addresses, for tests and benchmarks.

Each tray is a real ``nvidia-imex`` simulator process with its own config, node config,
log and run dir (its "host": one persist.dat), started through the ``-IS`` launchers of
:mod:`imexctl_sim.launchers`; the ctl is called the same way. Nothing here is used by the
product's hooks.
"""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import time
from pathlib import Path

from imexctl_sim.launchers import write_launchers

TIME_SCALE = "0.01"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def poll(fn, timeout: float = 10.0, interval: float = 0.1, what: str = "condition"):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}; last={last!r}")


class Tray:
    def __init__(self, domain: "SimDomain", idx: int, addr: str):
        self.domain = domain
        self.idx = idx
        self.addr = addr
        self.dir = domain.root / f"tray{idx}"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.cfg = self.dir / "config.cfg"
        self.nodes_cfg = self.dir / "nodes_config.cfg"
        self.log = self.dir / "nvidia-imex.log"
        self.run_dir = self.dir / "sim-run"   # this tray's host: one persist.dat
        self.proc: subprocess.Popen | None = None

    def env(self, extra: dict | None = None) -> dict:
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8",
               "IMEXCTL_SIM_LOCAL_IP": self.addr,
               "IMEXCTL_SIM_RUN_DIR": str(self.run_dir),
               "IMEXCTL_SIM_TIME_SCALE": self.domain.time_scale,
               "IMEXCTL_SIM_HOSTNAME": f"tray{self.idx:02d}"}
        if self.domain.faults_file is not None:
            env["IMEXCTL_SIM_FAULTS"] = str(self.domain.faults_file)
        env.update(extra or {})
        return env

    def write_config(self, nodes: list[str] | None = None, **overrides) -> None:
        values = {
            "LOG_LEVEL": "4", "LOG_FILE_NAME": str(self.log), "DAEMONIZE": "0",
            "SERVER_PORT": str(self.domain.port), "IMEX_NODE_CONFIG_FILE": str(self.nodes_cfg),
            "IMEX_CMD_ENABLED": "1", "IMEX_CMD_PORT": str(self.domain.cmd_port),
            "IMEX_CMD_BIND_INTERFACE_IP": "", "BIND_INTERFACE_IP": "",
            "IMEX_WAIT_FOR_QUORUM": "RECOVERY", "IMEX_NODE_DISCONNECTED_GRACE_TIME": "-1",
            "IMEX_ENABLE_AUTH_ENCRYPTION": "0",
        }
        values.update({k: str(v) for k, v in overrides.items()})
        self.cfg.write_text("# simulated tray\n" + "".join(f"{k}={v}\n" for k, v in values.items()))
        nodes = self.domain.addresses if nodes is None else nodes
        self.nodes_cfg.write_text("".join(f"{a}\n" for a in nodes))

    def start(self, env: dict | None = None) -> subprocess.Popen:
        out = open(self.dir / "stdio.log", "ab")
        self.proc = subprocess.Popen([self.domain.daemon_bin, "-c", str(self.cfg)],
                                     stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                                     env=self.env(env), start_new_session=True)
        out.close()
        self.domain.procs.append(self.proc)
        return self.proc

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    def wait_exit(self, timeout: float = 5.0) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout)

    def ctl(self, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
        return subprocess.run([self.domain.ctl_bin, "-c", str(self.cfg), *args],
                              capture_output=True, text=True, timeout=20, env=self.env(env),
                              stdin=subprocess.DEVNULL)

    def query(self) -> str:
        proc = self.ctl("-q")
        return proc.stdout.strip() if proc.returncode == 0 else "UNAVAILABLE"

    def domain_json(self) -> dict:
        proc = self.ctl("-N", "-j")
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout)

    def log_text(self) -> str:
        return self.log.read_text() if self.log.exists() else ""


class SimDomain:
    def __init__(self, root: Path, n: int, time_scale: str = TIME_SCALE):
        self.root = root
        self.root.mkdir(parents=True, exist_ok=True)
        a, b = random.randint(100, 250), random.randint(1, 250)
        self.addresses = [f"127.{a}.{b}.{i + 2}" for i in range(n)]
        self.port = free_port()
        self.cmd_port = free_port()
        while self.cmd_port == self.port:
            self.cmd_port = free_port()
        self.time_scale = time_scale
        self.faults_file: Path | None = None
        self.procs: list[subprocess.Popen] = []
        self.extra_pids: list[int] = []
        self.daemon_bin, self.ctl_bin = write_launchers(str(self.root / "bin"))
        self.trays = [Tray(self, i, addr) for i, addr in enumerate(self.addresses)]
        for tray in self.trays:
            tray.write_config()

    def set_faults(self, spec: dict) -> None:
        self.faults_file = self.root / "faults.json"
        self.faults_file.write_text(json.dumps(spec))

    def start_all(self) -> None:
        for tray in self.trays:
            tray.start()

    def kill_all(self) -> None:
        """SIGKILL every running tray: an unclean stop (persist.dat keeps its importers)."""
        for tray in self.trays:
            if tray.proc is not None and tray.proc.poll() is None:
                tray.signal(signal.SIGKILL)
                tray.wait_exit(5)

    def wait_up(self, via: int = 0, timeout: float = 20.0) -> dict:
        def up():
            view = self.trays[via].domain_json()
            return view if view["status"] == "UP" else None
        return poll(up, timeout, 0.2, "domain UP")

    def cleanup(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except OSError:
                    proc.kill()
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                pass
        for pid in self.extra_pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


