"""Slurm's own GB200 plugins on the harness, for real (24.11 and 26.05; 22.05 has neither):
switch/nvidia_imex, made active by the simulated /proc/devices each tray shows slurmd, and
topology/block with one block per clique. Hooks only record here: these tests pin down what
Slurm itself does, which imexctl's channel and placement decisions rely on."""

from __future__ import annotations

import re
import time

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


def _slurmd_log(c, tray) -> str:
    return (c.state_dir / "log" / f"slurmd-{tray}.log").read_text(errors="replace")


def _diag(c, tray) -> str:
    """The tail of the tray's imexctl and slurmd logs, for an assertion message."""
    log = imexctl_config.tray_dir(c, tray) / "log" / "imexctl.log"
    own = log.read_text(errors="replace").splitlines()[-25:] if log.exists() else ["(no imexctl.log)"]
    return "\n".join(["imexctl.log:", *own, "slurmd:", *_slurmd_log(c, tray).splitlines()[-25:]])


def _output(c, job) -> str:
    try:
        return c.job_output(job)
    except OSError:  # no output file: the batch script never started
        return ""


def _restart_with_proc_devices(c, tray, text: str) -> str:
    """Give the tray's slurmd this /proc/devices: it is bind-mounted (by inode) when the
    tray starts, so write it, then restart the tray. Returns the slurmd log of the new
    start only."""
    path = imexctl_config.tray_dir(c, tray) / "proc-devices"
    imexctl_config.atomic_write(path, text)
    start = len(_slurmd_log(c, tray))
    c.restart_tray(tray)
    deadline = time.monotonic() + 30
    while "nvidia-caps-imex-channels" not in _slurmd_log(c, tray)[start:] and \
            "plugin disabled" not in _slurmd_log(c, tray)[start:]:
        assert time.monotonic() < deadline, _slurmd_log(c, tray)[start:]
        time.sleep(0.2)
    return _slurmd_log(c, tray)[start:]


def test_plugin_disabled_on_a_tray_without_the_major_drains_it_and_the_job_never_runs(imex_switch):
    """Issue 8: SwitchType=switch/nvidia_imex, and one tray's slurmd starts with no
    nvidia-caps-imex-channels major: slurmd disables the plugin there, so a job would run
    with no channel. imexctl (real hooks) decides per tray: `imexctl status` says Slurm
    cannot make a channel there, that tray's prolog drains it with a precise
    `prolog/channel` reason, and the job never runs (batch: requeued and held)."""
    c = imex_switch
    good, bad = c.trays
    no_major = imexctl_config.PROC_DEVICES.replace(f"{MAJOR} nvidia-caps-imex-channels\n", "")
    assert no_major != imexctl_config.PROC_DEVICES
    c.wait_quiet()   # no epilog of an earlier test's job may be cut short by the restart
    try:
        log = _restart_with_proc_devices(c, bad, no_major)
        assert "major device not found, plugin disabled" in log, log
        c.set_hooks("imexctl")
        for tray in c.trays:
            c.imexctl(tray, "identity", "publish")
        st = c.imexctl_status(bad)
        assert st["channel_owner"]["owner"] == "slurm" and st["channel_owner"]["usable"] is False
        assert "SwitchType=switch/nvidia_imex" in st["channel_owner"]["why"]
        assert any(p.startswith("Slurm's switch/nvidia_imex is disabled on this tray (slurmd: "
                                "\"major device not found, plugin disabled\") and makes no "
                                "channel: nvidia-caps-imex-channels not registered in ")
                   for p in st["problems"]), st["problems"]
        assert "CANNOT make a channel here" in c.imexctl(bad, "status")
        ok = c.imexctl_status(good)["channel_owner"]
        assert (ok["owner"], ok["major"], ok["usable"]) == ("slurm", MAJOR, True)

        marker = "JOB_RAN"
        job = c.submit(["-N", "2", "-w", f"{good},{bad}", "--wrap",
                        f"echo {marker}; srun sh -c '{LIST}'"])
        node = c.wait_node_state(bad, lambda s: "DRAIN" in s, timeout=60)
        assert node["reason"].startswith(
            "imexctl: prolog/channel: Slurm's switch/nvidia_imex owns the channel but cannot "
            "make one on this tray: nvidia-caps-imex-channels not registered in "), _diag(c, bad)
        info = c.wait_job_state(job, "PENDING", timeout=60)   # requeued and held
        assert info["Priority"] == "0" and info["Restarts"] == "1", info
        assert marker not in _output(c, job)              # the script never ran
        assert "DRAIN" not in c.node_info(good)["state"]  # the healthy tray is not blamed
        for tray in c.trays:                              # and imexctl made no channel
            assert _channels(c.exec_on(tray, ["ls", "-ln", "/dev/nvidia-caps-imex-channels/"]).stdout) == []
            assert list((imexctl_config.tray_dir(c, tray) / "dev" / "nvidia-caps-imex-channels").iterdir()) == []
        st = c.imexctl_status(bad)
        assert st["state"] == "idle" and st["domain"] is None
        assert f"drained by imexctl: {node['reason']} (see docs/runbook.md)" in st["problems"]
    finally:
        c.cancel_all()
        c.wait_quiet(timeout=90)
        c.set_hooks("record")
        log = _restart_with_proc_devices(c, bad, imexctl_config.PROC_DEVICES)
        c.scontrol("update", f"nodename={bad}", "state=resume", check=False)
    assert f"nvidia-caps-imex-channels major: {MAJOR}" in log and "plugin disabled" not in log
    c.wait_node_state(bad, "IDLE")


@pytest.mark.slurm_min(25, 11)
def test_status_reports_the_channel_slurm_allocated(imex_switch):
    """With the real imexctl hooks: imexctl creates no channel, and `imexctl status` (node
    and cluster views) reports the one Slurm allocated (`scontrol show resources`, 25.11+)."""
    import json

    from tests.support.harness import wait_running_domain

    c = imex_switch
    c.set_hooks("imexctl")
    try:
        for tray in c.trays:
            c.imexctl(tray, "identity", "publish")
        job = c.submit(["-N", "2", "--wrap", f"srun sh -c '{LIST}'; sleep 12"])
        sts = wait_running_domain(c, job, c.trays, timeout=90)
        shown = c.client(["scontrol", "show", "resources", str(job)]).stdout
        slurm = {m[0]: int(m[1]) for m in re.findall(r"^Node=(\S+) .*Channel=(\d+)", shown, re.M)}
        assert sorted(slurm) == c.trays and len(set(slurm.values())) == 1, shown
        for tray in c.trays:
            assert sts[tray]["decision"]["channel_rule"] == "slurm switch/nvidia_imex", sts[tray]
            assert sts[tray]["channels_present"] == []          # imexctl made none
            assert sts[tray]["slurm"]["slurm_channel"] == slurm[tray], sts[tray]["slurm"]
        res = c.exec_on(c.trays[0], [str(c.imexctl_bin), "status", "--json", "--nodes",
                                     ",".join(c.trays)],
                        env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "SLURMD_NODENAME": c.trays[0]})
        assert res.returncode == 0, res.stderr
        view = json.loads(res.stdout)
        dom = next(j for j in view["jobs"] if j["job_id"] == job)["domains"][0]
        assert dom["channel"] == slurm[c.trays[0]] and dom["channel_source"] == "slurm", dom
        assert c.wait_job_state(job, "COMPLETED", timeout=60)["JobState"] == "COMPLETED"
        step = _channels(c.job_output(job))                    # the step saw that channel
        assert {d[2] for d in step} == set(slurm.values()), step
    finally:
        c.cancel_all()
        c.wait_quiet(timeout=90)
        c.set_hooks("record")


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
