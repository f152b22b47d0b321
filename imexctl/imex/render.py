"""Per-job IMEX configuration: nodes_config.cfg, config.cfg, ports and digest.

Every tray of a job must render byte-identical nodes_config.cfg (IMEX numbers nodes by
line) and the same ports without talking to each other, so everything here is a pure
function of what Slurm says about the job (plus name resolution, which every tray of a
domain must answer alike). config.cfg differs between trays in one line only:
``IMEX_CMD_BIND_INTERFACE_IP``, this tray's own address, because the real
``nvidia-imex-ctl`` connects to ``[::]`` when it is empty and fails on IPv6-less trays.
"""

from __future__ import annotations

import ipaddress
import re
import time
from pathlib import Path

from imexctl.base.digest import sha256
from imexctl.config import MIN_HOSTNAME_DRIVER, driver_version_key, hostnames_supported
from imexctl.errors import ConfigError
from imexctl.base.dataclass import dataclass

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Callable, Sequence

KEY_LINE = r"^\s*([A-Z][A-Z0-9_]*)\s*=(.*)$"
# Keys imexctl owns: a site template may not set them, the job decides them.
OWNED_KEYS = ("SERVER_PORT", "IMEX_NODE_CONFIG_FILE", "IMEX_CMD_ENABLED", "IMEX_CMD_PORT",
              "IMEX_CMD_BIND_INTERFACE_IP", "DAEMONIZE", "LOG_FILE_NAME",
              "IMEX_WAIT_FOR_QUORUM", "BIND_INTERFACE_IP", "IMEX_NODE_DISCONNECTED_GRACE_TIME",
              "STATS_FILE_NAME")
# Owned keys a site sets in imexctl.toml instead (named in the template's error).
OWNED_BY_SETTING = {"IMEX_WAIT_FOR_QUORUM": "imex.wait_for_quorum",
                    "IMEX_NODE_DISCONNECTED_GRACE_TIME": "imex.node_disconnected_grace_time"}
# The daemon's authentication keys (docs/security.md): imexctl renders them when
# ``imex.auth`` is on, and a site template may then set none of them.
AUTH_KEYS = ("IMEX_ENABLE_AUTH_ENCRYPTION", "IMEX_AUTH_ENCRYPTION_MODE", "IMEX_AUTH_SOURCE",
             "IMEX_SERVER_KEY", "IMEX_SERVER_CERT", "IMEX_SERVER_CERT_AUTH",
             "IMEX_CLIENT_KEY", "IMEX_CLIENT_CERT", "IMEX_CLIENT_CERT_AUTH",
             "IMEX_SECURITY_TARGET_OVERRIDE")
HOST_NAME = r"(?a)[A-Za-z0-9](?:[A-Za-z0-9_-]{0,62})(?:\.[A-Za-z0-9_-]{1,63})*"
RESOLVE_TIMEOUT_S = 5.0
DEFAULT_TEMPLATE = """\
# Site defaults for per-job IMEX daemons (rendered by imexctl; do not edit per job).
LOG_LEVEL=4
LOG_APPEND_TO_LOG=1
LOG_FILE_MAX_SIZE=64
LOG_MAX_ROTATE_COUNT=3
LOG_USE_SYSLOG=0
IMEX_ENABLE_AUTH_ENCRYPTION=0
"""


class RenderError(ValueError):
    """The job's node list cannot be turned into an IMEX node list (a node fault)."""


@dataclass(frozen=True)
class Ports:
    server: int
    cmd: int


def job_ports(job_id: int, server_base: int, cmd_base: int, span: int) -> Ports:
    """Per-job ports: consecutive jobs on a tray never reuse the previous job's ports."""
    offset = job_id % span
    return Ports(server=server_base + offset, cmd=cmd_base + offset)


def persistent_ports(server_base: int, cmd_base: int) -> Ports:
    """The persistent domain's ports (issue 37): the bases themselves, alike on every tray
    of the clique. A job id that is a multiple of ``imex.port_span`` gets the same numbers,
    but a persistent tray runs no job's daemon (a clique agrees on its lifetime)."""
    return Ports(server=server_base, cmd=cmd_base)


# IMEX_NODE_DISCONNECTED_GRACE_TIME of a persistent domain (issue 37) unless the site sets
# a finite imex.node_disconnected_grace_time: with -1 a tray that exported memory to a lost
# peer keeps it referenced for as long as the daemon lives (NVIDIA DRA #1479), and a
# persistent daemon lives across jobs, so leaked memory would pile up. 300 s outlasts a
# transient link drop (IMEX retries from 500 ms to 3 s, DRA #1443); a rebooted peer is a
# new instance and is cleaned up at once regardless of the grace time.
PERSISTENT_GRACE_TIME_S = 300


def persistent_grace_time(setting: int) -> int:
    """The grace time a persistent domain runs with: ``imex.node_disconnected_grace_time``
    when finite (>= 0), else PERSISTENT_GRACE_TIME_S (-1, the per-job default, is never
    used for a persistent domain)."""
    return setting if setting >= 0 else PERSISTENT_GRACE_TIME_S


def render_nodes_config(entries: Sequence[str]) -> str:
    """One entry per line in Slurm's node order; IMEX node id = line index."""
    if not entries:
        raise RenderError("an IMEX domain needs at least one node address")
    seen = set()
    for entry in entries:
        if not entry or any(c.isspace() for c in entry) or entry in seen:
            raise RenderError(f"invalid or duplicate node address {entry!r}")
        seen.add(entry)
    return "".join(f"{entry}\n" for entry in entries)


def canonical_ip(text: str) -> str | None:
    """``text`` as ``ipaddress`` writes it, or None when it is no IP address."""
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        return None


def is_ip_address(text: str) -> bool:
    return canonical_ip(text) is not None


if TYPE_CHECKING:
    Resolver = Callable[[str], list[str]]


def _check_name(entry: str) -> None:
    if not re.fullmatch(HOST_NAME, entry) or len(entry) > 253:
        raise RenderError(f"invalid node address {entry!r}")


def system_resolver(name: str) -> list[str]:
    """Addresses of ``name`` from the system resolver (/etc/hosts, DNS), in its order."""
    import socket

    try:
        infos = socket.getaddrinfo(name, None, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError) as exc:
        raise RenderError(f"cannot resolve node address {name!r}: {exc}") from None
    return [str(info[4][0]) for info in infos]


def resolve_address(entry: str, resolver: Resolver = system_resolver) -> str:
    """The one IP address of a NodeAddr; IP literals come back in canonical form.

    Each tray resolves on its own, so the answer must not depend on the tray: IPv4 is
    preferred, and a name with several addresses of that family is refused rather than
    picked from (the resolver's order depends on the asking host's interfaces).
    """
    literal = canonical_ip(entry)
    if literal is not None:
        return literal
    _check_name(entry)
    found = []
    for text in resolver(entry):
        try:
            found.append(ipaddress.ip_address(text.partition("%")[0]))
        except ValueError:
            continue
    v4: list[ipaddress.IPv4Address | ipaddress.IPv6Address] = sorted(
        {a for a in found if isinstance(a, ipaddress.IPv4Address)})
    choice = v4 or sorted({a for a in found if isinstance(a, ipaddress.IPv6Address)})
    if not choice:
        raise RenderError(f"node address {entry!r} resolves to no IP address")
    if len(choice) > 1:
        raise RenderError(f"node address {entry!r} resolves to several addresses "
                          f"({', '.join(map(str, choice[:4]))}); set NodeAddr to the one "
                          "IMEX should use")
    return str(choice[0])


def resolve_all(entries: Sequence[str], resolver: Resolver = system_resolver,
                timeout_s: float = RESOLVE_TIMEOUT_S) -> list[str]:
    """resolve_address for every entry, names looked up in parallel and bounded in time
    (a dead DNS server must not eat the prolog's budget); the first error is raised."""
    results: dict[int, str | Exception] = {}
    names = [i for i, e in enumerate(entries) if not is_ip_address(e)]

    def one(i: int) -> None:
        try:
            results[i] = resolve_address(entries[i], resolver)
        except Exception as exc:  # handed to the caller below
            results[i] = exc

    if names:
        import threading   # not at import: IP addresses (the usual NodeAddr) need no thread
    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in names]
    for t in threads:
        t.start()
    deadline = time.monotonic() + timeout_s
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    out = []
    for i, entry in enumerate(entries):
        if i not in names:
            out.append(resolve_address(entry, resolver))
            continue
        got = results.get(i)
        if got is None:
            raise RenderError(f"resolving node address {entry!r} took longer than "
                              f"{timeout_s:g}s")
        if isinstance(got, Exception):
            raise got if isinstance(got, RenderError) else RenderError(
                f"cannot resolve node address {entry!r}: {got}")
        out.append(got)
    return out


@dataclass(frozen=True)
class NodeEntries:
    """What goes into nodes_config.cfg, and this tray's address for the command service."""
    entries: tuple[str, ...]
    cmd_bind_ip: str


def node_entries(node_addrs: Sequence[str], local_index: int, *, host_names: bool = False,
                 labels: Sequence[str] | None = None, resolver: Resolver = system_resolver,
                 timeout_s: float = RESOLVE_TIMEOUT_S) -> NodeEntries:
    """Entries for the job's Slurm NodeAddrs (in Slurm's node order) on the tray at
    ``local_index``. Addresses by default (every name resolved here); with
    ``host_names`` (a site whose driver is >= MIN_HOSTNAME_DRIVER) names are kept as
    written, and only this tray's own entry is resolved, for the command service.
    ``labels`` (the Slurm node names) name the nodes in error messages."""
    if not 0 <= local_index < len(node_addrs):
        raise RenderError(f"this tray (index {local_index}) is not in the job's node list")
    if host_names:
        for entry in node_addrs:
            if not is_ip_address(entry):
                _check_name(entry)
        entries = [canonical_ip(e) or e for e in node_addrs]
        bind = resolve_all([node_addrs[local_index]], resolver, timeout_s)[0]
    else:
        entries = resolve_all(node_addrs, resolver, timeout_s)
        bind = entries[local_index]
    dupes = sorted({e for e in entries if entries.count(e) > 1})
    if dupes:
        names = [(labels or node_addrs)[i] for i, e in enumerate(entries) if e == dupes[0]]
        raise RenderError(f"duplicate node address {dupes[0]} (from {', '.join(names)})")
    return NodeEntries(tuple(entries), bind)


def auth_settings(*, key: Path, cert: Path, ca: Path, target: str = "") -> dict[str, str]:
    """The config.cfg keys of mutual TLS from PEM files: one key and certificate serve as
    both server and client credentials, checked against one CA. ``target``: the name every
    peer's certificate carries (IMEX_SECURITY_TARGET_OVERRIDE); empty: the peer's address."""
    out = {"IMEX_ENABLE_AUTH_ENCRYPTION": "1", "IMEX_AUTH_ENCRYPTION_MODE": "SSL_TLS",
           "IMEX_AUTH_SOURCE": "FILE",
           "IMEX_SERVER_KEY": str(key), "IMEX_SERVER_CERT": str(cert),
           "IMEX_SERVER_CERT_AUTH": str(ca),
           "IMEX_CLIENT_KEY": str(key), "IMEX_CLIENT_CERT": str(cert),
           "IMEX_CLIENT_CERT_AUTH": str(ca)}
    if target:
        out["IMEX_SECURITY_TARGET_OVERRIDE"] = target
    return out


def load_template(path: Path | None, *, auth: bool = False) -> str:
    """The site's config.cfg template; keys imexctl owns are rejected with file and line.
    With ``auth`` (imex.auth is not "off") the authentication keys are imexctl's too."""
    if path is None:
        if auth:
            return "".join(line for line in DEFAULT_TEMPLATE.splitlines(keepends=True)
                           if not line.startswith("IMEX_ENABLE_AUTH_ENCRYPTION="))
        return DEFAULT_TEMPLATE
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read IMEX config template: {exc.strerror}") from None
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        match = re.match(KEY_LINE, line)
        if not match:
            raise ConfigError(f"{path}:{lineno}: not a KEY=VALUE line: {line!r}")
        if match.group(1) in OWNED_KEYS:
            setting = OWNED_BY_SETTING.get(match.group(1))
            instead = f" (set {setting} in imexctl.toml instead)" if setting else ""
            raise ConfigError(
                f"{path}:{lineno}: {match.group(1)} is set per job by imexctl; remove it "
                f"from the template{instead}")
        if auth and match.group(1) in AUTH_KEYS:
            raise ConfigError(
                f"{path}:{lineno}: {match.group(1)} is set by imexctl when imex.auth is on; "
                "remove it from the template")
    return text


def render_daemon_config(template: str, *, nodes_config: Path, ports: Ports, log_file: Path,
                         wait_for_quorum: str, cmd_bind_ip: str,
                         grace_time: int = -1, auth: dict[str, str] | None = None) -> str:
    """The whole config.cfg for one job: site template plus the job's own values."""
    if not is_ip_address(cmd_bind_ip):
        raise RenderError(f"IMEX_CMD_BIND_INTERFACE_IP must be an IP address, got "
                          f"{cmd_bind_ip!r}")
    owned = {
        "SERVER_PORT": str(ports.server),
        "IMEX_NODE_CONFIG_FILE": str(nodes_config),
        "IMEX_CMD_ENABLED": "1",
        "IMEX_CMD_PORT": str(ports.cmd),
        "IMEX_CMD_BIND_INTERFACE_IP": cmd_bind_ip,
        "DAEMONIZE": "0",
        "LOG_FILE_NAME": str(log_file),
        # NVIDIA: "If STATS_FILE_NAME is configured same as LOG_FILE_NAME, then stats will
        # be redirected to LOG_FILE_NAME": the job's statistics stay in its directory
        # instead of the host-wide /var/log/nvidia-imex-stats.log (fidelity N13).
        "STATS_FILE_NAME": str(log_file),
        "IMEX_WAIT_FOR_QUORUM": wait_for_quorum,
        "BIND_INTERFACE_IP": "",
        "IMEX_NODE_DISCONNECTED_GRACE_TIME": str(grace_time),
        **(auth or {}),
    }
    body = template if template.endswith("\n") else template + "\n"
    lines = "".join(f"{key}={value}\n" for key, value in owned.items())
    return f"{body}# --- per-job values (imexctl) ---\n{lines}"


def domain_digest(nodes_config: str, ports: Ports, channel: int | None) -> str:
    """Identifies the domain: equal on every tray of a job, different between jobs."""
    h = sha256()
    h.update(nodes_config.encode())
    h.update(f"server={ports.server};cmd={ports.cmd};channel={channel}".encode())
    return h.hexdigest()[:16]
