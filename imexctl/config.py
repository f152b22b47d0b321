"""Site configuration: /etc/imexctl/imexctl.toml parsed into a typed, validated object.

Every path imexctl touches comes from here, so tests and the simulator can move the
whole world under a temporary directory. Path values may contain ``{node}``, expanded
to the Slurm node name, so one file can serve many trays (a shared /etc/slurm, or the
test harness where every tray is a network namespace on one machine).
Errors name the file, the key and what is allowed: an admin fixes them at 3 a.m.
"""

from __future__ import annotations

import enum
import os
import re
import stat
from pathlib import Path

from imexctl.errors import ConfigError
from imexctl.base.dataclass import dataclass, field, fields, replace
from imexctl.slurm.records import NODE_NAME

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Iterable

    from imexctl.base.jsontypes import Json

DEFAULT_SEARCH_PATH = (
    Path("/etc/imexctl/imexctl.toml"),
    Path("/etc/slurm/imexctl.toml"),
)
ENV_CONFIG = "IMEXCTL_CONFIG"


@dataclass(frozen=True)
class Paths:
    state_dir: Path = Path("/var/lib/imexctl")
    run_dir: Path = Path("/run/imexctl")
    log_file: Path = Path("/var/log/imexctl/imexctl.log")
    channel_dir: Path = Path("/dev/nvidia-caps-imex-channels")
    proc_devices: Path = Path("/proc/devices")
    imex_binary: Path = Path("/usr/bin/nvidia-imex")
    imex_ctl_binary: Path = Path("/usr/bin/nvidia-imex-ctl")
    imex_persist_file: Path = Path("/var/run/nvidia-imex/persist.dat")
    imex_config_template: Path | None = None
    slurm_bin_dir: Path = Path("/usr/bin")
    # munge and unmunge: the controller seals its decision with MUNGE, the node prologs
    # open it (imexctl/slurm/munge.py); munged's socket comes from slurm.conf's AuthInfo.
    munge_bin_dir: Path = Path("/usr/bin")
    # PrologSlurmctld's channel table (unset: <StateSaveLocation>/imexctl from the local
    # slurm.conf, shared by an HA pair; <state_dir>/slurmctld without one), owned by
    # SlurmUser: the controller hooks run as it.
    controller_dir: Path | None = None
    # The controller hooks' log (they run as SlurmUser, who may not open log_file);
    # unset: log_file, and where SlurmUser cannot open it, imexctl-controller.log in
    # the controller's directory (above), which is SlurmUser's.
    controller_log_file: Path | None = None
    # The local slurm.conf; unset: $SLURM_CONF, /etc/slurm, configless /run/slurm/conf.
    slurm_conf: Path | None = None
    boot_id_file: Path = Path("/proc/sys/kernel/random/boot_id")


@dataclass(frozen=True)
class Fabric:
    source: str = "nvml"
    file: Path | None = None
    on_degraded: str = "warn"   # degraded NVLink bandwidth: "warn" (run, report) or "drain"
    # gfm_state=DISCONNECTED / partition_assigned=FALSE (a fabric-manager restart or outage):
    # "warn" (run, report) or "drain" (only a tray where some GPUs report it, never all)
    on_fabric_manager: str = "warn"


class AuthMode(enum.StrEnum):
    """``imex.auth``, how a job's daemons authenticate each other (docs/security.md): the one
    list of modes. The file's value is parsed into it once (``CHOICES`` is made from it);
    every reader compares members, never strings."""
    OFF = "off"     # IMEX_ENABLE_AUTH_ENCRYPTION=0
    SITE = "site"   # mutual TLS with the site's CA and this tray's certificate and key
    JOB = "job"     # per-job credentials every tray derives from auth_secret_file

    @property
    def on(self) -> bool:
        """Whether the daemons authenticate (imexctl owns config.cfg's auth keys)."""
        return self is not AuthMode.OFF

    @property
    def keys(self) -> tuple[str, ...]:
        """The ``[imex]`` keys this mode alone reads (``config check`` warns of them set
        under another mode)."""
        return AUTH_KEYS[self]


class Lifetime(enum.StrEnum):
    """``imex.lifetime``, how long a tray's IMEX daemon lives (issue 37; docs/configuration.md):
    the one list of lifetimes, parsed once like :class:`AuthMode`. A property of a clique:
    each tray publishes its own (imex.identity), the controller refuses a job whose trays
    of one clique disagree (rules.groups.lifetime_splits)."""
    JOB = "job"                 # one daemon per job, started by the prolog, ended by the epilog
    PERSISTENT = "persistent"   # one daemon per tray across jobs, with a channel per job


# The enumerated types a config value is parsed into (by their annotation's name).
ENUMS: dict[str, type[AuthMode] | type[Lifetime]] = {"AuthMode": AuthMode, "Lifetime": Lifetime}


@dataclass(frozen=True)
class Imex:
    launcher: str = "direct"
    # Below Linux's ephemeral range (ip_local_port_range, 32768-60999 by default), where
    # connect() would hand the job's ports to outgoing connections: docs/channels-and-ports.md
    server_port_base: int = 18432
    cmd_port_base: int = 20480
    port_span: int = 2048
    # None: derived from the local slurm.conf's PrologTimeout / PrologEpilogTimeout
    # (imex.ready.default_ready_timeout: 120 s, capped to that limit minus 15 s).
    ready_timeout_s: float | None = None
    stop_grace_s: float = 10.0
    wait_for_quorum: str = "RECOVERY"
    # IMEX_NODE_DISCONNECTED_GRACE_TIME: -1 (the packaged default) keeps a lost peer's
    # imports until it reconnects; the job's daemons end with the job (docs/configuration.md)
    node_disconnected_grace_time: int = -1
    node_entries: str = "address"
    driver_version: str = ""
    # KEY=VALUE lines added to the environment of nvidia-imex (direct launcher) and of every
    # nvidia-imex-ctl imexctl runs (imex.launcher.environment_file); unset: PATH and LANG only.
    environment_file: Path | None = None
    # Authentication between the job's daemons (docs/security.md): "off" renders
    # IMEX_ENABLE_AUTH_ENCRYPTION=0; "site": mutual TLS with the site's CA and this tray's
    # certificate and key (auth_ca_file, auth_cert_file, auth_key_file); "job": per-job
    # credentials every tray derives from the root-only auth_secret_file.
    auth: AuthMode = AuthMode.OFF
    auth_ca_file: Path | None = None
    auth_cert_file: Path | None = None
    auth_key_file: Path | None = None
    # "site": IMEX_SECURITY_TARGET_OVERRIDE, the name every tray's certificate carries as a
    # DNS SAN; unset: each peer's certificate must name the address nodes_config.cfg gives.
    auth_target: str = ""
    auth_secret_file: Path = Path("/etc/imexctl/imex-auth.key")
    # "job": the cluster name in the credentials; unset: the local slurm.conf's ClusterName.
    auth_cluster: str = ""
    # "job": the longest a job's certificate lives, counted from the prolog: it ends at the
    # job's end (SLURM_JOB_END_TIME) plus an hour, or this much later at most.
    auth_cert_lifetime_h: float = 168.0
    # health warns when a certificate expires within this many days (site mode).
    auth_expiry_warn_days: float = 30.0
    # "job": a daemon per job (the prolog starts it, the epilog ends it); "persistent": one
    # daemon per tray for its whole clique across jobs (issue 37: published in the tray's
    # identity and checked per clique; recover starts the persistent daemon, health keeps
    # it, each job gets a channel on it; docs/configuration.md "Persistent IMEX domains").
    lifetime: Lifetime = Lifetime.JOB


@dataclass(frozen=True)
class Policy:
    mode: str = "multi-node"
    partitions: tuple[str, ...] = ()
    feature: str = "imex"
    # Who decides groups and channels (docs/multi-rack.md, "Authority"): "required": only
    # PrologSlurmctld's sealed decision; a job without one is refused. "none": the node
    # prologs group trays and use the job-id channel rule. "auto": required when the
    # local slurm.conf names a PrologSlurmctld.
    controller: str = "auto"
    # Jobs whose trays span NVLink cliques: per-clique | refuse | skip (docs/multi-rack.md);
    # [policy.partition.<name>] multi_clique = ... overrides it for one partition.
    multi_clique: str = "per-clique"
    partition_multi_clique: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Channels:
    mode: str = "auto"
    file_mode: int = 0o600
    channel0: str = "keep"
    params_file: Path = Path("/proc/driver/nvidia/params")
    count: int = 2048   # the driver's NVreg_ImexChannelCount: channels 1..count-1 are used
    # How often the controller's channel table is checked against Slurm's live jobs (one
    # squeue listing every live job): at most once per this many seconds, and at once when
    # a clique has no free channel. 0: at every allocation and release.
    reconcile_every_s: float = 60.0


@dataclass(frozen=True)
class Slurm:
    backend: str = "auto"
    timeout_s: float = 10.0
    attempts: int = 3


@dataclass(frozen=True)
class Log:
    level: str = "info"
    # The log is renamed to <log_file>.1 once it reaches this size (0: never; leave it to
    # logrotate). Each hook reopens the file, so no daemon needs a signal.
    max_bytes: int = 16 * 1024 * 1024
    # Where the JSON events go: "file" (paths.log_file), "syslog" (RFC 3164 datagrams,
    # facility daemon) or "journal" (systemd-journald's native protocol, one field per
    # key). A socket that cannot take a line sends it to the file instead.
    sink: str = "file"
    # The sink's socket; unset: /dev/log (syslog), /run/systemd/journal/socket (journal).
    socket: Path | None = None


@dataclass(frozen=True)
class Health:
    """``imexctl health``: checks to leave out, and a watchdog on the whole run."""
    skip: tuple[str, ...] = ()
    timeout_s: float = 60.0
    lock_wait_s: float = 2.0


@dataclass(frozen=True)
class Metrics:
    """Prometheus textfile for node_exporter; hooks write it when a directory is set."""
    textfile_dir: Path | None = None


# The names `[health] skip` accepts: imexctl/ops/health.py's checks (a unit test keeps both equal).
HEALTH_CHECKS = ("dirs", "fabric", "identity", "record", "reboot", "stale-domain",
                 "persistent", "domain", "daemons", "foreign-imex", "channels", "job-dirs",
                 "auth")


@dataclass(frozen=True)
class Config:
    source: Path | None = None
    node: str = ""
    paths: Paths = field(default_factory=Paths)
    fabric: Fabric = field(default_factory=Fabric)
    imex: Imex = field(default_factory=Imex)
    policy: Policy = field(default_factory=Policy)
    channels: Channels = field(default_factory=Channels)
    slurm: Slurm = field(default_factory=Slurm)
    log: Log = field(default_factory=Log)
    health: Health = field(default_factory=Health)
    metrics: Metrics = field(default_factory=Metrics)
    # Dotted keys ("imex.launcher") the file set; every other key is a built-in default.
    from_file: frozenset[str] = frozenset()


# Allowed values for enumerated keys: one table, used for checking and in messages.
CHOICES: dict[str, tuple[str, ...]] = {
    "fabric.source": ("nvml", "file"),
    "fabric.on_degraded": ("warn", "drain"),
    "fabric.on_fabric_manager": ("warn", "drain"),
    "imex.launcher": ("direct", "systemd"),
    "imex.wait_for_quorum": ("RECOVERY", "NONE"),
    "imex.node_entries": ("address", "hostname"),
    "imex.auth": tuple(mode.value for mode in AuthMode),
    "imex.lifetime": tuple(lifetime.value for lifetime in Lifetime),
    "policy.mode": ("multi-node", "all", "partitions", "feature", "none"),
    "channels.mode": ("auto", "imexctl", "slurm"),
    "channels.channel0": ("keep", "remove"),
    "policy.multi_clique": ("per-clique", "refuse", "skip"),
    "policy.controller": ("auto", "required", "none"),
    "slurm.backend": ("auto", "cli", "pyslurm"),
    "log.level": ("debug", "info", "warning", "error"),
    "log.sink": ("file", "syslog", "journal"),
}
# Numeric bounds: (min, max) inclusive.
BOUNDS: dict[str, tuple[float, float]] = {
    "imex.server_port_base": (1024, 65535),
    "imex.cmd_port_base": (1024, 65535),
    "imex.port_span": (1, 32768),
    "imex.ready_timeout_s": (1, 3600),
    "imex.stop_grace_s": (0.1, 600),
    "imex.node_disconnected_grace_time": (-1, 86400),
    "imex.auth_cert_lifetime_h": (0.1, 24 * 366),
    "imex.auth_expiry_warn_days": (0, 3650),
    "slurm.timeout_s": (0.5, 600),
    "slurm.attempts": (1, 20),
    "channels.count": (2, 1 << 20),
    "channels.reconcile_every_s": (0, 86400),
    "health.timeout_s": (1, 3600),
    "health.lock_wait_s": (0, 60),
    "log.max_bytes": (0, 1 << 40),
}
SECTIONS = {
    "paths": Paths, "fabric": Fabric, "imex": Imex, "policy": Policy,
    "channels": Channels, "slurm": Slurm, "log": Log,
    "health": Health, "metrics": Metrics,
}



def local_node_name() -> str:
    """The Slurm node name of this host: SLURMD_NODENAME when a hook runs, else hostname."""
    name = os.environ.get("SLURMD_NODENAME") or os.uname().nodename.split(".")[0]
    return name if re.fullmatch(NODE_NAME, name) else ""


def _node_name_problem() -> str:
    """Why ``local_node_name`` found no name, naming the value that was refused."""
    env = os.environ.get("SLURMD_NODENAME")
    if env:
        return (f"SLURMD_NODENAME={env!r} is not a valid node name (letters, digits, '.', "
                "'_', '-'; at most 64)")
    return ("the node name is unknown (SLURMD_NODENAME unset and the hostname "
            f"{os.uname().nodename!r} is not a valid node name)")


def find_config(explicit: str | os.PathLike | None = None, *,
                trust_env: bool = True) -> Path | None:
    """Pick the config file: --config, $IMEXCTL_CONFIG, then the default search path.

    None when neither was given and no default file exists: a fresh install runs on the
    built-in defaults. A file that was named explicitly must exist. ``trust_env=False``
    (the TaskProlog, whose environment is the job user's) skips $IMEXCTL_CONFIG.
    """
    if explicit:
        return Path(explicit)
    env = os.environ.get(ENV_CONFIG) if trust_env else None
    if env:
        return Path(env)
    for candidate in DEFAULT_SEARCH_PATH:
        if candidate.is_file():
            return candidate
    return None


def _read_regular(path: Path) -> bytes:
    """The config's bytes; a FIFO or device in its place is refused, never waited on (a
    symlink to a regular file is fine: sites manage /etc that way)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(0, "not a regular file")
        os.set_blocking(fd, True)
        return handle.read()


def load_config(path: str | os.PathLike | None = None, node: str | None = None, *,
                trust_env: bool = True) -> Config:
    """Read, parse and validate the config; raise ConfigError naming file and key.

    With no file anywhere (see :func:`find_config`) the result is the built-in defaults.
    """
    cfg_path = find_config(path, trust_env=trust_env)
    node = local_node_name() if node is None else node
    if cfg_path is None:
        return parse_config({}, None, node)
    from imexctl.base import cache as configcache
    try:
        data = _read_regular(cfg_path)
        raw = configcache.load(data)
        if raw is None:
            raw = _parse_toml(data)
            configcache.store(data, raw)
    except FileNotFoundError:
        raise ConfigError(f"{cfg_path}: file not found") from None
    except PermissionError:
        raise ConfigError(f"{cfg_path}: permission denied") from None
    except OSError as exc:  # a directory, a FIFO or device, a symlink loop
        raise ConfigError(f"{cfg_path}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{cfg_path}: not UTF-8 text ({exc.reason})") from None
    except _TomlError as exc:
        raise ConfigError(f"{cfg_path}: invalid TOML: {exc.__cause__}") from None
    return parse_config(raw, cfg_path, node)


class _TomlError(Exception):
    """tomllib's TOMLDecodeError, raised from here so tomllib stays unimported when the
    parsed table comes from :mod:`imexctl.base.cache`."""


def _parse_toml(data: bytes) -> Json:
    import tomllib
    try:
        return tomllib.loads(data.decode("utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise _TomlError() from exc


def _did_you_mean(word: str, choices: Iterable[str]) -> str:
    import difflib

    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


def parse_config(raw: Json, source: Path | None, node: str) -> Config:
    """The Config of ``raw``. Every error in it is reported at once (ConfigError, one
    line per error, in file order), not only the first."""
    where = str(source) if source else "<config>"
    errors: list[str] = []
    for name in sorted(set(raw) - set(SECTIONS)):
        errors.append(f"{where}: unknown section [{name}]{_did_you_mean(name, SECTIONS)}; "
                      f"allowed: {', '.join(sorted(SECTIONS))}")
    built: dict[str, Any] = {}
    for name, cls in SECTIONS.items():
        table = raw.get(name, {})
        if not isinstance(table, dict):
            errors.append(f"{where}: '{name}' must be a table ([{name}])")
            table = {}
        per_partition = None
        if name == "policy" and "partition" in table:
            table = dict(table)
            try:
                per_partition = _partition_policies(where, table.pop("partition"))
            except ConfigError as exc:
                errors.append(str(exc))
        built[name] = _build_section(where, name, cls, table, node, errors)
        if per_partition is not None:
            built[name] = replace(built[name], partition_multi_clique=per_partition)
    if built["fabric"].source == "file" and built["fabric"].file is None:
        errors.append(f"{where}: fabric.file is required when fabric.source = \"file\"")
    try:
        _check_node_entries(where, built["imex"])
    except ConfigError as exc:
        errors.append(str(exc))
    errors += _auth_problems(where, built["imex"])
    ports = built["imex"]
    for key in ("server_port_base", "cmd_port_base"):
        top = getattr(ports, key) + ports.port_span - 1
        if top > 65535:
            errors.append(f"{where}: imex.{key} + imex.port_span - 1 = {top} exceeds 65535")
    lo1, hi1 = ports.server_port_base, ports.server_port_base + ports.port_span
    lo2, hi2 = ports.cmd_port_base, ports.cmd_port_base + ports.port_span
    if lo1 < hi2 and lo2 < hi1:
        errors.append(f"{where}: port ranges overlap: imex.server_port_base..+port_span "
                      f"[{lo1},{hi1}) and imex.cmd_port_base..+port_span [{lo2},{hi2})")
    if errors:
        raise ConfigError("\n".join(errors))
    from_file = frozenset(f"{name}.{key}" for name in SECTIONS for key in raw.get(name, {}))
    return Config(source=source, node=node, from_file=from_file, **built)


# Host names in nodes_config.cfg are accepted from this driver release on (its notes).
MIN_HOSTNAME_DRIVER = "570.158.01"


def driver_version_key(version: str) -> tuple[int, ...]:
    """``"570.158.01"`` -> ``(570, 158, 1)``; ValueError for anything else."""
    if not re.fullmatch(r"[0-9]{1,4}(?:\.[0-9]{1,4}){1,3}", version, re.ASCII):
        raise ValueError(f"not a driver version like {MIN_HOSTNAME_DRIVER}: {version!r}")
    return tuple(int(part) for part in version.split("."))


def hostnames_supported(driver_version: str) -> bool:
    """Whether nvidia-imex of this driver accepts host names in nodes_config.cfg."""
    return driver_version_key(driver_version) >= driver_version_key(MIN_HOSTNAME_DRIVER)


def _check_node_entries(where: str, imex: Imex) -> None:
    """Host names in nodes_config.cfg only where the site says its driver accepts them."""
    try:
        supported = bool(imex.driver_version) and hostnames_supported(imex.driver_version)
    except ValueError as exc:
        raise ConfigError(f"{where}: imex.driver_version: {exc}") from None
    if imex.node_entries == "hostname" and not supported:
        raise ConfigError(
            f"{where}: imex.node_entries = \"hostname\" needs imex.driver_version "
            f">= {MIN_HOSTNAME_DRIVER} (older nvidia-imex accepts only addresses)"
        )


# A DNS name as a TLS certificate's SAN carries it: IMEX_SECURITY_TARGET_OVERRIDE, cluster names.
DNS_NAME = r"(?a)(?=.{1,253}$)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*"
AUTH_SITE_FILES = ("auth_ca_file", "auth_cert_file", "auth_key_file")
# The [imex] keys each mode alone reads (AuthMode.keys).
AUTH_KEYS: dict[AuthMode, tuple[str, ...]] = {
    AuthMode.OFF: (),
    AuthMode.SITE: AUTH_SITE_FILES + ("auth_target",),
    AuthMode.JOB: ("auth_secret_file", "auth_cluster", "auth_cert_lifetime_h"),
}


# Why ``auth = "job"`` and ``lifetime = "persistent"`` exclude each other (issue 37's sentence).
PERSISTENT_JOB_AUTH = 'auth = "job" cannot serve a persistent domain: the daemon outlives jobs'


def _auth_problems(where: str, imex: Imex) -> list[str]:
    """imex.auth's one validation: ``auth = "site"`` needs its three files; names must be
    DNS names; ``auth = "job"`` cannot serve ``lifetime = "persistent"``."""
    out = []
    if imex.auth == AuthMode.JOB and imex.lifetime == Lifetime.PERSISTENT:
        out.append(f"{where}: imex.auth = \"job\" with imex.lifetime = \"persistent\": "
                   f"{PERSISTENT_JOB_AUTH} (use auth = \"site\", or lifetime = \"job\")")
    if imex.auth == AuthMode.SITE:
        missing = [f"imex.{key}" for key in AUTH_SITE_FILES if getattr(imex, key) is None]
        if missing:
            out.append(f"{where}: imex.auth = \"site\" needs {', '.join(missing)} (the site "
                       "CA, this tray's certificate and its key, PEM)")
    if imex.auth_target and not re.fullmatch(DNS_NAME, imex.auth_target):
        out.append(f"{where}: imex.auth_target = {imex.auth_target!r} is not a DNS name "
                   "(letters, digits, '-' and '.')")
    if imex.auth_cluster and not re.fullmatch(r"(?a)[A-Za-z0-9][A-Za-z0-9-]{0,62}",
                                              imex.auth_cluster):
        out.append(f"{where}: imex.auth_cluster = {imex.auth_cluster!r} must be letters, "
                   "digits and '-' (at most 63, a DNS label)")
    return out


def _partition_policies(where: str, tables: object) -> dict[str, str]:
    """[policy.partition.<name>] multi_clique = "refuse": one partition's own policy."""
    if not isinstance(tables, dict):
        raise ConfigError(f"{where}: policy.partition must be tables ([policy.partition.NAME])")
    out: dict[str, str] = {}
    allowed = CHOICES["policy.multi_clique"]
    for part, table in tables.items():
        dotted = f"policy.partition.{part}"
        if not isinstance(table, dict) or set(table) != {"multi_clique"}:
            raise ConfigError(f"{where}: [{dotted}] takes exactly one key, multi_clique")
        if table["multi_clique"] not in allowed:
            raise ConfigError(f"{where}: {dotted}.multi_clique = {table['multi_clique']!r} "
                              f"is not allowed; use one of: {', '.join(allowed)}")
        out[part] = table["multi_clique"]
    return out


# Fields the file sets only through tables of their own (shown that way by config show).
FROM_TABLES = {"policy.partition_multi_clique": "partition.<name>.multi_clique"}


def _build_section(where: str, name: str, cls: type, table: dict, node: str,
                   errors: list[str]):
    """The section from its table; each bad key adds to ``errors`` (its default is used
    meanwhile, so later checks still run)."""
    known = {f.name: f for f in fields(cls) if f"{name}.{f.name}" not in FROM_TABLES}
    values: dict[str, Any] = {}
    for key, value in table.items():
        dotted = f"{name}.{key}"
        if key not in known:
            allowed = [*known, *(t for k, t in FROM_TABLES.items() if k.startswith(name + "."))]
            errors.append(f"{where}: unknown key '{dotted}'{_did_you_mean(key, known)}; "
                          f"allowed in [{name}]: {', '.join(allowed)}")
            continue
        try:
            values[key] = _coerce(where, dotted, known[key].type, value, node)
        except ConfigError as exc:
            errors.append(str(exc))
    return cls(**values)


# IMEX_NODE_CONFIG_FILE and LOG_FILE_NAME: "Full path/filename string (max length of
# 256)" (NVIDIA's config.cfg). imexctl renders <run_dir>/job-<id>/<file>: the longest
# part below run_dir is tray.jobdir.LONGEST, 32 characters (a unit test holds it).
IMEX_PATH_MAX = 256
MAX_RUN_DIR = IMEX_PATH_MAX - 32


def _coerce(where: str, dotted: str, typ: object, value: object, node: str) -> object:
    typ = str(typ)
    if "Path" in typ:
        if not isinstance(value, str) or not value:
            raise ConfigError(f"{where}: {dotted} must be a non-empty path string")
        if "{node}" in value and not node:
            raise ConfigError(f"{where}: {dotted} uses {{node}} but {_node_name_problem()}")
        expanded = value.replace("{node}", node)
        if not expanded.startswith("/"):
            raise ConfigError(f"{where}: {dotted} must be an absolute path, got {value!r}")
        if "\0" in expanded or "/../" in f"{expanded}/":
            raise ConfigError(f"{where}: {dotted} must not contain '..' or NUL: {value!r}")
        if dotted == "paths.run_dir" and len(expanded) > MAX_RUN_DIR:
            raise ConfigError(f"{where}: {dotted} is {len(expanded)} characters; at most "
                              f"{MAX_RUN_DIR}, so that the per-job paths imexctl renders "
                              f"into config.cfg stay within IMEX's {IMEX_PATH_MAX}")
        return Path(expanded)
    if dotted == "channels.file_mode":
        return _file_mode(where, dotted, value)
    if typ.startswith("tuple"):
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise ConfigError(f"{where}: {dotted} must be a list of non-empty strings")
        if dotted == "health.skip" and not set(value) <= set(HEALTH_CHECKS):
            bad = sorted(set(value) - set(HEALTH_CHECKS))[0]
            raise ConfigError(f"{where}: {dotted}: unknown check {bad!r}; "
                              f"checks: {', '.join(HEALTH_CHECKS)}")
        return tuple(value)
    if typ in ("int", "float", "float | None"):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{where}: {dotted} must be a number, got {value!r}")
        if typ == "int" and not isinstance(value, int):
            raise ConfigError(f"{where}: {dotted} must be an integer, got {value!r}")
        lo, hi = BOUNDS.get(dotted, (float("-inf"), float("inf")))
        if not lo <= value <= hi:
            raise ConfigError(f"{where}: {dotted} = {value} is out of range [{lo:g}, {hi:g}]")
        return value if typ == "int" else float(value)
    if typ == "str" or typ in ENUMS:
        if not isinstance(value, str):
            raise ConfigError(f"{where}: {dotted} must be a string, got {value!r}")
        allowed = CHOICES.get(dotted)
        if allowed and value not in allowed:
            raise ConfigError(
                f"{where}: {dotted} = {value!r} is not allowed; use one of: {', '.join(allowed)}"
                f"{_did_you_mean(value, allowed)}")
        return ENUMS[typ](value) if typ in ENUMS else value
    raise ConfigError(f"{where}: {dotted}: unsupported value {value!r}")  # pragma: no cover


def _file_mode(where: str, dotted: str, value: object) -> int:
    """Channel device mode: an octal string; owner-only read-write (0600), because the
    channel's group is never trusted (a job's primary group is commonly shared)."""
    if not isinstance(value, str) or not re.fullmatch(r"0?[0-7]{3}", value):
        raise ConfigError(f"{where}: {dotted} must be an octal string like \"0600\", got {value!r}")
    mode = int(value, 8)
    if mode & 0o077:
        raise ConfigError(
            f"{where}: {dotted} = {value} lets other users open the channel; use 0600"
        )
    if mode & 0o600 != 0o600:
        raise ConfigError(
            f"{where}: {dotted} = {value} does not let the job's user open the channel "
            "read-write; use 0600"
        )
    return mode
