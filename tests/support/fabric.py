"""Fabric files for simulated trays: what the harness, the unit tests and the benchmarks
write where ``[fabric] source = "file"`` reads (test scaffolding, not in the product)."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Any, Iterable

from imexctl.base.fsutil import atomic_write
from imexctl.tray.gpus import (HEALTHY_MASK, STATE_NOT_SUPPORTED, STATUS_SUCCESS, ZERO_UUID,
                               GpuFabric)


def write_fabric_file(path: str | os.PathLike, gpus: Iterable[GpuFabric]) -> None:
    """Write a fabric file atomically."""
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


def not_imex_tray(gpus: int = 4) -> list[GpuFabric]:
    """What a GPU without a multi-node NVLink fabric answers (real H100, driver 580.159.04)."""
    return [GpuFabric(i, f"GPU-sim-{i}", ZERO_UUID, 0, STATE_NOT_SUPPORTED, STATUS_SUCCESS, 0)
            for i in range(gpus)]


