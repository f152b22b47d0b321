"""config.cfg and nodes_config.cfg as the real daemon reads them, plus the sim's env.

``KEY=VALUE`` lines, ``#`` comments; read once at start. Node id = 0-based index of the
entry in the node config (blank lines and comments do not count).
"""

from __future__ import annotations

import hashlib
import ipaddress
import os
import socket
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from imexctl.sim import DEFAULT_VERSION

DEFAULT_CONFIG = "/etc/nvidia-imex/config.cfg"
DEFAULT_NODES = "/etc/nvidia-imex/nodes_config.cfg"

# Keys the simulator acts on; every other documented key is accepted and ignored.
KNOWN_KEYS = {
    "LOG_LEVEL", "LOG_FILE_NAME", "STATS_FILE_NAME", "LOG_APPEND_TO_LOG", "LOG_FILE_MAX_SIZE",
    "LOG_MAX_ROTATE_COUNT", "LOG_USE_SYSLOG", "DAEMONIZE", "BIND_INTERFACE_IP", "SERVER_PORT",
    "IMEX_NODE_CONFIG_FILE", "NETWORK_INTERFACE", "IMEX_WAIT_FOR_QUORUM",
    "IMEX_ENABLE_AUTH_ENCRYPTION", "IMEX_AUTH_ENCRYPTION_MODE", "IMEX_AUTH_SOURCE",
    "IMEX_SERVER_KEY", "IMEX_SERVER_CERT", "IMEX_SERVER_CERT_AUTH", "IMEX_CLIENT_KEY",
    "IMEX_CLIENT_CERT", "IMEX_CLIENT_CERT_AUTH", "IMEX_SECURITY_TARGET_OVERRIDE",
    "IMEX_GSS_SERVICE_NAME", "IMEX_GSS_TIMEOUT_SEC", "IMEX_GSS_RETRY_INTERVAL_SEC",
    "IMEX_GSS_SEC_CONTEXT_LIFETIME_SEC", "IMEX_GSS_SHUTDOWN_ON_FAILURE", "IMEX_CMD_ENABLED",
    "IMEX_CMD_BIND_INTERFACE_IP", "IMEX_CMD_PORT", "IMEX_CMD_UNIX_DOMAIN_PATH",
    "IMEX_NODE_DISCONNECTED_GRACE_TIME",
}


class SimConfigError(Exception):
    pass


def _int(raw: dict[str, str], key: str, default: int) -> int:
    value = raw.get(key, "").strip()
    if value == "":
        return default
    try:
        return int(value)
    except ValueError:
        raise SimConfigError(f"Invalid value '{value}' for {key}") from None


@dataclass
class DaemonConfig:
    path: Path
    raw: dict[str, str] = field(default_factory=dict)
    server_port: int = 50000
    node_config_file: Path = Path(DEFAULT_NODES)
    bind_ip: str = ""
    cmd_enabled: bool = False
    cmd_port: int = 50005
    cmd_bind_ip: str = ""
    wait_for_quorum: str = "RECOVERY"
    grace_time: int = -1
    daemonize: bool = True
    log_file: str = ""
    log_level: int = 4
    log_append: bool = True

    @classmethod
    def parse(cls, path: Path, text: str) -> "DaemonConfig":
        raw: dict[str, str] = {}
        for line in text.splitlines():
            line = line.strip()
            if not line or line.startswith("#") or "=" not in line:
                continue
            key, _, value = line.partition("=")
            raw[key.strip()] = value.strip()
        cfg = cls(path=path, raw=raw)
        cfg.server_port = _int(raw, "SERVER_PORT", 50000)
        cfg.node_config_file = Path(raw.get("IMEX_NODE_CONFIG_FILE") or DEFAULT_NODES)
        cfg.bind_ip = raw.get("BIND_INTERFACE_IP", "")
        cfg.cmd_enabled = _int(raw, "IMEX_CMD_ENABLED", 0) == 1
        cfg.cmd_port = _int(raw, "IMEX_CMD_PORT", 50005)
        cfg.cmd_bind_ip = raw.get("IMEX_CMD_BIND_INTERFACE_IP", "")
        cfg.wait_for_quorum = (raw.get("IMEX_WAIT_FOR_QUORUM") or "RECOVERY").upper()
        cfg.grace_time = _int(raw, "IMEX_NODE_DISCONNECTED_GRACE_TIME", -1)
        cfg.daemonize = _int(raw, "DAEMONIZE", 1) == 1
        cfg.log_file = raw.get("LOG_FILE_NAME", "")
        cfg.log_level = _int(raw, "LOG_LEVEL", 4)
        cfg.log_append = _int(raw, "LOG_APPEND_TO_LOG", 1) == 1
        if not 0 <= cfg.server_port <= 65535:
            raise SimConfigError(f"Invalid value '{cfg.server_port}' for SERVER_PORT")
        if cfg.wait_for_quorum not in ("RECOVERY", "NONE", "FULL"):
            raise SimConfigError(
                f"Invalid value '{cfg.wait_for_quorum}' for IMEX_WAIT_FOR_QUORUM")
        return cfg

    @classmethod
    def load(cls, path: Path) -> "DaemonConfig":
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError as exc:
            raise SimConfigError(
                f"Failed to open config file {path}: {exc.strerror}") from None
        return cls.parse(path, text)


@dataclass(frozen=True)
class NodeList:
    path: Path
    entries: tuple[str, ...]

    @property
    def digest(self) -> str:
        """Key of the node map: equal node lists (same order) give equal keys."""
        return hashlib.sha256("\n".join(self.entries).encode()).hexdigest()[:16]

    def address(self, idx: int) -> str:
        return resolve(self.entries[idx])

    def index_of(self, address: str) -> int | None:
        for idx, entry in enumerate(self.entries):
            if entry == address or resolve(entry) == address:
                return idx
        return None


def read_node_list(path: Path) -> NodeList:
    """Raises OSError when the file cannot be read."""
    text = path.read_text(encoding="utf-8", errors="replace")
    entries = []
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            entries.append(line)
    return NodeList(path, tuple(entries))


def is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def resolve(entry: str) -> str:
    """An IP entry as is; a host name resolved (unresolvable names stay as they are)."""
    if is_ip(entry):
        return entry
    try:
        return socket.gethostbyname(entry)
    except OSError:
        return entry


def local_addresses() -> set[str]:
    """This node's addresses: IMEXCTL_SIM_LOCAL_IP (comma list) or every interface's."""
    forced = os.environ.get("IMEXCTL_SIM_LOCAL_IP", "").strip()
    if forced:
        return {a.strip() for a in forced.split(",") if a.strip()}
    import psutil  # lazily: the forced path (tests, loopback trays) never needs it

    out: set[str] = set()
    for addrs in psutil.net_if_addrs().values():
        for addr in addrs:
            if addr.family in (socket.AF_INET, socket.AF_INET6):
                out.add(addr.address.split("%", 1)[0])
    return out


def identify(nodes: NodeList, bind_ip: str = "") -> tuple[int, str] | None:
    """(node id, address) of the first node entry that is a local address (or bind_ip)."""
    candidates = {bind_ip} if bind_ip else local_addresses()
    for idx, entry in enumerate(nodes.entries):
        addr = resolve(entry)
        if addr in candidates or entry in candidates:
            return idx, addr
    return None


def time_scale() -> float:
    try:
        value = float(os.environ.get("IMEXCTL_SIM_TIME_SCALE", "1.0"))
    except ValueError:
        return 1.0
    return value if value > 0 else 1.0


def run_dir() -> Path:
    env = os.environ.get("IMEXCTL_SIM_RUN_DIR", "").strip()
    if env:
        return Path(env)
    return Path(tempfile.gettempdir()) / f"imexctl-sim-{os.getuid()}"


def version() -> str:
    return os.environ.get("IMEXCTL_SIM_VERSION", "").strip() or DEFAULT_VERSION


def cmd_endpoint(cfg: DaemonConfig, node_addr: str | None) -> str:
    """Where the command service listens / where the ctl finds it.

    IMEX_CMD_BIND_INTERFACE_IP when set (a wildcard is reached via loopback); else the
    node's own address. The real daemon binds all interfaces when the key is empty; the
    simulator uses the node address so many trays can share one network namespace on
    127.x.y.z addresses with the same per-job IMEX_CMD_PORT.
    """
    bind = cfg.cmd_bind_ip.strip()
    if bind in ("0.0.0.0", "::"):
        return "127.0.0.1" if bind == "0.0.0.0" else "::1"
    if bind:
        return bind
    return node_addr or "127.0.0.1"
