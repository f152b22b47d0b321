"""Every subcommand, fed bad input, ends in an ``imexctl`` message and a documented exit code.

The subcommands and their options are read from the argparse parser (imexctl.cli.parser.build_parser),
so a new subcommand or option is driven here without editing this file. Each run is a real
``python -m imexctl`` process (a traceback is what a site would see on its terminal), with
every path of the configuration under the test's directory and Slurm's commands replaced by
a stub that fails as an unreachable slurmctld does: nothing on this host is touched.

Bad input: an unknown option, each option with a value it cannot use (a choice that does
not exist, a path below a regular file, which no user, root included, can create or
write), a configuration file that does not exist, is a directory or is not TOML, a
slurm.conf that does not exist, and configured directories that cannot be written.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest

from imexctl.cli.parser import build_parser
from imexctl.errors import EXIT_CODES, EXIT_CONFIG, EXIT_OK, EXIT_USAGE

REPO = Path(__file__).resolve().parents[2]
SLURM_STUBS = ("scontrol", "squeue", "sinfo", "scancel", "sacct", "munge", "unmunge")


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    for action in parser._actions:          # noqa: SLF001 - argparse has no public walk
        if isinstance(action, argparse._SubParsersAction):   # noqa: SLF001
            return dict(action.choices)
    raise AssertionError("imexctl's parser has no subcommands")


SUBCOMMANDS = _subcommands()


def _minimal_argvs(name: str, sub: argparse.ArgumentParser) -> list[list[str]]:
    """The command lines the subcommand accepts with no option: one per choice of each
    positional that has choices (``config check``, ``config show``, ...)."""
    argvs = [[name]]
    for action in sub._actions:             # noqa: SLF001
        if action.option_strings or action.nargs in ("?", "*"):
            continue
        values = list(action.choices) if action.choices else ["tray01"]
        argvs = [argv + [v] for argv in argvs for v in values]
    return argvs


def _sandboxed(sub: argparse.ArgumentParser, argv: list[str]) -> list[str]:
    """``argv`` with ``--root`` under the test's directory wherever the subcommand has one:
    ``config systemd --write`` would otherwise install into this host's /etc."""
    if any("--root" in a.option_strings for a in _options(sub)) and "--root" not in argv:
        return [*argv, "--root", "@SYSROOT@"]
    return argv


def _options(sub: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in sub._actions             # noqa: SLF001
            if a.option_strings and not isinstance(a, argparse._HelpAction)]   # noqa: SLF001


def _cases() -> list[tuple[str, list[str], str]]:
    """(id, argv after --config, configuration) for every subcommand."""
    cases = []
    for name, sub in SUBCOMMANDS.items():
        argvs = _minimal_argvs(name, sub)
        cases.append((f"{name} unknown-option", [name, "--no-such-option"], "good"))
        for argv in argvs:
            label = " ".join(argv)
            cases.append((f"{label} missing-config", argv, "missing"))
            cases.append((f"{label} config-is-a-directory", argv, "directory"))
            cases.append((f"{label} invalid-config", argv, "invalid"))
            cases.append((f"{label} missing-slurm.conf", argv, "no-slurm-conf"))
            cases.append((f"{label} unwritable-paths", argv, "unwritable"))
            flags = [f for a in _options(sub) if a.nargs == 0
                     for f in a.option_strings[-1:]]
            for flag in flags:   # each switch alone (some exclude each other)
                cases.append((f"{label} {flag}", _sandboxed(sub, argv + [flag]),
                              "no-slurm-conf"))
        for action in _options(sub):
            if action.nargs == 0:
                continue
            flag = action.option_strings[-1]
            bad = ["no-such-choice"] if action.choices else ["@UNDER_FILE@", ""]
            for value in bad:
                for argv in argvs:
                    cases.append((f"{' '.join(argv)} {flag}={value or 'empty'}",
                                  _sandboxed(sub, argv + [flag, value]), "no-slurm-conf"))
    return cases


CASES = _cases()


HOST_FILES = ("/etc/systemd/system/imexctl-imex@.service.d",
              "/etc/systemd/system/imexctl-recover.service.d",
              "/etc/systemd/system/imexctl-imex-persistent.service.d",
              "/etc/tmpfiles.d/imexctl.conf")


@pytest.fixture(scope="module", autouse=True)
def host_untouched():
    """Nothing here may install into this host (a sandbox that leaked once did)."""
    before = {p: os.path.lexists(p) for p in HOST_FILES}
    yield
    assert {p: os.path.lexists(p) for p in HOST_FILES} == before


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("badinput")
    (root / "afile").write_text("a regular file: nothing can be made below it\n")
    bin_dir = root / "bin"
    bin_dir.mkdir()
    for tool in SLURM_STUBS:
        stub = bin_dir / tool
        stub.write_text("#!/bin/sh\necho 'slurm_load_jobs error: Unable to contact slurm "
                        "controller (connect failure)' >&2\nexit 1\n")
        stub.chmod(0o755)
    (root / "devices").write_text("Character devices:\n  1 mem\n")
    for d in ("state", "run", "channels", "textfile", "ctl"):
        (root / d).mkdir(mode=0o755)

    def config(name: str, under: Path) -> Path:
        text = (f'[paths]\nstate_dir = "{under}/state"\nrun_dir = "{under}/run"\n'
                f'log_file = "{under}/log/imexctl.log"\nchannel_dir = "{under}/channels"\n'
                f'proc_devices = "{root}/devices"\nslurm_bin_dir = "{bin_dir}"\n'
                f'munge_bin_dir = "{bin_dir}"\nimex_binary = "{root}/no-nvidia-imex"\n'
                f'imex_ctl_binary = "{root}/no-nvidia-imex-ctl"\n'
                f'controller_dir = "{under}/ctl"\nslurm_conf = "{root}/no-slurm.conf"\n'
                f'[fabric]\nsource = "file"\nfile = "{root}/no-fabric.json"\n'
                f'[slurm]\nbackend = "cli"\ntimeout_s = 2\nattempts = 1\n'
                f'[health]\ntimeout_s = 20\n'
                f'[metrics]\ntextfile_dir = "{under}/textfile"\n')
        path = root / f"{name}.toml"
        path.write_text(text)
        return path

    (root / "invalid.toml").write_text('[paths\nstate_dir = 3\n[no_such_section]\nx = 1\n')
    return {"root": root, "missing": root / "no-such-imexctl.toml",
            "directory": root / "state", "invalid": root / "invalid.toml",
            "no-slurm-conf": config("no-slurm-conf", root),
            "good": config("good", root),
            "unwritable": config("unwritable", root / "afile")}


def run_imexctl(argv: list[str], cwd: Path, env_extra: dict[str, str] | None = None
                ) -> subprocess.CompletedProcess:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(cwd), "LANG": "C.UTF-8",
           "PYTHONPATH": str(REPO),       # the checkout under test, wherever cwd is
           "SLURMD_NODENAME": "tray01", **(env_extra or {})}
    return subprocess.run([sys.executable, "-m", "imexctl", *argv], cwd=cwd, env=env,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=60)


def assert_clean(proc: subprocess.CompletedProcess) -> None:
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode in EXIT_CODES, (proc.returncode, proc.stderr)
    if proc.returncode != EXIT_OK:
        # a message on stderr, or a report on stdout (doctor, health) that names imexctl
        assert "imexctl" in proc.stderr + proc.stdout, (proc.returncode, proc.stdout,
                                                        proc.stderr)


def test_every_subcommand_is_driven() -> None:
    driven = {argv[0] for _, argv, _ in CASES}
    assert driven == set(SUBCOMMANDS)
    assert {"prolog", "epilog", "topology", "metrics", "config", "health"} <= driven


@pytest.mark.parametrize("argv,config", [(c[1], c[2]) for c in CASES],
                         ids=[c[0] for c in CASES])
def test_bad_input_ends_in_a_message_and_an_exit_code(site, argv, config) -> None:
    fill = {"@UNDER_FILE@": str(site["root"] / "afile" / "x"),
            "@SYSROOT@": str(site["root"] / "sysroot")}
    argv = [fill.get(a, a) for a in argv]
    proc = run_imexctl(["--config", str(site[config]), *argv], site["root"])
    assert_clean(proc)


@pytest.mark.parametrize("hook", ["prolog", "epilog", "prolog-slurmctld", "epilog-slurmctld",
                                  "task-prolog"])
def test_hooks_with_a_forged_job_environment(site, hook) -> None:
    proc = run_imexctl(["--config", str(site["no-slurm-conf"]), hook], site["root"],
                       {"SLURM_JOB_ID": "12x", "SLURM_JOB_NODELIST": "tray[01-",
                        "SLURM_JOB_UID": "-1", "SLURM_JOB_USER": "a\nb"})
    assert_clean(proc)


@pytest.mark.parametrize("config", ["unwritable", "no-slurm-conf"])
@pytest.mark.parametrize("hook", ["prolog", "epilog", "prolog-slurmctld", "epilog-slurmctld",
                                  "task-prolog"])
def test_hooks_of_a_real_job_with_unusable_paths(site, hook, config) -> None:
    """A well-formed job: the hooks get past their environment to the paths and Slurm."""
    proc = run_imexctl(["--config", str(site[config]), hook], site["root"],
                       {"SLURM_JOB_ID": "41", "SLURM_JOB_NODELIST": "tray[01-02]",
                        "SLURM_JOB_UID": "1000", "SLURM_JOB_USER": "alice",
                        "SLURM_JOB_PARTITION": "gpu", "SLURM_RESTART_COUNT": "0"})
    assert_clean(proc)


# ------------------------------------------------ the three tracebacks of the operations review
def test_topology_without_a_local_slurm_conf(site) -> None:
    proc = run_imexctl(["--config", str(site["no-slurm-conf"]), "topology"], site["root"])
    assert proc.returncode == EXIT_CONFIG
    assert proc.stderr.strip().splitlines() == [
        f"imexctl: topology: {site['root']}/no-slurm.conf: cannot open (No such file or "
        "directory); name the trays with --nodes, or set [paths] slurm_conf"]


def test_metrics_textfile_on_a_group_writable_directory(site) -> None:
    loose = site["root"] / "loose"
    loose.mkdir()
    loose.chmod(0o775)
    proc = run_imexctl(["--config", str(site["good"]), "metrics", "--textfile", str(loose)],
                       site["root"])
    assert proc.returncode == EXIT_USAGE
    assert proc.stderr.strip().splitlines() == [
        f"imexctl: metrics: --textfile {loose}: {loose} is writable by group or others "
        "(mode 0775); fix with chmod go-w"]
    assert not (loose / "imexctl.prom").exists()


def test_metrics_configured_textfile_dir_that_is_unsafe(site, tmp_path) -> None:
    loose = tmp_path / "textfile"
    loose.mkdir()
    loose.chmod(0o777)
    cfg = tmp_path / "imexctl.toml"
    cfg.write_text(site["good"].read_text().replace(f'"{site["root"]}/textfile"',
                                                    f'"{loose}"'))
    proc = run_imexctl(["--config", str(cfg), "metrics"], site["root"])
    assert proc.returncode == EXIT_CONFIG
    assert proc.stderr.startswith(f"imexctl: metrics: [metrics] textfile_dir {loose}: ")
    assert len(proc.stderr.strip().splitlines()) == 1


def test_metrics_prints_to_stdout_although_a_textfile_dir_is_set(site) -> None:
    target = site["root"] / "textfile" / "imexctl.prom"
    target.unlink(missing_ok=True)
    proc = run_imexctl(["--config", str(site["good"]), "metrics", "--stdout"], site["root"])
    assert proc.returncode == EXIT_OK, proc.stderr
    assert "# TYPE imexctl_domain_state gauge" in proc.stdout
    assert 'imexctl_domain_state{state="idle"} 1' in proc.stdout
    assert not target.exists()                   # --stdout leaves the textfile alone
    both = run_imexctl(["--config", str(site["good"]), "metrics", "--stdout", "--textfile",
                        str(site["root"] / "textfile")], site["root"])
    assert both.returncode == EXIT_USAGE and "not allowed with" in both.stderr


def test_config_systemd_write_on_an_unwritable_root(site) -> None:
    root = site["root"] / "afile"
    proc = run_imexctl(["--config", str(site["good"]), "config", "systemd", "--write",
                        "--root", str(root)], site["root"])
    assert proc.returncode == EXIT_USAGE
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        f"imexctl: config systemd --write: cannot write {root}/etc/systemd/system/")
    assert "Not a directory (run as root, or name a writable --root DIR)" in lines[0]


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes through directory modes")
def test_config_systemd_write_on_a_read_only_root(site, tmp_path) -> None:
    tmp_path.chmod(0o555)
    try:
        proc = run_imexctl(["--config", str(site["good"]), "config", "systemd", "--write",
                            "--root", str(tmp_path)], site["root"])
    finally:
        tmp_path.chmod(0o755)
    assert proc.returncode == EXIT_USAGE
    assert "Permission denied" in proc.stderr and "Traceback" not in proc.stderr
