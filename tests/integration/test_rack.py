"""A full NVL72 rack: 18 trays on their own harness cluster, one job across all of them."""

from __future__ import annotations

import pytest

from tests.cluster import Cluster
from tests.integration.test_domain import assert_clean, wait_running_domain

pytestmark = pytest.mark.integration


@pytest.fixture
def rack(cluster):
    """18 trays beside the session cluster (own state dir, subnet and link prefix)."""
    c = Cluster("/tmp/imexctl-harness-rack", 18, net_prefix="imxr", subnet="10.213.79",
                cluster_name="imxr", hooks="imexctl")
    try:
        c.up(timeout=120)
        for tray in c.trays:
            c.imexctl(tray, "identity", "publish")
        yield c
    finally:
        c.down(purge=True)


def test_eighteen_tray_job_gets_one_domain(rack):
    c = rack
    job = c.submit(["-N", "18", "--wrap", "srun hostname; sleep 15"])
    sts = wait_running_domain(c, job, c.trays, timeout=90)
    assert len({s["domain"]["digest"] for s in sts.values()}) == 1
    dom = sts["tray18"]["domain"]
    assert dom["domain_state"] == "UP" and dom["node_id"] == 17
    assert [m["status"] for m in dom["members"]] == ["READY"] * 18
    info = c.wait_job_state(job, ("COMPLETED", "FAILED", "CANCELLED"), timeout=90)
    assert info["JobState"] == "COMPLETED"
    assert sorted(c.job_output(job).split()) == c.trays
    c.wait_quiet(timeout=90)
    assert_clean(c, c.trays)
