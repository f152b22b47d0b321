"""Issue 12's targets, one copy for the benchmarks that print them (startup.py, lifecycle.py).

Benchmarks print figures and these verdicts; no test asserts a timing."""

from __future__ import annotations

STATUS_X_BARE = 2.0          # `imexctl status` within this many times bare Python's wall
OWN_CPU_MS = 50.0            # imexctl's own CPU per hook
PROLOG_SLURMCTLD_MS = 50.0   # PrologSlurmctld wall
EPILOG_MS = 250.0            # node epilog wall per tray, cooperative daemon
UP_MARGIN_MS = 100.0         # allocation -> UP within this of the shell baseline's


def verdict(ok: bool) -> str:
    return "met" if ok else "NOT met"
