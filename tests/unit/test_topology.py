"""Clique rules: tray fitness (node fault) and allocation agreement (job fault)."""

from dataclasses import dataclass

import pytest

from imexctl.topology import (TrayIdentity, TrayUnfit, tray_identity,
                              unhealthy_fields)

UUID = "9c6f5af3-53bf-49b5-a436-b66766c413c3"


@dataclass
class Gpu:
    index: int
    cluster_uuid: str = UUID
    clique_id: int = 1
    state: int = 3
    status: int = 0
    health_mask: int = 0x1AA


def test_healthy_tray():
    ident = tray_identity([Gpu(i) for i in range(4)])
    assert ident.clique == f"{UUID}.1" and ident.gpu_count == 4
    assert TrayIdentity.from_extra(ident.to_extra()).clique == ident.clique


@pytest.mark.parametrize("gpus, needle", [
    ([], "no GPU"),
    ([Gpu(0), Gpu(1, state=2)], "GPU 1 fabric state In Progress, not Completed"),
    ([Gpu(0, status=24)], "GPU 0 fabric status 24, not Success"),
    ([Gpu(0, health_mask=0x1AA & ~0x3 | 0x1)], "degraded_bw=1"),
    ([Gpu(0), Gpu(1, clique_id=2)], "GPUs disagree on their clique"),
    ([Gpu(0, cluster_uuid="00000000-0000-0000-0000-000000000000")], "not MNNVL"),
])
def test_unfit_trays(gpus, needle):
    with pytest.raises(TrayUnfit, match=needle):
        tray_identity(gpus)


def test_health_mask_zero_means_not_supported():
    assert unhealthy_fields(0) == [] and unhealthy_fields(0x1AA) == []
    assert unhealthy_fields(0x1AA & ~(0x3 << 4) | (1 << 4)) == ["route_unhealthy=1"]
