"""Run-time fault injection for the simulated daemon (no code edits).

Sources, merged in this order (later wins), read once at daemon start:

1. ``IMEXCTL_SIM_FAULTS`` = path of a JSON control file::

       {"fail_start": true}                       # faults for every daemon reading it
       {"faults": {"slow_start": 2}}              # same, nested
       {"nodes": {"1": {"never_ready": true},      # by node id (line index) ...
                  "127.0.1.3": {"version": "1.0"}}} # ... or by node address / entry

   A missing or empty file means no faults.
2. ``IMEXCTL_SIM_FAULT`` = one spec (or several, comma separated):
   ``never_ready``, ``slow_start=2.5``, ``refuse_peer=127.0.1.3``, ``version=999.1``.

Faults: fail_start (true or message), never_ready, hang_on_sigterm, crash_after (s),
slow_start (s), version (str), refuse_peer (node id / address, or a list of them),
cmd_unreachable (the command port answers only local queries), cmd_drop (the command
port swallows other trays' queries: a firewall that DROPs, the asker waits out its own
deadline), ctl_hang (this tray's ``nvidia-imex-ctl -N`` never returns, DRA-k8s #1417;
``-q`` still answers). Tray settings in the same
file: no_ipv6 (the tray has IPv6 disabled: the ctl cannot reach ``[::]``), wake_on_hello
(a peer's hello makes the dialler reconnect at once; off = the real daemon's timing).
Fault durations are wall-clock seconds (not multiplied by IMEXCTL_SIM_TIME_SCALE).
The ctl reads this too (for no_ipv6), so: stdlib-light.
"""

from __future__ import annotations

import json
import os

FAULT_NAMES = ("fail_start", "never_ready", "hang_on_sigterm", "crash_after", "slow_start",
               "late_start", "version", "refuse_peer", "cmd_unreachable", "cmd_drop",
               "ctl_hang", "no_ipv6", "wake_on_hello", "node_map_mismatch")
BOOL_FAULTS = ("never_ready", "hang_on_sigterm", "cmd_unreachable", "cmd_drop", "ctl_hang",
               "no_ipv6", "wake_on_hello", "node_map_mismatch")


class FaultError(Exception):
    pass


class Faults:
    def __init__(self) -> None:
        self.fail_start: str | None = None          # message, or None
        self.never_ready = False
        self.hang_on_sigterm = False
        self.crash_after: float | None = None
        self.slow_start = 0.0
        self.late_start = 0.0   # s before binding: this tray's prolog started late
        self.version: str | None = None
        self.refuse_peer: set[str] = set()
        self.cmd_unreachable = False
        self.cmd_drop = False
        self.ctl_hang = False
        self.no_ipv6 = False
        self.wake_on_hello = False
        self.node_map_mismatch = False   # as if this tray's nodes_config differed
        self.sources: list[str] = []

    def active(self) -> dict:
        out = {}
        for name in FAULT_NAMES:
            value = getattr(self, name)
            if value not in (None, False, 0.0, set()):
                out[name] = sorted(value) if isinstance(value, set) else value
        return out

    def refuses(self, node_id: int | None, host: str) -> bool:
        return (host in self.refuse_peer) or (node_id is not None
                                               and str(node_id) in self.refuse_peer)

    def apply(self, spec: dict, source: str) -> None:
        for name, value in spec.items():
            if name not in FAULT_NAMES:
                raise FaultError(f"{source}: unknown simulated fault {name!r} "
                                 f"(known: {', '.join(FAULT_NAMES)})")
            try:
                self._set(name, value)
            except (TypeError, ValueError):
                raise FaultError(f"{source}: bad value {value!r} for fault {name}") from None
        if spec:
            self.sources.append(source)

    def _set(self, name: str, value) -> None:
        if name == "fail_start":
            if value is True or (isinstance(value, str) and value.lower() in ("1", "true", "")):
                self.fail_start = "simulated start failure (fault fail_start)"
            elif value:
                self.fail_start = str(value)
            else:
                self.fail_start = None
        elif name in BOOL_FAULTS:
            setattr(self, name, _bool(value))
        elif name == "crash_after":
            self.crash_after = None if value in (None, False) else float(value)
        elif name in ("slow_start", "late_start"):
            setattr(self, name, float(value or 0))
        elif name == "version":
            self.version = str(value) if value not in (None, False, "") else None
        elif name == "refuse_peer":
            items = value if isinstance(value, list) else str(value).replace(";", " ").split()
            self.refuse_peer |= {str(v).strip() for v in items if str(v).strip()}


def _bool(value) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on", "")
    return bool(value)


def parse_env_spec(text: str) -> dict:
    """``never_ready`` / ``slow_start=2`` / ``a,b=1`` -> {name: value}."""
    spec: dict = {}
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        name, sep, value = part.partition("=")
        name = name.strip()
        if not sep:
            spec[name] = True
        elif name == "refuse_peer" and name in spec:
            spec[name] = f"{spec[name]} {value.strip()}"
        else:
            spec[name] = value.strip()
    return spec


def load(node_id: int | None, node_keys: list[str], env=None) -> Faults:
    """The faults for this daemon. ``node_keys``: entry/address strings naming this node."""
    env = os.environ if env is None else env
    faults = Faults()
    path = env.get("IMEXCTL_SIM_FAULTS", "").strip()
    if path:
        data = _read_file(path)
        src = f"fault file {path}"
        top = {k: v for k, v in data.items() if k in FAULT_NAMES}
        other = set(data) - set(top) - {"faults", "nodes"}
        other = {k for k in other if not k.startswith(("_", "comment"))}
        if other:
            raise FaultError(f"{src}: unknown simulated fault(s) {', '.join(sorted(other))} "
                             f"(known: {', '.join(FAULT_NAMES)})")
        faults.apply(top, src)
        faults.apply(_obj(data.get("faults", {}), src), src)
        nodes = _obj(data.get("nodes", {}), src)
        keys = ([str(node_id)] if node_id is not None else []) + node_keys
        for key in dict.fromkeys(keys):
            if key in nodes:
                faults.apply(_obj(nodes[key], src), f"{src} [nodes.{key}]")
    spec = env.get("IMEXCTL_SIM_FAULT", "").strip()
    if spec:
        faults.apply(parse_env_spec(spec), "IMEXCTL_SIM_FAULT")
    return faults


def _obj(value, src: str) -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise FaultError(f"{src}: expected a JSON object, got {type(value).__name__}")
    return value


def _read_file(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise FaultError(f"fault file {path}: {exc.strerror}") from None
    if not text.strip():
        return {}
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise FaultError(f"fault file {path}: invalid JSON: {exc}") from None
    return _obj(data, f"fault file {path}")
