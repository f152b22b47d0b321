"""Tiny launchers for the simulated binaries: ``python -m imexctl_sim.launchers DIR``.

Writes ``DIR/nvidia-imex`` and ``DIR/nvidia-imex-ctl``: Python scripts run with ``-IS``
(no site, no editable-install finder, no user site) that put the directory holding this
``imexctl_sim`` package (``sim/`` of a checkout) first on ``sys.path``. The simulated
tools are stdlib-only, so that is all they need, and the ctl then starts in about the
time of a bare interpreter instead of paying the venv's site machinery on every call
(the real ctl is a small native binary).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from imexctl.base.executable import shebang, write_script

TOOLS = {"nvidia-imex": "imexctl_sim.daemon", "nvidia-imex-ctl": "imexctl_sim.ctl"}


def launcher_text(module: str, python: str = sys.executable) -> str:
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return (f"{shebang(python)}\n"
            "import sys\n"
            f"sys.path.insert(0, {root!r})\n"
            f"from {module} import entry\n"
            "entry()\n")


def write_launchers(directory: str, python: str = sys.executable) -> list[str]:
    """Write (atomically, mode 0755) one launcher per simulated tool; return their paths."""
    os.makedirs(directory, exist_ok=True)
    return [str(write_script(Path(directory) / name, launcher_text(module, python)))
            for name, module in TOOLS.items()]


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m imexctl_sim.launchers DIR", file=sys.stderr)
        return 2
    for path in write_launchers(args[0]):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
