"""Each hook's import set, and the Slurm adapter picked on first use."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


def run(code: str, env=None) -> list:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, env=env)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.splitlines()[-1])


def test_status_on_an_idle_tray_does_not_load_psutil(tmp_path):
    cfg = tmp_path / "imexctl.toml"
    cfg.write_text(f'[paths]\nstate_dir = "{tmp_path}/state"\nrun_dir = "{tmp_path}/run"\n'
                   f'log_file = "{tmp_path}/log/imexctl.log"\nchannel_dir = "{tmp_path}/ch"\n')
    rc, loaded = run(f"""
import contextlib, io, json, sys
from imexctl.cli import main
with contextlib.redirect_stdout(io.StringIO()):
    rc = main(["--config", {str(cfg)!r}, "status", "--json"])
print(json.dumps([rc, sorted(m for m in ("psutil._pslinux", "asyncio", "tenacity", "cryptography")
                             if m in sys.modules)]))
""")
    assert (rc, loaded) == (0, [])


# ------------------------------------------------------------------ each hook's import set
# Modules a hook must not load on its common path: each costs every tray CPU at every job
# start (bench/startup.py prints the figures). tenacity (with concurrent.futures and
# logging) only after a transient Slurm failure; asyncio and ssl come with structlog's
# package __init__ (imexctl.base.log avoids it); pynvml only with fabric.source = "nvml";
# tempfile, shutil (argparse's formatter, rmtree), uuid and socket are not needed.
NEVER = ("tenacity", "concurrent.futures", "logging", "asyncio", "ssl", "pynvml",
         "prometheus_client", "tempfile", "shutil", "uuid", "socket", "structlog.stdlib",
         "psutil", "dataclasses", "inspect",
         # imexctl.base.subproc starts processes with posix_spawn: subprocess (with locale,
         # selectors, threading) is loaded by no hook
         "subprocess", "locale", "selectors",
         # cryptography: only imexctl.imex.auth imports it, only with imex.auth on
         "cryptography", "imexctl.imex.auth")
JOB_LINE = ("JobId={job} JobName=x UserId=nobody(65534) GroupId=nogroup(65534) "
            "JobState=CONFIGURING Reason=None Restarts=0 BatchFlag=0 Partition=trays "
            "NodeList=tray01 NumNodes=1 Features=(null) WorkDir=/tmp StdOut=/dev/null\n")
WRAPPER = """
import json, sys
from imexctl.cli import main
rc = main(sys.argv[2:])
with open(sys.argv[1], "w") as out:
    json.dump([rc, sorted(sys.modules)], out)
"""


@pytest.fixture
def site(tmp_path):
    """A tray's config with a shell `scontrol` that answers a job-record query and
    records every call; no daemon, no channel device (the jobs here want no IMEX)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "job.txt").write_text(JOB_LINE.format(job=77))
    for tool in ("scontrol", "squeue"):
        script = bin_dir / tool
        script.write_text(f'#!/bin/sh\necho "{tool} $*" >> {bin_dir}/calls\n'
                          f'case "$*" in "--local -o show job 77") cat {bin_dir}/job.txt ;; '
                          '"update "*) ;; *) exit 1 ;; esac\n')
        script.chmod(0o755)
    (tmp_path / "fabric.json").write_text('{"gpus": []}')
    (tmp_path / "slurm.conf").write_text("SwitchType=switch/none\nNodeName=tray01\n")
    cfg = tmp_path / "imexctl.toml"
    cfg.write_text(f'[paths]\nstate_dir = "{tmp_path}/state"\nrun_dir = "{tmp_path}/run"\n'
                   f'log_file = "{tmp_path}/log/imexctl.log"\nchannel_dir = "{tmp_path}/ch"\n'
                   f'slurm_bin_dir = "{bin_dir}"\nslurm_conf = "{tmp_path}/slurm.conf"\n'
                   f'controller_dir = "{tmp_path}/ctld"\n'
                   f'[fabric]\nsource = "file"\nfile = "{tmp_path}/fabric.json"\n'
                   '[slurm]\nbackend = "cli"\n[policy]\nmode = "multi-node"\n')
    return cfg, bin_dir


def run_hook(site, tmp_path, *argv):
    cfg, bin_dir = site
    env = {"IMEXCTL_CONFIG": str(cfg), **HOOK_ENV,
           "SLURM_JOB_ID": "77", "SLURM_JOB_UID": "65534", "SLURM_JOB_USER": "nobody",
           "SLURM_JOB_NODELIST": "tray01", "SLURMD_NODENAME": "tray01"}
    out = tmp_path / "modules.json"
    proc = subprocess.run([sys.executable, "-c", WRAPPER, str(out), *argv], env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    rc, modules = json.loads(out.read_text())
    calls = (bin_dir / "calls").read_text().splitlines() if (bin_dir / "calls").exists() else []
    return rc, set(modules), calls


HOOK_ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}


def interpreter_modules() -> frozenset[str]:
    """What a bare ``python -c pass`` of this interpreter loads before any code of ours:
    Ubuntu's sitecustomize, for one, loads apport's exception hook (with threading) into
    every process, venvs included (platform check 2026-11-28). A hook is not charged for it."""
    global _BARE
    if _BARE is None:
        out = subprocess.run([sys.executable, "-c", "import sys, json; "
                              "print(json.dumps(sorted(set(sys.modules) - {'json'})))"],
                             env=HOOK_ENV, capture_output=True, text=True, timeout=60)
        _BARE = frozenset(json.loads(out.stdout))
    return _BARE


_BARE: frozenset[str] | None = None


def contextlib_charged() -> tuple[str, ...]:
    """("contextlib",) where a hook is charged for loading it; () where this interpreter's own
    pathlib, which every hook imports, loads it (3.13 and 3.14, through glob)."""
    out = subprocess.run([sys.executable, "-c", "import sys, pathlib; print('contextlib' in sys.modules)"],
                         env=HOOK_ENV, capture_output=True, text=True, timeout=60)
    return () if out.stdout.strip() == "True" else ("contextlib",)


def loaded(modules, names):
    """The modules of ``names`` the hook loaded that a bare interpreter does not."""
    return sorted(n for n in names if n in modules and n not in interpreter_modules())


def test_prolog_of_a_job_without_imex_asks_slurm_once_and_loads_nothing_heavy(site, tmp_path):
    rc, modules, calls = run_hook(site, tmp_path, "prolog")
    assert rc == 0 and calls == ["scontrol --local -o show job 77"]   # one-tray job: no IMEX
    assert loaded(modules, NEVER + ("imexctl.lifecycle.epilog", "psutil._pslinux")) == []
    assert "imexctl.lifecycle.prolog" in modules and "structlog" in modules  # it ran, and logged


def test_epilog_without_a_domain_never_loads_a_slurm_backend(site, tmp_path):
    rc, modules, calls = run_hook(site, tmp_path, "epilog")
    assert rc == 0 and calls == []
    assert loaded(modules, NEVER + ("imexctl.lifecycle.prolog", "imexctl.slurm.cli_backend",
                                    "imexctl.slurm.adapter", "psutil._pslinux")) == []
    log_lines = (tmp_path / "log" / "imexctl.log").read_text()
    assert "no IMEX domain of this job here; nothing left" in log_lines


@pytest.mark.parametrize("hook", ["prolog-slurmctld", "epilog-slurmctld"])
def test_controller_hooks_load_nothing_heavy(site, tmp_path, hook):
    rc, modules, calls = run_hook(site, tmp_path, hook)
    assert rc == 0
    # a one-tray job under policy multi-node: its environment says it wants no IMEX, so
    # neither hook asks Slurm anything
    assert calls == []
    # threading: PrologSlurmctld's early queries are processes started without a thread
    assert loaded(modules, NEVER + ("psutil", "imexctl.lifecycle.prolog", "imexctl.lifecycle.epilog",
                                    "threading")) == []
    if hook == "epilog-slurmctld":   # a job that held no channel: no Slurm backend picked,
        # and no logging set up (it writes no line)
        assert loaded(modules, ("imexctl.slurm.adapter", "imexctl.slurm.cli_backend",
                                "structlog")) == []


def test_task_prolog_loads_neither_logging_nor_slurm(site, tmp_path):
    # the TaskProlog never reads $IMEXCTL_CONFIG (the job user's environment): named here
    config = ("--config", str(site[0]))
    run_hook(site, tmp_path, *config, "task-prolog")   # parses and caches the TOML (tomllib: typing)
    rc, modules, _ = run_hook(site, tmp_path, *config, "task-prolog")
    assert rc == 0
    # typing: for type checkers only in every module it imports (structlog brings it
    # to the hooks that log)
    assert loaded(modules, NEVER + ("structlog", "psutil", "imexctl.slurm.adapter",
                                    "subprocess", "typing", *contextlib_charged())) == []


def test_status_local_on_an_idle_tray_loads_no_slurm_adapter(site, tmp_path):
    run_hook(site, tmp_path, "status", "--json", "--local")   # parses and caches the TOML
    rc, modules, calls = run_hook(site, tmp_path, "status", "--json", "--local")
    assert rc == 0 and calls == []
    # structlog (with typing) only when something logs: status on an idle tray does not;
    # nor contextlib, which its context managers do without (imexctl/cli/stdio.py)
    assert loaded(modules, NEVER + ("psutil", "imexctl.slurm.adapter", "subprocess",
                                    "structlog", "typing", *contextlib_charged())) == []
    assert not (tmp_path / "log" / "imexctl.log").exists()


def test_deferred_logging_is_set_up_by_the_first_event(tmp_path):
    """A command that defers logging (status) still writes what it logs, where it would
    have, with the context bound."""
    from imexctl.base import log

    try:
        log.setup_logging(tmp_path / "x.log", "info", "tray07", stderr=None, defer=True)
        assert not (tmp_path / "x.log").exists()
        log.bind(job_id=12)
        log.get_logger().warning("something worth a line")
        line = json.loads((tmp_path / "x.log").read_text().splitlines()[-1])
        assert line["event"] == "something worth a line" and line["node"] == "tray07"
        assert line["job_id"] == 12 and line["level"] == "warning"
    finally:
        log.setup_logging(None, stderr=None)


def test_import_imexctl_only_imports_imexctl():
    """``import imexctl`` holds the version and nothing else: no module of the standard
    library is replaced or loaded for the process that imports it (docs/development.md)."""
    code = """
import json, sys
before = dict(sys.modules)
import imexctl
print(json.dumps([sorted(set(sys.modules) - set(before)),
                  sorted(n for n, m in before.items() if sys.modules.get(n) is not m)]))
"""
    proc = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True,
                          text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == [["imexctl"], []]


def test_prolog_slurmctld_sends_its_first_query_before_typing_and_structlog(tmp_path):
    """Every job start waits for PrologSlurmctld, whose longest waits are its Slurm
    queries: they go out before typing (for type checkers only) and structlog are
    imported, and the import of those runs while slurmctld answers."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("scontrol", "squeue"):
        (bin_dir / tool).write_text("#!/bin/sh\nexit 0\n")
        (bin_dir / tool).chmod(0o755)
    (tmp_path / "slurm.conf").write_text("SwitchType=switch/none\nNodeName=tray0[1-2]\n")
    cfg = tmp_path / "imexctl.toml"
    cfg.write_text(f'[paths]\nstate_dir = "{tmp_path}/state"\nlog_file = "{tmp_path}/x.log"\n'
                   f'slurm_bin_dir = "{bin_dir}"\nslurm_conf = "{tmp_path}/slurm.conf"\n'
                   f'controller_dir = "{tmp_path}/ctld"\n[slurm]\nbackend = "cli"\n'
                   '[policy]\nmode = "all"\n')
    code = """
import json, sys
from imexctl.slurm import cli_backend
seen = []
original = cli_backend.CliBackend.prestart
def prestart(self, *args):
    seen.append([args[0], sorted(m for m in ("typing", "structlog") if m in sys.modules)])
    return original(self, *args)
cli_backend.CliBackend.prestart = prestart
from imexctl.cli import main
main(["prolog-slurmctld"])
print(json.dumps(seen))
"""
    env = {"IMEXCTL_CONFIG": str(cfg), "PATH": "/usr/bin:/bin", "SLURM_JOB_ID": "78",
           "SLURM_JOB_UID": "65534", "SLURM_JOB_USER": "nobody",
           "SLURM_JOB_NODELIST": "tray[01-02]", "SLURM_JOB_PARTITION": "trays"}
    for _ in range(2):   # the first run parses the TOML (tomllib imports typing) and caches it
        proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                              text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == [["scontrol", []],
                                                                 ["squeue", []]]
