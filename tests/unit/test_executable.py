"""The fast ``imexctl`` executable (python -IS, site's paths baked in): it runs the real
CLI, skips site (no .pth code, no sitecustomize), ignores PYTHONPATH, and is refused
rather than written half-working."""

from __future__ import annotations

import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

import imexctl
from imexctl.ops import doctor
from imexctl.base.executable import (ExecutableError, executable_text, is_fast_executable,
                                     write_executable)
from imexctl.cli.executable import main

REPO = Path(imexctl.__file__).resolve().parent.parent
ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}


@pytest.fixture(scope="module")
def tiny_venv(tmp_path_factory) -> Path:
    """A venv whose site runs code (a .pth line that leaves a mark, as setuptools' own
    .pth does) and puts this checkout on the path (as an editable install does)."""
    root = tmp_path_factory.mktemp("venv")
    venv.EnvBuilder(with_pip=False).create(root)
    site = next(root.glob("lib/python3*/site-packages"))
    (site / "mark.pth").write_text(f"import os; open({str(site / 'site-ran')!r}, 'a').close()\n")
    (site / "imexctl-checkout.pth").write_text(f"{REPO}\n")
    return root


def _mark(venv_root: Path) -> Path:
    return next(venv_root.glob("lib/python3*/site-packages")) / "site-ran"


def test_written_executable_runs_the_cli_without_site(tiny_venv):
    python = str(tiny_venv / "bin" / "python")
    dest = write_executable(None, python)
    assert dest == tiny_venv / "bin" / "imexctl"
    assert dest.stat().st_mode & 0o777 == 0o755
    lines = dest.read_text().splitlines()
    assert lines[0] == f"#!{python} -IS"
    site = str(next(tiny_venv.glob("lib/python3*/site-packages")))
    assert f"sys.path += {[site, str(REPO)]!r}" in lines      # site's paths, in site's order
    _mark(tiny_venv).unlink(missing_ok=True)
    out = subprocess.run([str(dest), "--version"], capture_output=True, text=True, env=ENV)
    assert out.returncode == 0 and out.stdout.splitlines()[0] == f"imexctl {imexctl.__version__}", out.stderr
    assert not _mark(tiny_venv).exists()                        # site's .pth code never ran
    subprocess.run([python, "-c", "pass"], check=True, env=ENV)
    assert _mark(tiny_venv).exists()                            # ... where site does run
    assert is_fast_executable(dest)


def test_pythonpath_cannot_replace_imexctl_in_the_executable(tiny_venv, tmp_path):
    fake = tmp_path / "evil" / "imexctl"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    (fake / "cli.py").write_text("def entry():\n    print('HIJACKED')\n")
    env = {**ENV, "PYTHONPATH": str(tmp_path / "evil")}
    python = str(tiny_venv / "bin" / "python")
    dest = write_executable(tmp_path / "imexctl", python)
    pip_style = subprocess.run([python, "-c", "from imexctl.cli import entry; entry()"],
                               capture_output=True, text=True, env=env, cwd=tmp_path)
    assert pip_style.stdout == "HIJACKED\n"            # what a site-run script would import
    fast = subprocess.run([str(dest), "--version"], capture_output=True, text=True, env=env,
                          cwd=tmp_path / "evil")
    assert fast.stdout.splitlines()[0] == f"imexctl {imexctl.__version__}", fast.stderr


def test_an_interpreter_that_cannot_import_imexctl_gets_no_executable(tmp_path):
    bare = tmp_path / "bare"
    venv.EnvBuilder(with_pip=False).create(bare)
    dest = tmp_path / "imexctl"
    with pytest.raises(ExecutableError, match="cannot import imexctl"):
        write_executable(dest, str(bare / "bin" / "python"))
    assert not dest.exists()


def test_an_executable_whose_paths_are_gone_says_so_without_a_traceback(tiny_venv, tmp_path):
    dest = tmp_path / "imexctl"
    dest.write_text(executable_text(str(tiny_venv / "bin" / "python"), [str(tmp_path / "gone")]))
    dest.chmod(0o755)
    out = subprocess.run([str(dest), "prolog"], capture_output=True, text=True, env=ENV)
    assert out.returncode == 127 and "Traceback" not in out.stderr
    assert out.stderr == (f"imexctl: {dest}: cannot import imexctl (No module named 'imexctl'); "
                          "write it again: python -m imexctl.cli.executable\n")


def test_a_symlink_in_place_of_the_executable_is_not_written_through(tiny_venv, tmp_path):
    target = tmp_path / "elsewhere"
    target.write_text("keep\n")
    dest = tmp_path / "imexctl"
    dest.symlink_to(target)
    with pytest.raises(ExecutableError, match=str(dest)):
        write_executable(dest, str(tiny_venv / "bin" / "python"))
    assert target.read_text() == "keep\n" and dest.is_symlink()


@pytest.mark.parametrize("python,why", [("python3", "absolute path"),
                                        ("/opt/my venv/bin/python", "without blanks"),
                                        ("/" + "d" * 260 + "/python", "too long")])
def test_interpreters_a_shebang_cannot_name_are_refused(python, why):
    with pytest.raises(ExecutableError, match=why):
        executable_text(python, [])


def test_pip_s_console_script_is_not_taken_for_the_fast_one(tmp_path):
    pip_script = tmp_path / "imexctl"
    pip_script.write_text("#!/opt/imexctl/.venv/bin/python\nimport re\nimport sys\n"
                          "from imexctl.cli import entry\n")
    assert not is_fast_executable(pip_script)
    assert not is_fast_executable(tmp_path / "absent")


def test_doctor_names_the_slow_executable_and_its_fix(tiny_venv, tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "imexctl").write_text("#!/x/python\nimport re\n")
    python = str(bin_dir / "python")
    [slow] = doctor.check_executable(python)
    assert slow.level == doctor.WARN and "pip's console script" in slow.message
    assert slow.fix.startswith(f"{python} -m imexctl.cli.executable")
    write_executable(bin_dir / "imexctl", str(tiny_venv / "bin" / "python"))
    [fast] = doctor.check_executable(python)
    assert fast.level == doctor.OK
    assert doctor.check_executable(str(tmp_path / "nothing" / "python")) == []


def test_usage(capsys):
    assert main(["--help"]) == 2 and "usage:" in capsys.readouterr().err
    assert main(["a", "b"]) == 2
