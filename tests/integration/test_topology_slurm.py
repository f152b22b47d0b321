"""`imexctl topology` output loaded by a real slurmctld with topology/block, and `--segment`
jobs placed by it.

Slurm 22.05 on the host has no topology/block, so these tests run the slurmctld of the
harness's cached Debian roots (24.11 from trixie, 26.05 from sid; built by
`tests/cluster/rootfs.py`, cached under IMEXCTL_HARNESS_ROOT_CACHE) in a private mount and
network namespace, with a throw-away config bound over the root's /etc/slurm (the cached
root itself is never written). slurmctld reads the topology at start-up and either logs
its blocks or exits with `fatal:`; the tests wait for one of the two, then stop it.

The `--segment` test runs a harness cluster of the suite's Slurm (IMEXCTL_SLURM; 26.05: 24.11
prints no SegmentSize)
with topology/block and the real imexctl hooks: PrologSlurmctld reads the job's SegmentSize
and reports a segment that spans NVLink cliques.
"""

from __future__ import annotations

import fcntl
import os
import re
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from imexctl.rules import decision as dec
from imexctl.ops import topoconf
from imexctl.rules.cliques import TrayIdentity

pytestmark = pytest.mark.integration

CACHE = Path(os.environ.get("IMEXCTL_HARNESS_ROOT_CACHE", "/var/cache/imexctl-harness"))
NODES = [f"tray{i:03d}" for i in range(1, 37)]
RUN = """set -e
mount --bind "$CONF" "$ROOT/etc/slurm"
mount -t proc proc "$ROOT/proc"
ip link set lo up
ip link add v0 type veth peer name v1
ip addr add 10.99.0.1/24 dev v0
ip link set v0 up; ip link set v1 up
exec chroot "$ROOT" /usr/sbin/slurmctld -D -i -f /etc/slurm/slurm.conf
"""


def root_for(suite: str) -> Path:
    root = CACHE / suite
    if os.geteuid() != 0 or not (root / "usr" / "sbin" / "slurmctld").exists():
        pytest.skip(f"needs root and the harness's cached {suite} root ({root})")
    return root


def slurm_conf(conf: Path, topology_plugin: bool) -> None:
    (conf / "state").mkdir(parents=True)
    (conf / "slurm.key").write_bytes(os.urandom(64))
    (conf / "slurm.key").chmod(0o600)
    lines = [
        "ClusterName=topo", f"SlurmctldHost={socket.gethostname()}(10.99.0.1)",
        "SlurmUser=root", "AuthType=auth/slurm", "CredType=cred/slurm",
        "StateSaveLocation=/etc/slurm/state", "SlurmctldPidFile=/etc/slurm/ctld.pid",
        "SlurmctldLogFile=/etc/slurm/ctld.log", "SlurmctldDebug=debug", "MailProg=/bin/true",
        "SelectType=select/cons_tres",
        "NodeName=tray[001-036] NodeAddr=127.0.0.1 CPUs=1 State=UNKNOWN",
        "PartitionName=p Nodes=ALL Default=YES",
    ]
    if topology_plugin:
        lines.append("TopologyPlugin=topology/block")
    (conf / "slurm.conf").write_text("\n".join(lines) + "\n")


def start_slurmctld(suite: str, conf: Path, timeout: float = 30.0) -> str:
    """slurmctld's log up to the point where it read the topology (or died)."""
    root = root_for(suite)
    log = conf / "ctld.log"
    with open(CACHE / f".lock-{suite}", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_SH)      # the harness rebuilds a root under LOCK_EX
        proc = subprocess.Popen(
            ["unshare", "--mount", "--net", "--propagation", "private", "--", "/bin/sh", "-c", RUN],
            env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "CONF": str(conf), "ROOT": str(root)},
            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                text = log.read_text() if log.exists() else ""
                if "fatal:" in text or "Aggregated Block name" in text or proc.poll() is not None:
                    time.sleep(0.2)
                    return log.read_text() if log.exists() else ""
                time.sleep(0.1)
            raise AssertionError(f"slurmctld {suite} neither read the topology nor died:\n{text}")
        finally:
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # the namespace and its mounts go with it
            except ProcessLookupError:
                pass
            proc.wait(timeout=30)


def two_racks(sizes=None) -> topoconf.Topology:
    ids = {n: TrayIdentity(f"{i // 18 + 1:08x}-1c1a-4d0e-9a5e-00000000abcd", 32766, 4)
           for i, n in enumerate(NODES)}
    return topoconf.build(NODES, ids, sizes)


@pytest.mark.parametrize("suite", ["trixie", "sid"])
def test_topology_conf_is_loaded_as_written(suite, tmp_path):
    slurm_conf(tmp_path, topology_plugin=True)
    (tmp_path / "topology.conf").write_text(topoconf.render_conf(two_racks()))
    log = start_slurmctld(suite, tmp_path)
    assert "fatal:" not in log, log[-2000:]
    assert "Block name:b_00000001_32766 nodes:tray[001-018]" in log
    assert "Block name:b_00000002_32766 nodes:tray[019-036]" in log
    # the names survive Slurm's hostlist handling when blocks are aggregated (BlockSizes 36)
    assert "Aggregated Block name:b_00000001_32766,b_00000002_32766 nodes:tray[001-036]" in log


def test_topology_yaml_is_loaded_by_26_05(tmp_path):
    slurm_conf(tmp_path, topology_plugin=False)
    (tmp_path / "topology.yaml").write_text(topoconf.render_yaml(two_racks()))
    log = start_slurmctld("sid", tmp_path)
    assert "fatal:" not in log, log[-2000:]
    assert "Plugin: topology/block, Topology Name:nvlink" in log
    assert "Aggregated Block name:b_00000001_32766,b_00000002_32766 nodes:tray[001-036]" in log


@pytest.mark.parametrize("suite, sizes, fatal", [
    ("trixie", "18,27", "Invalid BlockSizes value: 27"),
    ("sid", "18,27", "Invalid BlockSizes value: 27"),
    ("trixie", "36", "children count lower than bblock_node_cnt"),
])
def test_what_imexctl_refuses_slurm_refuses(suite, sizes, fatal, tmp_path):
    """The BlockSizes imexctl's validator refuses make slurmctld fail to start."""
    with pytest.raises(topoconf.TopologyError):
        two_racks([int(s) for s in sizes.split(",")])
    slurm_conf(tmp_path, topology_plugin=True)
    text = re.sub(r"BlockSizes=.*", f"BlockSizes={sizes}", topoconf.render_conf(two_racks()))
    (tmp_path / "topology.conf").write_text(text)
    log = start_slurmctld(suite, tmp_path)
    assert "fatal:" in log and fatal in log, log[-2000:]


U1 = "5b1b3a1e-1c1a-4d0e-9a5e-0000000000b1"
U2 = "5b1b3a1e-1c1a-4d0e-9a5e-0000000000b2"


@pytest.fixture(scope="module")
def blocks(cluster):
    """Four trays in two blocks, tray[01-02] and tray[03-04], with real imexctl hooks."""
    c = cluster.sibling("/tmp/imexctl-harness-segment", 4, index=6, hooks="imexctl",
                        topology_conf="BlockName=b1 Nodes=tray[01-02]\n"
                                      "BlockName=b2 Nodes=tray[03-04]\n")
    try:
        c.up(timeout=120)
        yield c
    finally:
        c.down(purge=True)


def segment_job(c, cliques: dict[str, str]) -> tuple[dict, dec.Decision]:
    """Publish the trays' cliques, run a 4-tray --segment=2 job until its controller
    decision is recorded; its job record and decision."""
    for tray, uuid in cliques.items():
        c.set_fabric(tray, cluster_uuid=uuid, clique_id=32766)
        c.imexctl(tray, "identity", "publish")
    job = c.submit(["-N", "4", "--segment=2", "--wrap", "sleep 30"])
    deadline = time.monotonic() + 90
    while dec.decode((info := c.job_info(job)).get("AdminComment")) is None:
        assert time.monotonic() < deadline, info
        time.sleep(0.3)
    c.client(["scancel", str(job)])
    c.wait_quiet(timeout=90)
    return info, dec.decode(info["AdminComment"])


@pytest.mark.slurm_min(26, 5)  # 24.11 prints no SegmentSize: nothing to check there
def test_segment_that_spans_cliques_is_reported(blocks):
    c = blocks
    log = c.state_dir / "trays" / c.ctl_name / "log" / "imexctl.log"
    # blocks match the cliques: each segment inside one clique, nothing to report
    info, record = segment_job(c, {"tray01": U1, "tray02": U1, "tray03": U2, "tray04": U2})
    assert info["SegmentSize"] == "2", info
    assert record.action == "domains" and len(record.groups) == 2, info["AdminComment"]
    assert "segment" not in (record.note or ""), record.note
    assert "segment of the job spans" not in (log.read_text() if log.exists() else "")
    # tray02 moved to the other clique, topology.conf not rewritten: segment b1 spans two
    info, record = segment_job(c, {"tray01": U1, "tray02": U2, "tray03": U2, "tray04": U2})
    assert record.action == "domains" and [g.members for g in record.groups] == [
        ("tray01",), ("tray02", "tray03", "tray04")], info["AdminComment"]
    assert (f"warning: a segment spans cliques: {U1}.32766 holds 1 trays, not a multiple of "
            f"the segment size 2 {U2}.32766 holds 3 trays") in record.note, record.note
    lines = [ln for ln in log.read_text().splitlines()
             if "a segment of the job spans NVLink cliques" in ln]
    assert len(lines) == 1 and info["JobId"] in lines[0] and "segment_size" in lines[0], lines
