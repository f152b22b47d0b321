"""For tests of the simulated IMEX domain on loopback addresses: the interpreter that runs
its tools, and ``poll`` (wait until a condition holds)."""

from __future__ import annotations

import sys

from imexctl_sim.loopback import poll

__all__ = ["PY", "poll"]

PY = sys.executable
