"""The hand-parsed common command lines give exactly argparse's answer, and anything
else still reaches argparse (help, usage errors)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from imexctl.cli import FAST_FLAGS, fast_args, main
from imexctl.cli.parser import build_parser


def _same_handler(a, b) -> bool:
    cells = lambda f: [c.cell_contents for c in (f.__closure__ or ())]  # noqa: E731
    return a.__qualname__ == b.__qualname__ and cells(a) == cells(b)


COMMON = [[name, *flags] for name, allowed in FAST_FLAGS.items()
          for flags in ([], list(allowed), list(reversed(allowed)), list(allowed[:1]))]


@pytest.mark.parametrize("argv", COMMON + [["--config", "/etc/x.toml", "status", "--json"],
                                           ["--config=/etc/x.toml", "prolog"]],
                         ids=lambda a: " ".join(a))
def test_common_command_lines_match_argparse(argv):
    fast, slow = fast_args(argv), build_parser().parse_args(argv)
    assert fast is not None
    assert {k: v for k, v in vars(fast).items() if k != "handler"} == \
        {k: v for k, v in vars(slow).items() if k != "handler"}
    assert _same_handler(fast.handler, slow.handler)


@pytest.mark.parametrize("argv", [["status", "--nodes", "tray01"], ["status", "--json", "--json"],
                                  ["prolog", "extra"], ["status", "--jso"], ["--conf", "x", "status"],
                                  ["--config"], ["--config", "--json", "status"], ["--help"],
                                  ["health", "--help"], ["doctor"], []],
                         ids=lambda a: " ".join(a) or "empty")
def test_anything_else_goes_to_argparse(argv):
    assert fast_args(argv) is None


def test_usage_errors_and_help_still_come_from_argparse(capsys):
    assert main(["status", "--bogus"]) == 2
    assert "unrecognized arguments: --bogus" in capsys.readouterr().err
    assert main(["prolog", "--help"]) == 0
    assert "slurmd Prolog" in capsys.readouterr().out


def test_version_is_argparse_s_answer_without_argparse(capsys):
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(["--version"])
    assert exc.value.code == 0
    slow = capsys.readouterr().out
    assert main(["--version"]) == 0
    assert capsys.readouterr().out == slow and slow.startswith("imexctl ")
    code = "import sys; from imexctl.cli import main; main(['--version']); print('argparse' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.splitlines()[-1] == "False", out.stderr


def test_a_hook_does_not_import_argparse(tmp_path):
    code = ("import sys; from imexctl.cli import main; "
            "rc = main(['--config', '/nonexistent/imexctl.toml', 'epilog']); "
            "print(rc, 'argparse' in sys.modules)")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    rc, loaded = out.stdout.split()
    assert rc == "2" and loaded == "False", out.stderr   # no SLURM_JOB_ID; no argparse
    assert "SLURM_JOB_ID" in out.stderr
