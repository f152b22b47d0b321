"""Per-GPU NVLink fabric identity, from NVML on a real tray or a JSON file on a simulated one,
and the verdict on the tray: an IMEX tray (maybe degraded), not an IMEX tray, or unfit.

Both sources return the same ``GpuFabric`` records, so ``judge`` decides on a simulated
tray exactly as on a GB200 tray. The file source exists for the simulator and the test
harness; it is also handy to replay what a broken tray reported.

NVML is read by ``imexctl.tray.nvml``, imported only on trays that use it.
"""

from __future__ import annotations

import json
import os
import re
import stat
import time
from pathlib import Path

from imexctl.base.dataclass import asdict, dataclass, field
from imexctl.rules.cliques import TrayIdentity
from imexctl.tray.gpus import (DEGRADED_FIELD, FABRIC_MANAGER_FIELDS, FabricError, GpuFabric, HEALTHY_MASK, HEALTH_FIELD_NAMES, HEALTH_SUMMARY_CODES, NoNvidiaDriver, STATE_CODES, STATE_COMPLETED, STATE_NAMES, STATE_NOT_SUPPORTED, STATUS_CODES, STATUS_SUCCESS, SUMMARY_LIMITED, SUMMARY_UNHEALTHY, ZERO_UUID, health_mask, health_problems)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from types import ModuleType
    from typing import Iterable, Literal

    from imexctl.base.jsontypes import Json
    from imexctl.config import Config

_CANONICAL_UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"


def read_fabric(source: str, path: str | os.PathLike | None = None,
                timeout_s: float | None = None) -> list[GpuFabric]:
    """All local GPUs' fabric records, in index order; NVML under ``timeout_s``
    (default NVML_DEADLINE_S)."""
    if source == "file":
        if not path:
            raise FabricError("fabric.source is \"file\" but no fabric.file is configured")
        return read_fabric_file(path)
    if source == "nvml":
        return read_fabric_nvml(timeout_s=timeout_s or NVML_DEADLINE_S)
    raise FabricError(f"unknown fabric source {source!r} (allowed: nvml, file)")


# ------------------------------------------------------------------ verdict
if TYPE_CHECKING:
    VerdictKind = Literal["imex", "not_imex", "unfit"]


ON_DEGRADED = ("warn", "drain")
ON_FABRIC_MANAGER = ("warn", "drain")


@dataclass(frozen=True)
class FabricVerdict:
    """What this tray is for IMEX. ``imex``: may join a domain of ``clique`` (``degraded``
    says there is a warning: bandwidth is reduced or the fabric manager is unreachable;
    ``detail`` says why). ``not_imex``: no NVLink fabric here
    (no GPU, or every GPU answers state NOT_SUPPORTED with a zero cluster UUID): run jobs
    without a domain, never drain for it. ``unfit``: a node fault, ``detail`` names GPU
    and cause."""
    kind: VerdictKind
    detail: str = ""
    degraded: bool = False
    clique: TrayIdentity | None = None
    gpus: tuple[GpuFabric, ...] = field(default=(), repr=False)

    def to_json(self) -> Json:
        return {"kind": self.kind, "detail": self.detail, "degraded": self.degraded,
                "clique": self.clique.clique if self.clique else None,
                "gpus": [g.to_json() for g in self.gpus]}


def judge(gpus: Iterable[GpuFabric], on_degraded: str = "warn",
          observed: float | None = None, on_fabric_manager: str = "warn") -> FabricVerdict:
    """Decide on the local GPUs. Degraded bandwidth (healthMask degraded_bw, or health
    summary LIMITED_CAPACITY) is ``imex`` + ``degraded`` under ``warn`` and ``unfit`` under
    ``drain``. The fabric manager's own bits (gfm_state=DISCONNECTED,
    partition_assigned=FALSE) are ``imex`` + ``degraded`` under ``warn``; under ``drain``
    they make the tray ``unfit`` only when some of its GPUs report them and others do not
    (every GPU reporting them is what a fabric-manager restart looks like on every tray of
    the rack, which must not drain the rack). Any other health fault, or summary
    UNHEALTHY, is ``unfit``."""
    if on_degraded not in ON_DEGRADED:
        raise ValueError(f"on_degraded must be one of {ON_DEGRADED}, got {on_degraded!r}")
    if on_fabric_manager not in ON_FABRIC_MANAGER:
        raise ValueError(f"on_fabric_manager must be one of {ON_FABRIC_MANAGER}, "
                         f"got {on_fabric_manager!r}")
    gpus = tuple(gpus)
    if not gpus:
        return FabricVerdict("not_imex", "no NVIDIA GPU found: not an IMEX tray")
    absent = [g for g in gpus if g.state == STATE_NOT_SUPPORTED and g.cluster_uuid == ZERO_UUID]
    if len(absent) == len(gpus):
        return FabricVerdict("not_imex", f"no NVLink fabric on {_gpu_list(gpus)} (fabric state "
                             "NOT_SUPPORTED, no cluster UUID): not an IMEX tray", gpus=gpus)
    if absent:
        return FabricVerdict("unfit", f"GPUs disagree: {_gpu_list(absent)} without NVLink "
                             "fabric, the others with", gpus=gpus)
    degraded: list[str] = []
    manager: dict[int, str] = {}
    for g in gpus:
        fault = _gpu_fault(g)
        if fault:
            return FabricVerdict("unfit", f"GPU {g.index} {fault}", gpus=gpus)
        why = _degradation(g)
        if why:
            degraded.append(f"GPU {g.index} ({why})")
        lost = _manager_problems(g)
        if lost:
            manager[g.index] = lost
    cliques = sorted({(g.cluster_uuid, g.clique_id) for g in gpus})
    if len(cliques) > 1:
        seen = ", ".join(f"GPU {g.index}={g.cluster_uuid}.{g.clique_id}" for g in gpus)
        return FabricVerdict("unfit", f"GPUs disagree on their clique ({seen})", gpus=gpus)
    if observed is None:
        observed = round(time.time(), 3)
    ident = TrayIdentity(cliques[0][0], cliques[0][1], len(gpus), "Completed", observed)
    if not degraded and not manager:
        return FabricVerdict("imex", f"clique {ident.clique}", False, ident, gpus)
    parts = []
    if degraded:
        parts.append("fabric bandwidth degraded: " + "; ".join(degraded))
    if manager:
        parts.append(_manager_detail(gpus, manager))
    detail = "; ".join(parts)
    if degraded and on_degraded == "drain":
        return FabricVerdict("unfit", detail + " (fabric.on_degraded = drain)", True, None, gpus)
    if manager and on_fabric_manager == "drain" and len(manager) < len(gpus):
        return FabricVerdict("unfit", detail + " (fabric.on_fabric_manager = drain)", True,
                             None, gpus)
    return FabricVerdict("imex", detail, True, ident, gpus)


def _manager_detail(gpus: tuple[GpuFabric, ...], manager: dict[int, str]) -> str:
    """``fabric manager unreachable: ...`` naming the GPUs (all of them in one phrase)."""
    values = sorted(set(manager.values()))
    if len(manager) == len(gpus) and len(values) == 1:
        return (f"fabric manager not reachable on every GPU ({values[0]}): a fabric-manager "
                "restart or outage; running domains keep working")
    return "fabric manager not reachable: " + "; ".join(
        f"GPU {i} ({why})" for i, why in sorted(manager.items()))


def gpu_healthy(g: GpuFabric) -> bool:
    """One GPU as ``judge`` sees it: no fault, no degradation and its fabric manager
    reachable (the metrics' rule)."""
    return not _gpu_fault(g) and not _degradation(g) and not _manager_problems(g)


def _gpu_fault(g: GpuFabric) -> str:
    if g.state != STATE_COMPLETED:
        return f"fabric state {_state_title(g.state)}, not Completed"
    if g.status != STATUS_SUCCESS:
        return f"fabric status {g.status}, not Success"
    if g.cluster_uuid == ZERO_UUID:
        return "has no fabric cluster UUID (not MNNVL)"
    soft = (DEGRADED_FIELD, *FABRIC_MANAGER_FIELDS)
    bad = [p for p in health_problems(g.health_mask) if p.split("=", 1)[0] not in soft]
    # A summary UNHEALTHY that only the fabric manager's bits explain is that manager's
    # outage (fabric.on_fabric_manager decides), not a fault of this GPU (fidelity N18).
    if g.health_summary == SUMMARY_UNHEALTHY and (bad or not _manager_problems(g)):
        bad.insert(0, "health summary UNHEALTHY")
    return f"fabric unhealthy ({', '.join(bad)})" if bad else ""


def _degradation(g: GpuFabric) -> str:
    why = []
    if g.health_summary == SUMMARY_LIMITED:
        why.append("health summary LIMITED_CAPACITY")
    bw = HEALTH_FIELD_NAMES[DEGRADED_FIELD]
    if (g.health_mask >> bw.shift) & bw.width == 1:
        why.append(f"{DEGRADED_FIELD}=TRUE")
    return ", ".join(why)


def _manager_problems(g: GpuFabric) -> str:
    """The fabric manager's own bits that do not read fine (``gfm_state=DISCONNECTED``...)."""
    return ", ".join(p for p in health_problems(g.health_mask)
                     if p.split("=", 1)[0] in FABRIC_MANAGER_FIELDS)


def _state_title(state: int) -> str:
    return STATE_NAMES.get(state, str(state)).replace("_", " ").title()


def _gpu_list(gpus: Iterable[GpuFabric]) -> str:
    idx = [str(g.index) for g in gpus]
    return f"GPU {idx[0]}" if len(idx) == 1 else f"GPUs {','.join(idx)}"


def fabric_verdict(source: str, path: str | os.PathLike | None = None,
                   on_degraded: str = "warn", on_fabric_manager: str = "warn") -> FabricVerdict:
    """Read the local fabric and judge it; never raises for a bad source (``unfit``)."""
    try:
        gpus = read_fabric(source, path)
    except NoNvidiaDriver as exc:
        return FabricVerdict("not_imex", f"{exc}: not an IMEX tray")
    except FabricError as exc:
        return FabricVerdict("unfit", str(exc))
    return judge(gpus, on_degraded, on_fabric_manager=on_fabric_manager)


# ------------------------------------------------------------------ file source
def read_fabric_file(path: str | os.PathLike) -> list[GpuFabric]:
    """Parse ``{"gpus": [{"index", "uuid", "cluster_uuid", "clique_id", "state", "status",
    "health_mask", "health_summary"}, ...]}``; state, status and health_summary may be names
    or numbers, health_mask a number or a "0x..." string. A GPU with state NOT_SUPPORTED may
    leave out cluster_uuid and clique_id (zero, like a real non-NVLink GPU); ``"gpus": []``
    is a tray without GPUs."""
    p = Path(path)
    try:
        raw = json.loads(_read_regular(p))
    except FileNotFoundError:
        raise FabricError(f"{p}: fabric file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise FabricError(f"{p}: cannot read fabric file: {exc}") from None
    except (ValueError, RecursionError) as exc:
        raise FabricError(f"{p}: not JSON: {exc}") from None
    gpus = raw.get("gpus") if isinstance(raw, dict) else None
    if not isinstance(gpus, list):
        raise FabricError(f"{p}: expected an object with a \"gpus\" list")
    return [_gpu_from_json(p, i, g) for i, g in enumerate(gpus)]


def _read_regular(p: Path) -> str:
    """Read a file without blocking on a FIFO or device put in its place."""
    fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{p} is not a regular file")
        return handle.read(1 << 20).decode("utf-8")


def _gpu_from_json(p: Path, pos: int, g: object) -> GpuFabric:
    where = f"{p}: gpus[{pos}]"
    if not isinstance(g, dict):
        raise FabricError(f"{where}: expected an object")
    try:
        state = _code(g.get("state", "COMPLETED"), STATE_CODES)
        absent = ZERO_UUID if state == STATE_NOT_SUPPORTED else None
        cluster = g.get("cluster_uuid", absent)
        clique = g.get("clique_id", 0 if absent else None)
        if cluster is None or clique is None:
            raise KeyError("cluster_uuid" if cluster is None else "clique_id")
        return GpuFabric(
            index=_int(g.get("index", pos)), uuid=str(g.get("uuid", f"GPU-sim-{pos}")),
            cluster_uuid=_uuid_text(cluster), clique_id=_int(clique),
            state=state, status=_code(g.get("status", "SUCCESS"), STATUS_CODES),
            health_mask=_int(g.get("health_mask", HEALTHY_MASK if not absent else 0)),
            health_summary=_code(g.get("health_summary", 0), HEALTH_SUMMARY_CODES))
    except KeyError as exc:
        raise FabricError(f"{where}: missing key {exc.args[0]!r}") from None
    except (TypeError, ValueError, OverflowError) as exc:
        raise FabricError(f"{where}: bad value ({exc})") from None


def _int(value: object) -> int:
    """A JSON integer or a decimal/0x string; floats (Infinity, NaN, 1.5) are refused."""
    if isinstance(value, bool) or isinstance(value, float):
        raise ValueError(f"{value!r} is not an integer")
    if isinstance(value, int):
        return value
    return int(str(value).strip(), 0)


def _code(value: object, names: dict[str, int]) -> int:
    if isinstance(value, (bool, float)):
        raise ValueError(f"{value!r} is not a state/status")
    if isinstance(value, int):
        return value
    key = str(value).strip().upper().replace(" ", "_")
    if key in names:
        return names[key]
    raise ValueError(f"unknown value {value!r}; allowed: {', '.join(names)} or a number")


def _uuid_text(value: object) -> str:
    """``value`` as a canonical UUID string; ValueError when it is not one. The usual
    (already canonical) text is checked without importing uuid on the prolog's path."""
    text = str(value)
    if re.fullmatch(_CANONICAL_UUID, text):
        return text
    import uuid

    return str(uuid.UUID(text))


# ------------------------------------------------------------------ NVML source
# How long one read of every GPU's fabric may take before the hook gives up on NVML: NVML
# calls have been seen to hang on real trays (NVSentinel #1748); well inside any
# PrologEpilogTimeout, far above a healthy read (milliseconds per GPU).
NVML_DEADLINE_S = 10.0


def read_fabric_nvml(pynvml: ModuleType | None = None, timeout_s: float | None = None) -> list[GpuFabric]:
    """Every GPU's fabric record through NVML (``imexctl.tray.nvml``, loaded only when used).
    ``timeout_s``: under that deadline (imexctl.base.bounded); a hang is a FabricError
    naming the call and the GPU."""
    from imexctl.tray.nvml import read_gpus
    if timeout_s is None:
        return read_gpus(pynvml)
    from imexctl.base import bounded

    try:
        return bounded.call(lambda progress: read_gpus(pynvml, progress), timeout_s,
                            name="imexctl-nvml")
    except bounded.Hung as exc:
        raise FabricError(str(exc)) from None


def local_verdict(cfg: Config) -> FabricVerdict:
    """This tray's verdict under the site's ``[fabric]`` settings (source, on_degraded,
    on_fabric_manager)."""
    fab = cfg.fabric
    return fabric_verdict(fab.source, fab.file, fab.on_degraded, fab.on_fabric_manager)
