"""Slurm's own GB200 plugins on the harness, for real (24.11 and 26.05; 22.05 has neither):
switch/nvidia_imex, made active by the simulated /proc/devices each tray shows slurmd, and
topology/block with one block per clique. Hooks only record here: these tests pin down what
Slurm itself does, which imexctl's channel and placement decisions rely on."""

from __future__ import annotations

import re

import pytest

from tests.cluster import imexctl_config

pytestmark = [pytest.mark.integration, pytest.mark.slurm_min(24, 5)]
MAJOR = int(re.search(r"^\s*(\d+) nvidia-caps-imex-channels$", imexctl_config.PROC_DEVICES, re.M).group(1))
LIST = "ls -ln /dev/nvidia-caps-imex-channels/ 2>&1; echo STEP_END"


@pytest.fixture(scope="module")
def imex_switch(cluster):
    """Two trays with SwitchType=switch/nvidia_imex beside the session cluster."""
    c = cluster.sibling("/tmp/imexctl-harness-switch", 2, index=3, hooks="record", switch_type="switch/nvidia_imex")
    try:
        c.up()
        yield c
    finally:
        c.down(purge=True)


def _channels(text: str) -> list[tuple[str, int, int, str]]:
    """(mode, major, minor, name) of each device `ls -ln` listed."""
    return [(m[0], int(m[1]), int(m[2]), m[3]) for m in
            re.findall(r"^(?:\d+: )?(c\S+)\s+\d+\s+0\s+0\s+(\d+),\s*(\d+)\s+.*\s(channel\d+)$", text, re.M)]


def test_switch_plugin_finds_the_simulated_major(imex_switch):
    c = imex_switch
    assert "switch/nvidia_imex" in c.scontrol("show", "config")
    for tray in c.trays:
        log = (c.state_dir / "log" / f"slurmd-{tray}.log").read_text()
        assert f"nvidia-caps-imex-channels major: {MAJOR}" in log
        assert "plugin disabled" not in log


def test_every_srun_step_gets_one_channel_in_a_private_dev(imex_switch):
    c = imex_switch
    res = c.srun(["-N", "2", "-l", "sh", "-c", LIST], timeout=60)
    assert res.returncode == 0, res.stderr
    devs = _channels(res.stdout)
    assert len(devs) == 2 and len({d[2] for d in devs}) == 1  # one channel, same on both trays
    mode, major, _, name = devs[0]
    assert mode == "crw-rw-rw-" and major == MAJOR and name == f"channel{devs[0][2]}"
    for tray in c.trays:  # the device lives in the step's mount namespace only
        outside = c.exec_on(tray, ["ls", "-ln", "/dev/nvidia-caps-imex-channels/"])
        assert _channels(outside.stdout) == []


def test_concurrent_jobs_get_different_channels(imex_switch):
    c = imex_switch
    jobs = [c.submit(["-N", "1", "-w", tray, "--wrap", f"srun sh -c '{LIST}'; sleep 3"]) for tray in c.trays]
    for job in jobs:
        assert c.wait_job_state(job, ("COMPLETED", "FAILED", "CANCELLED"), timeout=60)["JobState"] == "COMPLETED"
    minors = [[d[2] for d in _channels(c.job_output(job))] for job in jobs]
    assert all(len(m) == 1 for m in minors), minors
    assert minors[0] != minors[1]


def test_batch_step_channel_by_version(imex_switch):
    """The batch script itself: 24.11 shows it no channel, 26.05 the job's channel."""
    c = imex_switch
    job = c.submit(["-N", "1", "--wrap", f"{LIST}; srun sh -c '{LIST}'"])
    assert c.wait_job_state(job, ("COMPLETED", "FAILED"), timeout=60)["JobState"] == "COMPLETED"
    batch_part, step_part = c.job_output(job).split("STEP_END", 1)
    step = _channels(step_part)
    assert len(step) == 1
    if c.slurm_version >= (26, 5):
        assert _channels(batch_part) == step
    else:
        assert _channels(batch_part) == []


BLOCKS = "BlockName=b1 Nodes={a}\nBlockName=b2 Nodes={b}\n"


@pytest.fixture(scope="module")
def blocks(cluster):
    """Four trays in two blocks (one per NVLink clique) with TopologyPlugin=topology/block."""
    c = cluster.sibling("/tmp/imexctl-harness-blocks", 4, index=4, hooks="record")
    c.topology_conf = BLOCKS.format(a=",".join(c.trays[:2]), b=",".join(c.trays[2:]))
    try:
        c.up()
        yield c
    finally:
        c.down(purge=True)


def _nodes(c, job) -> set[str]:
    return set(c.scontrol("show", "hostnames", c.job_info(job)["NodeList"]).split())


def test_topology_block_is_active(blocks):
    c = blocks
    assert "topology/block" in c.scontrol("show", "config")
    shown = c.scontrol("show", "topology")
    assert "b1" in shown and "b2" in shown


def test_two_tray_jobs_land_inside_one_block(blocks):
    c = blocks
    block_of = {t: i // 2 for i, t in enumerate(c.trays)}
    jobs = [c.submit(["-N", "2", "--exclusive", "--wrap", "sleep 4"]) for _ in range(2)]
    placed = []
    for job in jobs:
        c.wait_job_state(job, "RUNNING", timeout=60)
        placed.append(_nodes(c, job))
    for nodes in placed:
        assert len(nodes) == 2 and len({block_of[n] for n in nodes}) == 1, placed
    assert placed[0].isdisjoint(placed[1])  # both ran at once, one block each
    for job in jobs:
        c.wait_job_state(job, "COMPLETED", timeout=60)


def test_a_job_larger_than_a_block_spans_blocks(blocks):
    c = blocks
    job = c.submit(["-N", "3", "--wrap", "srun hostname"])
    info = c.wait_job_state(job, ("COMPLETED", "FAILED", "CANCELLED"), timeout=60)
    assert info["JobState"] == "COMPLETED"
    nodes = _nodes(c, job)
    assert len(nodes) == 3 and nodes & set(c.trays[:2]) and nodes & set(c.trays[2:])
    assert sorted(c.job_output(job).split()) == sorted(nodes)
