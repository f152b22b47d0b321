"""A site's wrapper as ``paths.imex_binary`` (audit F3-20): a script that ``exec``s the
daemon keeps its pid, start time and session but changes its executable after the spawn.

Each identity rule on its own (``launcher.identify``), checked from another process as the
epilog and health are, then the prolog and epilog end to end with the simulated daemon
behind three wrapper shapes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from imexctl.base.dataclass import asdict, replace
from pathlib import Path

import psutil
import pytest

from imexctl.lifecycle.epilog import run_epilog
from imexctl.imex import launcher
from imexctl.lifecycle.prolog import run_prolog
from imexctl.tray.ownership import DaemonIdentity, StateStore
from imexctl.ops.health import run_checks
from imexctl.lifecycle.teardown import job_dir, teardown_domain
from tests.support.lifecycle import CLEAN, ctx_for, leftovers
from tests.support.records import make_record
from tests.support.sim_daemon import BIN, sim_cfg, sim_processes
from tests.support.memory_slurm import job_record

REPO = Path(__file__).resolve().parents[2]
DAEMON = "import time\nwhile True:\n    time.sleep(0.1)\n"


def wrapper(tmp_path: Path, body: str, name: str = "imex-wrapper") -> Path:
    script = tmp_path / name
    script.write_text("#!/bin/sh\n" + body + "\n")
    script.chmod(0o755)
    return script


def fake_daemon(tmp_path: Path) -> Path:
    script = tmp_path / "fake-imex"
    script.write_text(f"#!{sys.executable}\n{DAEMON}")
    script.chmod(0o755)
    return script


def wait_exe_changes(pid: int, first: str, timeout: float = 10.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        exe = psutil.Process(pid).exe()
        if exe != first:
            return exe
        time.sleep(0.02)
    raise AssertionError(f"pid {pid} never exec'd past {first}")


def elsewhere(ident: DaemonIdentity, call: str) -> str:
    """Run ``launcher.<call>(ident)`` in another process (the epilog, health: never the
    daemon's parent) and return its outcome."""
    code = ("import json, sys\nfrom imexctl.imex import launcher\n"
            "from imexctl.tray.ownership import DaemonIdentity\n"
            "ident = DaemonIdentity.from_dict(json.loads(sys.argv[1]))\n"
            f"res = launcher.{call}(ident{', 1.0' if call == 'stop_direct' else ''})\n"
            "print(res[0] if isinstance(res, tuple) else res.outcome)\n")
    out = subprocess.run([sys.executable, "-c", code, json.dumps(asdict(ident))], cwd=REPO,
                         capture_output=True, text=True, timeout=30, check=True)
    return out.stdout.strip()


@pytest.fixture
def cleanup():
    pids: list[int] = []
    yield pids
    for pid in pids:
        try:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass


def test_wrapper_daemon_is_ours_before_and_after_its_exec(tmp_path, cleanup):
    """F3-20: the spawned pid runs the wrapper's shell at first, then the daemon. It is the
    job's daemon throughout (before: 'not ours' once it exec'd), in the prolog that
    spawned it and in any other process; refresh_exe settles the daemon's executable."""
    binary = wrapper(tmp_path, f"sleep 0.3\nexec {fake_daemon(tmp_path)} \"$@\"")
    cfg = tmp_path / "config.cfg"
    cfg.write_text("")
    ident = launcher.start_direct(binary, cfg, tmp_path / "stdio.log")
    cleanup.append(ident.pid)
    shell = ident.exe
    assert not ident.exe_settled and ident.sid == ident.pid
    assert launcher.is_alive(ident) and elsewhere(ident, "identify") == "ours"
    real = wait_exe_changes(ident.pid, shell)
    assert launcher.is_alive(ident)                       # the prolog's wait-ready check
    assert elsewhere(ident, "identify") == "ours"         # an epilog before the refresh
    launcher.refresh_exe(ident)
    assert ident.exe == real != shell and ident.exe_settled
    assert elsewhere(ident, "identify") == "ours"
    assert elsewhere(ident, "stop_direct") == "terminated"
    assert not psutil.pid_exists(ident.pid) or \
        psutil.Process(ident.pid).status() == psutil.STATUS_ZOMBIE


def test_own_child_is_never_disowned(tmp_path, cleanup):
    """The prolog's own spawned pid is ours whatever it runs now, even with a settled
    executable that no longer matches: its pid cannot be reused before it is reaped."""
    ident = launcher.start_direct(wrapper(tmp_path, f"exec {fake_daemon(tmp_path)}"),
                                  tmp_path / "config.cfg", tmp_path / "stdio.log")
    cleanup.append(ident.pid)
    ident.exe, ident.exe_settled = "/usr/bin/nvidia-imex", True
    assert launcher.identify(ident) == ("ours", ident.pid)
    assert elsewhere(ident, "identify") == "unverified"   # not the parent: exe decides
    assert launcher.stop_direct(ident, 1.0).outcome == "terminated"


def test_unsettled_daemon_that_left_its_session_is_unverified_and_untouched():
    """Before the executable is settled only pid, start time and session say who it is:
    the same pid and start time in another session is not signalled, and not 'gone'."""
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        ps = psutil.Process(other.pid)
        ident = DaemonIdentity(pid=other.pid, create_time=ps.create_time(), exe="/bin/dash",
                               sid=other.pid, exe_settled=False)   # its sid is ours, not pid
        assert elsewhere(ident, "identify") == "unverified"
        assert elsewhere(ident, "stop_direct") == "unverified"
        assert other.poll() is None
    finally:
        other.kill()
        other.wait()


def test_unverified_pid_keeps_the_record_stuck(tmp_path, cleanup):
    """Keep the record while a pid is not verified gone: a teardown that cannot verify
    the recorded process keeps the record (phase stuck) and names the pid."""
    cfg = sim_cfg(tmp_path, policy="all")
    store = StateStore(cfg.paths.state_dir)
    code = ("import subprocess, sys, time\n"
            "p = subprocess.Popen(['sleep', '30'], start_new_session=True, "
            "stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
            "print(p.pid, flush=True)\n")   # orphaned at once: init's child, not ours
    pid = int(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             timeout=30).stdout.strip())
    cleanup.append(pid)
    forged = DaemonIdentity(pid=pid, create_time=psutil.Process(pid).create_time(),
                            exe="/usr/bin/nvidia-imex")
    record = make_record(daemon=forged, job_dir=str(tmp_path / "run" / "job-42"), channel=None)
    with store.locked():
        store.save(record)
        report = teardown_domain(cfg, record, store)
    assert [step for step, _ in report.failures] == ["stop-daemon"]
    assert f"pid {pid} started when the daemon did" in report.failures[0][1]
    kept = store.load()
    assert kept is not None and kept.phase == "stuck" and kept.daemon.pid == pid
    assert psutil.Process(pid).status() != psutil.STATUS_ZOMBIE   # never signalled


def test_recycled_pid_is_gone_and_clears_the_record(tmp_path):
    """Another start time means another process: the daemon is verified gone."""
    bystander = subprocess.Popen(["sleep", "30"])
    try:
        ident = DaemonIdentity(pid=bystander.pid, create_time=1.0, exe="/usr/bin/nvidia-imex")
        assert launcher.identify(ident) == ("gone", None)
        assert launcher.stop_direct(ident, 1.0).outcome == "not-ours"
        assert bystander.poll() is None
    finally:
        bystander.kill()
        bystander.wait()


def test_records_of_earlier_versions_still_load_settled():
    old = {"pid": 5, "create_time": 1.0, "exe": "/usr/bin/nvidia-imex", "launcher": "direct",
           "unit": None}
    ident = DaemonIdentity.from_dict(old)
    assert ident.exe_settled and ident.sid is None
    with pytest.raises(TypeError):
        DaemonIdentity.from_dict({**old, "exe_settled": 1})


def with_binary(cfg, binary: Path):
    return replace(cfg, paths=replace(cfg.paths, imex_binary=binary))


SHAPES = {
    "exec at once": 'exec {sim} "$@"',
    "after set-up": 'sleep 0.3\nexec {sim} "$@"',
    "through env": 'exec /usr/bin/env IMEX_WRAPPED=1 {sim} "$@"',
}


@pytest.mark.skipif(os.geteuid() != 0, reason="channel mknod needs root")
@pytest.mark.parametrize("shape", list(SHAPES))
def test_prolog_and_epilog_with_a_wrapper_launcher(tmp_path, sim_slurm, job_id, shape):
    """F3-20 end to end (a08's three shapes): the prolog brings the domain UP (before:
    drained 'nvidia-imex exited during start-up', the undo called the job's daemon 'not
    ours', left it running and cleared the record), records the daemon's real executable,
    and the epilog stops it and leaves nothing."""
    sim = BIN / "imexctl-sim-imex"
    binary = wrapper(tmp_path, SHAPES[shape].format(sim=sim))
    cfg = with_binary(sim_cfg(tmp_path, policy="all"), binary)
    ctx = ctx_for(job_id, nodes="tray01")
    assert run_prolog(cfg, sim_slurm, ctx) == 0, StateStore(cfg.paths.state_dir).last_outcome()
    record = StateStore(cfg.paths.state_dir).load()
    assert record.phase == "ready" and record.daemon.exe_settled
    assert record.daemon.exe == psutil.Process(record.daemon.pid).exe() != "/usr/bin/dash"
    assert [p.pid for p in sim_processes(tmp_path)] == [record.daemon.pid]
    assert run_epilog(cfg, sim_slurm, ctx) == 0
    assert leftovers(tmp_path) == CLEAN and not sim_processes(tmp_path)
    assert not [c for c in sim_slurm.calls if c[0] == "drain"]


@pytest.mark.skipif(os.geteuid() != 0, reason="channel mknod needs root")
def test_a_failed_start_behind_a_wrapper_stops_the_daemon(tmp_path, sim_slurm, job_id):
    """The undo of a prolog whose domain never came up stops the wrapped daemon (before:
    'not-ours', left running, record cleared) and leaves nothing behind."""
    sim = BIN / "imexctl-sim-imex"
    cfg = with_binary(sim_cfg(tmp_path, faults={"never_ready": True}, policy="all"),
                      wrapper(tmp_path, f'sleep 0.3\nexec {sim} "$@"'))
    assert run_prolog(cfg, sim_slurm, ctx_for(job_id, nodes="tray01")) == 1
    assert sim_slurm.nodes_["tray01"].reason.startswith("imexctl: prolog/wait-ready: ")
    assert "exited during start-up" not in sim_slurm.nodes_["tray01"].reason
    assert not sim_processes(tmp_path)
    assert leftovers(tmp_path) == CLEAN


def untracked_daemon(tmp_path: Path, cfg, job: int) -> subprocess.Popen:
    """A root process started as `<daemon> -c <run_dir>/job-<job>/config.cfg`, in its own
    session, that no record names (what the F3-20 undo left behind)."""
    config = job_dir(cfg, job) / "config.cfg"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text("")
    return subprocess.Popen([str(fake_daemon(tmp_path)), "-c", str(config)],
                            start_new_session=True)


@pytest.mark.skipif(os.geteuid() != 0, reason="only root processes are a job's daemon")
def test_health_stops_an_untracked_daemon_of_an_ended_job(tmp_path, sim_slurm):
    """Health finds daemons by their job config: one whose job ended and that no record
    names is stopped (before: health never saw it; only the job's own epilog could)."""
    cfg = sim_cfg(tmp_path, policy="all")
    proc = untracked_daemon(tmp_path, cfg, 4242)
    try:
        time.sleep(0.2)
        report = run_checks(cfg, sim_slurm, boot_id="b")
        assert proc.wait(timeout=10) is not None
        assert f"stopped untracked nvidia-imex of job 4242 (pid {proc.pid}): its job ended" \
            in report.repaired
        assert report.exit_code == 0 and not [c for c in sim_slurm.calls if c[0] == "drain"]
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.skipif(os.geteuid() != 0, reason="only root processes are a job's daemon")
def test_health_reports_an_untracked_daemon_of_a_running_job(tmp_path, sim_slurm):
    """While Slurm runs the job here, its untracked daemon is left running (stopping it
    would break the job) and the tray is drained for an admin, naming job and pid. A
    daemon the record names is not untracked."""
    cfg = sim_cfg(tmp_path, policy="all")
    sim_slurm.jobs[4243] = job_record(4243, ("tray01",), state="RUNNING")
    proc = untracked_daemon(tmp_path, cfg, 4243)
    tracked = untracked_daemon(tmp_path, cfg, 4244)
    sim_slurm.jobs[4244] = job_record(4244, ("tray01",), state="RUNNING")
    ps = psutil.Process(tracked.pid)
    StateStore(cfg.paths.state_dir).save(make_record(
        job_id=4244, channel=None, job_dir=str(job_dir(cfg, 4244)), phase="ready",
        daemon=DaemonIdentity(pid=tracked.pid, create_time=ps.create_time(), exe=ps.exe())))
    try:
        time.sleep(0.2)
        report = run_checks(cfg, sim_slurm, boot_id="b")
        assert proc.poll() is None and tracked.poll() is None
        assert sim_slurm.nodes_["tray01"].reason == (
            f"imexctl: health/daemons: untracked nvidia-imex of job 4243 (pid {proc.pid}): "
            "the job runs here but no ownership record names it "
            "(docs/runbook.md#untracked-daemon)")
        assert report.exit_code == 1
    finally:
        for p in (proc, tracked):
            p.kill()
            p.wait()
