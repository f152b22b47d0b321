"""The domain view and its two renderings: ``-N`` text and ``-N -j`` JSON.

Shapes follow real 570.172 / 580.x output (reference imex.md §2.3, §2.4):
legend, timestamp ``M/D/YYYY HH:MM:SS.mmm``, ``Node #i - host - STATUS - Version: v``
lines, the From\\To connectivity matrix and ``Domain State: UP|DEGRADED|DOWN``; JSON with
``nodes`` keyed by index string, then ``timestamp``, then the top-level ``status`` last.
"""

from __future__ import annotations

import json

# Connection status word (JSON) -> matrix letter (text).
LETTERS = {
    "CONNECTED": "C",
    "INVALID": "I",
    "NEVER_CONNECTED": "N",
    "RECOVERING": "R",
    "DISCONNECTED": "D",
    "AUTHENTICATING": "A",
    "VERSION_MISMATCH": "!V!",      # JSON spelling not observed on real systems
    "NODE_MAP_MISMATCH": "!M!",     # JSON spelling not observed on real systems
}

LEGEND = """\
Connectivity Table Legend:
I - Invalid - Node wasn't reachable, no connection status available
N - Never Connected
R - Recovering - Connection was lost, but clean up has not yet been triggered.
D - Disconnected - Connection was lost, and clean up has been triggreed.
A - Authenticating - If GSSAPI enabled, client has initiated mutual authentication.
!V! - Version mismatch, communication disabled.
!M! - Node map mismatch, communication disabled.
C - Connected - Ready for operation
"""


class NodeView:
    """One member's row; ``connections``: peer index -> connection status word."""

    def __init__(self, idx: int, host: str, status: str = "UNAVAILABLE", version: str = "",
                 hostname: str = "", connections: dict[int, str] | None = None):
        self.idx = idx
        self.host = host
        self.status = status
        self.version = version
        self.hostname = hostname
        self.connections = connections or {}


class DomainView:
    def __init__(self, nodes: list[NodeView], timestamp: str, local_up: bool = True):
        self.nodes = nodes
        self.timestamp = timestamp
        self.local_up = local_up

    @property
    def status(self) -> str:
        if not self.local_up or not self.nodes:
            return "DOWN"
        all_ready = all(n.status == "READY" for n in self.nodes)
        all_conn = all(n.connections.get(p.idx) == "CONNECTED"
                       for n in self.nodes for p in self.nodes)
        return "UP" if all_ready and all_conn else "DEGRADED"


def render_text(view: DomainView, with_hostname: bool = False) -> str:
    lines = [LEGEND, f"{view.timestamp}", "Nodes:"]
    for n in view.nodes:
        host = f"{n.host} ({n.hostname or 'N/A'})" if with_hostname else n.host
        lines.append(f"Node #{n.idx:<3} - {host:<15} - {n.status:<20} - Version: {n.version}"
                     .rstrip())
    lines.append("")
    header = " Nodes From\\To  " + "".join(f"{p.idx:<4}" for p in view.nodes)
    lines.append(header.rstrip())
    for n in view.nodes:
        cells = "".join(f"{LETTERS.get(n.connections.get(p.idx, 'INVALID'), '?'):<4}"
                        for p in view.nodes)
        lines.append(f"{n.idx:>8}        {cells}".rstrip())
    lines.append("")
    lines.append(f"Domain State: {view.status}")
    return "\n".join(lines) + "\n"


def to_json_obj(view: DomainView, with_hostname: bool = False) -> dict:
    nodes = {}
    by_idx = {n.idx: n for n in view.nodes}
    for n in view.nodes:
        if with_hostname:
            hostname = n.hostname if n.status != "UNAVAILABLE" and n.hostname else "N/A"
        else:
            hostname = ""
        nodes[str(n.idx)] = {
            "status": n.status,
            "host": n.host,
            "hostName": hostname,
            "connections": {
                str(p): {"host": by_idx[p].host, "status": status, "changed": True}
                for p, status in sorted(n.connections.items()) if p in by_idx},
            "changed": True,
            "version": n.version,
        }
    return {"nodes": nodes, "timestamp": view.timestamp, "status": view.status}


def render_json(view: DomainView, with_hostname: bool = False) -> str:
    return json.dumps(to_json_obj(view, with_hostname), indent=2) + "\n"
