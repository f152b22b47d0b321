"""Per-GPU NVLink fabric identity, from NVML on a real tray or a JSON file on a simulated one.

Both sources return the same ``GpuFabric`` records, so the clique rules in
``topology.py`` judge a simulated tray exactly as they judge a GB200 tray. The file
source exists for the simulator and the test harness; it is also handy to replay what a
broken tray reported.
"""

from __future__ import annotations

import ctypes
import json
import os
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterable

from imexctl.fsutil import atomic_write

STATE_NAMES = {0: "NOT_SUPPORTED", 1: "NOT_STARTED", 2: "IN_PROGRESS", 3: "COMPLETED"}
STATE_CODES = {name: code for code, name in STATE_NAMES.items()}
STATUS_SUCCESS = 0
HEALTHY_MASK = 0x1AA  # every supported health field reads healthy (reference imex.md §4.2)
# nvmlReturn_t names a file may use instead of the number.
STATUS_CODES = {"SUCCESS": 0, "ERROR_NOT_SUPPORTED": 3, "ERROR_INSUFFICIENT_RESOURCES": 23,
                "ERROR_UNKNOWN": 999, "IN_PROGRESS": 24}


class FabricError(Exception):
    """The fabric identity could not be read; the message names the source at fault."""


@dataclass(frozen=True)
class GpuFabric:
    index: int
    uuid: str                 # GPU UUID (informational)
    cluster_uuid: str
    clique_id: int
    state: int                # NVML_GPU_FABRIC_STATE_*
    status: int               # nvmlReturn_t; meaningful only when state is COMPLETED
    health_mask: int

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["state"] = STATE_NAMES.get(self.state, self.state)
        out["status"] = "SUCCESS" if self.status == STATUS_SUCCESS else self.status
        return out


def read_fabric(source: str, path: str | os.PathLike | None = None) -> list[GpuFabric]:
    """All local GPUs' fabric records, in index order."""
    if source == "file":
        if not path:
            raise FabricError("fabric.source is \"file\" but no fabric.file is configured")
        return read_fabric_file(path)
    if source == "nvml":
        return read_fabric_nvml()
    raise FabricError(f"unknown fabric source {source!r} (allowed: nvml, file)")


# ------------------------------------------------------------------ file source
def read_fabric_file(path: str | os.PathLike) -> list[GpuFabric]:
    """Parse ``{"gpus": [{"index", "uuid", "cluster_uuid", "clique_id", "state",
    "status", "health_mask"}, ...]}``; state and status may be names or numbers."""
    p = Path(path)
    try:
        raw = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise FabricError(f"{p}: fabric file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise FabricError(f"{p}: cannot read fabric file: {exc}") from None
    except ValueError as exc:
        raise FabricError(f"{p}: not JSON: {exc}") from None
    gpus = raw.get("gpus") if isinstance(raw, dict) else None
    if not isinstance(gpus, list):
        raise FabricError(f"{p}: expected an object with a \"gpus\" list")
    return [_gpu_from_json(p, i, g) for i, g in enumerate(gpus)]


def _gpu_from_json(p: Path, pos: int, g: Any) -> GpuFabric:
    where = f"{p}: gpus[{pos}]"
    if not isinstance(g, dict):
        raise FabricError(f"{where}: expected an object")
    try:
        state = _code(g.get("state", "COMPLETED"), STATE_CODES)
        status = _code(g.get("status", "SUCCESS"), STATUS_CODES)
        return GpuFabric(
            index=int(g.get("index", pos)), uuid=str(g.get("uuid", f"GPU-sim-{pos}")),
            cluster_uuid=str(uuid.UUID(str(g["cluster_uuid"]))), clique_id=int(g["clique_id"]),
            state=state, status=status, health_mask=int(g.get("health_mask", HEALTHY_MASK)))
    except KeyError as exc:
        raise FabricError(f"{where}: missing key {exc.args[0]!r}") from None
    except (TypeError, ValueError) as exc:
        raise FabricError(f"{where}: bad value ({exc})") from None


def _code(value: Any, names: dict[str, int]) -> int:
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a state/status")
    if isinstance(value, int):
        return value
    key = str(value).strip().upper().replace(" ", "_")
    if key in names:
        return names[key]
    raise ValueError(f"unknown value {value!r}; allowed: {', '.join(names)} or a number")


def write_fabric_file(path: str | os.PathLike, gpus: Iterable[GpuFabric]) -> None:
    """Write a fabric file atomically (simulator and harness use this)."""
    body = json.dumps({"gpus": [g.to_json() for g in gpus]}, indent=1) + "\n"
    atomic_write(Path(path), body.encode(), mode=0o644)


def simulated_tray(cluster_uuid: str, clique_id: int, gpus: int = 4, **overrides: Any
                   ) -> list[GpuFabric]:
    """A healthy simulated tray; ``overrides`` maps GPU index -> dict of changed fields."""
    out = []
    for i in range(gpus):
        fields = dict(index=i, uuid=f"GPU-{uuid.uuid5(uuid.NAMESPACE_OID, f'{cluster_uuid}/{clique_id}/{i}')}",
                      cluster_uuid=cluster_uuid, clique_id=clique_id, state=3,
                      status=STATUS_SUCCESS, health_mask=HEALTHY_MASK)
        fields.update(overrides.get(str(i), {}))
        out.append(GpuFabric(**fields))
    return out


# ------------------------------------------------------------------ NVML source
def read_fabric_nvml() -> list[GpuFabric]:
    """Query every GPU's fabric info through NVML (nvidia-ml-py)."""
    try:
        import pynvml
    except ImportError:
        raise FabricError("nvidia-ml-py (pynvml) is not installed") from None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        raise FabricError(f"NVML init failed: {exc}") from None
    try:
        count = pynvml.nvmlDeviceGetCount()
        return [_nvml_gpu(pynvml, i) for i in range(count)]
    except pynvml.NVMLError as exc:
        raise FabricError(f"NVML query failed: {exc}") from None
    finally:
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError:
            pass


def _nvml_gpu(pynvml: Any, index: int) -> GpuFabric:
    handle = pynvml.nvmlDeviceGetHandleByIndex(index)
    gpu_uuid = pynvml.nvmlDeviceGetUUID(handle)
    if isinstance(gpu_uuid, bytes):
        gpu_uuid = gpu_uuid.decode()
    info = pynvml.c_nvmlGpuFabricInfo_v2_t()  # constructor sets .version
    try:
        # The binding passes its argument straight to C: it must be a pointer.
        pynvml.nvmlDeviceGetGpuFabricInfoV(handle, ctypes.byref(info))
    except pynvml.NVMLError as exc:
        if getattr(exc, "value", None) == getattr(pynvml, "NVML_ERROR_NOT_SUPPORTED", 3):
            return GpuFabric(index, gpu_uuid, str(uuid.UUID(int=0)), 0, 0, 3, 0)
        raise
    cluster = str(uuid.UUID(bytes=bytes(bytearray(info.clusterUuid))))
    return GpuFabric(index=index, uuid=gpu_uuid, cluster_uuid=cluster,
                     clique_id=int(info.cliqueId), state=int(info.state),
                     status=int(info.status), health_mask=int(info.healthMask))
