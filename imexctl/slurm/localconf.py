"""slurm.conf read from the local disk: node addresses and settings without asking slurmctld.

Every tray's prolog needs the job's tray addresses and ``SwitchType``; asking slurmctld
(``scontrol show node`` loads the whole node table, ``show config`` the configuration)
costs RPCs that grow with the cluster, at every job start, on every tray. slurmd itself
runs from a local slurm.conf: the file named by ``$SLURM_CONF``, the compiled-in
``/etc/slurm/slurm.conf``, or in configless mode the copy slurmd keeps under
``/run/slurm/conf`` (older releases: ``<SlurmdSpoolDir>/conf-cache``). This reads the
same file, following ``Include`` lines, with slurm.conf(5)'s rules: case-insensitive
keys, ``#`` comments, ``\\`` line continuation, ``NodeName=DEFAULT`` defaults,
hostlist expressions in ``NodeName``/``NodeAddr``/``NodeHostname``, and a missing
``NodeAddr`` meaning ``NodeHostname``, a missing ``NodeHostname`` meaning the name.
Reading is bounded (size, include depth) and never blocks on a FIFO.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

from imexctl.base.dataclass import dataclass, field

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Mapping, Sequence
    from imexctl.config import Config
    from imexctl.slurm.interface import SlurmAdapter

CANDIDATES = (Path("/etc/slurm/slurm.conf"), Path("/run/slurm/conf/slurm.conf"),
              Path("/var/spool/slurmd/conf-cache/slurm.conf"))
MAX_FILE_BYTES = 64 << 20
MAX_INCLUDE_DEPTH = 8
MAX_FILES = 256
_PAIR = r'([A-Za-z][A-Za-z0-9_]*)=("(?:[^"\\]|\\.)*"|\S*)'

# Slurm version facts of slurm.conf's keys (doctor recommends by them; the readers below
# take whatever the file says).
DEFERBATCH_SINCE = (20, 11)      # PrologFlags=DeferBatch appeared in Slurm 20.11
PROLOG_TIMEOUT_SINCE = (24, 11)  # PrologTimeout split from PrologEpilogTimeout
# A 16-bit timeout's "no limit" (INFINITE16), also written UNLIMITED or INFINITE.
INFINITE16 = 65534
NO_LIMIT = ("UNLIMITED", "INFINITE", str(INFINITE16))


def prolog_timeout_key(version: tuple[int, int] | None) -> str:
    """The key that limits a Prolog on Slurm ``version`` (None: unknown, the older key)."""
    return "PrologTimeout" if version and version >= PROLOG_TIMEOUT_SINCE \
        else "PrologEpilogTimeout"


class LocalConfError(Exception):
    """slurm.conf could not be found or read; the message names the file."""


@dataclass(frozen=True)
class NodeConf:
    name: str
    addr: str
    hostname: str


@dataclass
class LocalSlurmConf:
    path: Path
    files: list[Path] = field(default_factory=list)
    settings: dict[str, str] = field(default_factory=dict)   # lower-cased key -> value
    nodes: dict[str, NodeConf] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    def get(self, key: str, default: str | None = None) -> str | None:
        return self.settings.get(key.lower(), default)

    @property
    def switch_type(self) -> str:
        value = self.get("SwitchType", "") or ""
        return "" if value in ("(null)", "none") else value

    @property
    def slurm_manages_imex_channels(self) -> bool:
        return "nvidia_imex" in self.switch_type

    def timeout_s(self, key: str) -> int | None:
        value = self.get(key)
        return int(value) if value is not None and value.isdigit() else None

    @property
    def prolog_timeout_name(self) -> str:
        """The key this file limits a Prolog with: PrologTimeout (24.11+) when it sets it,
        else PrologEpilogTimeout."""
        return "PrologTimeout" if self.get("PrologTimeout") else "PrologEpilogTimeout"

    @property
    def prolog_timeout_s(self) -> int | None:
        """How long slurmd lets a Prolog run (:attr:`prolog_timeout_name`); None when
        there is no limit: unset (Slurm's default) or ``UNLIMITED``/``INFINITE``/65534.
        LocalConfError for a value that is not a number."""
        name = self.prolog_timeout_name
        raw = self.get(name) or ""
        if not raw or raw.upper() in NO_LIMIT:
            return None
        try:
            return int(raw)
        except ValueError:
            raise LocalConfError(f"{name}={raw!r} is not a number") from None

    @property
    def health_check_timeout_s(self) -> int | None:
        """How long slurmd lets the HealthCheckProgram run: HealthCheckTimeout (26.05+;
        0 or unparsable means Slurm's default, 60); None when unset (slurmd's default,
        and before 26.05 a fixed 60 s)."""
        if self.get("HealthCheckTimeout") is None:
            return None
        return self.timeout_s("HealthCheckTimeout") or 60

    @property
    def health_check_reboot_only(self) -> bool:
        """HealthCheckNodeState=REBOOT_ONLY (26.05+): slurmd runs the HealthCheckProgram
        only when the node registers after a reboot Slurm issued, never periodically nor
        at slurmd start (it cannot be combined with other states)."""
        words = (self.get("HealthCheckNodeState", "") or "").upper().split(",")
        return "REBOOT_ONLY" in (w.strip() for w in words)

    def node_of_host(self, host: str) -> str | None:
        """The one NodeName whose NodeHostname (NodeName when unset) is ``host`` or its
        short form, as slurmd finds its own name; None when none or several match."""
        wanted = {host, host.split(".")[0]}
        found = [n.name for n in self.nodes.values() if n.hostname in wanted]
        return found[0] if len(found) == 1 else None

    def addresses(self, names: Sequence[str]) -> dict[str, str]:
        """NodeAddr of each name defined here; names not defined are left out."""
        return {n: self.nodes[n].addr for n in names if n in self.nodes}


@dataclass(frozen=True)
class ChannelOwner:
    """Who makes IMEX channels here, and why (for ``status``)."""
    slurm: bool          # Slurm's switch/nvidia_imex; else imexctl
    why: str             # "channels.mode = imexctl", "SwitchType=... in /etc/slurm/slurm.conf"


def channel_owner(cfg: Config, slurm: SlurmAdapter | None = None,
                  conf: LocalSlurmConf | None = None) -> ChannelOwner:
    """The one rule for who owns IMEX channels (prolog, PrologSlurmctld and status use
    it): ``channels.mode``, and for ``auto`` the SwitchType of the local slurm.conf
    (``conf`` when the caller has read it, else ``paths.slurm_conf`` or found as slurmd
    finds it). Asks slurmctld (``slurm.switch_type()``) only when no local slurm.conf can
    be read and an adapter is given; otherwise LocalConfError."""
    mode = cfg.channels.mode
    if mode != "auto":
        return ChannelOwner(mode == "slurm", f"channels.mode = {mode}")
    try:
        # SwitchType only: node lines skipped
        conf = conf if conf is not None else load(cfg.paths.slurm_conf, nodes=())
    except LocalConfError:
        if slurm is None:
            raise
        switch = slurm.switch_type() or ""
        return ChannelOwner("nvidia_imex" in switch,
                            f"SwitchType={switch or '(none)'} from slurmctld")
    return ChannelOwner(conf.slurm_manages_imex_channels,
                        f"SwitchType={conf.switch_type or '(none)'} in {conf.path}")


def slurm_owns_channels(cfg: Config, slurm: SlurmAdapter | None = None,
                        conf: LocalSlurmConf | None = None) -> bool:
    """Whether Slurm's switch/nvidia_imex owns IMEX channels (see :func:`channel_owner`)."""
    return channel_owner(cfg, slurm, conf).slurm


def find_slurm_conf(env: Mapping[str, str] | None = None,
                    candidates: Sequence[Path] = CANDIDATES) -> Path:
    env = os.environ if env is None else env
    named = env.get("SLURM_CONF")
    if named:
        return Path(named)
    for path in candidates:
        if os.path.isfile(path):
            return path
    raise LocalConfError("no local slurm.conf (SLURM_CONF unset; looked at "
                         + ", ".join(str(p) for p in candidates) + ")")


def load(path: Path | str | None = None, env: Mapping[str, str] | None = None,
         nodes: Sequence[str] | None = None) -> LocalSlurmConf:
    """Parse the local slurm.conf (``path``, else found as slurmd finds it).

    ``nodes``: only these node definitions are wanted (a prolog needs its job's trays);
    single-node lines for other names are skipped unparsed, which keeps a 10,000-line
    node table cheap on every tray at every job start.
    """
    conf = LocalSlurmConf(Path(path) if path else find_slurm_conf(env))
    defaults: dict[str, str] = {}
    _parse_file(conf, conf.path, defaults, depth=0,
                wanted=frozenset(nodes) if nodes is not None else None)
    return conf


def _read(path: Path) -> str:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise LocalConfError(f"{path}: cannot open ({exc.strerror})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise LocalConfError(f"{path}: not a regular file")
        if st.st_size > MAX_FILE_BYTES:
            raise LocalConfError(f"{path}: larger than {MAX_FILE_BYTES >> 20} MiB")
        with os.fdopen(fd, "rb", closefd=False) as handle:
            data = handle.read(MAX_FILE_BYTES + 1)
    finally:
        os.close(fd)
    return data.decode("utf-8", errors="replace")


def _logical_lines(text: str):
    pending = ""
    for raw in text.splitlines():
        line = re.sub(r"(?<!\\)#.*", "", raw).replace("\\#", "#").rstrip() if "#" in raw \
            else raw.rstrip()
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line = (pending + line).strip()
        pending = ""
        if line:
            yield line
    if pending.strip():
        yield pending.strip()


def _parse_file(conf: LocalSlurmConf, path: Path, defaults: dict[str, str], depth: int,
                wanted: frozenset[str] | None = None) -> None:
    if depth > MAX_INCLUDE_DEPTH:
        raise LocalConfError(f"{path}: Include nested deeper than {MAX_INCLUDE_DEPTH}")
    if len(conf.files) >= MAX_FILES:
        raise LocalConfError(f"{conf.path}: more than {MAX_FILES} included files")
    conf.files.append(path)
    for line in _logical_lines(_read(path)):
        word, _, rest = line.partition(" ")
        if word.lower() == "include":
            _include(conf, path, rest.strip().strip('"'), defaults, depth, wanted)
            continue
        if wanted is not None and word[:9].lower() == "nodename=":
            name = word[9:]
            if "[" not in name and "," not in name and name.lower() != "default" \
                    and name not in wanted:
                continue  # another node's definition: not needed here
        pairs = [(k, _unquote(v)) for k, v in re.findall(_PAIR, line)]
        if not pairs:
            continue
        first = pairs[0][0].lower()
        if first == "nodename":
            _node_line(conf, path, pairs, defaults)
        elif first in ("partitionname", "nodeset", "downnodes", "frontendname", "slurmctldhost"):
            if first == "slurmctldhost":
                conf.settings.setdefault("slurmctldhost", pairs[0][1])
            continue  # records of their own, not settings
        else:
            for key, value in pairs:
                conf.settings[key.lower()] = value


def _include(conf: LocalSlurmConf, path: Path, target: str, defaults: dict[str, str],
             depth: int, wanted: frozenset[str] | None) -> None:
    if not target:
        conf.problems.append(f"{path}: Include without a file")
        return
    pattern = target if target.startswith("/") else str(path.parent / target)
    import glob   # only for an Include with a wildcard

    matches = sorted(glob.glob(pattern)) if glob.has_magic(pattern) else [pattern]
    for match in matches:
        _parse_file(conf, Path(match), defaults, depth + 1, wanted)


def _unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] == '"':
        return value[1:-1].replace('\\"', '"')
    return value


def _expand(value: str) -> list[str]:
    from imexctl.slurm.hostlist import expand

    if "[" in value:
        return expand(value)
    return [v for v in value.split(",") if v]


def _node_line(conf: LocalSlurmConf, path: Path, pairs: list[tuple[str, str]],
               defaults: dict[str, str]) -> None:
    values = {k.lower(): v for k, v in pairs}
    name_expr = values["nodename"]
    if name_expr.lower() == "default":
        defaults.update({k: v for k, v in values.items() if k != "nodename"})
        return
    merged = {**defaults, **values}
    try:
        names = _expand(name_expr)
        hosts = _expand(merged["nodehostname"]) if "nodehostname" in merged else names
        addrs = _expand(merged["nodeaddr"]) if "nodeaddr" in merged else hosts
    except ValueError as exc:
        conf.problems.append(f"{path}: NodeName={name_expr}: {exc}")
        return
    if len(hosts) != len(names) or len(addrs) != len(names):
        conf.problems.append(f"{path}: NodeName={name_expr}: {len(names)} names but "
                             f"{len(hosts)} NodeHostname and {len(addrs)} NodeAddr values")
        return
    for name, host, addr in zip(names, hosts, addrs):
        conf.nodes[name] = NodeConf(name, addr, host)


__all__ = ["LocalSlurmConf", "NodeConf", "LocalConfError", "load", "find_slurm_conf",
           "slurm_owns_channels", "channel_owner", "ChannelOwner"]
