"""`imexctl health --no-drain` and `--dry-run` change nothing (issue 28): on a tray with a
stale domain (its daemon still running for an ended job, a leftover channel and job
directory, a widened channel, a stale expected-state file, a health drain to lift, an
identity to republish) every file (path, mode, owner, contents, mtime), every process and
the Slurm node record stay as they were; --dry-run lists each change, a full run then
makes them; --repair-only repairs but never drains or lifts; `recover --dry-run` too."""

from __future__ import annotations

import hashlib
import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from imexctl.cli.display import health_json, health_lines
from imexctl.lifecycle.teardown import job_dir
from imexctl.ops.health import default_teardown, run_checks
from imexctl.ops.recover import recover
from imexctl.tray import expected
from imexctl.tray.ownership import DaemonIdentity, StateStore
from tests.support.health import mkchannel
from tests.support.lifecycle import published
from tests.support.records import make_record
from tests.support.sim_daemon import sim_cfg
from tests.support.memory_slurm import job_record

pytestmark = pytest.mark.skipif(os.geteuid() != 0,
                                reason="channel devices (mknod) and root daemons need root")

DAEMON = "import time\nwhile True:\n    time.sleep(0.1)\n"
ENDED, RUNNING = 4241, 4244
BOOT = "11111111-2222-3333-4444-555555555555"


def snapshot(root: Path) -> dict[str, tuple]:
    """Every entry under root, never following a link: type and mode, owner, device,
    size, mtime, and a regular file's contents."""
    out: dict[str, tuple] = {}
    for top, dirs, files in os.walk(root, followlinks=False):
        for name in dirs + files:
            path = Path(top) / name
            st = os.lstat(path)
            digest = hashlib.sha256(path.read_bytes()).hexdigest() \
                if stat.S_ISREG(st.st_mode) else ""
            out[str(path.relative_to(root))] = (st.st_mode, st.st_uid, st.st_gid, st.st_rdev,
                                                st.st_size, st.st_mtime_ns, digest)
    return out


def start_daemon(tmp_path: Path, cfg, job: int) -> subprocess.Popen:
    """A root process started as `<daemon> -c <run_dir>/job-<job>/config.cfg`."""
    script = tmp_path / "fake-imex"
    if not script.exists():
        script.write_text(f"#!{sys.executable}\n{DAEMON}")
        script.chmod(0o755)
    config = job_dir(cfg, job) / "config.cfg"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text("")
    return subprocess.Popen([str(script), "-c", str(config)], start_new_session=True)


def processes(procs) -> list[tuple]:
    return [(p.pid, p.poll(), psutil.Process(p.pid).create_time() if p.poll() is None else 0)
            for p in procs]


def node_record(slurm) -> tuple:
    n = slurm.nodes_["tray01"]
    return n.state, n.reason, n.extra


WRITES = ("drain", "resume_if_ours", "extra_merge")


def writes(slurm) -> list:
    return [c for c in slurm.calls if c[0] in WRITES]


@pytest.fixture
def stale_tray(tmp_path, sim_slurm):
    """The stale-domain tray: job 4241 ended but its record, daemon, channel 9 and job dir
    are still here; channel 3 and job-40 are leftovers; expected.json says up for 4241;
    Slurm's Extra names another clique; the node carries an old health drain."""
    cfg = sim_cfg(tmp_path, policy="all")
    proc = start_daemon(tmp_path, cfg, ENDED)
    time.sleep(0.2)
    ps = psutil.Process(proc.pid)
    mkchannel(cfg, 9)
    mkchannel(cfg, 3)
    job_dir(cfg, 40).mkdir(parents=True)
    StateStore(cfg.paths.state_dir).save(make_record(
        job_id=ENDED, channel=9, job_dir=str(job_dir(cfg, ENDED)), phase="ready",
        daemon=DaemonIdentity(pid=proc.pid, create_time=ps.create_time(), exe=ps.exe())))
    expected.write(cfg, expected.UP, job_id=ENDED)
    sim_slurm.publish("tray01", published(clique=7))
    sim_slurm.set_node("tray01", state="IDLE+DRAIN",
                       reason="imexctl: health/fabric: an old finding")
    yield cfg, [proc]
    proc.kill()
    proc.wait()


@pytest.fixture
def running_tray(tmp_path, sim_slurm):
    """A running job 4244 whose user widened its channel 9 to 0666, with expected.json
    still idle; beside it an untracked daemon of the ended job 4241 and a leaked channel 3;
    Slurm's Extra names another clique."""
    cfg = sim_cfg(tmp_path, policy="all")
    sim_slurm.jobs[RUNNING] = job_record(RUNNING, ("tray01",), state="RUNNING")
    untracked = start_daemon(tmp_path, cfg, ENDED)
    job_dir(cfg, RUNNING).mkdir(parents=True)
    os.chmod(mkchannel(cfg, 9), 0o666)
    mkchannel(cfg, 3)
    StateStore(cfg.paths.state_dir).save(make_record(
        job_id=RUNNING, channel=9, job_dir=str(job_dir(cfg, RUNNING)), phase="ready"))
    expected.write(cfg, expected.IDLE)
    sim_slurm.publish("tray01", published(clique=7))
    with StateStore(cfg.paths.state_dir).locked(timeout_s=1):
        pass                          # a lock file a hook left: taken, never changed
    time.sleep(0.2)
    yield cfg, [untracked]
    untracked.kill()
    untracked.wait()


STALE_WOULD = [
    "identity: publish identity ",      # prefix: the clique is the simulated tray's
    f"stale-domain: tear down the stale domain of ended job {ENDED}",
    "channels: remove leaked channel3",           # channel9 and job-4241: the teardown's
    f"job-dirs: remove leftover {{run}}/job-40",
    f"expected: write the expected state idle (was up job {ENDED})",
    "resume: lift tray01's health drain (imexctl: health/fabric: an old finding)",
]
RUNNING_WOULD = [
    "identity: publish identity ",
    f"daemons: stop untracked nvidia-imex of job {ENDED} (pid {{pid}}): its job ended",
    f"channels: make channel9 of job {RUNNING} owner-only again (channel9 of uid 65534 was "
    "mode 0666 group 0)",
    "channels: remove leaked channel3",
    f"job-dirs: remove leftover {{run}}/job-{ENDED}",
    f"expected: write the expected state up job {RUNNING} (was idle)",
]


def matches(would: list[str], want: list[str]) -> bool:
    return len(would) == len(want) and all(w.startswith(x) for w, x in zip(would, want))


@pytest.mark.parametrize("tray, want", [("stale_tray", STALE_WOULD),
                                        ("running_tray", RUNNING_WOULD)])
def test_no_drain_and_dry_run_change_nothing_then_a_full_run_does_it(
        request, tmp_path, sim_slurm, tray, want):
    cfg, procs = request.getfixturevalue(tray)
    assert (cfg.paths.state_dir / "lock").exists() == (tray == "running_tray")
    want = [w.format(run=cfg.paths.run_dir, pid=procs[0].pid) for w in want]
    before = (snapshot(tmp_path), processes(procs), node_record(sim_slurm))
    for mode in ("no-drain", "dry-run"):
        report = run_checks(cfg, sim_slurm, mode=mode, boot_id=BOOT)
        assert (snapshot(tmp_path), processes(procs), node_record(sim_slurm)) == before, mode
        assert writes(sim_slurm) == [] and report.repaired == [], mode
        assert report.exit_code == 0 and report.problems == [], mode
        assert matches(report.would, want), report.would
    lines = health_lines(report)      # the dry run's: each change, as a line
    assert [x for x in lines if x.startswith("imexctl health: would: ")] == \
        [f"imexctl health: would: {w}" for w in report.would]
    assert json.loads(health_json(report))["would"] == report.would
    assert json.loads(health_json(report))["mode"] == "dry-run"
    assert "imexctl health: would:" not in "\n".join(
        health_lines(run_checks(cfg, sim_slurm, mode="no-drain", boot_id=BOOT)))

    report = run_checks(cfg, sim_slurm, boot_id=BOOT)       # a full run makes them
    assert report.exit_code == 0 and report.would == []
    repairs = [w for w in want if not w.startswith(("expected:", "resume:"))]
    assert len(report.repaired) == len(repairs)      # one line each, as the dry run said
    assert procs[0].wait(timeout=10) is not None
    assert sorted(os.listdir(cfg.paths.channel_dir)) == \
        (["channel9"] if tray == "running_tray" else [])
    assert writes(sim_slurm)[0][0] == "extra_merge"
    if tray == "stale_tray":
        # Slurm keeps the reason after a RESUME: the state says the drain is gone
        assert report.drain == "resumed" and node_record(sim_slurm)[:2] == (
            "IDLE", "imexctl: health/fabric: an old finding")
        assert StateStore(cfg.paths.state_dir).load() is None
        assert expected.read(cfg).state == expected.IDLE
    else:
        assert stat.S_IMODE(os.lstat(cfg.paths.channel_dir / "channel9").st_mode) == 0o600
        assert (expected.read(cfg).state, expected.read(cfg).job_id) == ("up", RUNNING)
    again = run_checks(cfg, sim_slurm, mode="dry-run", boot_id=BOOT)
    assert again.would == []                              # nothing left to do


def test_dry_run_lists_the_drain_with_its_reason_and_repair_only_never_drains(
        tmp_path, sim_slurm):
    from tests.support.fabric import simulated_tray, write_fabric_file
    from tests.support.lifecycle import UUID, make_cfg
    cfg = make_cfg(tmp_path)
    write_fabric_file(tmp_path / "fabric.json",
                      simulated_tray(UUID, 1, **{"2": {"health_mask": 0x1A6}}))
    reason = "imexctl: health/fabric: GPU 2 fabric unhealthy (route_recovery=TRUE)"
    before = node_record(sim_slurm)
    for mode in ("dry-run", "no-drain", "repair-only"):
        report = run_checks(cfg, sim_slurm, mode=mode, boot_id=BOOT)
        assert report.exit_code == 1 and node_record(sim_slurm) == before, mode
        assert not [c for c in sim_slurm.calls if c[0] in ("drain", "resume_if_ours")]
    assert report.drain == "none"                        # repair-only: NHC drains
    dry = run_checks(cfg, sim_slurm, mode="dry-run", boot_id=BOOT)
    assert f"drain: drain tray01: {reason}" in dry.would and dry.drain == "would drain"
    assert run_checks(cfg, sim_slurm, boot_id=BOOT).drain == "drained"
    assert node_record(sim_slurm)[:2] == ("IDLE+DRAIN", reason)


def test_dry_run_without_slurm_says_what_it_would_do(tmp_path, sim_slurm, monkeypatch):
    """A tray without Slurm (or slurmctld down): the dry run lists the drain it would ask
    for and why it could not read the node, instead of failing to drain (platform check
    2026-11-28); it tries no drain and no lift."""
    from imexctl.errors import SlurmError
    from tests.support.fabric import simulated_tray, write_fabric_file
    from tests.support.lifecycle import UUID, make_cfg
    cfg = make_cfg(tmp_path)
    write_fabric_file(tmp_path / "fabric.json",
                      simulated_tray(UUID, 1, **{"2": {"health_mask": 0x1A6}}))

    def no_slurm(names):
        raise SlurmError("cannot run /usr/bin/scontrol: No such file or directory")
    monkeypatch.setattr(sim_slurm, "nodes", no_slurm)
    dry = run_checks(cfg, sim_slurm, mode="dry-run", boot_id=BOOT)
    reason = "imexctl: health/fabric: GPU 2 fabric unhealthy (route_recovery=TRUE)"
    assert dry.drain == "would drain" and dry.exit_code == 1
    assert f"drain: drain tray01: {reason} (unless another drain is in place; Slurm not " \
           "asked: cannot run /usr/bin/scontrol: No such file or directory)" in dry.would
    assert not [c for c in sim_slurm.calls if c[0] in ("drain", "resume_if_ours")]


def test_repair_only_repairs_and_leaves_a_health_drain_to_nhc(stale_tray, sim_slurm):
    cfg, procs = stale_tray
    report = run_checks(cfg, sim_slurm, mode="repair-only", boot_id=BOOT)
    assert f"tore down stale domain of ended job {ENDED}" in report.repaired
    assert procs[0].wait(timeout=10) is not None
    assert node_record(sim_slurm)[:2] == ("IDLE+DRAIN", "imexctl: health/fabric: an old finding")
    assert [c[0] for c in writes(sim_slurm)] == ["extra_merge"]


def test_the_cli_rejects_two_modes_and_prints_what_it_would_do(tmp_path, capsys, monkeypatch):
    from imexctl.cli import main
    assert main(["health", "--dry-run", "--no-drain"]) == 2
    assert capsys.readouterr().err.strip() == \
        "imexctl: health: --no-drain and --dry-run exclude each other"


def test_recover_dry_run_changes_nothing_and_says_what_recover_would_do(tmp_path, sim_slurm):
    cfg = sim_cfg(tmp_path, policy="all")
    job_dir(cfg, ENDED).mkdir(parents=True)
    mkchannel(cfg, 9)
    mkchannel(cfg, 3)
    StateStore(cfg.paths.state_dir).save(make_record(
        job_id=ENDED, channel=9, job_dir=str(job_dir(cfg, ENDED)), started_at=1.0))
    sim_slurm.publish("tray01", published(clique=7))
    before = (snapshot(tmp_path), node_record(sim_slurm))
    plan = recover(cfg, default_teardown(cfg), sim_slurm, current_boot=BOOT, dry_run=True)
    assert (snapshot(tmp_path), node_record(sim_slurm)) == before
    assert writes(sim_slurm) == [] and plan.repaired == []
    assert [a.step for a in plan.actions] == ["reboot", "job-dirs", "channels", "expected",
                                              "identity"]
    assert plan.actions[0].what == f"tear down the domain of job {ENDED} left by an earlier boot"
    assert plan.actions[2].what == "remove leaked channel3,9"
    done = recover(cfg, default_teardown(cfg), sim_slurm, current_boot=BOOT)
    assert done.failures == [] and done.actions == []
    assert os.listdir(cfg.paths.channel_dir) == [] and StateStore(cfg.paths.state_dir).load() is None
    assert recover(cfg, default_teardown(cfg), sim_slurm, current_boot=BOOT,
                   dry_run=True).actions == []
