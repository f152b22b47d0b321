"""Audit findings (findings/audit-2026-11.md) on the hooks, each with a real world:
files under tmp_path, the simulated daemon, the in-memory Slurm."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from imexctl.lifecycle.epilog import run_epilog
from imexctl.lifecycle.prolog import run_prolog
from imexctl.tray.ownership import StateStore
from imexctl.lifecycle.teardown import job_dir
from tests.support.lifecycle import CLEAN, ctx_for, leftovers
from tests.support.sim_daemon import sim_cfg, sim_processes

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="channel mknod needs root")


def corrupt_record(cfg, content=b"{not json"):
    path = Path(cfg.paths.state_dir) / "domain.json"
    path.write_bytes(content)
    return path


# ---------------------------------------------------------------- F-03 corrupt record
def test_prolog_on_corrupt_record_drains_naming_ownership(world):
    cfg, slurm, ctx = world
    Path(cfg.paths.state_dir).mkdir(parents=True)
    path = corrupt_record(cfg)
    assert run_prolog(cfg, slurm, ctx) == 1
    reason = slurm.nodes_["tray01"].reason
    assert reason.startswith(f"imexctl: prolog/ownership: unreadable record {path}")
    assert path.read_bytes() == b"{not json"  # left for the admin, not overwritten
    assert slurm.jobs[ctx.job_id].state.startswith("RUNNING")  # Slurm requeues on exit 1


def test_epilog_on_corrupt_record_still_stops_the_daemon_by_its_argv(tmp_path, world):
    cfg, slurm, ctx = world
    assert run_prolog(cfg, slurm, ctx) == 0
    assert len(sim_processes(tmp_path)) == 1
    corrupt_record(cfg, b"[]")
    assert run_epilog(cfg, slurm, ctx) == 1
    assert slurm.nodes_["tray01"].reason.startswith(
        "imexctl: epilog/ownership: unreadable record")
    assert sim_processes(tmp_path) == []
    assert not job_dir(cfg, ctx.job_id).exists()


def test_status_shows_an_unreadable_record(world):
    from imexctl.ops.status import collect
    cfg, _, _ = world
    Path(cfg.paths.state_dir).mkdir(parents=True)
    corrupt_record(cfg, b"\xff\xfe")
    out = collect(cfg)
    assert out["state"] == "record-unreadable"
    assert "is unreadable" in out["problems"][0] and "utf-8" in out["problems"][0]


# ---------------------------------------------------------------- F-02 stuck / untracked daemon
def test_epilog_keeps_the_record_of_a_daemon_that_survives_sigkill(monkeypatch, tmp_path,
                                                                    world):
    from imexctl.imex import launcher
    cfg, slurm, ctx = world
    assert run_prolog(cfg, slurm, ctx) == 0
    pid = StateStore(cfg.paths.state_dir).load().daemon.pid
    monkeypatch.setattr(launcher, "stop_direct", lambda ident, grace: launcher.StopResult(
        "stuck", f"pid {ident.pid} survived SIGKILL (uninterruptible?)"))
    assert run_epilog(cfg, slurm, ctx) == 1
    assert slurm.nodes_["tray01"].reason.startswith(
        f"imexctl: epilog/stop-daemon: daemon stuck: pid {pid} survived SIGKILL")
    record = StateStore(cfg.paths.state_dir).load()
    assert record.phase == "stuck" and record.daemon.pid == pid  # still pointed at
    assert leftovers(tmp_path)["channels"] == [] and leftovers(tmp_path)["job_dirs"] == []
    monkeypatch.undo()  # the admin fixed the daemon: the next epilog finishes the job
    assert run_epilog(cfg, slurm, ctx) == 0
    assert leftovers(tmp_path) == CLEAN and sim_processes(tmp_path) == []


KILL_AFTER_SPAWN = """
import os, signal, sys
from pathlib import Path
sys.path.insert(0, {repo!r})
from imexctl.imex import launcher
from imexctl.lifecycle.prolog import run_prolog
from tests.support.memory_slurm import job_record, MemorySlurm
from tests.support.lifecycle import ctx_for, published
from tests.support.sim_daemon import sim_cfg
cfg = sim_cfg(Path({tmp!r}), policy="all")
slurm = MemorySlurm()
slurm.add_nodes({{"tray01": "127.0.0.1"}})
slurm.publish("tray01", published())
slurm.jobs[{job}] = job_record({job}, ("tray01",))
real = launcher.start_direct
def start(*args, **kwargs):
    real(*args, **kwargs)
    os.kill(os.getpid(), signal.SIGKILL)  # slurmd kills the prolog right after the spawn
launcher.start_direct = start
run_prolog(cfg, slurm, ctx_for({job}, nodes="tray01"))
"""


def test_daemon_spawned_by_a_killed_prolog_is_found_by_the_epilog(tmp_path, world):
    """F-02b: SIGKILL between the spawn and saving the daemon in the record."""
    import subprocess
    import sys
    cfg, slurm, ctx = world
    repo = str(Path(__file__).resolve().parents[2])
    code = KILL_AFTER_SPAWN.format(repo=repo, tmp=str(tmp_path), job=ctx.job_id)
    proc = subprocess.run([sys.executable, "-c", code], cwd=repo, timeout=60)
    assert proc.returncode == -9
    assert len(sim_processes(tmp_path)) == 1
    record = StateStore(cfg.paths.state_dir).load()
    assert record.phase == "starting" and record.daemon is None
    assert run_epilog(cfg, slurm, ctx) == 0
    assert sim_processes(tmp_path) == [] and leftovers(tmp_path) == CLEAN


# ---------------------------------------------------------------- failed daemon log kept
def test_drain_reason_names_the_kept_daemon_log(tmp_path, sim_slurm, job_id):
    """Issue 9: the reason pointed at run_dir/job-N/nvidia-imex.log, which the undo had
    already deleted; the tail is kept in the state dir and that path is named."""
    cfg = sim_cfg(tmp_path, faults={"never_ready": True}, policy="all")
    assert run_prolog(cfg, sim_slurm, ctx_for(job_id, nodes="tray01")) == 1
    kept = Path(cfg.paths.state_dir) / "failed-daemon.log"
    reason = sim_slurm.nodes_["tray01"].reason
    assert reason.startswith("imexctl: prolog/wait-ready: local daemon")
    assert reason.endswith(f"(daemon log kept in {kept})")
    assert b"nvidia-imex.log" in kept.read_bytes()
    assert leftovers(tmp_path) == CLEAN


def test_kept_daemon_log_is_bounded(tmp_path, world):
    from imexctl.imex.launcher import FAILED_LOG_TAIL, keep_daemon_log
    cfg, _, _ = world
    jdir = tmp_path / "job"
    jdir.mkdir()
    (jdir / "nvidia-imex.log").write_bytes(b"x" * (4 * FAILED_LOG_TAIL) + b"LAST LINE\n")
    (jdir / "daemon.stdio").write_bytes(b"y" * (4 * FAILED_LOG_TAIL))
    kept = keep_daemon_log(cfg, jdir)
    data = kept.read_bytes()
    assert len(data) < 2 * FAILED_LOG_TAIL + 512 and b"LAST LINE" in data
    os.mkfifo(jdir / "fifo-log")
    (jdir / "nvidia-imex.log").unlink()
    (jdir / "nvidia-imex.log").symlink_to(jdir / "fifo-log")  # never followed, never blocks
    assert b"LAST LINE" not in keep_daemon_log(cfg, jdir).read_bytes()


# ---------------------------------------------------------------- F-13 unusable state dir
def test_epilog_with_unsafe_state_dir_still_tears_down(tmp_path, world):
    """F-13: the epilog stopped nothing when the state dir could not be locked."""
    cfg, slurm, ctx = world
    assert run_prolog(cfg, slurm, ctx) == 0
    os.chmod(cfg.paths.state_dir, 0o777)
    assert run_epilog(cfg, slurm, ctx) == 1
    assert slurm.nodes_["tray01"].reason.startswith(
        f"imexctl: epilog/lock: {cfg.paths.state_dir} is writable by group or others")
    assert sim_processes(tmp_path) == []
    left = leftovers(tmp_path)
    assert left["channels"] == [] and left["job_dirs"] == []


@pytest.fixture
def tmpfs_state(world):
    """The state dir on its own small tmpfs, which a test can fill or make read-only."""
    import subprocess
    cfg = world[0]
    state = Path(cfg.paths.state_dir)
    state.mkdir(parents=True)
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,mode=0755", "tmpfs",
                       str(state)], capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    yield state
    subprocess.run(["umount", "-l", str(state)], check=False)


def test_epilog_with_read_only_state_dir_stops_daemon_and_removes_channel(tmp_path, world,
                                                                          tmpfs_state):
    import subprocess
    cfg, slurm, ctx = world
    assert run_prolog(cfg, slurm, ctx) == 0
    subprocess.run(["mount", "-o", "remount,ro", str(tmpfs_state)], check=True)
    assert run_epilog(cfg, slurm, ctx) == 1
    assert slurm.nodes_["tray01"].reason.startswith(
        "imexctl: epilog/record: [Errno 30] Read-only file system")
    assert sim_processes(tmp_path) == []
    left = leftovers(tmp_path)
    assert left["channels"] == [] and left["job_dirs"] == []


def test_epilog_without_a_lock_file_on_a_full_state_dir(tmp_path, world, tmpfs_state):
    cfg, slurm, ctx = world
    assert run_prolog(cfg, slurm, ctx) == 0
    import subprocess
    (tmpfs_state / "lock").unlink()
    used = len(os.listdir(tmpfs_state)) + 1  # + the root directory's inode
    subprocess.run(["mount", "-o", f"remount,nr_inodes={used}", str(tmpfs_state)], check=True)
    with pytest.raises(OSError):  # no inode left for a new lock file
        (tmpfs_state / "probe").touch()
    assert run_epilog(cfg, slurm, ctx) == 1
    assert slurm.nodes_["tray01"].reason.startswith("imexctl: epilog/lock: ")
    assert sim_processes(tmp_path) == []
    left = leftovers(tmp_path)
    assert left["channels"] == [] and left["job_dirs"] == []


def test_prolog_on_read_only_state_dir_names_the_step_that_failed(tmp_path, world,
                                                                  tmpfs_state):
    """F-13: a failed record save was labelled 'prolog/channel', a lock error 'allocation'."""
    import subprocess
    cfg, slurm, ctx = world
    (tmpfs_state / "lock").touch()
    subprocess.run(["mount", "-o", "remount,ro", str(tmpfs_state)], check=True)
    assert run_prolog(cfg, slurm, ctx) == 1
    assert slurm.nodes_["tray01"].reason.startswith(
        "imexctl: prolog/render: [Errno 30] Read-only file system")
    assert leftovers(tmp_path) == CLEAN and sim_processes(tmp_path) == []
    subprocess.run(["mount", "-o", "remount,rw", str(tmpfs_state)], check=True)
    (tmpfs_state / "lock").unlink()
    subprocess.run(["mount", "-o", "remount,ro", str(tmpfs_state)], check=True)
    assert run_prolog(cfg, slurm, ctx) == 1
    assert slurm.nodes_["tray01"].reason.startswith("imexctl: prolog/ownership: ")


# ---------------------------------------------------------------- S-05 epilog port check
def test_epilog_port_check_ignores_sockets_that_are_not_the_daemons(monkeypatch, tmp_path,
                                                                    world):
    """S-05: any socket on the job's ports made the epilog drain 'ports still in use'."""
    import socket
    from imexctl.imex import launcher
    cfg, slurm, ctx = world
    assert run_prolog(cfg, slurm, ctx) == 0
    record = StateStore(cfg.paths.state_dir).load()
    squatter = socket.socket()
    real_stop = launcher.stop

    def stop_then_squat(ident, grace):
        result = real_stop(ident, grace)
        squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        squatter.bind(("127.0.0.1", record.server_port))
        squatter.listen()  # another process takes the freed port at once
        return result
    monkeypatch.setattr(launcher, "stop", stop_then_squat)
    try:
        assert run_epilog(cfg, slurm, ctx) == 0
    finally:
        squatter.close()
    assert not slurm.nodes_["tray01"].reason
    assert leftovers(tmp_path) == CLEAN and sim_processes(tmp_path) == []


def test_epilog_port_check_sees_the_daemon_still_listening(monkeypatch, tmp_path,
                                                           world):
    from imexctl.imex import launcher
    cfg, slurm, ctx = world
    assert run_prolog(cfg, slurm, ctx) == 0
    record = StateStore(cfg.paths.state_dir).load()
    monkeypatch.setattr("imexctl.lifecycle.teardown.PORTS_RELEASE_S", 0.2)
    monkeypatch.setattr(launcher, "stop", lambda ident, grace: launcher.StopResult("terminated"))
    assert run_epilog(cfg, slurm, ctx) == 1  # the stop "worked" but the daemon listens on
    reason = slurm.nodes_["tray01"].reason
    assert reason.startswith("imexctl: epilog/ports: ports still in use: ")
    assert f"{record.server_port} (pid {record.daemon.pid})" in reason
    monkeypatch.undo()
    assert run_epilog(cfg, slurm, ctx) == 0 and sim_processes(tmp_path) == []
