"""Prometheus metrics for node_exporter's textfile collector.

Each hook is a short-lived process, so counters and histograms live in a small JSON
file in the state dir (``metrics/state.json``), updated under its own lock; gauges are
read from the node when the text is rendered (ownership record, channel devices, the
expected-state file, the NVLink fabric). ``imexctl metrics --textfile DIR`` and every
hook (when ``[metrics] textfile_dir`` is set) write ``DIR/imexctl.prom`` atomically.

Hooks call one function per finished hook run: :func:`observe`. Nothing here raises
into a hook: a metric that cannot be kept is logged and dropped.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

from imexctl.base.counting import inc as _inc, observe as _observe
from imexctl.config import AuthMode, Lifetime
from imexctl.slurm import reasons

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Iterable, Iterator

    from imexctl.base.jsontypes import Json
    from imexctl.config import Config
    from imexctl.tray.gpus import GpuFabric
    from imexctl.tray.ownership import DomainRecord

    Samples = dict[str, list[tuple[str, dict[str, str], float]]]

STATE_SUBDIR = "metrics"          # state_dir/metrics/: state.json and its own lock
STATE_FILE = "state.json"
TEXTFILE = "imexctl.prom"
BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)

HELP = {
    "imexctl_hook_outcomes_total": ("counter", "Finished hook runs by hook, failing step "
                                               "and outcome class."),
    "imexctl_stale_domains_found_total": ("counter", "Domains found whose job had ended or "
                                                     "whose boot was over."),
    "imexctl_persistent_restarts_total": ("counter", "Times recover or health started this "
                                                     "tray's persistent nvidia-imex anew (dead,"
                                                     " hung or after a reboot)."),
    "imexctl_hook_duration_seconds": ("histogram", "Wall time of one hook run."),
    "imexctl_hook_step_duration_seconds": ("histogram", "Wall time of one hook step."),
    "imexctl_domain_state": ("gauge", "Phase of this node's IMEX domain (1 for the current)."),
    "imexctl_domain_job_id": ("gauge", "Job owning this node's IMEX domain (0 when none)."),
    "imexctl_expected_state": ("gauge", "IMEX expected here now: the current state is 1."),
    "imexctl_imex_expected": ("gauge", "1 when an nvidia-imex daemon should run here now."),
    "imexctl_channels_in_use": ("gauge", "IMEX channel devices present on this node."),
    "imexctl_nvlink_gpu_fabric_state": ("gauge", "NVML fabric state per GPU (0 not supported,"
                                                 " 1 not started, 2 in progress, 3 completed)."),
    "imexctl_nvlink_gpu_healthy": ("gauge", "1 when the GPU's fabric is Completed, Success "
                                            "and every health field healthy."),
    "imexctl_nvlink_gpus": ("gauge", "GPUs seen in the fabric probe."),
    "imexctl_nvlink_gpus_unhealthy": ("gauge", "GPUs whose NVLink fabric is not healthy."),
    "imexctl_auth_cert_expiry_seconds": ("gauge", "Seconds until an imex.auth certificate "
                                         "expires (negative: expired), by certificate."),
    "imexctl_persistent_domain_up": ("gauge", "imex.lifetime = persistent: 1 when this "
                                     "tray's persistent nvidia-imex runs (the record's pid)."),
    "imexctl_persistent_domain_ready": ("gauge", "imex.lifetime = persistent: 1 when the "
                                        "persistent domain is ready here (record ready, daemon "
                                        "running and, in imexctl metrics, -q READY)."),
    "imexctl_persistent_domain_jobs": ("gauge", "Jobs holding a channel on this tray's "
                                       "persistent domain."),
    "imexctl_metrics_generated_timestamp_seconds": ("gauge", "When this file was written."),
    "imexctl_build_info": ("gauge", "Always 1; the imexctl version and Python that wrote "
                                    "this file are its labels (audit a rolling upgrade)."),
}


# --------------------------------------------------------------------------- recording
def observe(cfg: Config, hook: str, outcome: str, steps_ms: dict[str, float] | None = None,
            duration_ms: float | None = None, reason: str = "") -> None:
    """Record one finished hook run (prolog, epilog, health, recover): its outcome class
    (``ok``, ``node-fault``, ``job-fault``, ...), the step named in its ``imexctl:``
    reason, and its timings; then refresh the textfile when one is configured."""
    parsed = reasons.parse(reason)
    step = parsed[1] if parsed is not None else "none"
    labels = {"hook": hook, "step": step, "class": outcome}

    def update(state: dict) -> None:
        _inc(state, "imexctl_hook_outcomes_total", labels, 1)
        if duration_ms is not None:
            _hist(state, "imexctl_hook_duration_seconds", {"hook": hook}, duration_ms / 1000)
        for name, ms in (steps_ms or {}).items():
            _hist(state, "imexctl_hook_step_duration_seconds", {"hook": hook, "step": name},
                  ms / 1000)
    _update(cfg, update)


def observe_outcome(cfg: Config, outcome: dict) -> None:
    """:func:`observe` from a hook's recorded outcome (``state_dir/last-outcome.json``)."""
    observe(cfg, str(outcome.get("hook", "?")), str(outcome.get("result", "?")),
            outcome.get("steps_ms") or {}, outcome.get("duration_ms"),
            str(outcome.get("reason") or ""))


def count(cfg: Config, what: str, n: int = 1) -> None:
    """Add ``n`` to the counter ``imexctl_<what>_total`` (e.g. ``stale_domains_found``)."""
    name = f"imexctl_{what}_total"
    if name not in HELP:
        raise ValueError(f"unknown counter {name}")
    _update(cfg, lambda state: _inc(state, name, {}, n))


def remember_fabric(cfg: Config, gpus: Iterable[GpuFabric]) -> None:
    """Keep the last NVLink probe (health reads it live) for hooks that render the file
    without paying for an NVML query."""
    summary = [_gpu_summary(g) for g in gpus]
    _update(cfg, lambda state: state.__setitem__("fabric", summary), write=False)


def _hist(state: dict, name: str, labels: dict[str, str], value: float) -> None:
    _observe(state, name, labels, value, BUCKETS)


def _state_dir(cfg: Config) -> Path:
    return Path(cfg.paths.state_dir) / STATE_SUBDIR


def _update(cfg: Config, change, write: bool = True) -> None:
    """Change the persisted state under its own lock (never the node lock, which a
    caller may hold); a busy or unusable state is logged and the change dropped."""
    from imexctl.base.fsutil import ensure_secure_dir, write_json
    from imexctl.tray.ownership import LockTimeout, StateStore
    try:
        ensure_secure_dir(Path(cfg.paths.state_dir))   # never a symlinked state dir's target
        with StateStore(_state_dir(cfg)).locked(timeout_s=2.0):
            state = load_state(cfg)
            change(state)
            write_json(_state_dir(cfg) / STATE_FILE, state, 0o600, durable=False)
        if write and cfg.metrics.textfile_dir:
            write_textfile(cfg, cfg.metrics.textfile_dir, live_fabric=False)
    except (OSError, ValueError, TypeError, LockTimeout) as exc:
        try:
            from imexctl.base import log
            log.get_logger().error("metrics not recorded", error=str(exc))
        except Exception:  # noqa: BLE001 - metrics never break a hook
            pass


def load_state(cfg: Config) -> dict:
    """The persisted counters; an unusable file starts the counters again (a counter
    reset is something Prometheus handles)."""
    from imexctl.base.fsutil import read_json
    try:
        state = read_json(_state_dir(cfg) / STATE_FILE)
    except (OSError, ValueError):
        state = None
    return state if isinstance(state, dict) else {}


# --------------------------------------------------------------------------- rendering
def render(cfg: Config, live_fabric: bool = True, now: float | None = None) -> str:
    """The whole textfile: persisted counters and histograms plus live gauges."""
    state = load_state(cfg)
    samples: Samples = {}

    def add(name: str, labels: dict[str, str], value: float, suffix: str = "") -> None:
        samples.setdefault(name, []).append((name + suffix, labels, value))

    persisted_samples(state, HELP, BUCKETS, add)
    if "imexctl_stale_domains_found_total" not in samples:
        add("imexctl_stale_domains_found_total", {}, 0)
    if cfg.imex.lifetime == Lifetime.PERSISTENT \
            and "imexctl_persistent_restarts_total" not in samples:
        add("imexctl_persistent_restarts_total", {}, 0)
    for name, labels, value in _live_gauges(cfg, state, live_fabric):
        add(name, labels, value)
    add("imexctl_metrics_generated_timestamp_seconds", {},
        round(time.time() if now is None else now, 3))
    return exposition(HELP, samples)


def persisted_samples(state: dict, helps: dict[str, tuple[str, str]],
                      buckets: tuple[float, ...], add) -> None:
    """Add the counters and histograms of a persisted state (``{"counters": {name:
    {label key: value}}, "histograms": ...}``) that ``helps`` declares, through
    ``add(name, labels, value, suffix)``."""
    for name, series in sorted(state.get("counters", {}).items()):
        if name in helps:
            for key, value in sorted(series.items()):
                add(name, dict(json.loads(key)), value)
    for name, series in sorted(state.get("histograms", {}).items()):
        if name not in helps:
            continue
        for key, h in sorted(series.items()):
            labels = dict(json.loads(key))
            for bound, n in zip(buckets, h["buckets"]):
                add(name, {**labels, "le": repr(float(bound))}, n, "_bucket")
            add(name, {**labels, "le": "+Inf"}, h["count"], "_bucket")
            add(name, labels, h["sum"], "_sum")
            add(name, labels, h["count"], "_count")


def exposition(helps: dict[str, tuple[str, str]], samples: Samples) -> str:
    """Prometheus text format: each family of ``helps`` that has samples, in the order
    of ``helps``, with its HELP and TYPE lines."""
    lines: list[str] = []
    for name in helps:
        if name not in samples:
            continue
        kind, text = helps[name]
        lines += [f"# HELP {name} {text}", f"# TYPE {name} {kind}"]
        lines += [f"{sample}{_labels(labels)} {_fmt(value)}"
                  for sample, labels, value in samples[name]]
    return "\n".join(lines) + "\n"


def _live_gauges(cfg: Config, state: dict, live_fabric: bool
                 ) -> Iterator[tuple[str, dict[str, str], float]]:
    from imexctl.tray import expected
    from imexctl.tray.channels import list_channels
    from imexctl.tray.ownership import StateStore

    try:
        record = StateStore(cfg.paths.state_dir).load()
        phase = record.phase if record is not None else "idle"
        job = record.job_id if record is not None else 0
    except (OSError, ValueError, TypeError):
        record, phase, job = None, "unreadable", 0
    import platform

    from imexctl import __version__
    yield "imexctl_build_info", {"version": __version__,
                                 "python": platform.python_version()}, 1.0
    for name in domain_states():
        yield "imexctl_domain_state", {"state": name}, float(phase == name)
    yield "imexctl_domain_job_id", {}, float(job)
    exp = expected.read(cfg)
    for name in expected.STATES:
        yield "imexctl_expected_state", {"state": name}, float(exp is not None and exp.state == name)
    yield "imexctl_imex_expected", {}, float(exp is not None and exp.imex_expected)
    try:
        yield "imexctl_channels_in_use", {}, float(len(list_channels(cfg.paths.channel_dir)))
    except OSError:
        pass
    if cfg.imex.lifetime == Lifetime.PERSISTENT:
        yield from _persistent_gauges(cfg, record, ask_ctl=live_fabric)
    auth = cfg.imex.auth
    if auth == AuthMode.SITE or (auth == AuthMode.JOB and record is not None):
        # cryptography: only with auth on, and not in an epilog after its teardown
        from imexctl.ops.authinfo import expiries
        for e in expiries(cfg, record):
            if e.seconds_left is not None:
                yield "imexctl_auth_cert_expiry_seconds", {"cert": e.name}, round(e.seconds_left)
    gpus = _fabric(cfg) if live_fabric else state.get("fabric")
    if gpus is not None:
        for g in gpus:
            labels = {"gpu": str(g["index"]), "uuid": g["uuid"]}
            yield "imexctl_nvlink_gpu_fabric_state", labels, float(g["state"])
            yield "imexctl_nvlink_gpu_healthy", labels, float(g["healthy"])
        yield "imexctl_nvlink_gpus", {}, float(len(gpus))
        yield "imexctl_nvlink_gpus_unhealthy", {}, float(sum(not g["healthy"] for g in gpus))


def _persistent_gauges(cfg: Config, job: DomainRecord | None, ask_ctl: bool
                       ) -> Iterator[tuple[str, dict[str, str], float]]:
    """The persistent domain here (issue 37): up (its daemon runs), ready (its record is
    ready, the daemon runs and, when ``ask_ctl`` (``imexctl metrics``, not a hook), ``-q``
    answers READY) and the jobs holding a channel on it. An unreadable record: 0 and 0."""
    from imexctl.imex import launcher, persistent
    from imexctl.tray.ownership import StateStore

    try:
        record = StateStore(cfg.paths.state_dir).load_persistent()
    except ValueError:   # RecordUnreadable
        record = None
    up = record is not None and record.daemon is not None and launcher.is_alive(record.daemon)
    ready = up and record is not None and record.phase == "ready"
    if ready and ask_ctl:
        try:
            ready = persistent.ctl(cfg).local() == persistent.READY
        except Exception:  # noqa: BLE001 - a ctl that cannot answer: not ready
            ready = False
    yield "imexctl_persistent_domain_up", {}, float(up)
    yield "imexctl_persistent_domain_ready", {}, float(ready)
    yield "imexctl_persistent_domain_jobs", {}, float(job is not None and job.on_persistent
                                                      and job.phase != "tearing-down")


def domain_states() -> tuple[str, ...]:
    """The ``imexctl_domain_state`` series: no record, every phase a record can have
    (``state.PHASES``), and an unreadable record."""
    from imexctl.tray.ownership import PHASES
    return ("idle", *PHASES, "unreadable")


def _fabric(cfg: Config) -> list[dict] | None:
    from imexctl.tray.gpus import FabricError
    from imexctl.tray.fabric import read_fabric
    try:
        gpus = read_fabric(cfg.fabric.source,
                           str(cfg.fabric.file) if cfg.fabric.file else None)
    except FabricError:
        return None
    return [_gpu_summary(g) for g in gpus]


def _gpu_summary(gpu: GpuFabric) -> Json:
    from imexctl.tray.fabric import gpu_healthy
    return {"index": gpu.index, "uuid": gpu.uuid, "state": gpu.state,
            "healthy": gpu_healthy(gpu)}


def _labels(labels: dict[str, str]) -> str:
    if not labels:
        return ""
    body = ",".join(f'{k}="{_escape(str(v))}"' for k, v in labels.items())
    return "{" + body + "}"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _fmt(value: float) -> str:
    if isinstance(value, float) and math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if float(value).is_integer():
        return str(int(value))
    return repr(float(value))


def write_textfile(cfg: Config, directory: Path, live_fabric: bool = True) -> Path:
    """Write ``directory/imexctl.prom`` atomically (node_exporter reads only ``*.prom``;
    the temporary file is a dot file)."""
    return write_prom(directory, TEXTFILE, render(cfg, live_fabric=live_fabric))


def write_prom(directory: Path, name: str, text: str) -> Path:
    """Replace ``directory/name`` with ``text`` atomically (a dot-file first, renamed;
    never through a symlink; a group- or world-writable directory is refused)."""
    from imexctl.base.fsutil import atomic_write, ensure_secure_dir
    directory = Path(directory)
    ensure_secure_dir(directory)
    target = directory / name
    atomic_write(target, text, 0o644, durable=False)
    return target
