"""Client for ``nvidia-imex-ctl``: local daemon state and the domain's view.

``-q`` answers one word for the local daemon; ``-N -j`` gives the domain with every
member's status and connection matrix (so one ``-N -j`` call also tells the local state:
the local member's row). Both run with a timeout, in their own session, and the whole
process group is killed when it expires: ``-N`` is known to hang on a broken node, and a
wrapper script's children must not outlive the call (audit F-23).

Any answer that is not the documented shape (non-UTF-8 bytes, JSON of another shape,
a member or connection that is not an object, a key that is not a node index) reads as
domain ``UNKNOWN`` with an error text, never as an exception (audit F-04).
"""

from __future__ import annotations

import json
from pathlib import Path

from imexctl.imex.launcher import daemon_env
from imexctl.base.dataclass import dataclass, field
from imexctl.base.subproc import Bounded, run_bounded

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Mapping

UNKNOWN = "UNKNOWN"
DOMAIN_STATES = ("UP", "DEGRADED", "DOWN")


class CtlOutputError(ValueError):
    """The ctl printed something that is not the documented ``-N -j`` shape."""


@dataclass(frozen=True)
class DomainView:
    """One ``-N -j`` answer. ``members``: node index -> ``{"status", "host", "hostName",
    "version", "connections": {peer index: {"host", "status"}}}``, all values strings."""
    status: str                                   # UP | DEGRADED | DOWN | UNKNOWN
    members: dict[int, dict] = field(default_factory=dict)
    error: str = ""
    timed_out: bool = False                       # -N -j did not answer in time

    def problems(self) -> list[str]:
        """Which member is not READY or which link is not CONNECTED, by host."""
        out = []
        for idx, node in sorted(self.members.items()):
            host = node["host"] or f"#{idx}"
            if node["status"] != "READY":
                out.append(f"{host} {node['status'] or '?'}")
            for peer, conn in sorted(node["connections"].items()):
                if conn["status"] != "CONNECTED":
                    out.append(f"{host}->{conn['host'] or peer} {conn['status'] or '?'}")
        return out

    @property
    def up(self) -> bool:
        return self.status == "UP" and not self.problems() and bool(self.members)


def _text(value: object, what: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise CtlOutputError(f"{what} is {type(value).__name__}, not a string")
    return value


def _index(key: object, what: str) -> int:
    if not isinstance(key, str) or not key.isascii() or not key.isdigit() or len(key) > 6:
        raise CtlOutputError(f"{what} key {key!r} is not a node index")
    return int(key)


def parse_domain(stdout: bytes) -> DomainView:
    """``-N -j`` bytes -> DomainView; CtlOutputError for anything off the real shape."""
    try:
        raw = json.loads(stdout.decode("utf-8"))
    except UnicodeDecodeError:
        raise CtlOutputError("output is not UTF-8") from None
    except (ValueError, RecursionError) as exc:
        raise CtlOutputError(f"not JSON: {exc}") from None
    if not isinstance(raw, dict):
        raise CtlOutputError(f"top level is {type(raw).__name__}, not an object")
    status = _text(raw.get("status"), "status")
    if status not in DOMAIN_STATES:
        raise CtlOutputError(f"unknown domain status {status!r}")
    nodes = raw.get("nodes", {})
    if not isinstance(nodes, dict):
        raise CtlOutputError("nodes is not an object")
    members: dict[int, dict] = {}
    for key, node in nodes.items():
        idx = _index(key, "nodes")
        if not isinstance(node, dict):
            raise CtlOutputError(f"member {key} is not an object")
        conns = node.get("connections", {})
        if not isinstance(conns, dict):
            raise CtlOutputError(f"connections of member {key} is not an object")
        links = {}
        for peer, conn in conns.items():
            if not isinstance(conn, dict):
                raise CtlOutputError(f"connection {key}->{peer} is not an object")
            links[_index(peer, f"connections of member {key}")] = {
                "host": _text(conn.get("host"), "connection host"),
                "status": _text(conn.get("status"), "connection status")}
        members[idx] = {"status": _text(node.get("status"), "member status"),
                        "host": _text(node.get("host"), "member host"),
                        "hostName": _text(node.get("hostName"), "member hostName"),
                        "version": _text(node.get("version"), "member version"),
                        "connections": links}
    return DomainView(status, members)


@dataclass(frozen=True)
class CtlClient:
    """``nvidia-imex-ctl -c CONFIG`` with a bounded run time.

    ``env`` is added to the minimal environment (PATH, LANG): imexctl passes the lines of
    ``imex.environment_file``, so the ctl sees what the daemon sees (the simulator's knobs).
    """
    ctl: Path
    config: Path
    env: Mapping[str, str] = field(default_factory=dict)
    timeout_s: float = 6.0

    def run(self, *args: str) -> Bounded:
        res = run_bounded([str(self.ctl), "-c", str(self.config), *args], self.timeout_s,
                          daemon_env(dict(self.env)))
        if res.timed_out:
            return Bounded(None, timed_out=True,
                           error=f"nvidia-imex-ctl {' '.join(args)} {res.error}")
        return res

    def local(self) -> str:
        """The local daemon's state word (READY, INITIALIZING, ...) or UNAVAILABLE."""
        ans = self.run("-q")
        if ans.rc is None:
            return "UNAVAILABLE" if ans.timed_out else f"UNAVAILABLE ({ans.error})"
        try:
            word = ans.stdout.decode("utf-8").strip()
        except UnicodeDecodeError:
            return "UNAVAILABLE (-q output is not UTF-8)"
        if ans.rc != 0 or not word or len(word) > 64 or not word.isprintable():
            return "UNAVAILABLE"
        return word

    def domain(self) -> DomainView:
        """The domain as ``-N -j`` shows it; UNKNOWN (with ``error``) if it cannot say."""
        ans = self.run("-N", "-j")
        if ans.rc is None:
            return DomainView(UNKNOWN, error=ans.error, timed_out=ans.timed_out)
        if ans.rc != 0:
            text = (ans.stdout + ans.stderr).decode("utf-8", "replace").strip()
            return DomainView(UNKNOWN, error=text[:500] or f"exit {ans.rc}")
        try:
            return parse_domain(ans.stdout)
        except CtlOutputError as exc:
            return DomainView(UNKNOWN, error=f"unexpected nvidia-imex-ctl -N -j output: {exc}")


def query_local(ctl: Path, config: Path, timeout: float = 5.0,
                env: Mapping[str, str] | None = None) -> str:
    """The local daemon's state word (READY, INITIALIZING, ...) or UNAVAILABLE."""
    return CtlClient(ctl, config, env or {}, timeout).local()


def query_domain(ctl: Path, config: Path, timeout: float = 6.0,
                 env: Mapping[str, str] | None = None) -> DomainView:
    return CtlClient(ctl, config, env or {}, timeout).domain()
