"""imexctl.base.subproc: helper commands and the daemon started with posix_spawn, bounded,
in their own session, seeing only stdin/stdout/stderr of this process's descriptors."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from imexctl.base.subproc import Bounded, Completed, Started, run_bounded, run_text, spawn, start

ENV = {"PATH": "/usr/bin:/bin"}
PY = sys.executable


def test_output_and_exit_code_are_returned():
    ran = run_bounded([PY, "-c", "import sys; print('out'); print('err', file=sys.stderr); "
                              "sys.exit(3)"], 10, ENV)
    assert ran == Bounded(3, b"out\n", b"err\n")


def test_a_signal_is_a_negative_exit_code_as_subprocess_reports_it():
    argv = [PY, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"]
    ours = run_text(argv, 10, ENV)
    theirs = subprocess.run(argv, capture_output=True, text=True)
    assert isinstance(ours, Completed) and ours.returncode == theirs.returncode == -9


def test_large_output_on_both_pipes_does_not_deadlock():
    code = "import sys; sys.stdout.write('o' * 300000); sys.stderr.write('e' * 300000)"
    ran = run_bounded([PY, "-c", code], 20, ENV)
    assert ran.rc == 0 and len(ran.stdout) == len(ran.stderr) == 300000


def test_timeout_kills_the_whole_group_and_leaves_no_zombie(tmp_path):
    """F-23: a wrapper's children die with it at the bound."""
    pidfile = tmp_path / "grandchild"
    code = ("import subprocess, sys, time; p = subprocess.Popen([sys.executable, '-c', "
            "'import time; time.sleep(60)']); open(sys.argv[1], 'w').write(str(p.pid)); "
            "time.sleep(60)")
    zombies_before = _my_zombies()
    t0 = time.monotonic()
    ran = run_bounded([PY, "-c", code, str(pidfile)], 1.5, ENV)
    assert ran.rc is None and ran.timed_out and "timed out after 1.5s" in ran.error
    assert time.monotonic() - t0 < 6
    grandchild = int(pidfile.read_text())
    for _ in range(100):
        if not os.path.exists(f"/proc/{grandchild}") or _state(grandchild) == "Z":
            break
        time.sleep(0.05)
    assert not os.path.exists(f"/proc/{grandchild}") or _state(grandchild) == "Z"
    assert _my_zombies() <= zombies_before   # the direct child was reaped


def _my_zombies() -> set[int]:
    """Children of this process that ended and were not collected."""
    found = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = open(f"/proc/{entry}/stat").read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[0] == "Z" and int(fields[1]) == os.getpid():
                found.add(int(entry))
    return found


def _state(pid: int) -> str:
    try:
        return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"


def test_a_child_that_closes_its_output_early_is_still_waited_for():
    ran = run_bounded([PY, "-c", "import os, time; os.close(1); os.close(2); time.sleep(0.3); "
                              "os._exit(4)"], 10, ENV)
    assert ran.rc == 4


def test_a_missing_or_non_executable_program_is_an_error_not_an_exception(tmp_path):
    assert "No such file" in run_bounded([str(tmp_path / "nope")], 5, ENV).error
    plain = tmp_path / "plain"
    plain.write_text("not a program\n")
    ran = run_bounded([str(plain)], 5, ENV)
    assert ran.rc is None and "Permission denied" in ran.error


def test_no_path_search_and_no_shell():
    """A bare name is not looked up in PATH: callers pass absolute paths."""
    ran = run_bounded(["true"], 5, ENV)
    assert ran.rc is None and "cannot run true" in ran.error


def test_child_runs_in_its_own_session_with_only_stdio_inherited(tmp_path):
    inherited = os.open(tmp_path / "leak", os.O_CREAT | os.O_WRONLY, 0o600)
    os.set_inheritable(inherited, True)       # as a descriptor slurmd left open would be
    try:
        code = ("import os; print(os.getsid(0) == os.getpid()); "
                "print(sorted(int(f) for f in os.listdir('/proc/self/fd')))")
        ran = run_text([PY, "-c", code], 10, ENV)
    finally:
        os.close(inherited)
    session, fds = ran.stdout.splitlines()
    assert session == "True"
    assert [fd for fd in eval(fds) if fd > 2 and os.path.realpath(
        f"/proc/self/fd/{fd}") == str(tmp_path / "leak")] == []
    assert inherited not in eval(fds)


def test_spawn_with_cwd_leaves_this_process_where_it_was(tmp_path):
    here = os.getcwd()
    out = os.open(tmp_path / "out", os.O_CREAT | os.O_WRONLY, 0o600)
    try:
        pid = spawn([PY, "-c", "import os; print(os.getcwd())"], ENV, stdout=out, stderr=out,
                    cwd="/")
    finally:
        os.close(out)
    os.waitpid(pid, 0)
    assert (tmp_path / "out").read_text().strip() == "/"
    assert os.getcwd() == here


def test_spawn_works_when_this_process_has_no_stdio(tmp_path):
    """slurmd may start a hook with 0-2 closed: a pipe can then get descriptor 1."""
    code = f"""
import os, sys
sys.path.insert(0, {os.getcwd()!r})
for fd in (0, 1, 2):
    os.close(fd)
from imexctl.base.subproc import run_bounded
ran = run_bounded([{PY!r}, "-c", "print('seen')"], 10, {{}})
open({str(tmp_path / 'result')!r}, "w").write(repr(ran.stdout))
"""
    subprocess.run([PY, "-c", code], timeout=30, check=True)
    assert (tmp_path / "result").read_text() == repr(b"seen\n")


def test_a_libc_without_setsid_spawn_is_an_error_not_an_exception(monkeypatch):
    def no_setsid(*a, **k):
        raise NotImplementedError("setsid is not supported")
    monkeypatch.setattr(os, "posix_spawn", no_setsid)
    ran = run_bounded([PY, "-c", "pass"], 5, ENV)
    assert ran.rc is None and "in its own session" in ran.error


def test_a_started_command_runs_before_it_is_waited_for(tmp_path):
    """start() returns while the command runs: it has written its file before finish()
    is called (a fact, not a timing), and finish() returns its output as run_text."""
    flag = tmp_path / "running"
    argv = [PY, "-c", f"open({str(flag)!r}, 'w').close(); import time; time.sleep(0.2); "
                      "print('answer')"]
    started = start(argv, 10, ENV)
    assert isinstance(started, Started)
    deadline = time.monotonic() + 10
    while not flag.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert flag.exists()
    done = started.finish_text()
    assert isinstance(done, Completed) and done.returncode == 0 and done.stdout == "answer\n"
    assert done.args == argv


def test_a_started_commands_bound_counts_from_its_start_and_kills_its_group(tmp_path):
    pidfile = tmp_path / "child"
    zombies_before = _my_zombies()
    started = start(["/bin/sh", "-c", f"sleep 30 & echo $! > {pidfile}; wait"], 0.5, ENV)
    time.sleep(0.6)                      # the bound has passed before anyone waits
    ran = started.finish()
    assert ran.rc is None and ran.timed_out and "timed out after 0.5s" in ran.error
    child = int(pidfile.read_text())
    for _ in range(100):
        if _state(child) in ("gone", "Z"):
            break
        time.sleep(0.05)
    assert _state(child) in ("gone", "Z")     # killed with its group
    assert _my_zombies() <= zombies_before     # the shell was reaped


def test_a_command_that_cannot_start_is_a_bounded_failure():
    ran = start(["/nonexistent/scontrol", "show", "node"], 10, ENV)
    assert isinstance(ran, Bounded) and ran.rc is None
    assert "cannot run /nonexistent/scontrol" in ran.error


def test_a_flood_of_output_is_stopped_at_the_bound_with_the_command_named(tmp_path):
    """Audit S3-6: a client that floods its output is not read whole into memory: past
    max_output on either stream its group is killed and the error names the command."""
    flood = tmp_path / "scontrol"
    flood.write_text("#!/bin/sh\nexec yes 'JobId=1 JobState=RUNNING'\n")
    flood.chmod(0o755)
    zombies_before = _my_zombies()
    t0 = time.monotonic()
    ran = run_bounded([str(flood), "show", "job", "5"], 30, ENV, max_output=1 << 20)
    assert time.monotonic() - t0 < 10
    assert ran.rc is None and not ran.timed_out and ran.stdout == b""
    assert ran.error == ("'scontrol show job 5' wrote more than 1 MiB on stdout: stopped, "
                         "its output not used")
    assert _my_zombies() <= zombies_before
    code = "import sys\nwhile True: sys.stderr.write('e' * 65536)"
    ran = run_text([PY, "-c", code], 30, ENV, max_output=100000)
    assert isinstance(ran, Bounded) and ran.error.endswith(
        "wrote more than 100000 bytes on stderr: stopped, its output not used")
    # the default bound is generous: a few MiB pass whole
    ran = run_bounded([PY, "-c", "import sys; sys.stdout.write('o' * (4 << 20))"], 30, ENV)
    assert ran.rc == 0 and len(ran.stdout) == 4 << 20


def test_the_slurm_client_reports_a_flood_as_a_slurm_error_naming_it(tmp_path):
    from types import SimpleNamespace

    from imexctl.errors import SlurmError
    from imexctl.slurm.cli_backend import CliBackend
    (tmp_path / "scontrol").write_text("#!/bin/sh\nexec yes JobId=4242\n")
    (tmp_path / "scontrol").chmod(0o755)
    cfg = SimpleNamespace(paths=SimpleNamespace(slurm_bin_dir=tmp_path),
                          slurm=SimpleNamespace(timeout_s=30, attempts=1))
    with pytest.raises(SlurmError, match=r"'scontrol show job 4242' wrote more than 16 MiB "
                                         r"on stdout: stopped"):
        CliBackend(cfg).run("scontrol", "show", "job", "4242")


ORACLE_PROGRAMS = {
    "exit-0": "print('hello')",
    "exit-3-both-pipes": "import sys; print('out'); print('err', file=sys.stderr); sys.exit(3)",
    "sigterm": "import os, signal; print('x', flush=True); os.kill(os.getpid(), signal.SIGTERM)",
    "sigkill": "import os, signal; os.kill(os.getpid(), signal.SIGKILL)",
    "binary-output": "import sys; sys.stdout.buffer.write(bytes(range(256)) * 4)",
    "large-both": "import sys; sys.stdout.write('o' * 300000); sys.stderr.write('e' * 300000)",
    "no-output": "pass",
    "env-seen": "import os; print(sorted(k for k in os.environ if k != 'LC_CTYPE'))",
    "stdin-closed": "import sys; print(repr(sys.stdin.read()))",
}


@pytest.mark.parametrize("name", sorted(ORACLE_PROGRAMS))
def test_run_bounded_answers_as_the_subprocess_module_does(name):
    """The oracle: what subprocess.run reports for the same command, environment and empty
    stdin (base/subproc.py replaces the subprocess module on the hooks' path)."""
    argv = [PY, "-c", ORACLE_PROGRAMS[name]]
    ours = run_bounded(argv, 30, ENV)
    theirs = subprocess.run(argv, env=ENV, stdin=subprocess.DEVNULL, capture_output=True,
                            timeout=30)
    assert (ours.rc, ours.stdout, ours.stderr) == (theirs.returncode, theirs.stdout,
                                                   theirs.stderr)
    text = run_text(argv, 30, ENV)
    assert isinstance(text, Completed)
    assert (text.returncode, text.stdout, text.stderr) == (
        theirs.returncode, theirs.stdout.decode(errors="replace"),
        theirs.stderr.decode(errors="replace"))
