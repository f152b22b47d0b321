"""The harness itself: real jobs across trays, hook environments, another Slurm prefix,
no leaks, idempotent bring-up, power-cutting a tray. Every wait polls."""

from __future__ import annotations

import os
import pwd
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from tests.cluster import procs

pytestmark = pytest.mark.integration

SHOW = 'echo "$(hostname) $(ip -4 -o addr show dev eth0 | sed -n "s/.* inet \\([0-9.]*\\)\\/.*/\\1/p")"'


def slurm_uid(c) -> int:
    """SlurmUser's uid as the daemons see it: the host's, or the Slurm root's /etc/passwd
    (a fresh host running only a root's Slurm has no slurm user of its own)."""
    if c.root_path is None:
        return pwd.getpwnam("slurm").pw_uid
    for line in c.root_file("/etc/passwd").read_text().splitlines():
        fields = line.split(":")
        if fields[0] == "slurm":
            return int(fields[2])
    raise AssertionError(f"no slurm user in {c.root_file('/etc/passwd')}")


def _hosts_and_ips(text: str) -> tuple[set[str], set[str]]:
    pairs = [line.split()[-2:] for line in text.splitlines() if re.search(r"\d+\.\d+\.\d+\.\d+$", line)]
    return {p[0] for p in pairs}, {p[1] for p in pairs}


def test_sbatch_spans_four_trays(recording):
    c = recording
    job = c.submit(["-N", "4", "--wrap", f"srun -l sh -c '{SHOW}'"])
    info = c.wait_job_state(job, "COMPLETED", timeout=60)
    assert info["UserId"].startswith("nobody(")
    hosts, ips = _hosts_and_ips(c.job_output(job))
    assert hosts == set(c.trays)
    assert ips == set(c.tray_addrs().values())


def test_srun_two_trays_as_nobody(recording):
    res = recording.srun(["-N", "2", "-l", "sh", "-c", SHOW], timeout=60)
    assert res.returncode == 0, res.stderr
    hosts, ips = _hosts_and_ips(res.stdout)
    assert len(hosts) == 2 and hosts <= set(recording.trays)
    assert len(ips) == 2 and ips <= set(recording.tray_addrs().values())


def test_hooks_see_documented_environment(recording):
    c = recording
    job = c.submit(["-N", "2", "--comment", "harness env test", "--wrap", "true"])
    c.wait_job_state(job, "COMPLETED", timeout=60)
    prologs = c.wait_hook_records("prolog", job, 2)
    epilogs = c.wait_hook_records("epilog", job, 2)
    ctl = c.wait_hook_records("prolog-slurmctld", job, 1) + c.wait_hook_records("epilog-slurmctld", job, 1)
    nodes = set(c.scontrol("show", "hostnames", c.job_info(job)["NodeList"]).split())
    for rec in prologs + epilogs + ctl:
        assert rec["SLURM_JOB_ID"] == str(job)
        assert rec["SLURM_JOB_UID"] == "65534" and rec["SLURM_JOB_USER"] == "nobody"
        assert "PATH" not in rec, f"{rec['__hook']} got a PATH"
        nodelist = rec.get("SLURM_JOB_NODELIST") or rec.get("SLURM_NODELIST")
        assert set(c.scontrol("show", "hostnames", nodelist).split()) == nodes
    for rec in prologs + epilogs:
        assert rec["__uid"] == "0"
        assert rec["SLURMD_NODENAME"] == rec["__hostname"] and rec["__hostname"] in nodes
    for rec in ctl:
        assert rec["__uid"] == str(slurm_uid(c)) and rec["__hostname"] == c.ctl_name
        assert "SLURMD_NODENAME" not in rec
    assert {r["__hostname"] for r in prologs} == nodes
    health = c.run_healthcheck("tray02")
    assert health.returncode == 0, health.stderr
    (rec,) = c.hook_records("healthcheck", node="tray02")
    assert {k for k in rec if not k.startswith("__")} == {"SLURMD_NODENAME"}


def test_exec_on_and_tray_files(cluster):
    res = cluster.exec_on("tray03", ["sh", "-c", "hostname; cat /etc/slurm/slurm.conf | head -1; ip -4 -o addr"])
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines()[0] == "tray03"
    assert "tests/cluster" in res.stdout and f"{cluster.tray_addrs()['tray03']}/24" in res.stdout
    cluster.inject_fault("tray03", {"never_ready": True})
    tray = cluster.state_dir / "trays" / "tray03"
    assert '"never_ready": true' in (tray / "faults.json").read_text()
    cluster.clear_faults("tray03")
    cluster.set_fabric("tray03", 4, clique_id=2)
    assert '"clique_id": 2' in (tray / "fabric.json").read_text().replace(" ", " ")
    cluster.set_fabric("tray03")
    toml = (cluster.state_dir / "etc" / "imexctl.toml").read_text()
    assert f'"{cluster.state_dir}/trays/{{node}}/fabric.json"' in toml
    assert "nvidia-caps-imex-channels" in (tray / "proc-devices").read_text()


def test_up_again_is_idempotent_and_quick(cluster):
    ctl = (cluster.state_dir / "run" / "slurmctld.pid").read_text()
    t0 = time.monotonic()
    cluster.up()
    assert time.monotonic() - t0 < 2.0
    assert (cluster.state_dir / "run" / "slurmctld.pid").read_text() == ctl
    cluster.wait_nodes_ready(timeout=10)


@pytest.mark.host_slurm_only("CI time: a harness self-test (~17 s)")
def test_kill_and_restart_tray(recording):
    c = recording
    c.kill_tray("tray04")
    assert not c.tray_alive("tray04")
    c.wait_node_state("tray04", lambda st: "NOT_RESPONDING" in st or "DOWN" in st, timeout=60)
    c.restart_tray("tray04")
    c.wait_node_state("tray04", "IDLE", timeout=30)
    res = c.srun(["-w", "tray04", "hostname"], timeout=60)
    assert res.returncode == 0 and res.stdout.strip() == "tray04", res.stderr


def test_hook_wrappers_find_imexctl_without_path():
    repo = Path(__file__).resolve().parents[2]
    for hook, sub in (("prolog", "prolog"), ("epilog", "epilog"), ("prolog-slurmctld", "prolog-slurmctld"),
                      ("epilog-slurmctld", "epilog-slurmctld"), ("healthcheck", "health")):
        text = (repo / "hooks" / hook).read_text()
        assert text.startswith("#!/bin/sh") and f'run_imexctl {sub} "$@"' in text
    res = subprocess.run(["/usr/bin/env", "-i", str(repo / "hooks" / "healthcheck"), "--help"],
                         capture_output=True, text=True, timeout=30)
    assert res.returncode != 127, res.stderr  # 127: the wrapper did not find imexctl


def _snapshot(extra_ignore: set[str]) -> dict:
    names = ("slurmctld", "slurmd", "slurmstepd", "munged")
    pids = set()
    for d in os.listdir("/proc"):
        try:
            if d.isdigit() and Path(f"/proc/{d}/comm").read_text().strip() in names and procs.is_alive(int(d)):
                pids.add(int(d))
        except OSError:
            pass
    run = lambda *a: subprocess.run(a, capture_output=True, text=True).stdout  # noqa: E731
    mounts = sorted(" ".join(line.split()[3:5]) for line in Path("/proc/self/mountinfo").read_text().splitlines())
    return {
        "pids": pids,
        "netns": run("ip", "netns", "list"),
        "links": sorted(line.split(":")[1].strip() for line in run("ip", "-o", "link").splitlines()),
        "addrs": run("ip", "-o", "-4", "addr"),
        "mounts": mounts,
        "tmp": sorted(set(os.listdir("/tmp")) - extra_ignore),
        "etc": {p: Path(p).read_bytes() for p in ("/etc/hosts", "/etc/hostname") if Path(p).exists()},
        "etc_slurm": sorted(os.listdir("/etc/slurm")),
    }


def test_second_build_from_prefix_leaves_nothing(cluster):
    """Another Slurm prefix by configuration alone, beside the session cluster, and no leaks."""
    state, prefix = Path("/tmp/imexctl-harness-t2"), Path("/tmp/imexctl-harness-t2-prefix")
    shutil.rmtree(prefix, ignore_errors=True)
    for sub, names in (("sbin", ("slurmctld", "slurmd", "slurmstepd")),
                       ("bin", ("sbatch", "srun", "scontrol", "sinfo", "squeue", "scancel"))):
        (prefix / sub).mkdir(parents=True)
        for name in names:
            (prefix / sub / name).symlink_to(f"/usr/{sub}/{name}")
    before = _snapshot({state.name, prefix.name})
    other = cluster.sibling(state, 2, slurm_prefix=prefix, hooks="record")
    try:
        other.up()
        daemons = [other.tray_pid(n) for n in (other.ctl_name, *other.trays)]
        for pid in daemons:
            argv0 = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode()
            assert argv0.startswith(f"{prefix}/sbin/"), argv0
        res = other.srun(["-N", "2", "hostname"], timeout=60)
        assert res.returncode == 0, res.stderr
        assert sorted(res.stdout.split()) == other.trays
        assert cluster.node_info("tray01")["name"] == "tray01"  # the session cluster is untouched
    finally:
        other.down(purge=True)
        shutil.rmtree(prefix, ignore_errors=True)
    diff: dict = {}
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # netns teardown in the kernel is asynchronous
        after = _snapshot({state.name, prefix.name})
        after["pids"] = after["pids"] - before["pids"]  # new daemons left behind (old ones may end)
        diff = {k: (before[k], after[k]) for k in before if k != "pids" and after[k] != before[k]}
        if after["pids"]:
            diff["pids"] = after["pids"]
        if not diff:
            break
        time.sleep(0.2)
    assert diff == {}
    assert not state.exists()


# Connects from one tray to the slurmd port of every address given, all at once, and
# prints the addresses that did not answer within the deadline.
_REACH = """
import selectors, socket, sys, time
sel, left = selectors.DefaultSelector(), set(sys.argv[1:])
for addr in left:
    s = socket.socket(); s.setblocking(False); s.connect_ex((addr, 6818))
    sel.register(s, selectors.EVENT_WRITE, addr)
deadline = time.monotonic() + 5
while left and time.monotonic() < deadline:
    for key, _ in sel.select(0.2):
        if key.fileobj.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0:
            left.discard(key.data)
        sel.unregister(key.fileobj)
print(" ".join(sorted(left)))
"""


@pytest.mark.host_slurm_only("the harness's network, the same under every Slurm")
def test_forty_trays_reach_each_other(cluster):
    """Every tray of a 40-tray cluster opens a TCP connection to every other. 41
    namespaces resolving each other need about 1,700 neighbour entries, over the kernel's
    default limit of 1,024 for all namespaces together; past it the kernel dropped packets
    between trays, and at 72 trays no IMEX domain came UP. up() raises the limit."""
    big = cluster.sibling("/tmp/imexctl-harness-forty", 40, index=7, hooks="record")
    try:
        big.up(timeout=120)
        limits = {k: int(Path(f"/proc/sys/net/ipv4/neigh/default/{k}").read_text())
                  for k in ("gc_thresh1", "gc_thresh2", "gc_thresh3")}
        assert limits["gc_thresh3"] >= 2 * 42 ** 2, limits
        addrs = big.tray_addrs()
        unreachable = {}
        for tray in big.trays:
            others = [a for t, a in addrs.items() if t != tray]
            res = big.exec_on(tray, ["python3", "-c", _REACH, *others], timeout=30)
            assert res.returncode == 0, res.stderr
            if res.stdout.split():
                unreachable[tray] = res.stdout.split()
        assert unreachable == {}
    finally:
        big.down(purge=True)
