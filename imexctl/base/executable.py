"""The fast ``imexctl`` executable: ``python -m imexctl.cli.executable [DEST]``.

pip's console script runs the interpreter with ``site``: every .pth file of the venv
(setuptools' distutils hook among them), Debian's sitecustomize and the user site, all
before imexctl's first import, in every hook on every tray. This writes a script that runs
the same ``imexctl.cli.entry`` under ``python -IS`` with the site directories baked in, as
site computed them when it was written. ``-I`` also makes the root hooks ignore PYTHONPATH,
PYTHON* variables, the user site and the current directory.

DEST defaults to the ``imexctl`` next to the interpreter (the venv's console script, which
the hooks run). A later ``pip install`` puts pip's script back: slower, never wrong.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

SHEBANG_MAX = 255          # the kernel reads at most 256 bytes of a #! line (Linux >= 5.1)
MARK = "# imexctl executable"  # second line: how doctor and tests tell it from pip's script


class ExecutableError(Exception):
    """The executable cannot be written; the message names the path at fault."""


def _sys_path(python: str, flags: str) -> list[str]:
    code = "import json, sys; print(json.dumps(sys.path))"
    try:
        out = subprocess.run([python, flags, "-c", code], capture_output=True, text=True,
                             timeout=60, check=True).stdout
        return json.loads(out.strip().splitlines()[-1])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError) as exc:
        raise ExecutableError(f"{python}: cannot read its path with {flags}: {exc}") from exc


def site_paths(python: str) -> list[str]:
    """What ``site`` adds to the interpreter's path (site-packages, .pth entries), in order."""
    bare = set(_sys_path(python, "-IS"))
    return [p for p in _sys_path(python, "-I") if p and p not in bare]


def shebang(python: str) -> str:
    """``#!PYTHON -IS``: no site, no user site, no PYTHON* variables, no script directory
    on the path (this executable and the simulator's launchers)."""
    if not os.path.isabs(python) or any(c.isspace() for c in python):
        raise ExecutableError(f"{python}: the interpreter must be an absolute path without "
                              "blanks to stand in a #! line")
    line = f"#!{python} -IS"
    if len(line.encode()) > SHEBANG_MAX:
        raise ExecutableError(f"{python}: path too long for a #! line ({SHEBANG_MAX} bytes)")
    return line


def write_script(dest: Path, text: str) -> Path:
    """``text`` as an executable file (0755), atomically, never through a symlink."""
    from imexctl.base.fsutil import atomic_write

    try:
        atomic_write(dest, text, 0o755)
    except OSError as exc:
        raise ExecutableError(f"{dest}: {exc.strerror or exc}") from exc
    return dest


def executable_text(python: str, paths: list[str]) -> str:
    return (f"{shebang(python)}\n{MARK} (python -m imexctl.cli.executable): site skipped, its paths "
            "baked in\nimport sys\n"
            f"sys.path += {paths!r}\n"
            "try:\n"
            "    from imexctl.cli import entry\n"
            "except ImportError as exc:   # the venv moved or changed under this file\n"
            "    sys.stderr.write(f'imexctl: {__file__}: cannot import imexctl ({exc}); '\n"
            "                     'write it again: python -m imexctl.cli.executable\\n')\n"
            "    sys.exit(127)\n"
            "entry()\n")


def is_fast_executable(path: Path) -> bool:
    """Whether ``path`` is an executable this module wrote (not pip's console script)."""
    try:
        with open(path, "rb") as f:
            head = f.read(SHEBANG_MAX + 64 + len(MARK))
    except OSError:
        return False
    lines = head.split(b"\n")
    return len(lines) > 1 and lines[0].endswith(b" -IS") and lines[1].startswith(MARK.encode())


def write_executable(dest: Path | None = None, python: str = sys.executable) -> Path:
    """Write the executable (mode 0755, atomically) after checking that it imports imexctl."""
    dest = Path(dest) if dest else Path(python).parent / "imexctl"
    paths = site_paths(python)
    text = executable_text(python, paths)
    probe = f"import sys\nsys.path += {paths!r}\nimport imexctl.cli\n"
    try:
        got = subprocess.run([python, "-IS", "-c", probe], capture_output=True, text=True,
                             timeout=60)
    except (OSError, subprocess.SubprocessError) as exc:
        raise ExecutableError(f"{python} -IS: {exc}") from exc
    if got.returncode != 0:
        last = (got.stderr.strip().splitlines() or ["no output"])[-1]
        raise ExecutableError(f"{python} -IS cannot import imexctl from {paths}: {last}")
    return write_script(dest, text)
