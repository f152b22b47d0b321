"""tests/cluster/pythons.py: which interpreter the unit and simulator suite runs on for a
minor version the checkout's .venv is not (CI's 3.12 phase)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cluster import pythons

MINOR = "%d.%d" % sys.version_info[:2]
REAL = Path(os.path.realpath(sys.executable))


def test_a_launcher_is_followed_to_the_interpreter_itself(tmp_path, monkeypatch):
    """A venv's python (a link) or a pyenv shim (a script) named in IMEXCTL_PYTHON3XX: the
    interpreter that runs, whose installation is what gets copied."""
    venv = tmp_path / "venv"
    subprocess.run([str(REAL), "-m", "venv", "--without-pip", str(venv)], check=True)
    shim = tmp_path / f"python{MINOR}"
    shim.write_text(f'#!/bin/sh\nexec {venv}/bin/python "$@"\n')
    shim.chmod(0o755)
    monkeypatch.setenv(f"IMEXCTL_PYTHON{MINOR.replace('.', '')}", str(shim))
    assert pythons.find_python(MINOR) == REAL


def test_no_interpreter_of_that_minor_says_where_it_looked(tmp_path, monkeypatch):
    monkeypatch.setenv("PYENV_ROOT", str(tmp_path))
    monkeypatch.setenv("IMEXCTL_PYTHON399", str(REAL))   # a 3.x that is not 3.99
    with pytest.raises(pythons.PythonNotFound) as exc:
        pythons.find_python("3.99")
    assert f"IMEXCTL_PYTHON399, python3.99 on PATH and {tmp_path}/versions/3.99.*" in str(exc.value)


@pytest.mark.parametrize("ci, rc", [("true", 2), ("", 0)])
def test_a_missing_interpreter_fails_the_phase_only_in_ci(tmp_path, monkeypatch, capsys, ci, rc):
    monkeypatch.setenv("PYENV_ROOT", str(tmp_path))
    monkeypatch.setenv("CI", ci)
    monkeypatch.delenv("IMEXCTL_PYTHON399", raising=False)
    assert pythons.main(["3.99"]) == rc
    err = capsys.readouterr().err
    assert err.startswith("pythons: no Python 3.99 on this machine") and "Traceback" not in err
