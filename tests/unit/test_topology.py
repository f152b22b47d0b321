"""Clique rules: tray fitness (node fault) and allocation agreement (job fault)."""

from dataclasses import dataclass

import pytest

from imexctl.tray.gpus import GpuFabric
from imexctl.tray.fabric import judge
from imexctl.rules.cliques import TrayIdentity

UUID = "9c6f5af3-53bf-49b5-a436-b66766c413c3"


def Gpu(index, cluster_uuid=UUID, clique_id=1, state=3, status=0, health_mask=0x1AA):
    return GpuFabric(index, f"GPU-{index}", cluster_uuid, clique_id, state, status,
                     health_mask)


def test_healthy_tray():
    ident = judge([Gpu(i) for i in range(4)]).clique
    assert ident.clique == f"{UUID}.1" and ident.gpu_count == 4
    assert TrayIdentity.from_extra(ident.to_extra()).clique == ident.clique


@pytest.mark.parametrize("gpus, needle", [
    ([Gpu(0), Gpu(1, state=2)], "GPU 1 fabric state In Progress, not Completed"),
    ([Gpu(0, status=24)], "GPU 0 fabric status 24, not Success"),
    ([Gpu(0, health_mask=0x1AA & ~(0x3 << 4) | (1 << 4))], "route_unhealthy"),
    ([Gpu(0), Gpu(1, clique_id=2)], "GPUs disagree on their clique"),
    ([Gpu(0, cluster_uuid="00000000-0000-0000-0000-000000000000")], "not MNNVL"),
])
def test_unfit_trays(gpus, needle):
    verdict = judge(gpus)
    assert verdict.kind == "unfit" and needle in verdict.detail, verdict


def test_health_mask_zero_means_not_supported():
    assert judge([Gpu(0, health_mask=0)]).kind == "imex"
