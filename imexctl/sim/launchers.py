"""Tiny launchers for the simulated binaries: ``python -m imexctl.sim.launchers DIR``.

Writes ``DIR/nvidia-imex`` and ``DIR/nvidia-imex-ctl``: Python scripts run with ``-IS``
(no site, no editable-install finder, no user site) that put this checkout first on
``sys.path``. The simulator is stdlib-only, so that is all it needs, and the ctl then
starts in about the time of a bare interpreter instead of paying the venv's site
machinery on every call (the real ctl is a small native binary).
"""

from __future__ import annotations

import os
import sys

TOOLS = {"nvidia-imex": "imexctl.sim.daemon", "nvidia-imex-ctl": "imexctl.sim.ctl"}


def launcher_text(module: str, python: str = sys.executable) -> str:
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return (f"#!{python} -IS\n"
            "import sys\n"
            f"sys.path.insert(0, {root!r})\n"
            f"from {module} import entry\n"
            "entry()\n")


def write_launchers(directory: str, python: str = sys.executable) -> list[str]:
    """Write (atomically, mode 0755) one launcher per simulated tool; return their paths."""
    os.makedirs(directory, exist_ok=True)
    out = []
    for name, module in TOOLS.items():
        path = os.path.join(directory, name)
        tmp = f"{path}.{os.getpid()}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o755)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(launcher_text(module, python))
        os.chmod(tmp, 0o755)
        os.replace(tmp, path)
        out.append(path)
    return out


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m imexctl.sim.launchers DIR", file=sys.stderr)
        return 2
    for path in write_launchers(args[0]):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
