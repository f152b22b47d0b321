"""A real multi-node Slurm cluster of simulated trays on one machine.

One slurmctld and N slurmd "trays", each in its own network, UTS and mount namespace
(veth to a private bridge, its own address and hostname, the harness's slurm.conf and
/etc/hosts bind-mounted over the host's), one private munged. The namespaces are
anonymous and live exactly as long as their processes, so a SIGKILL of a tray's
processes is a power cut and nothing is left in the host's /run/netns, /etc or mounts.
Everything written lives under the state dir. See docs/harness.md.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterable

from tests.cluster import imexctl_config, procs, recorder, rootfs, slurmconf

REPO = Path(__file__).resolve().parents[2]
STD_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
MARKER = ".imexctl-harness"
PACKAGES = ("munge", "slurmctld", "slurmd", "slurm-client")
JOB_END_STATES = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE", "PREEMPTED")

# Run inside the fresh namespaces: wait for the network, then set the identity, mount, exec.
_NODE_SCRIPT = 'read -r _go || exit 1; exec </dev/null; hostname "$1" || exit 1; shift; {mounts} && exec {chroot}"$@"'
SLURMS = ("host", *rootfs.SUITES)
# The user that owns test jobs, by uid: 26.05's scancel refuses `--user nobody`.
NOBODY_UID = 65534


def _exclusive(args: list[str]) -> list[str]:
    """``--exclusive`` unless the job says how it shares: per-job IMEX needs node-exclusive
    jobs, and since 24.11 the prolog refuses a job whose SLURM_JOB_OVERSUBSCRIBE says it
    may share its trays (a test that wants sharing passes ``--oversubscribe``)."""
    shares = any(a.startswith("--exclusive") or a in ("--oversubscribe", "-s") for a in args)
    return [] if shares else ["--exclusive"]


class HarnessError(RuntimeError):
    """The harness could not do what was asked; the message says what to look at."""


def _env_knob(name: str, default):
    value = os.environ.get(f"IMEXCTL_HARNESS_{name.upper()}")
    if value is None:
        return default
    return type(default)(value) if isinstance(default, int) else value


# SlurmctldTimeout with a backup controller: it takes over this many seconds after the
# primary stops answering (Slurm's default, 120, would outlast a test).
BACKUP_SLURMCTLD_TIMEOUT = 6
# The backup's slurmctld.log when it takes over (22.05: "ControlMachine slurmctl not
# responding, BackupController1 slurmctl2 taking over", then "Running as primary controller").
TAKEOVER = re.compile(r"taking over|Running as primary controller")
PRIMARY = re.compile(r"Running as primary controller")
_HOLDERS: list[subprocess.Popen] = []   # processes keeping a killed controller's host up

# What docs/install.md asks sites for. DeferBatch matters to the tests: without it slurmd
# launches a batch script as soon as its own tray's prolog ends, so a job that prolog has
# just refused (cancelled, exit 0) can start if Slurm's kill arrives a moment later.
PROLOG_FLAGS = "Alloc,DeferBatch"
# What the Debian package installs (tests/cluster/rootfs.py installs it into the Slurm roots).
INSTALLED_HOOKS = Path("/opt/imexctl/hooks")
INSTALLED_VENV = Path("/opt/imexctl/.venv")
PACKAGE_CONFFILE = "/etc/imexctl/imexctl.toml"
# What the daemons see there: the harness's etc/ (a directory bind, so a test that replaces
# etc/imexctl.toml by rename is seen at once; a bind of the file kept the old inode).
PACKAGE_CONFDIR = "/etc/imexctl"


def hooks_dir(slurm: str) -> Path:
    """Where the hooks slurm.conf names are: the checkout's hooks/ on the host Slurm (a
    developer's edit runs at once, no package build), the installed package's
    /opt/imexctl/hooks in the trixie and sid roots (the real install path)."""
    return REPO / "hooks" if slurm == "host" else INSTALLED_HOOKS


class Cluster:
    """Lifecycle and helpers for one harness cluster. Knobs are constructor arguments;
    `Cluster.from_env()` reads IMEXCTL_HARNESS_<KNOB> for humans and CI."""

    def __init__(self, state_dir: str | os.PathLike = "/tmp/imexctl-harness", n: int = 4, *,
                 node_prefix: str = "tray", subnet: str = "10.213.77", net_prefix: str = "imxt",
                 prolog_flags: str = PROLOG_FLAGS, prolog_epilog_timeout: int = 60,
                 health_check_interval: int = 0, slurmd_timeout: int = 10, cred_expire: int = 30,
                 scheduler_parameters: Iterable[str] = (), extra_conf: Iterable[str] = (),
                 features: dict[str, str] | None = None, slurm_prefix: str | os.PathLike | None = None,
                 sysconfdir: str | os.PathLike = "/etc/slurm", munged: str = "/usr/sbin/munged",
                 hooks: str = "imexctl", hook_targets: dict[str, str | os.PathLike] | None = None,
                 partition: str = "trays", cluster_name: str = "imxt", ctl_name: str = "slurmctl",
                 slurm: str | None = None, switch_type: str = "", topology_conf: str = "",
                 slurm_backend: str = "", down_nodes: int = 0, backup_ctl: bool = False,
                 slurmctld_timeout: int = 0):
        self.slurm = slurm or os.environ.get("IMEXCTL_SLURM") or "host"
        if self.slurm not in SLURMS:
            raise ValueError(f"slurm must be one of {SLURMS} (IMEXCTL_SLURM), not {self.slurm!r}")
        self.root: rootfs.Root | None = None  # resolved (built if needed) at up()
        self.switch_type, self.topology_conf = switch_type, topology_conf
        self.slurm_backend = slurm_backend  # imexctl's [slurm] backend on the trays ("" = its default, auto)
        self.state_dir = Path(state_dir).resolve()
        self.n = n
        self.node_prefix, self.subnet, self.net_prefix = node_prefix, subnet, net_prefix
        self.prolog_flags, self.prolog_epilog_timeout = prolog_flags, prolog_epilog_timeout
        self.health_check_interval, self.slurmd_timeout = health_check_interval, slurmd_timeout
        self.cred_expire = cred_expire
        self.scheduler_parameters, self.extra_conf = list(scheduler_parameters), list(extra_conf)
        self.features = dict(features or {})
        prefix = Path(slurm_prefix) if slurm_prefix else Path("/usr")
        self.slurm_sbin, self.slurm_bin = prefix / "sbin", prefix / "bin"
        self.sysconfdir, self.munged = Path(sysconfdir), Path(munged)
        if hooks not in recorder.MODES:
            raise ValueError(f"hooks must be one of {recorder.MODES}, not {hooks!r}")
        self.hooks = hooks
        self.hook_targets = {h: hooks_dir(self.slurm) / h for h in recorder.HOOKS}
        self.hook_targets.update({h: Path(p) for h, p in (hook_targets or {}).items()})
        self.partition, self.cluster_name, self.ctl_name = partition, cluster_name, ctl_name
        # Node definitions without a slurmd (State=DOWN): a big cluster's node table for
        # slurmctld load benchmarks, at the cost of config lines only.
        self.down_nodes = down_nodes
        # A backup slurmctld (second SlurmctldHost, its own address, hostname and imexctl
        # state_dir, the same StateSaveLocation) that takes over within SlurmctldTimeout.
        self.backup_ctl = bool(backup_ctl)
        self.slurmctld_timeout = slurmctld_timeout or (BACKUP_SLURMCTLD_TIMEOUT if backup_ctl else 0)

    @classmethod
    def from_env(cls, **overrides) -> "Cluster":
        knobs = {k: _env_knob(k, d) for k, d in (
            ("state_dir", "/tmp/imexctl-harness"), ("n", 4), ("node_prefix", "tray"), ("subnet", "10.213.77"),
            ("net_prefix", "imxt"), ("prolog_flags", PROLOG_FLAGS), ("prolog_epilog_timeout", 60),
            ("health_check_interval", 0), ("slurmd_timeout", 10), ("hooks", "imexctl"),
            ("backup_ctl", 0), ("slurmctld_timeout", 0))}
        for key in ("slurm_prefix", "sysconfdir", "switch_type", "slurm_backend"):
            if os.environ.get(f"IMEXCTL_HARNESS_{key.upper()}"):
                knobs[key] = os.environ[f"IMEXCTL_HARNESS_{key.upper()}"]
        extra = os.environ.get("IMEXCTL_HARNESS_EXTRA_CONF")
        if extra:
            knobs["extra_conf"] = [line for line in extra.split(";") if line.strip()]
        knobs.update(overrides)
        return cls(**knobs)

    # ---- names and addresses -------------------------------------------------------
    @property
    def trays(self) -> list[str]:
        return [f"{self.node_prefix}{i:02d}" for i in range(1, self.n + 1)]

    def tray_addrs(self) -> dict[str, str]:
        return {t: f"{self.subnet}.{10 + i}" for i, t in enumerate(self.trays, 1)}

    @property
    def ctl_addr(self) -> str:
        return f"{self.subnet}.1"

    @property
    def backup_name(self) -> str | None:
        """The backup controller's host name (None without the backup_ctl knob)."""
        return f"{self.ctl_name}2" if self.backup_ctl else None

    @property
    def backup_addr(self) -> str:
        return f"{self.subnet}.2"

    @property
    def controllers(self) -> list[str]:
        """The SlurmctldHost names, primary first."""
        return [self.ctl_name, *([self.backup_name] if self.backup_ctl else [])]

    @property
    def table_dir(self) -> Path:
        """Where PrologSlurmctld keeps the channel table on this cluster: the host-local
        controller_dir the harness config pins, or with a backup controller imexctl's
        default, <StateSaveLocation>/imexctl (shared by both controllers)."""
        if self.backup_ctl:
            return self._p("ctld", "imexctl")
        return imexctl_config.tray_dir(self, self.ctl_name) / "state" / "slurmctld"

    @property
    def host_addr(self) -> str:
        return f"{self.subnet}.254"

    @property
    def bridge(self) -> str:
        return f"{self.net_prefix}br0"

    @property
    def conf_path(self) -> Path:
        return self.state_dir / "etc" / "slurm.conf"

    @property
    def root_path(self) -> Path | None:
        """The root filesystem the Slurm daemons and clients run in (None: the host's)."""
        if self.slurm == "host":
            return None
        if self.root is None:
            self.root = rootfs.ensure(self.slurm)
        return self.root.path

    def root_file(self, path: str | os.PathLike) -> Path:
        """Where a path the daemons see lies on the host (the host's /tmp and the checkout
        are mounted into the root at their own paths)."""
        path, root = Path(path), self.root_path
        if root is None or path.is_relative_to("/tmp") or path.is_relative_to(REPO):
            return path
        return root / str(path).lstrip("/")

    def sibling(self, state_dir: str | os.PathLike, n: int, index: int = 1, **kw) -> "Cluster":
        """Another cluster beside this one on the same Slurm: its own state dir, link prefix,
        subnet and cluster name derived from this cluster's, so tests hard-code none of them."""
        a, b, c = (int(x) for x in self.subnet.split("."))
        subnet = f"{a}.{b}.{(c + index) % 256}"
        net_prefix = f"{self.net_prefix[:3]}{chr(ord('a') + index % 26)}"
        kw = {"net_prefix": net_prefix, "subnet": subnet, "cluster_name": net_prefix, "slurm": self.slurm, **kw}
        return Cluster(state_dir, n, **kw)

    @property
    def env(self) -> dict[str, str]:
        """Environment for Slurm clients run on the host (the "login node")."""
        return {"PATH": f"{self.slurm_bin}:{STD_PATH}", "SLURM_CONF": str(self.conf_path), "LANG": "C.UTF-8"}

    def _p(self, *parts: str) -> Path:
        return self.state_dir.joinpath(*parts)

    # ---- lifecycle -------------------------------------------------------------------
    def up(self, n: int | None = None, timeout: float = 60.0) -> "Cluster":
        """Bring the cluster up; a no-op (well under a second) when it already runs as asked."""
        if n is not None:
            self.n = n
        self._preflight()
        desired = self._render()
        if self._matches(desired) and self._core_alive():
            dead = [t for t in self.trays if not self.tray_alive(t)]
            for tray in dead:
                self._start_node(tray, self._argv_slurmd(tray))
            self.set_hooks(self.hooks)
            if dead:
                self.wait_nodes_ready(timeout=timeout)
            return self
        self.down()
        self._build(desired)
        self.wait_nodes_ready(timeout=timeout)
        self._wait_first_schedule()
        if self.backup_ctl:
            self.wait_controllers_up()
        return self

    def down(self, purge: bool = False) -> None:
        """Stop everything this harness started; idempotent. purge also removes the state dir."""
        inodes = self._recorded_netns()
        for sig, wait in ((signal.SIGTERM, 2.0), (signal.SIGKILL, 5.0)):
            pids = [p for ino in inodes for p in procs.pids_in_netns(ino)]
            for pid in pids:
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
            if not pids or procs.wait_gone(pids, wait):
                break
        self._stop_munged()
        self._delete_links()
        for f in self._p("run").glob("*.netns") if self._p("run").is_dir() else ():
            f.unlink(missing_ok=True)
        if purge and (self._p(MARKER).exists()):
            shutil.rmtree(self.state_dir)

    def status(self) -> dict:
        """What runs now: controller, munged and each tray (alive and Slurm state)."""
        out = {"state_dir": str(self.state_dir), "controller": self._core_alive(), "trays": {}}
        for tray in self.trays:
            info = {"alive": self.tray_alive(tray), "addr": self.tray_addrs()[tray]}
            if out["controller"]:
                try:
                    node = self.node_info(tray)
                    info.update(state=node["state"], reason=node.get("reason", ""))
                except Exception as exc:  # noqa: BLE001 - status must always answer
                    info["error"] = str(exc)
            out["trays"][tray] = info
        return out

    # ---- build steps ---------------------------------------------------------------------
    def _preflight(self) -> None:
        if os.geteuid() != 0:
            raise HarnessError("the harness needs root (network namespaces, bind mounts, runuser)")
        if self.slurm != "host":
            if not self.munged.exists():
                install_packages(("munge",))
            try:
                self.root_path
            except rootfs.RootfsError as exc:
                raise HarnessError(f"Slurm root {self.slurm!r}: {exc}") from exc
            if not self.root_file(self.slurm_sbin / "slurmd").exists():
                raise HarnessError(f"no slurmd at {self.slurm_sbin} in the {self.slurm} root")
        elif not (self.slurm_sbin / "slurmd").exists() or not self.munged.exists():
            if self.slurm_sbin != Path("/usr/sbin"):
                raise HarnessError(f"no slurmd in {self.slurm_sbin} (slurm_prefix knob)")
            install_packages(PACKAGES)

    def _render(self) -> dict[str, str]:
        slurmd = [str(self.slurm_sbin / "slurmd"), "-C"]
        res = subprocess.run(self.in_root(slurmd, bare=True) if self.root_path else slurmd, capture_output=True,
                             text=True, env={"PATH": STD_PATH}, timeout=30)
        if res.returncode:
            raise HarnessError(f"slurmd -C -> rc {res.returncode}: {res.stderr.strip()}")
        topo = slurmconf.parse_topology(res.stdout)
        knobs = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(self).items()
                 if k not in ("hooks", "hook_targets", "root", "_version")}
        if self.root is not None:
            knobs["root"] = self.root.stamp
        knobs["hook_targets"] = {h: str(p) for h, p in self.hook_targets.items()}
        return {
            "etc/slurm.conf": slurmconf.render_slurm_conf(self, topo),
            "etc/hosts": slurmconf.render_hosts(self, socket.gethostname()),
            "etc/imexctl.toml": imexctl_config.render_imexctl_toml(self),
            **({"etc/topology.conf": self.topology_conf} if self.topology_conf else {}),
            "cluster.json": json.dumps(knobs, indent=1, sort_keys=True, default=str) + "\n",
        }

    def _matches(self, desired: dict[str, str]) -> bool:
        try:
            return all(self._p(name).read_text() == text for name, text in desired.items())
        except OSError:
            return False

    def _core_alive(self) -> bool:
        ctl = procs.read_pidfile(self._p("run", "slurmctld.pid"))
        backup = not self.backup_ctl or self.controller_pid(self.backup_name)
        return bool(ctl and procs.is_alive(ctl) and self._munged_pid() and backup)

    def tray_alive(self, tray: str) -> bool:
        pid = procs.read_pidfile(self._p("run", f"slurmd-{tray}.pid"))
        return bool(pid and procs.is_alive(pid) and procs.netns_inode(pid) == self._netns_of(tray))

    def _build(self, desired: dict[str, str]) -> None:
        s = self.state_dir
        if s.exists() and any(s.iterdir()) and not self._p(MARKER).exists():
            raise HarnessError(f"{s} exists, is not empty and is not a harness state dir; refusing to wipe it")
        if s.exists():
            shutil.rmtree(s)
        s.mkdir(parents=True, mode=0o755)
        s.chmod(0o755)
        self._p(MARKER).write_text("imexctl integration harness state; `python -m tests.cluster down` stops it\n")
        slurm = _ids("slurm")
        for sub, mode, owner in (("etc", 0o755, None), ("munge", 0o755, _ids("munge")), ("ctld", 0o700, slurm),
                                 ("spool", 0o755, None), ("run", 0o755, None), ("log", 0o755, slurm),
                                 ("hooks", 0o755, None), ("control", 0o755, None), ("out", 0o1777, None),
                                 ("jobs", 0o1777, None), ("trays", 0o755, None)):
            d = self._p(sub)
            d.mkdir(mode=mode)
            d.chmod(mode)
            if owner:
                os.chown(d, *owner)
        for name, text in desired.items():
            self._p(name).write_text(text)
        (log := self._p("log", "slurmctld.log")).touch()
        os.chown(log, *slurm)
        recorder.write_dispatchers(self._p("hooks"), self._p("control", "hooks"), self._p("out"), self.hook_targets)
        self.set_hooks(self.hooks)
        for tray in self.trays:
            imexctl_config.prepare_tray(self, tray)
        for ctl in self.controllers:   # SlurmUser runs the controller hooks there
            imexctl_config.prepare_tray(self, ctl)
            for root, dirs, files in os.walk(imexctl_config.tray_dir(self, ctl)):
                for name in (root, *(os.path.join(root, f) for f in dirs + files)):
                    os.chown(name, *slurm)
        if self.backup_ctl:   # its pid and log files: see _ns_mounts
            self._p("run", self.backup_name).mkdir(mode=0o755)
            self._p("log", self.backup_name).mkdir(mode=0o755)
            os.chown(self._p("log", self.backup_name), *slurm)
            (log := self._p("log", self.backup_name, "slurmctld.log")).touch()
            os.chown(log, *slurm)
        if Path(f"/sys/class/net/{self.bridge}").exists():
            raise HarnessError(f"network link {self.bridge} already exists: another harness cluster with "
                               f"net_prefix {self.net_prefix!r} runs (bring it down, or pick another "
                               "net_prefix and subnet)")
        _size_neighbour_table(self.n)
        self._start_munged()
        self._own_link(self.bridge)
        self._ip("link", "add", self.bridge, "type", "bridge")
        _disable_ipv6(self.bridge)
        self._ip("addr", "add", f"{self.host_addr}/24", "dev", self.bridge)
        self._ip("link", "set", self.bridge, "up")
        self._start_node(self.ctl_name, [str(self.slurm_sbin / "slurmctld")])
        if self.backup_ctl:
            # A starting primary first asks the backup to give up control; a backup that
            # starts meanwhile answers late and both wait out 3 x MessageTimeout (30 s,
            # seen on 24.11). The backup starts once the primary runs as primary.
            log = self.controller_log(self.ctl_name)
            _poll(lambda: PRIMARY.search(log.read_text(errors="replace")), 60,
                  "slurmctld running as primary", interval=0.1, raise_=False)
            self._start_node(self.backup_name, [str(self.slurm_sbin / "slurmctld")])
        for tray in self.trays:
            self._start_node(tray, self._argv_slurmd(tray))

    def _argv_slurmd(self, tray: str) -> list[str]:
        return [str(self.slurm_sbin / "slurmd"), "-N", tray]

    def _start_munged(self) -> None:
        m = self._p("munge")
        key = m / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        os.chown(key, *_ids("munge"))
        subprocess.run(["runuser", "-u", "munge", "--", str(self.munged), f"--socket={m}/munge.socket",
                        f"--key-file={key}", f"--pid-file={m}/munged.pid", f"--log-file={m}/munged.log",
                        f"--seed-file={m}/munged.seed"], check=True, capture_output=True, env={"PATH": STD_PATH})
        _poll(lambda: (m / "munge.socket").exists(), 10, "munged socket")

    def _munged_pid(self) -> int | None:
        m = self._p("munge")
        pid = procs.read_pidfile(m / "munged.pid")
        if pid and procs.is_alive(pid) and f"--socket={m}/munge.socket" in procs.cmdline(pid):
            return pid
        return None

    def _stop_munged(self) -> None:
        pid = self._munged_pid()
        if pid:
            os.kill(pid, signal.SIGTERM)
            if not procs.wait_gone([pid], 3):
                os.kill(pid, signal.SIGKILL)
                procs.wait_gone([pid], 3)

    def _host_if(self, name: str) -> str:
        """The host side of a daemon's veth: v0 the controller, vb its backup, v<i> trays."""
        if name == self.backup_name:
            return f"{self.net_prefix}vb"
        return f"{self.net_prefix}v{0 if name == self.ctl_name else self.trays.index(name) + 1}"

    def _addr(self, name: str) -> str:
        if name == self.backup_name:
            return self.backup_addr
        return self.ctl_addr if name == self.ctl_name else self.tray_addrs()[name]

    def _start_node(self, name: str, argv: list[str]) -> None:
        """Start a daemon in fresh net+UTS+mount namespaces wired to the bridge."""
        host_if = self._host_if(name)
        if host_if in self._owned_links():
            self._del_link(host_if)
        self._own_link(host_if)
        env = {"PATH": STD_PATH}
        mounts, chroot = self._ns_mounts(name)
        if not self._sysconf_bound():
            env["SLURM_CONF"] = str(self.conf_path)
        console = open(self._p("log", f"{name}.console"), "ab")
        child = subprocess.Popen(
            ["unshare", "--net", "--uts", "--mount", "--propagation", "private", "--", "/bin/sh", "-c",
             _NODE_SCRIPT.format(mounts=mounts, chroot=chroot), "sh", name, *argv],
            stdin=subprocess.PIPE, stdout=console, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        console.close()
        host_ino = procs.netns_inode(os.getpid())
        _poll(lambda: procs.netns_inode(child.pid) not in (None, host_ino), 5, f"{name} namespace")
        self._p("run", f"{name}.netns").write_text(f"{procs.netns_inode(child.pid)}\n")
        script = (
            "echo 1 > /proc/sys/net/ipv6/conf/all/disable_ipv6; echo 1 > /proc/sys/net/ipv6/conf/default/disable_ipv6; "
            f"ip link add eth0 type veth peer name {host_if} netns {os.getpid()} && "
            f"ip addr add {self._addr(name)}/24 dev eth0 && ip link set eth0 up && ip link set lo up"
        )
        subprocess.run(["nsenter", "-t", str(child.pid), "-n", "--", "/bin/sh", "-c", script],
                       check=True, capture_output=True, env={"PATH": STD_PATH})
        _disable_ipv6(host_if)
        self._ip("link", "set", host_if, "master", self.bridge, "up")
        child.stdin.write(b"go\n")
        child.stdin.close()
        try:
            rc = child.wait(timeout=15)
        except subprocess.TimeoutExpired:
            rc = None
        if rc not in (0, None):
            raise HarnessError(f"{name} did not start (rc={rc}); see {self._p('log', name + '.console')}")

    def _sysconf_bound(self) -> bool:
        return self.root_file(self.sysconfdir).is_dir()

    def _ns_mounts(self, name: str | None) -> tuple[str, str]:
        """Shell mount commands for a daemon's (name) or a client's (None) private mount
        namespace, and the chroot prefix for its exec: the harness's slurm.conf and hosts over
        the compiled-in paths, a tray's simulated /proc/devices (so switch/nvidia_imex finds
        its major) and, with a Slurm root, the root's own mounts."""
        binds = []
        if self._sysconf_bound():
            binds.append((str(self._p("etc")), str(self.sysconfdir)))
        binds.append((str(self._p("etc", "hosts")), "/etc/hosts"))
        # The installed package's /etc/imexctl/imexctl.toml comes first in imexctl's search
        # path: the harness's etc/ is bound over /etc/imexctl, so its imexctl.toml is seen
        # there, also after a test replaced it by rename.
        if self.root_path is not None and self.root_file(PACKAGE_CONFDIR).is_dir():
            binds.append((str(self._p("etc")), PACKAGE_CONFDIR))
        if name is not None and name not in self.controllers:
            binds.append((str(imexctl_config.tray_dir(self, name) / "proc-devices"), "/proc/devices"))
        if name is not None and name == self.backup_name:
            # One slurm.conf names one SlurmctldPidFile and SlurmctldLogFile: the backup
            # sees its own run/ and log/ there. A shared pid file would make the backup's
            # slurmctld kill the primary at its start (it kills the pid it finds locked).
            binds += [(str(self._p("run", name)), str(self._p("run"))),
                      (str(self._p("log", name)), str(self._p("log")))]
        root = self.root_path
        if root is None:
            return " && ".join(f"mount --bind {shlex.quote(a)} {shlex.quote(b)}" for a, b in binds), ""
        return (rootfs.mount_script(root, self.root.venv, binds, daemon=name is not None),
                f"chroot {shlex.quote(str(root))} /usr/bin/env --chdir=/tmp ")

    def _recorded_netns(self) -> list[int]:
        run = self._p("run")
        return [int(f.read_text()) for f in run.glob("*.netns")] if run.is_dir() else []

    def _netns_of(self, name: str) -> int | None:
        try:
            return int(self._p("run", f"{name}.netns").read_text())
        except (OSError, ValueError):
            return None

    def _own_link(self, dev: str) -> None:
        """Record a link before creating it: down() deletes only links this cluster made."""
        if dev not in self._owned_links():
            with open(self._p("run", "links"), "a") as f:
                f.write(dev + "\n")

    def _del_link(self, dev: str) -> None:
        """Delete a leftover link; the kernel may be removing it already.

        A killed tray's namespace is torn down asynchronously: its veth can vanish between
        the check and ``ip link del`` (seen on CI as "Cannot find device"), which is success.
        """
        sysfs = Path(f"/sys/class/net/{dev}")
        if sysfs.exists():
            res = subprocess.run(["ip", "link", "del", dev], capture_output=True, text=True,
                                 env={"PATH": STD_PATH})
            if res.returncode and sysfs.exists():
                raise HarnessError(f"ip link del {dev}: {res.stderr.strip()}")
        _poll(lambda: not sysfs.exists(), 5, f"{dev} removed")

    def _owned_links(self) -> list[str]:
        try:
            return self._p("run", "links").read_text().split()
        except OSError:
            return []

    def _delete_links(self) -> None:
        for dev in self._owned_links():
            if Path(f"/sys/class/net/{dev}").exists():
                subprocess.run(["ip", "link", "del", dev], capture_output=True, env={"PATH": STD_PATH})
        self._p("run", "links").unlink(missing_ok=True)

    def _ip(self, *args: str) -> None:
        res = subprocess.run(["ip", *args], capture_output=True, text=True, env={"PATH": STD_PATH})
        if res.returncode:
            raise HarnessError(f"ip {' '.join(args)}: {res.stderr.strip()}")

    def wait_nodes_ready(self, timeout: float = 60.0) -> None:
        """Poll until every tray is registered and IDLE (no DOWN/NOT_RESPONDING flag)."""
        seen: dict[str, str] = {}

        def ready():
            seen.clear()
            seen.update({n["name"]: _state(n) for n in self._sinfo_nodes()})
            return all(seen.get(t) == "IDLE" for t in self.trays)
        _poll(ready, timeout, lambda: f"all trays idle (last {seen})", interval=0.2)

    def _wait_first_schedule(self) -> None:
        """slurmctld's first scheduling pass comes ~3 s after start; jobs before it wait."""
        log = self._p("log", "slurmctld.log")
        _poll(lambda: "SchedulerParameters" in log.read_text(errors="replace"), 6, "first scheduling pass",
              raise_=False)

    # ---- runtime control -------------------------------------------------------------------
    def wait_quiet(self, timeout: float = 60.0) -> None:
        """Poll until no job is queued, running or completing (epilogs done): lets a test
        switch hook modes without a late epilog running in the wrong mode."""
        def quiet():
            jobs = self.client(["squeue", "-h", "-o", "%i"], check=False)
            busy = [n for n in self._sinfo_nodes() if "COMPLETING" in _state(n)]
            return jobs.returncode == 0 and not jobs.stdout.strip() and not busy
        _poll(quiet, timeout, "no active jobs", interval=0.2)

    def cancel_until_quiet(self, job_id: int, timeout: float = 120.0) -> None:
        """scancel a job again every few seconds until the cluster is quiet: a cancel that
        lands while a failed launch is still being requeued is lost (22.05), and the job
        would otherwise sit requeued and held for ever."""
        deadline = time.monotonic() + timeout
        while True:
            self.client(["scancel", str(job_id)], check=False)
            try:
                self.wait_quiet(timeout=min(5.0, max(0.1, deadline - time.monotonic())))
                return
            except TimeoutError:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"job {job_id} still active {timeout}s after scancel: "
                                       f"{self.client(['squeue', '-h', '-j', str(job_id)], check=False).stdout.strip()}")

    def resume_all(self) -> None:
        """Resume every drained or down tray (cleanup between tests)."""
        for node in self._sinfo_nodes():
            if node.get("name") in self.trays and {"DRAIN", "DOWN"} & set(_state(node).split("+")):
                self.scontrol("update", f"nodename={node['name']}", "state=resume", check=False)

    def set_hooks(self, mode: str) -> None:
        """Switch what the hooks do, effective at the next hook run (no restart)."""
        if mode not in recorder.MODES:
            raise ValueError(f"hooks mode must be one of {recorder.MODES}")
        imexctl_config.atomic_write(self._p("control", "hooks"), mode + "\n")
        self.hooks = mode

    def inject_fault(self, tray: str, fault_spec: dict) -> None:
        """Write the simulator's fault control file for a tray (read at every run)."""
        imexctl_config.atomic_write(imexctl_config.tray_dir(self, tray) / "faults.json", json.dumps(fault_spec) + "\n")

    def clear_faults(self, tray: str) -> None:
        self.inject_fault(tray, {})

    def set_fabric(self, tray: str, gpus: list[dict] | int | None = None, **kw) -> None:
        """Set a tray's fabric identity: a list of GPU dicts, or a count plus overrides
        (cluster_uuid=, clique_id=, state=, ...) applied to every GPU."""
        if not isinstance(gpus, list):
            gpus = imexctl_config.default_gpus(tray, count=4 if gpus is None else gpus, **kw)
        imexctl_config.write_fabric(imexctl_config.tray_dir(self, tray) / "fabric.json", gpus)

    def set_tray_link(self, tray: str, up: bool) -> None:
        """Cut a tray off the network (its processes keep running) or connect it again: the
        host side of its veth, down or up."""
        self._ip("link", "set", self._host_if(tray), "up" if up else "down")

    def kill_tray(self, tray: str) -> None:
        """Power-cut a tray: SIGKILL every process in its namespaces (jobs, daemons, IMEX)."""
        ino = self._netns_of(tray)
        if ino is None:
            raise HarnessError(f"{tray} has no recorded namespace")
        if not procs.kill_netns(ino, signal.SIGKILL, timeout=5):
            raise HarnessError(f"processes in {tray} survived SIGKILL")

    def restart_tray(self, tray: str, wait: bool = True, timeout: float = 60.0) -> None:
        """Start a tray again (after kill_tray, or kill it first); wait until Slurm sees it respond."""
        if self.tray_alive(tray) or procs.pids_in_netns(self._netns_of(tray) or -1):
            self.kill_tray(tray)
        self._start_node(tray, self._argv_slurmd(tray))
        if wait:
            self.wait_node_state(tray, lambda st: "DOWN" not in st and "NOT_RESPONDING" not in st, timeout)

    def _pidfile(self, name: str) -> Path:
        if name == self.backup_name:
            return self._p("run", name, "slurmctld.pid")
        return self._p("run", "slurmctld.pid" if name == self.ctl_name else f"slurmd-{name}.pid")

    def controller_pid(self, name: str | None = None) -> int | None:
        """The slurmctld of a controller host (the primary by default), None when dead."""
        name = name or self.ctl_name
        pid = procs.read_pidfile(self._pidfile(name))
        if pid and procs.is_alive(pid) and procs.netns_inode(pid) == self._netns_of(name):
            return pid
        return None

    def controller_log(self, name: str | None = None) -> Path:
        name = name or self.ctl_name
        return self._p("log", *([name] if name == self.backup_name else []), "slurmctld.log")

    def kill_controller(self, name: str | None = None) -> None:
        """SIGKILL a controller's slurmctld (the primary by default); its host stays up (a
        process keeps its namespace and address), so clients are refused at once and go
        on to the other controller, as when the daemon dies on a running host."""
        name = name or self.ctl_name
        pid = self.controller_pid(name)
        if pid is None:
            raise HarnessError(f"no slurmctld runs on {name}")
        holder = subprocess.Popen(["nsenter", "-t", str(pid), "-n", "-u", "--", "sleep", "infinity"],
                                  stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL, env={"PATH": STD_PATH}, start_new_session=True)
        _HOLDERS.append(holder)   # down() ends it with everything else in the namespace
        _poll(lambda: procs.netns_inode(holder.pid) == self._netns_of(name), 5, f"{name} kept up")
        os.kill(pid, signal.SIGKILL)
        if not procs.wait_gone([pid], 5):
            raise HarnessError(f"slurmctld {pid} on {name} survived SIGKILL")

    def wait_in_control(self, name: str, timeout: float = 60.0) -> None:
        """Poll until controller ``name`` is the one in control and answers queries: the
        backup once its log says it took over (it answers `scontrol ping` in standby too)."""
        log = self.controller_log(name)

        def ready():
            if name != self.ctl_name and not TAKEOVER.search(log.read_text(errors="replace")):
                return False
            return self.client(["squeue", "-h"], check=False).returncode == 0
        _poll(ready, timeout, f"slurmctld on {name} in control", interval=0.5)

    def wait_controllers_up(self, timeout: float = 30.0) -> None:
        """Poll until `scontrol ping` says every controller is UP (a backup in standby)."""
        out = ""

        def up():
            nonlocal out
            out = self.client(["scontrol", "ping"], check=False).stdout
            return all(re.search(rf" at {re.escape(n)} is UP", out) for n in self.controllers)
        _poll(up, timeout, lambda: f"every controller UP (last {out!r})", interval=0.5)

    def tray_pid(self, name: str) -> int:
        """A live process inside the tray (its slurmd, else anything in its namespace)."""
        pidfile = self._pidfile(name)
        pid, ino = procs.read_pidfile(pidfile), self._netns_of(name)
        if pid and procs.is_alive(pid) and procs.netns_inode(pid) == ino:
            return pid
        others = procs.pids_in_netns(ino) if ino else []
        if not others:
            raise HarnessError(f"{name} is not running")
        return others[0]

    def exec_on(self, tray: str, argv: list[str], *, env: dict | None = None, timeout: float = 30,
                check: bool = False, text: bool = True) -> subprocess.CompletedProcess:
        """Run argv "on" a tray (or the controller): its network, mounts and hostname."""
        return subprocess.run(["nsenter", "-t", str(self.tray_pid(tray)), "-n", "-m", "-u", "-r", "-w", "--", *argv],
                              env={"PATH": STD_PATH} if env is None else env, capture_output=True,
                              text=text, timeout=timeout, check=check)

    def rebind_package_config(self) -> None:
        """Mount the harness's etc/ over the root's /etc/imexctl again in every running
        daemon's namespace: dpkg's purge removes that directory (outside them), which
        detaches the bind the daemon started with (the kernel drops a mount whose mount
        point is removed), and the hooks would read the package's default."""
        root = self.root_path
        if root is None or not self.root_file(PACKAGE_CONFDIR).is_dir():
            return
        target = root / PACKAGE_CONFDIR.lstrip("/")
        for node in (*self.controllers, *self.trays):
            subprocess.run(["nsenter", "-t", str(self.tray_pid(node)), "-m", "--", "mount", "--bind",
                            str(self._p("etc")), str(target)],
                           check=True, capture_output=True, env={"PATH": STD_PATH})

    @property
    def hooks_dir(self) -> Path:
        """The hook wrappers slurm.conf's hooks run (hooks_dir())."""
        return hooks_dir(self.slurm)

    @property
    def imexctl_bin(self) -> Path:
        """The imexctl an admin runs on a tray: the checkout's on the host Slurm, the installed
        package's in a Slurm root (its python has imexctl and, on trixie, pyslurm)."""
        return REPO / ".venv" / "bin" / "imexctl" if self.slurm == "host" else INSTALLED_VENV / "bin" / "imexctl"

    @property
    def sim_ctl(self) -> Path:
        return REPO / ".venv" / "bin" / "imexctl-sim-imex-ctl"

    def imexctl(self, tray: str, *args: str, timeout: float = 60) -> str:
        """Run `imexctl ARGS` on a tray as an admin would (root, its hostname): stdout+stderr."""
        res = self.exec_on(tray, [str(self.imexctl_bin), *args], timeout=timeout,
                           env={"PATH": STD_PATH, "SLURMD_NODENAME": tray})
        return (res.stdout + res.stderr).strip()

    def imexctl_status(self, tray: str) -> dict:
        """`imexctl status --json` on a tray, parsed."""
        res = self.exec_on(tray, [str(self.imexctl_bin), "status", "--json"],
                           env={"PATH": STD_PATH, "SLURMD_NODENAME": tray})
        if res.returncode:
            raise HarnessError(f"imexctl status on {tray} -> rc {res.returncode}: {res.stderr.strip()}")
        return json.loads(res.stdout)

    def run_healthcheck(self, tray: str) -> subprocess.CompletedProcess:
        """Run HealthCheckProgram on a tray the way slurmd does: root, only SLURMD_NODENAME."""
        return self.exec_on(tray, [str(self._p("hooks", "healthcheck"))], env={"SLURMD_NODENAME": tray})

    # ---- Slurm clients -------------------------------------------------------------------------
    def client(self, argv: list[str], user: str | None = None, timeout: float = 30,
               check: bool = True) -> subprocess.CompletedProcess:
        """Run a Slurm client on the host, optionally as another user (runuser, no shell)."""
        argv = [str(self.slurm_bin / argv[0]) if "/" not in argv[0] else argv[0], *argv[1:]]
        if user and user != "root":
            argv = ["runuser", "-u", user, "--", *argv]
        if self.root_path is not None:
            argv = self.in_root(argv)
        res = subprocess.run(argv, env=self.env, capture_output=True, text=True, timeout=timeout, cwd="/tmp")
        if check and res.returncode:
            raise HarnessError(f"{' '.join(argv)} -> rc {res.returncode}: {res.stderr.strip()}")
        return res

    def in_root(self, argv: list[str], bare: bool = False) -> list[str]:
        """argv wrapped to run on the "login node": the host's network, the Slurm root's files
        (a private mount namespace per call, so nothing is left mounted). bare: without the
        harness's config (before the state dir exists)."""
        mounts, chroot = self._ns_mounts(None)
        if bare:
            mounts = rootfs.mount_script(self.root_path, None, daemon=False)
        return ["unshare", "--mount", "--propagation", "private", "--", "/bin/sh", "-c",
                f'{mounts} && exec {chroot}"$@"', "sh", *argv]

    @property
    def slurm_version(self) -> tuple[int, int]:
        """(major, minor) of the Slurm this cluster runs, from `scontrol --version`."""
        if getattr(self, "_version", None) is None:
            out = self.client(["scontrol", "--version"]).stdout
            m = re.search(r"(\d+)\.(\d+)", out)
            self._version = (int(m.group(1)), int(m.group(2))) if m else (0, 0)
        return self._version

    def cancel_all(self, full: bool = False) -> None:
        """Cancel every test job (by uid: 26.05 refuses `--user nobody`)."""
        self.client(["scancel", *(["--full"] if full else []), "--user", str(NOBODY_UID)], check=False)

    def scontrol(self, *args: str, check: bool = True) -> str:
        return self.client(["scontrol", *args], check=check).stdout

    def submit(self, args: list[str], user: str = "nobody") -> int:
        """sbatch as a non-root user; output goes to $STATE/jobs/<id>.out unless -o is given.
        Jobs are node-exclusive unless the args say otherwise (see _exclusive)."""
        extra = _exclusive(args)
        if not any(a in ("-o", "--output") or a.startswith("--output=") for a in args):
            extra.append(f"--output={self._p('jobs')}/%j.out")
        if not any(a in ("-D",) or a.startswith("--chdir") for a in args):
            extra.append(f"--chdir={self._p('jobs')}")
        out = self.client(["sbatch", "--parsable", *extra, *args], user=user).stdout
        return int(out.strip().split(";")[0])

    def srun(self, args: list[str], user: str = "nobody", timeout: float = 60,
             check: bool = False) -> subprocess.CompletedProcess:
        return self.client(["srun", *_exclusive(args), *args], user=user, timeout=timeout,
                           check=check)

    def job_output(self, job_id: int) -> str:
        return self._p("jobs", f"{job_id}.out").read_text()

    def job_info(self, job_id: int) -> dict:
        """The job as slurmctld knows it (`scontrol show job`), keys as Slurm spells them."""
        out = self.scontrol("show", "job", str(job_id))
        return _parse_scontrol(out)

    def wait_job_state(self, job_id: int, states: Iterable[str] | str, timeout: float = 60) -> dict:
        """Poll until JobState is one of states; returns the job info."""
        wanted = {states} if isinstance(states, str) else set(states)
        last: dict = {}

        def check():
            nonlocal last
            last = self.job_info(job_id)
            return last.get("JobState") in wanted
        _poll(check, timeout, lambda: f"job {job_id} in {sorted(wanted)} (last {last.get('JobState')} "
              f"reason {last.get('Reason')})", interval=0.2)
        return last

    def _sinfo_nodes(self) -> list[dict]:
        """One record per node. Since 23.02 `sinfo --json` groups nodes, and per-node records
        come from `scontrol --json show nodes` (which 22.05 lacks)."""
        argv = ["scontrol", "--json", "show", "nodes"] if self.slurm_version >= (23, 2) else ["sinfo", "--json"]
        res = self.client(argv, check=False)
        if res.returncode:
            return []
        try:
            return json.loads(res.stdout).get("nodes", [])
        except ValueError:
            return []

    def node_info(self, name: str) -> dict:
        """One node's record, plus "state": Slurm's state string like IDLE+DRAIN, and
        "base_state"; "reason" and "extra" are strings on every version."""
        for node in self._sinfo_nodes():
            if node.get("name") == name:
                return {**node, "state": _state(node), "base_state": _state(node).split("+")[0],
                        "reason": node.get("reason") or "", "extra": node.get("extra") or ""}
        raise HarnessError(f"node {name} unknown to slurmctld")

    def wait_node_state(self, name: str, states, timeout: float = 60) -> dict:
        """Poll until the node's state matches: a state string (exact, like "IDLE" or
        "IDLE+DRAIN"), a list of them, or a predicate on the set of state tokens."""
        if callable(states):
            match = states
        else:
            wanted = [{states} if isinstance(states, str) else set(states)][0]
            match = lambda toks: "+".join(sorted(toks)) in {"+".join(sorted(w.split("+"))) for w in wanted}  # noqa: E731
        last: dict = {}

        def check():
            nonlocal last
            try:
                last = self.node_info(name)
            except HarnessError:
                return False
            return match(set(last["state"].split("+")))
        _poll(check, timeout, lambda: f"node {name} state (last {last.get('state')} {last.get('reason', '')!r})",
              interval=0.2)
        return last

    def hook_records(self, hook: str | None = None, job_id: int | None = None, node: str | None = None) -> list[dict]:
        """Recorded hook environments, filtered; each dict also has __file."""
        out = []
        for f in sorted(self._p("out").glob("*.env")):
            h, job, nd = _split_record_name(f.name)
            if (hook in (None, h)) and (job_id is None or job == str(job_id)) and (node in (None, nd)):
                out.append({**recorder.read_record(f), "__file": str(f), "__hook": h, "__node": nd})
        return out

    def wait_hook_records(self, hook: str, job_id: int | None, count: int, timeout: float = 30) -> list[dict]:
        _poll(lambda: len(self.hook_records(hook, job_id)) >= count, timeout, f"{count} {hook} records")
        return self.hook_records(hook, job_id)


def install_packages(packages: Iterable[str]) -> None:
    """apt-get install, refreshing the package lists first when they are missing or stale."""
    env = {"PATH": STD_PATH, "DEBIAN_FRONTEND": "noninteractive"}
    argv = ["apt-get", "install", "-y", "-q", "--no-install-recommends", *packages]
    res = subprocess.run(argv, capture_output=True, text=True, env=env)
    if res.returncode:
        subprocess.run(["apt-get", "update", "-q"], capture_output=True, env=env)
        res = subprocess.run(argv, capture_output=True, text=True, env=env)
    if res.returncode:
        raise HarnessError(f"apt-get install {' '.join(packages)} failed: {res.stderr.strip()[-800:]}")


def _split_record_name(name: str) -> tuple[str, str, str]:
    stem = name[: -len(".env")]
    for hook in sorted(recorder.HOOKS, key=len, reverse=True):
        if stem.startswith(hook + "-"):
            job, _, node = stem[len(hook) + 1:].partition("-")
            return hook, job, node
    return "", "", ""


def _state(node: dict) -> str:
    """Slurm's combined state (IDLE, IDLE+DRAIN, DOWN+NOT_RESPONDING): 22.05's sinfo gives a
    string plus state_flags, newer scontrol --json a list (base state first)."""
    state = node.get("state", "")
    toks = [t.upper() for t in state] if isinstance(state, list) else [state.upper()]
    toks += [f.upper() for f in node.get("state_flags", [])]
    return "+".join(t for t in toks if t)


_SCONTROL_KEY = re.compile(r"[A-Z][A-Za-z0-9_:/]*")


def _parse_scontrol(text: str) -> dict:
    """Parse `scontrol show job` (multi-line form): keys are split on known `Key=` starts of
    each line's space-separated words; values with spaces (Reason, Comment) keep them."""
    info: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        if line.split("=", 1)[0] in ("Command", "WorkDir", "StdErr", "StdIn", "StdOut", "Comment",
                                     "AdminComment", "Reason", "SystemComment", "Power"):
            key, _, value = line.partition("=")
            info[key] = value
            continue
        key = None
        for word in line.split(" "):
            k, eq, v = word.partition("=")
            if eq and _SCONTROL_KEY.fullmatch(k):
                key = k
                info[key] = v
            elif key:
                info[key] += " " + word
    return info


def _ids(user: str) -> tuple[int, int]:
    import pwd
    pw = pwd.getpwnam(user)
    return pw.pw_uid, pw.pw_gid


NEIGH_SYSCTL = Path("/proc/sys/net/ipv4/neigh/default")
KERNEL_NEIGH_DEFAULTS = {"gc_thresh1": 128, "gc_thresh2": 512, "gc_thresh3": 1024}


def neighbour_limits(trays: int, current: dict[str, int]) -> dict[str, int]:
    """The IPv4 neighbour (ARP) table limits a cluster of ``trays`` needs, where the
    ``current`` ones are too small; {} when they suffice.

    Linux keeps one neighbour table for all network namespaces, and its hard limit
    (gc_thresh3, 1024 by default) counts every namespace's entries. Each of the cluster's
    namespaces (trays and controller) resolves every other: about (trays + 2)^2 entries,
    5,476 at 72 trays. Past the limit the kernel drops packets to unresolved neighbours
    ("neighbor table overflow!"): at 72 trays whole pairs of trays could not reach each
    other's IMEX ports and no domain came UP. Limits are only ever raised."""
    need = (trays + 2) ** 2
    if 2 * need <= current.get("gc_thresh3", 0):
        return {}
    wanted = {"gc_thresh1": need, "gc_thresh2": 2 * need, "gc_thresh3": 4 * need}
    return {k: v for k, v in wanted.items() if v > current.get(k, 0)}


def _size_neighbour_table(trays: int) -> None:
    current = dict(KERNEL_NEIGH_DEFAULTS)
    for key in current:
        try:
            current[key] = int((NEIGH_SYSCTL / key).read_text())
        except (OSError, ValueError):
            pass    # unreadable: assume the kernel's default; small clusters need no more
    raised = neighbour_limits(trays, current)
    for key in sorted(raised, reverse=True):   # gc_thresh3 first, then 2, then 1
        path = NEIGH_SYSCTL / key
        try:
            path.write_text(f"{raised[key]}\n")
        except OSError as exc:
            raise HarnessError(f"{trays} trays need {path} >= {raised[key]} (it is "
                               f"{current[key]}): {exc.strerror}") from None
        print(f"harness: raised {path} from {current[key]} to {raised[key]} for {trays} trays",
              file=sys.stderr)


def _disable_ipv6(dev: str) -> None:
    """No IPv6 on harness links: no DAD/RS/MLD chatter leaves the namespaces."""
    try:
        Path(f"/proc/sys/net/ipv6/conf/{dev}/disable_ipv6").write_text("1\n")
    except OSError:
        pass


def _poll(cond, timeout: float, what, interval: float = 0.02, raise_: bool = True) -> bool:
    """Poll cond until true; never sample once. `what` may be a callable for a late message."""
    deadline = time.monotonic() + timeout
    while True:
        if cond():
            return True
        if time.monotonic() > deadline:
            if raise_:
                raise TimeoutError(f"timed out after {timeout}s waiting for {what() if callable(what) else what}")
            return False
        time.sleep(interval)
