"""The CLI as an admin meets it: version, help with exit codes, honest stubs, config check."""

import subprocess
import sys

from imexctl import __version__
from imexctl.cli import main
from imexctl.errors import EXIT_CONFIG, EXIT_OK, EXIT_USAGE


def run_cli(*args, env=None):
    return subprocess.run([sys.executable, "-m", "imexctl", *args], capture_output=True,
                          text=True, env=env, timeout=30)


def test_version_subprocess():
    proc = run_cli("--version")
    assert proc.returncode == 0
    lines = proc.stdout.splitlines()
    assert lines[0] == f"imexctl {__version__}" and lines[1].startswith("python ")
    assert any(line.startswith("structlog ") for line in lines)


def test_the_executable_skips_teardown_but_loses_no_output(tmp_path):
    """entry() leaves with os._exit: the exit code is main's and everything written to a
    pipe (help is long), to stderr and to the log file is there."""
    help_text = run_cli("--help")
    assert help_text.returncode == 0
    assert "exit codes:" in help_text.stdout and len(help_text.stdout) > 2000
    usage = run_cli("no-such-command")
    assert usage.returncode == EXIT_USAGE and "invalid choice" in usage.stderr
    # A controller hook that fails open logs why and exits 0: the line reaches the file.
    # (A two-tray job: one tray under the default policy wants no IMEX, and asks nothing.)
    cfg = tmp_path / "imexctl.toml"
    cfg.write_text(f'[paths]\nstate_dir = "{tmp_path}/state"\nlog_file = "{tmp_path}/x.log"\n'
                   f'controller_dir = "{tmp_path}/ctld"\nslurm_bin_dir = "{tmp_path}/none"\n')
    env = {"IMEXCTL_CONFIG": str(cfg), "SLURM_JOB_ID": "5", "SLURM_JOB_UID": "65534",
           "SLURM_JOB_USER": "nobody", "SLURM_JOB_NODELIST": "tray[01-02]",
           "SLURM_JOB_PARTITION": "trays", "PATH": "/usr/bin:/bin"}
    hook = run_cli("prolog-slurmctld", env=env)
    assert hook.returncode == EXIT_OK, hook.stderr
    lines = (tmp_path / "x.log").read_text()
    assert "failed open" in lines and '"hook": "prolog-slurmctld"' in lines
    assert "none/scontrol: No such file or directory" in lines     # the query it could not send
    assert "prolog-slurmctld failed open" in hook.stderr


GC_PROBE = """
import gc, os, sys
passes = []
gc.callbacks.append(lambda phase, info: phase == "start" and passes.append(info["generation"]))
real_exit = os._exit
def report(rc):
    sys.stderr.write(f"gc passes: {len(passes)}\\n")
    sys.stderr.flush()
    real_exit(rc)
os._exit = report
sys.argv = ["imexctl", "config", "check"]
from imexctl import cli
if THROUGH_ENTRY:
    cli.entry()
else:
    report(cli.main())
"""


def test_a_command_runs_without_a_collector_pass(tmp_path):
    """entry() tunes the interpreter for a short life: a command's imports and work go
    through without one pass of the cyclic collector (each pass scanned every object the
    imports made), while the collector stays on for long waits. Run through main() with
    Python's default threshold, the same command makes several passes."""
    cfg = tmp_path / "imexctl.toml"
    cfg.write_text(f'[paths]\nstate_dir = "{tmp_path}/state"\n')
    env = {"IMEXCTL_CONFIG": str(cfg), "PATH": "/usr/bin:/bin"}

    def passes(through_entry: bool) -> int:
        code = GC_PROBE.replace("THROUGH_ENTRY", str(through_entry))
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              env=env, timeout=60)
        assert proc.returncode == EXIT_OK, proc.stderr
        assert f"{cfg}: OK" in proc.stdout, proc.stdout
        return int(proc.stderr.rsplit("gc passes: ", 1)[1].split()[0])

    assert passes(through_entry=True) == 0
    assert passes(through_entry=False) >= 3
    from imexctl import cli
    assert cli.GC_THRESHOLD >= 10_000
    probe = subprocess.run([sys.executable, "-c", "import gc; from imexctl.cli import "
                            "short_lived; short_lived(); print(gc.isenabled(), "
                            "gc.get_threshold()[0])"], capture_output=True, text=True,
                           timeout=60)
    assert probe.stdout.split() == ["True", str(cli.GC_THRESHOLD)]


def test_no_module_registers_an_atexit_handler():
    """What entry() skips: an atexit handler would silently never run."""
    code = ("import atexit, importlib, pkgutil, imexctl\n"
            "before = atexit._ncallbacks()\n"
            "for m in pkgutil.walk_packages(imexctl.__path__, 'imexctl.'):\n"
            "    if m.name not in ('imexctl.__main__',):\n"
            "        importlib.import_module(m.name)\n"
            "from imexctl.base import log; log._structlog()\n"
            "print(atexit._ncallbacks() - before)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "0"


def test_help_lists_subcommands_and_exit_codes(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for word in ("prolog", "epilog", "status", "health", "identity", "config"):
        assert word in out
    assert "exit codes:" in out and "node fault" in out
    assert "  4  reserved (a refused job: the prolog cancels it and exits 0)" in out


def test_no_command_is_usage_error(capsys):
    assert main([]) == EXIT_USAGE
    assert "COMMAND is required" in capsys.readouterr().err


def test_health_without_config_names_the_problem(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("IMEXCTL_CONFIG", str(tmp_path / "absent.toml"))
    assert main(["health", "--no-drain"]) == EXIT_CONFIG
    assert "absent.toml: file not found" in capsys.readouterr().err


def test_config_check_ok_and_bad(tmp_path):
    good = tmp_path / "good.toml"
    good.write_text('[imex]\nlauncher = "direct"\n')
    proc = run_cli("--config", str(good), "config", "check")
    assert proc.returncode == EXIT_OK, proc.stderr
    assert f"{good}: OK" in proc.stdout
    bad = tmp_path / "bad.toml"
    bad.write_text('[channels]\nmode = "everyone"\n')
    proc = run_cli("--config", str(bad), "config", "check")
    assert proc.returncode == EXIT_CONFIG
    assert f"{bad}: channels.mode = 'everyone' is not allowed" in proc.stderr


def test_config_check_warns_about_ports_the_kernel_may_hand_out(tmp_path):
    from imexctl.tray.ports import ephemeral_conflicts
    cfg = tmp_path / "old-ports.toml"
    cfg.write_text("[imex]\nserver_port_base = 33792\ncmd_port_base = 50176\n")
    clash = ephemeral_conflicts([(33792, 35840), (50176, 52224)])
    proc = run_cli("--config", str(cfg), "config", "check")
    assert proc.returncode == EXIT_OK, proc.stderr
    assert ("lie in this host's ephemeral range" in proc.stdout) == bool(clash)
    if clash:  # the Linux default range 32768-60999 without reservations
        assert f"per-job ports {clash[0][0]}-{clash[0][1]}" in proc.stdout
    default = tmp_path / "default.toml"
    default.write_text("")
    proc = run_cli("--config", str(default), "config", "check")
    assert "ephemeral range" not in proc.stdout


def test_prolog_slurmctld_fails_open(tmp_path):
    """A non-zero PrologSlurmctld would requeue the job forever: errors exit 0, reported."""
    env = {"PATH": "/usr/bin:/bin", "IMEXCTL_CONFIG": str(tmp_path / "absent.toml"),
           "SLURM_JOB_ID": "12", "SLURM_JOB_UID": "65534", "SLURM_JOB_USER": "nobody",
           "SLURM_NODELIST": "tray[01-02]"}
    proc = run_cli("prolog-slurmctld", env=env)
    assert proc.returncode == EXIT_OK
    assert "failing open" in proc.stderr and "absent.toml" in proc.stderr
    env.pop("SLURM_JOB_ID")
    proc = run_cli("prolog-slurmctld", env=env)
    assert proc.returncode == EXIT_OK and "SLURM_JOB_ID" in proc.stderr


def test_controller_hooks_exit_zero_on_any_error(tmp_path):
    """F-08: a config path that is a directory (now a config error naming it)."""
    env = {"PATH": "/usr/bin:/bin", "IMEXCTL_CONFIG": str(tmp_path),
           "SLURM_JOB_ID": "12", "SLURM_JOB_UID": "65534", "SLURM_JOB_USER": "nobody",
           "SLURM_JOB_NODELIST": "tray[01-02]"}
    for hook in ("prolog-slurmctld", "epilog-slurmctld"):
        proc = run_cli(hook, env=env)
        assert proc.returncode == EXIT_OK, proc.stderr
        assert f"imexctl: {hook}: {tmp_path}: cannot read: Is a directory" in proc.stderr
        assert "Traceback" not in proc.stderr


def test_a_bug_is_one_line_and_exit_70_with_the_traceback_in_the_log(tmp_path, monkeypatch,
                                                                       capsys):
    """Never a Python traceback from a command: an unexpected exception is one stderr line
    naming the command and the exception, exit 70, and the traceback in the log file."""
    from imexctl import cli
    from imexctl.base import log
    from imexctl.cli import commands
    from imexctl.errors import EXIT_INTERNAL

    logfile = tmp_path / "x.log"

    def boom(args):
        log.setup_logging(logfile, stderr=None)
        raise KeyError("domain")

    monkeypatch.setattr(commands, "cmd_doctor", boom)
    monkeypatch.delenv("IMEXCTL_TRACEBACK", raising=False)
    assert cli.main(["doctor"]) == EXIT_INTERNAL
    err = capsys.readouterr().err
    assert err == ("imexctl: internal error in 'doctor': KeyError: 'domain' (a bug in "
                   "imexctl; the traceback is in the log)\n")
    text = logfile.read_text()
    assert '"event": "internal error"' in text and "Traceback (most recent call last)" in text
    assert 'raise KeyError(\\"domain\\")' in text or "raise KeyError" in text
