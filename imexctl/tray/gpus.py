"""What NVML says about one GPU's NVLink fabric: the record, its state, status and health
words, and the errors of reading it. Both fabric sources (NVML and the JSON file) return
these records, and the verdict on the tray is made from them (imexctl.tray.fabric)."""

from __future__ import annotations

import re

from imexctl.base.dataclass import asdict, dataclass, field
from imexctl.rules.cliques import ZERO_UUID

TYPE_CHECKING = False
if TYPE_CHECKING:
    from imexctl.base.jsontypes import Json

STATE_NAMES = {0: "NOT_SUPPORTED", 1: "NOT_STARTED", 2: "IN_PROGRESS", 3: "COMPLETED"}
STATE_CODES = {name: code for code, name in STATE_NAMES.items()}
STATE_NOT_SUPPORTED, STATE_COMPLETED = 0, 3
STATUS_SUCCESS = 0
# nvmlReturn_t names a file may use instead of the number.
STATUS_CODES = {"SUCCESS": 0, "ERROR_NOT_SUPPORTED": 3, "ERROR_INSUFFICIENT_RESOURCES": 23,
                "ERROR_UNKNOWN": 999, "IN_PROGRESS": 24}
HEALTH_SUMMARY_NAMES = {0: "NOT_SUPPORTED", 1: "HEALTHY", 2: "UNHEALTHY", 3: "LIMITED_CAPACITY"}
HEALTH_SUMMARY_CODES = {name: code for code, name in HEALTH_SUMMARY_NAMES.items()}
SUMMARY_UNHEALTHY, SUMMARY_LIMITED = 2, 3


@dataclass(frozen=True)
class HealthField:
    """One field of NVML's fabric healthMask: ``(mask >> shift) & width``; 0 = not supported."""
    name: str
    shift: int
    width: int
    good: int                       # the value that means "fine"
    values: dict[int, str]          # every documented value's name


_TF = {1: "TRUE", 2: "FALSE"}
HEALTH_FIELDS = (
    HealthField("degraded_bw", 0, 0x3, 2, _TF),
    HealthField("route_recovery", 2, 0x3, 2, _TF),
    HealthField("route_unhealthy", 4, 0x3, 2, _TF),
    HealthField("access_timeout_recovery", 6, 0x3, 2, _TF),
    HealthField("incorrect_configuration", 8, 0xF, 1, {
        1: "NONE", 2: "INCORRECT_SYSGUID", 3: "INCORRECT_CHASSIS_SN", 4: "NO_PARTITION",
        5: "INSUFFICIENT_NVLINKS", 6: "INCOMPATIBLE_GPU_FW", 7: "INVALID_LOCATION",
        8: "GPU_STATE_INVALID"}),
    HealthField("partition_assigned", 12, 0x3, 1, _TF),
    HealthField("gfm_state", 14, 0x3, 1, {1: "CONNECTED", 2: "DISCONNECTED"}),
)
HEALTH_FIELD_NAMES = {f.name: f for f in HEALTH_FIELDS}
DEGRADED_FIELD = "degraded_bw"    # the one fault a site may run jobs on (fabric.on_degraded)
# What the fabric manager (NMX-C / FM) says about itself, not about the GPU: both are set on
# every GPU of a rack while the fabric manager restarts, and no sample shows IMEX stopping
# for them (fidelity review N5). A warning unless the site drains for them
# (fabric.on_fabric_manager), and even then never when every GPU of the tray reports them.
FABRIC_MANAGER_FIELDS = ("gfm_state", "partition_assigned")


def health_mask(**values: int) -> int:
    """Compose a healthMask: every field healthy unless given, e.g. ``health_mask(degraded_bw=1)``."""
    mask = 0
    for f in HEALTH_FIELDS:
        value = values.pop(f.name, f.good)
        if not 0 <= value <= f.width:
            raise ValueError(f"{f.name}={value} does not fit its {f.width:#x} field")
        mask |= value << f.shift
    if values:
        raise ValueError(f"unknown health field {sorted(values)[0]!r}; "
                         f"allowed: {', '.join(HEALTH_FIELD_NAMES)}")
    return mask


HEALTHY_MASK = health_mask(partition_assigned=0, gfm_state=0)  # 0x1aa, reference imex.md §4.2


def decode_health(mask: int) -> dict[str, str]:
    """Each supported healthMask field's value by name (unsupported fields are left out)."""
    out = {}
    for f in HEALTH_FIELDS:
        value = (mask >> f.shift) & f.width
        if value:
            out[f.name] = f.values.get(value, str(value))
    return out


def health_problems(mask: int) -> list[str]:
    """Supported fields that do not read "fine", as ``name=VALUE``."""
    out = []
    for f in HEALTH_FIELDS:
        value = (mask >> f.shift) & f.width
        if value not in (0, f.good):
            out.append(f"{f.name}={f.values.get(value, value)}")
    return out


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
    health_summary: int = 0   # v3 only; 0 = not supported / not read

    def to_json(self) -> Json:
        out = asdict(self)
        out["state"] = STATE_NAMES.get(self.state, self.state)
        out["status"] = "SUCCESS" if self.status == STATUS_SUCCESS else self.status
        out["health_summary"] = HEALTH_SUMMARY_NAMES.get(self.health_summary,
                                                         self.health_summary)
        return out


class NoNvidiaDriver(FabricError):
    """libnvidia-ml is not installed: no NVIDIA driver, so no GPU and no fabric here."""
