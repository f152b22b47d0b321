"""Run a helper command with a wall-clock bound that also covers its children.

The command runs in its own session; when the bound expires the whole process group is
killed (SIGKILL), so a wrapper script's children do not outlive the call (audit F-23).
Nothing goes through a shell.
"""

from __future__ import annotations

import os
import signal
import subprocess
from typing import Mapping

from imexctl.record import dataclass


@dataclass(frozen=True)
class Bounded:
    rc: int | None           # None: could not start, or killed at the bound
    stdout: bytes = b""
    stderr: bytes = b""
    timed_out: bool = False
    error: str = ""          # why rc is None


def run_bounded(argv: list[str], timeout_s: float, env: Mapping[str, str]) -> Bounded:
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, env=dict(env),
                                start_new_session=True, close_fds=True)
    except OSError as exc:
        return Bounded(None, error=f"cannot run {argv[0]}: {exc.strerror or exc}")
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            proc.communicate(timeout=2)
        except subprocess.TimeoutExpired:  # pragma: no cover - pipe held by a stray child
            pass
        return Bounded(None, timed_out=True, error=f"timed out after {timeout_s:g}s")
    return Bounded(proc.returncode, out, err)
