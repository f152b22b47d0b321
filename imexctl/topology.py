"""NVLink clique rules: which trays may form one IMEX domain.

A tray is fit when every GPU reports fabric state Completed, status Success, a healthy
mask, and all GPUs agree on one cluster UUID + clique ID. A job is fit when all its trays
publish the same clique. The first is a node fault (drain), the second a job fault.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any, Iterable, Mapping

STATE_COMPLETED = 3
STATUS_SUCCESS = 0
ZERO_UUID = "00000000-0000-0000-0000-000000000000"
# healthMask fields that must read "healthy" when supported (0 = not supported is fine).
HEALTH_FIELDS = (  # name, shift, width, healthy value
    ("degraded_bw", 0, 0x3, 2),
    ("route_recovery", 2, 0x3, 2),
    ("route_unhealthy", 4, 0x3, 2),
    ("access_timeout_recovery", 6, 0x3, 2),
    ("incorrect_configuration", 8, 0xF, 1),
)
EXTRA_KEY = "imex"


class TrayUnfit(Exception):
    """This tray's GPUs cannot join a domain (a node fault)."""


@dataclass(frozen=True)
class TrayIdentity:
    cluster_uuid: str
    clique_id: int
    gpu_count: int
    state: str = "Completed"
    observed: float = 0.0

    @property
    def clique(self) -> str:
        return f"{self.cluster_uuid}.{self.clique_id}"

    def to_extra(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_extra(cls, raw: Mapping[str, Any]) -> "TrayIdentity":
        return cls(cluster_uuid=str(raw["cluster_uuid"]), clique_id=int(raw["clique_id"]),
                   gpu_count=int(raw.get("gpu_count", 0)), state=str(raw.get("state", "")),
                   observed=float(raw.get("observed", 0.0)))


def unhealthy_fields(mask: int) -> list[str]:
    bad = []
    for name, shift, width, healthy in HEALTH_FIELDS:
        value = (mask >> shift) & width
        if value not in (0, healthy):
            bad.append(f"{name}={value}")
    return bad


def tray_identity(gpus: Iterable[Any]) -> TrayIdentity:
    """Judge the local GPUs (objects with index, cluster_uuid, clique_id, state, status,
    health_mask); raise TrayUnfit naming the GPU and the fault."""
    gpus = list(gpus)
    if not gpus:
        raise TrayUnfit("no GPU with NVLink fabric found")
    for gpu in gpus:
        if gpu.state != STATE_COMPLETED:
            raise TrayUnfit(f"GPU {gpu.index} fabric state {_state_name(gpu.state)}, "
                            "not Completed")
        if gpu.status != STATUS_SUCCESS:
            raise TrayUnfit(f"GPU {gpu.index} fabric status {gpu.status}, not Success")
        bad = unhealthy_fields(gpu.health_mask)
        if bad:
            raise TrayUnfit(f"GPU {gpu.index} fabric unhealthy ({', '.join(bad)})")
        if gpu.cluster_uuid == ZERO_UUID:
            raise TrayUnfit(f"GPU {gpu.index} has no fabric cluster UUID (not MNNVL)")
    cliques = sorted({(g.cluster_uuid, g.clique_id) for g in gpus})
    if len(cliques) > 1:
        seen = ", ".join(f"GPU {g.index}={g.cluster_uuid}.{g.clique_id}" for g in gpus)
        raise TrayUnfit(f"GPUs disagree on their clique ({seen})")
    uuid, clique = cliques[0]
    return TrayIdentity(uuid, clique, len(gpus), "Completed", round(time.time(), 3))


def _state_name(state: int) -> str:
    return {0: "Not Supported", 1: "Not Started", 2: "In Progress", 3: "Completed"}.get(
        state, str(state))


def allocation_mismatch(published: Mapping[str, TrayIdentity | None]) -> str | None:
    """None when all trays publish one clique; else a reason naming trays and cliques."""
    missing = sorted(n for n, ident in published.items() if ident is None)
    if missing:
        return f"no published fabric identity for {','.join(missing)}"
    groups: dict[str, list[str]] = {}
    for node, ident in published.items():
        groups.setdefault(ident.clique, []).append(node)  # type: ignore[union-attr]
    if len(groups) == 1:
        return None
    parts = [f"{','.join(sorted(nodes))} in {clique}" for clique, nodes in sorted(groups.items())]
    return "allocation spans cliques: " + "; ".join(parts)
