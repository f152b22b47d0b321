"""Integration fixtures: one real Slurm cluster of 4 simulated trays for the whole session.

Which Slurm: `--slurm host|trixie|sid` or IMEXCTL_SLURM (host 22.05, trixie 24.11, sid 26.05
from a root filesystem the harness builds and caches). Tests marked `slurm_min(major, minor)`
or `pyslurm` are deselected (not skipped) where that Slurm cannot run them, and tests marked
`host_slurm_only` (slow, and Slurm's code on their path is the same in every version) on
every Slurm but the host's, `slurm_only(name)` on every Slurm but that one. Without root or
network namespaces the tests skip with the reason; under CI=true any skip of an integration
test fails instead, because CI must run them (design §6).
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess

import pytest

from tests.cluster import Cluster, rootfs
from tests.cluster.harness import SLURMS
from tests.support.harness import harness_unavailable, skip_or_fail

# Slurm of each root suite before its root is built (the stamp has the exact version after).
SUITE_SLURM = {"trixie": (24, 11), "sid": (26, 5)}


def pytest_addoption(parser):
    parser.addoption("--slurm", choices=SLURMS, default=None,
                     help="Slurm for integration tests: host (22.05), trixie (24.11), sid (26.05); "
                          "default IMEXCTL_SLURM or host")


def pytest_configure(config):
    if config.getoption("--slurm"):
        os.environ["IMEXCTL_SLURM"] = config.getoption("--slurm")
    config.addinivalue_line("markers", "slurm_min(major, minor): needs at least this Slurm version")
    config.addinivalue_line("markers", "pyslurm: needs a pyslurm built for the running Slurm (trixie root)")
    config.addinivalue_line("markers", "host_slurm_only(why): a slow test of a Slurm code path that is "
                                       "the same in every supported version: run on the host Slurm only")
    config.addinivalue_line("markers", "slurm_only(name, why): runs on that Slurm only (host, trixie or "
                                       "sid): a slow test one version proves")


def selected_slurm() -> str:
    return os.environ.get("IMEXCTL_SLURM") or "host"


def selected_version() -> tuple[int, int]:
    """The selected Slurm's (major, minor) without starting anything."""
    slurm = selected_slurm()
    if slurm == "host":
        if not os.path.exists("/usr/sbin/slurmd") and os.geteuid() == 0:
            # A fresh machine: install the host's Slurm now (the harness would at its
            # start anyway), so the version, not a guess, decides what is deselected.
            from tests.cluster.harness import PACKAGES, install_packages
            install_packages(PACKAGES)
        try:
            out = subprocess.run(["/usr/sbin/slurmd", "-V"], capture_output=True, text=True).stdout
        except OSError:
            out = ""   # not root and no Slurm: the harness reports it at its start
    else:
        out = (rootfs.read_stamp(rootfs.cache_dir() / slurm) or {}).get("packages", {}).get("slurmd", "")
    m = re.search(r"(\d+)\.(\d+)", out)
    return (int(m.group(1)), int(m.group(2))) if m else SUITE_SLURM.get(slurm, (0, 0))


def pytest_collection_modifyitems(config, items):
    """Deselect what the selected Slurm cannot run: a skip would hide it, and fails under CI."""
    version, slurm = None, selected_slurm()
    keep, drop = [], []
    for item in items:
        marker = item.get_closest_marker("slurm_min")
        wants_pyslurm = item.get_closest_marker("pyslurm") is not None
        if marker or wants_pyslurm:
            version = version or selected_version()
        host_only = item.get_closest_marker("host_slurm_only") is not None
        only = item.get_closest_marker("slurm_only")
        if ((marker and version < tuple(marker.args)) or (wants_pyslurm and slurm not in rootfs.PYSLURM_FOR)
                or (host_only and slurm != "host") or (only and slurm != only.args[0])):
            drop.append(item)
        else:
            keep.append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Under CI=true a skipped integration test is a failure (its reason kept)."""
    outcome = yield
    rep = outcome.get_result()
    if (rep.skipped and os.environ.get("CI", "").lower() == "true" and "integration" in str(item.fspath)
            and not hasattr(rep, "wasxfail")):
        rep.outcome = "failed"
        reason = rep.longrepr[2] if isinstance(rep.longrepr, tuple) else str(rep.longrepr)
        rep.longrepr = f"CI=true: integration test skipped on Slurm {selected_slurm()}: {reason}"


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
    c.cancel_all(full=True)
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
        cluster.cancel_all()
        cluster.wait_quiet(timeout=90)
    for tray in cluster.trays:
        cluster.clear_faults(tray)
        cluster.set_fabric(tray)
    cluster.resume_all()
    for tray in cluster.trays:
        cluster.imexctl(tray, "identity", "publish")


