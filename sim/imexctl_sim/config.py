"""config.cfg and nodes_config.cfg as the real daemon reads them, plus the sim's env.

``KEY=VALUE`` lines, ``#`` comments; read once at start. Node id = 0-based index of the
entry in the node config (blank lines and comments do not count).

Imported by the simulated ``nvidia-imex-ctl`` on every call, so stdlib-light on purpose:
no pathlib, dataclasses, ipaddress, psutil (the real ctl is a small binary; the harness
should measure imexctl, not the simulator's start-up).
"""

from __future__ import annotations

import os
import socket

from imexctl_sim import DEFAULT_VERSION

DEFAULT_CONFIG = "/etc/nvidia-imex/config.cfg"
DEFAULT_NODES = "/etc/nvidia-imex/nodes_config.cfg"
HOSTNAMES_MIN_VERSION = (570, 158, 1)
"""Host names in nodes_config are supported from driver 570.158.01 (release notes)."""
NO_I_FLAG_VERSION = (580,)
"""``nvidia-imex-ctl -i IP PORT`` was removed in the 580 branch."""

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


class DaemonConfig:
    """The keys the simulator acts on (paths are strings)."""

    def __init__(self, path: str, raw: dict[str, str]):
        self.path = str(path)
        self.raw = raw
        self.server_port = _int(raw, "SERVER_PORT", 50000)
        self.node_config_file = raw.get("IMEX_NODE_CONFIG_FILE") or DEFAULT_NODES
        self.bind_ip = raw.get("BIND_INTERFACE_IP", "")
        self.cmd_enabled = _int(raw, "IMEX_CMD_ENABLED", 0) == 1
        self.cmd_port = _int(raw, "IMEX_CMD_PORT", 50005)
        self.cmd_bind_ip = raw.get("IMEX_CMD_BIND_INTERFACE_IP", "").strip()
        self.wait_for_quorum = (raw.get("IMEX_WAIT_FOR_QUORUM") or "RECOVERY").upper()
        self.grace_time = _int(raw, "IMEX_NODE_DISCONNECTED_GRACE_TIME", -1)
        self.daemonize = _int(raw, "DAEMONIZE", 1) == 1
        self.log_file = raw.get("LOG_FILE_NAME", "")
        self.log_level = _int(raw, "LOG_LEVEL", 4)
        self.log_append = _int(raw, "LOG_APPEND_TO_LOG", 1) == 1
        if not 0 <= self.server_port <= 65535:
            raise SimConfigError(f"Invalid value '{self.server_port}' for SERVER_PORT")
        if self.wait_for_quorum not in ("RECOVERY", "NONE", "FULL"):
            raise SimConfigError(
                f"Invalid value '{self.wait_for_quorum}' for IMEX_WAIT_FOR_QUORUM")

    @classmethod
    def parse(cls, path, text: str) -> "DaemonConfig":
        raw: dict[str, str] = {}
        for line in text.splitlines():
            line = line.strip()
            if not line or line.startswith("#") or "=" not in line:
                continue
            key, _, value = line.partition("=")
            raw[key.strip()] = value.strip()
        return cls(str(path), raw)

    @classmethod
    def load(cls, path) -> "DaemonConfig":
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                text = f.read()
        except OSError as exc:
            raise SimConfigError(
                f"Failed to open config file {path}: {exc.strerror}") from None
        return cls.parse(path, text)


class NodeList:
    """The node config's entries in order; ``address(i)`` resolves host names."""

    def __init__(self, path, entries):
        self.path = str(path)
        self.entries = tuple(entries)

    @property
    def digest(self) -> str:
        """Key of the node map: equal node lists (same order) give equal keys."""
        import hashlib

        return hashlib.sha256("\n".join(self.entries).encode()).hexdigest()[:16]

    def address(self, idx: int) -> str:
        return resolve(self.entries[idx])

    def addresses(self) -> list[str]:
        return [resolve(e) for e in self.entries]

    def index_of(self, address: str) -> int | None:
        for idx, entry in enumerate(self.entries):
            if entry == address or resolve(entry) == address:
                return idx
        return None

    def host_names(self) -> list[str]:
        return [e for e in self.entries if not is_ip(e)]


def read_node_list(path) -> NodeList:
    """Raises OSError when the file cannot be read."""
    with open(path, encoding="utf-8", errors="replace") as f:
        text = f.read()
    entries = []
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            entries.append(line)
    return NodeList(path, entries)


def is_ip(text: str) -> bool:
    for fam in (socket.AF_INET, socket.AF_INET6):
        try:
            socket.inet_pton(fam, text)
            return True
        except OSError:
            continue
    return False


def resolve(entry: str) -> str:
    """An IP entry as is; a host name resolved (unresolvable names stay as they are)."""
    if is_ip(entry):
        return entry
    try:
        return socket.gethostbyname(entry)
    except OSError:
        return entry


def _proc_addresses() -> set[str]:
    """Interface addresses from /proc (IPv4 local routes, IPv6 if_inet6): no psutil."""
    out: set[str] = set()
    try:
        with open("/proc/net/fib_trie", encoding="ascii", errors="replace") as f:
            prev = ""
            for line in f:
                if "/32 host LOCAL" in line and prev.strip().startswith("|--"):
                    out.add(prev.strip()[3:].strip())
                prev = line
    except OSError:
        pass
    try:
        with open("/proc/net/if_inet6", encoding="ascii", errors="replace") as f:
            for line in f:
                raw = line.split()[0]
                if len(raw) == 32:
                    out.add(socket.inet_ntop(socket.AF_INET6, bytes.fromhex(raw)))
    except (OSError, ValueError):
        pass
    return out


def local_addresses() -> set[str]:
    """This node's addresses: IMEXCTL_SIM_LOCAL_IP (comma list) or every interface's."""
    forced = os.environ.get("IMEXCTL_SIM_LOCAL_IP", "").strip()
    if forced:
        return {a.strip() for a in forced.split(",") if a.strip()}
    return _proc_addresses()


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


def run_dir() -> str:
    """The simulated host's /var/run/nvidia-imex (one persist.dat per host)."""
    env = os.environ.get("IMEXCTL_SIM_RUN_DIR", "").strip()
    if env:
        return os.path.abspath(env)
    import tempfile

    return os.path.join(tempfile.gettempdir(), f"imexctl-sim-{os.getuid()}")


def version() -> str:
    return os.environ.get("IMEXCTL_SIM_VERSION", "").strip() or DEFAULT_VERSION


def version_tuple(text: str) -> tuple[int, ...]:
    """``570.158.01`` -> (570, 158, 1); a non-numeric version (NO_GPU) -> ()."""
    out = []
    for part in text.split("."):
        if not part.isdigit():
            break
        out.append(int(part))
    return tuple(out)


def at_least(ver: str, minimum: tuple[int, ...]) -> bool:
    got = version_tuple(ver)
    return bool(got) and got >= minimum
