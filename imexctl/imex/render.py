"""Per-job IMEX configuration: nodes_config.cfg, config.cfg, ports and digest.

Every tray of a job must render byte-identical nodes_config.cfg (IMEX numbers nodes by
line) and the same ports without talking to each other, so everything here is a pure
function of what Slurm says about the job.
"""

from __future__ import annotations

import hashlib
import ipaddress
import re
from dataclasses import dataclass
from pathlib import Path

from imexctl.errors import ConfigError

KEY_LINE = re.compile(r"^\s*([A-Z][A-Z0-9_]*)\s*=(.*)$")
# Keys imexctl owns: a site template may not set them, the job decides them.
OWNED_KEYS = ("SERVER_PORT", "IMEX_NODE_CONFIG_FILE", "IMEX_CMD_ENABLED", "IMEX_CMD_PORT",
              "DAEMONIZE", "LOG_FILE_NAME", "IMEX_WAIT_FOR_QUORUM", "BIND_INTERFACE_IP")
DEFAULT_TEMPLATE = """\
# Site defaults for per-job IMEX daemons (rendered by imexctl; do not edit per job).
LOG_LEVEL=4
LOG_APPEND_TO_LOG=1
LOG_FILE_MAX_SIZE=1024
LOG_MAX_ROTATE_COUNT=3
LOG_USE_SYSLOG=0
IMEX_CMD_BIND_INTERFACE_IP=
IMEX_ENABLE_AUTH_ENCRYPTION=0
IMEX_NODE_DISCONNECTED_GRACE_TIME=0
"""


@dataclass(frozen=True)
class Ports:
    server: int
    cmd: int


def job_ports(job_id: int, server_base: int, cmd_base: int, span: int) -> Ports:
    """Per-job ports: consecutive jobs on a tray never reuse the previous job's ports."""
    offset = job_id % span
    return Ports(server=server_base + offset, cmd=cmd_base + offset)


def render_nodes_config(addresses: list[str]) -> str:
    """One address per line in Slurm's node order; IMEX node id = line index."""
    if not addresses:
        raise ValueError("an IMEX domain needs at least one node address")
    seen = set()
    for addr in addresses:
        if not addr or any(c.isspace() for c in addr) or addr in seen:
            raise ValueError(f"invalid or duplicate node address {addr!r}")
        seen.add(addr)
    return "".join(f"{addr}\n" for addr in addresses)


def is_ip_address(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def load_template(path: Path | None) -> str:
    """The site's config.cfg template; keys imexctl owns are rejected with file and line."""
    if path is None:
        return DEFAULT_TEMPLATE
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read IMEX config template: {exc.strerror}") from None
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        match = KEY_LINE.match(line)
        if not match:
            raise ConfigError(f"{path}:{lineno}: not a KEY=VALUE line: {line!r}")
        if match.group(1) in OWNED_KEYS:
            raise ConfigError(
                f"{path}:{lineno}: {match.group(1)} is set per job by imexctl; remove it "
                "from the template")
    return text


def render_daemon_config(template: str, *, nodes_config: Path, ports: Ports, log_file: Path,
                         wait_for_quorum: str) -> str:
    """The whole config.cfg for one job: site template plus the job's own values."""
    owned = {
        "SERVER_PORT": str(ports.server),
        "IMEX_NODE_CONFIG_FILE": str(nodes_config),
        "IMEX_CMD_ENABLED": "1",
        "IMEX_CMD_PORT": str(ports.cmd),
        "DAEMONIZE": "0",
        "LOG_FILE_NAME": str(log_file),
        "IMEX_WAIT_FOR_QUORUM": wait_for_quorum,
        "BIND_INTERFACE_IP": "",
    }
    body = template if template.endswith("\n") else template + "\n"
    lines = "".join(f"{key}={value}\n" for key, value in owned.items())
    return f"{body}# --- per-job values (imexctl) ---\n{lines}"


def domain_digest(nodes_config: str, ports: Ports, channel: int | None) -> str:
    """Identifies the domain: equal on every tray of a job, different between jobs."""
    h = hashlib.sha256()
    h.update(nodes_config.encode())
    h.update(f"server={ports.server};cmd={ports.cmd};channel={channel}".encode())
    return h.hexdigest()[:16]
