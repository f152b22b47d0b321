"""Client for ``nvidia-imex-ctl``: local daemon state and the domain's view.

``-q`` answers one word for the local daemon; ``-N -j`` gives the domain with every
member's status and connection matrix. Both are run with a timeout: -N is known to hang
on a broken node.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from imexctl.imex.launcher import daemon_env


@dataclass(frozen=True)
class DomainView:
    status: str                                   # UP | DEGRADED | DOWN | UNKNOWN
    members: dict[int, dict] = field(default_factory=dict)
    error: str = ""

    def problems(self) -> list[str]:
        """Which member is not READY or which link is not CONNECTED, by host."""
        out = []
        for idx, node in sorted(self.members.items()):
            host = node.get("host", f"#{idx}")
            if node.get("status") != "READY":
                out.append(f"{host} {node.get('status', '?')}")
            for peer, conn in sorted((node.get("connections") or {}).items(),
                                     key=lambda kv: int(kv[0])):
                if conn.get("status") != "CONNECTED":
                    out.append(f"{host}->{conn.get('host', peer)} {conn.get('status', '?')}")
        return out

    @property
    def up(self) -> bool:
        return self.status == "UP" and not self.problems() and bool(self.members)


def _run(ctl: Path, config: Path, args: list[str], timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run([str(ctl), "-c", str(config), *args], capture_output=True, text=True,
                          timeout=timeout, env=daemon_env(), stdin=subprocess.DEVNULL)


def query_local(ctl: Path, config: Path, timeout: float = 5.0) -> str:
    """The local daemon's state word (READY, INITIALIZING, ...) or UNAVAILABLE."""
    try:
        proc = _run(ctl, config, ["-q"], timeout)
    except subprocess.TimeoutExpired:
        return "UNAVAILABLE"
    except OSError as exc:
        return f"UNAVAILABLE ({exc.strerror})"
    word = proc.stdout.strip()
    return word if proc.returncode == 0 and word else "UNAVAILABLE"


def query_domain(ctl: Path, config: Path, timeout: float = 6.0) -> DomainView:
    try:
        proc = _run(ctl, config, ["-N", "-j"], timeout)
    except subprocess.TimeoutExpired:
        return DomainView("UNKNOWN", error=f"nvidia-imex-ctl -N -j timed out after {timeout:g}s")
    except OSError as exc:
        return DomainView("UNKNOWN", error=f"cannot run {ctl}: {exc.strerror}")
    if proc.returncode != 0:
        return DomainView("UNKNOWN", error=(proc.stdout + proc.stderr).strip()
                          or f"exit {proc.returncode}")
    try:
        raw = json.loads(proc.stdout)
        members = {int(k): v for k, v in (raw.get("nodes") or {}).items()}
        return DomainView(str(raw.get("status", "UNKNOWN")), members)
    except (ValueError, AttributeError, TypeError) as exc:
        return DomainView("UNKNOWN", error=f"unparseable -N -j output: {exc}")
