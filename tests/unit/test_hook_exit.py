"""Audit S-01 and F-21 through the real command line: a hook's exit code is the documented
one whatever its job's name holds and whatever became of its stdout/stderr."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from imexctl.errors import EXIT_NODE_FAULT, EXIT_OK, EXIT_USAGE
from imexctl.cli.stdio import SafeStream, guarded
from tests.support.cli_tray import UUID, Tray, run_hook
from tests.support.fabric import simulated_tray, write_fabric_file


# ---------------------------------------------------------------- F-21 exit code 120
@pytest.mark.parametrize("stream", ["stdout", "stderr"])
@pytest.mark.parametrize("how", ["gone", "closed"])
def test_exit_code_survives_a_broken_stream(stream, how):
    """Python exits 120 when it cannot flush stdout/stderr at exit; imexctl never does."""
    kw = {stream: how}
    assert run_hook(["--version"], {}, **kw)[0] == EXIT_OK
    assert run_hook(["--help"], {}, **kw)[0] == EXIT_OK
    assert run_hook(["prolog"], {"PATH": "/usr/bin:/bin"}, **kw)[0] == EXIT_USAGE


def test_both_streams_closed_before_start():
    assert run_hook(["--help"], {}, stdout="closed", stderr="closed")[0] == EXIT_OK
    assert run_hook(["prolog"], {"PATH": "/usr/bin:/bin"}, stdout="closed",
                    stderr="closed")[0] == EXIT_USAGE


@pytest.mark.skipif(os.geteuid() != 0, reason="the prolog's directories must be root-owned")
def test_node_fault_with_stderr_reader_gone_drains_and_exits_1(tmp_path):
    """The audit's case: an unfit tray, the hook's stderr a pipe nobody reads."""
    tray = Tray(tmp_path)
    write_fabric_file(tmp_path / "fabric.json", simulated_tray(UUID, 1, **{"0": {"state": 2}}))
    rc, _, _ = run_hook(["prolog"], tray.env(), stderr="gone")
    assert rc == EXIT_NODE_FAULT
    assert "DRAIN" in tray.node()["State"]
    assert tray.node()["Reason"].startswith("imexctl: prolog/fabric: GPU 0 fabric state")


def test_safe_stream_points_a_broken_descriptor_at_devnull():
    r, w = os.pipe()
    os.close(r)
    raw = os.fdopen(w, "w")
    stream = SafeStream(raw)
    assert stream.write("x" * 100000) == 100000  # more than the buffer: the write fails
    stream.flush()
    assert stream.broken
    raw.write("after\n")
    raw.flush()  # now /dev/null: no error, and nothing left to fail at exit
    assert os.readlink(f"/proc/self/fd/{raw.fileno()}") == os.devnull
    raw.close()


def test_guarded_restores_the_streams_and_tolerates_captured_ones(monkeypatch):
    out, err = io.StringIO(), io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    monkeypatch.setattr(sys, "stderr", err)
    with guarded():
        print("to out")
        print("to err", file=sys.stderr)
        assert isinstance(sys.stdout, SafeStream)
    assert sys.stdout is out and sys.stderr is err
    assert out.getvalue() == "to out\n" and err.getvalue() == "to err\n"


# ---------------------------------------------------------------- S-01 newline in JobName
@pytest.mark.skipif(os.geteuid() != 0, reason="the prolog's directories must be root-owned")
def test_newline_in_job_name_is_read_not_a_slurm_error(tmp_path):
    """Was exit 5 (Slurm drains the tray 'Prolog error'): the record is read whole; a job
    that does not ask for IMEX is left alone, nothing drained."""
    tray = Tray(tmp_path, policy="feature", job={"JobName": "a\nb c"})
    rc, _, err = run_hook(["prolog"], tray.env())
    assert rc == EXIT_OK, err
    assert "DRAIN" not in tray.node()["State"]
    assert not tray.calls("squeue")


@pytest.mark.skipif(os.geteuid() != 0, reason="the prolog's directories must be root-owned")
def test_forged_record_after_a_newline_is_not_believed(tmp_path):
    """A JobName that starts a second record for the same job after a newline: the forged
    keys collide with the real ones, squeue is asked, the forged Features are dropped."""
    tray = Tray(tmp_path, policy="feature",
                job={"JobName": "a\nJobId=4242 JobName=x UserId=root(0) Features=imex"})
    rc, _, err = run_hook(["prolog"], tray.env())
    assert rc == EXIT_OK, err
    assert "DRAIN" not in tray.node()["State"]
    assert tray.calls("squeue")
    log = (tmp_path / "log" / "imexctl.log").read_text()
    assert "job does not want IMEX" in log


@pytest.mark.skipif(os.geteuid() != 0, reason="channel mknod needs root")
def test_unreadable_job_record_refuses_the_job_and_drains_nothing(monkeypatch, world):
    """What Slurm prints for the job cannot be read at all: a fault of the job (its user
    writes parts of the record), never Slurm's generic 'Prolog error' drain of the tray."""
    from imexctl.lifecycle.prolog import run_prolog
    from imexctl.slurm.records import JobRecordError

    cfg, slurm, ctx = world
    real_job = slurm.job

    def unreadable(job_id):
        real_job(job_id)
        raise JobRecordError(f"scontrol show job {job_id}: UserId='' has no numeric uid")
    monkeypatch.setattr(slurm, "job", unreadable)
    assert run_prolog(cfg, slurm, ctx) == EXIT_OK
    assert not slurm.nodes_["tray01"].drained
    assert ("cancel", ctx.job_id) in slurm.calls
    assert slurm.jobs[ctx.job_id].admin_comment.startswith(
        "imexctl: job record unreadable: scontrol show job")


@pytest.mark.skipif(os.geteuid() != 0, reason="the prolog's directories must be root-owned")
def test_out_of_file_descriptors_is_a_tray_fault_naming_the_limit_not_slurm(tmp_path):
    """Audit 2026-11b (A06): at RLIMIT_NOFILE 10 the prolog exited 5, "Slurm unreachable",
    because scontrol could not be started. Running out of descriptors is the tray's
    fault: exit 1 with a reason that names the limit, at whatever step it happens."""
    import re
    import resource

    from imexctl.errors import EXIT_SLURM
    tray = Tray(tmp_path)

    def prolog(limit=None):
        proc = subprocess.run([sys.executable, "-m", "imexctl", "prolog"], env=tray.env(),
                              capture_output=True, text=True, timeout=60,
                              cwd=Path(__file__).resolve().parents[2],
                              preexec_fn=None if limit is None else lambda: resource.setrlimit(
                                  resource.RLIMIT_NOFILE, (limit, limit)))
        subprocess.run([sys.executable, "-m", "imexctl", "epilog"], env=tray.env(),
                       capture_output=True, timeout=60, cwd=Path(__file__).resolve().parents[2])
        out = proc.stdout + proc.stderr
        reason = re.search(r"node fault \(reason=(imexctl: prolog/.*)", out)
        return proc.returncode, reason.group(1) if reason else "", out

    _, own, _ = prolog()   # this world's own outcome with descriptors enough (no slurm.conf)
    named = 0
    for limit in range(5, 12):
        rc, reason, out = prolog(limit)
        assert rc in (EXIT_OK, EXIT_NODE_FAULT), (limit, out)
        assert rc != EXIT_SLURM and "Slurm unreachable" not in out
        assert "Traceback" not in out
        if rc == EXIT_NODE_FAULT and reason[:60] != own[:60]:
            assert f"out of file descriptors (RLIMIT_NOFILE {limit}; raise LimitNOFILE of " \
                   "slurmd)" in reason, (limit, out)
            named += 1
    assert named >= 1
