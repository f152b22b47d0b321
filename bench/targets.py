"""Issue 12's, issue 27's and issue 35's targets, one copy for the benchmarks that print them (startup.py,
lifecycle.py).

Benchmarks print figures and these verdicts; no test asserts a timing."""

from __future__ import annotations

STATUS_CPU_MS = 40.0         # `imexctl status --json --local`: CPU (user + sys), reference machine
OWN_CPU_MS = 50.0            # imexctl's own CPU per hook
BASELINE_X = 1.10            # each hook's own CPU within 10 % of a baseline commit's, same run
PROLOG_SLURMCTLD_MS = 50.0   # PrologSlurmctld wall (issue 35: EpilogSlurmctld's too)
CONTROLLER_PYTHON_X = 2.5    # each controller hook's wall over a bare Python hook's, same run
EPILOG_MS = 250.0            # node epilog wall per tray, cooperative daemon
UP_MARGIN_MS = 100.0         # allocation -> UP within this of the shell baseline's


def verdict(ok: bool) -> str:
    return "met" if ok else "NOT met"


def pass_fail(ok: bool) -> str:
    return "PASS" if ok else "FAIL"
