"""Integration fixtures: one real Slurm cluster of 4 simulated trays for the whole session.

Without root or network namespaces the tests skip with the reason; under CI=true the same
condition fails instead, because CI must run them (design §6).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess

import pytest

from tests.cluster import Cluster


def harness_unavailable() -> str | None:
    """Why the harness cannot run here, or None when it can."""
    if os.geteuid() != 0:
        return "integration harness needs root (network namespaces, bind mounts, runuser)"
    for tool in ("unshare", "nsenter", "ip", "runuser"):
        if not shutil.which(tool, path="/usr/sbin:/usr/bin:/sbin:/bin"):
            return f"integration harness needs {tool!r}"
    probe = subprocess.run(["unshare", "--net", "--uts", "--mount", "--", "true"], capture_output=True, text=True)
    if probe.returncode:
        return f"network/mount namespaces unavailable: {probe.stderr.strip()}"
    return None


def skip_or_fail(reason: str) -> None:
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"CI=true but the integration harness cannot run: {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def cluster():
    """The session's cluster (4 trays, knobs from IMEXCTL_HARNESS_*); down at the end unless
    IMEXCTL_HARNESS_KEEP=1."""
    reason = harness_unavailable()
    if reason:
        skip_or_fail(reason)
    c = Cluster.from_env(n=4)
    c.up()
    # A cluster kept from an earlier run (IMEXCTL_HARNESS_KEEP=1) starts clean too.
    c.client(["scancel", "--full", "--user", "nobody"], check=False)
    c.wait_quiet(timeout=90)
    c.resume_all()
    yield c
    if os.environ.get("IMEXCTL_HARNESS_KEEP") != "1":
        c.down()


@pytest.fixture
def recording(cluster):
    """Hooks record their environment and exit 0 for this test, then go back."""
    before = cluster.hooks
    cluster.set_hooks("record")
    try:
        yield cluster
    finally:
        with contextlib.suppress(Exception):
            cluster.wait_quiet(timeout=60)
        cluster.set_hooks(before)


@pytest.fixture
def imex(cluster):
    """The cluster running the real imexctl hooks, every tray's identity published; after
    the test: no job left, faults cleared, fabric healthy, trays resumed."""
    cluster.set_hooks("imexctl")
    for tray in cluster.trays:
        cluster.clear_faults(tray)
        cluster.set_fabric(tray)
        cluster.imexctl(tray, "identity", "publish")
    yield cluster
    with contextlib.suppress(Exception):
        cluster.client(["scancel", "--user", "nobody"], check=False)
        cluster.wait_quiet(timeout=90)
    for tray in cluster.trays:
        cluster.clear_faults(tray)
        cluster.set_fabric(tray)
    cluster.resume_all()
    for tray in cluster.trays:
        cluster.imexctl(tray, "identity", "publish")
