"""Start-up cost of imexctl: every job start pays it on every tray, in every hook.

Prints wall time (median of N runs) and peak RSS of `imexctl --version`, `imexctl config
check` and `imexctl status --json` next to a bare `python -c pass`, and their ratios, all
measured in one run. Usage: .venv/bin/python bench/startup.py [-n 20]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

VENV_BIN = Path(sys.executable).parent


def measure(argv: list[str], runs: int, env: dict[str, str]) -> tuple[float, float]:
    """Median wall seconds and max peak RSS (MiB) over `runs` runs of argv."""
    times, peaks = [], []
    for _ in range(runs):
        t0 = time.perf_counter()
        pid = os.posix_spawn(argv[0], argv, env, file_actions=[
            (os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0),
            (os.POSIX_SPAWN_OPEN, 2, os.devnull, os.O_WRONLY, 0)])
        _, status, usage = os.wait4(pid, 0)
        times.append(time.perf_counter() - t0)
        peaks.append(usage.ru_maxrss / 1024)
        if os.waitstatus_to_exitcode(status) != 0:
            raise SystemExit(f"{' '.join(argv)} failed with {os.waitstatus_to_exitcode(status)}")
    return statistics.median(times), max(peaks)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("-n", type=int, default=20)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        cfg = Path(tmp) / "imexctl.toml"
        cfg.write_text(f'[paths]\nstate_dir = "{tmp}/state"\nrun_dir = "{tmp}/run"\n'
                       f'log_file = "{tmp}/imexctl.log"\nchannel_dir = "{tmp}/ch"\n')
        env = {"PATH": "/usr/bin:/bin", "IMEXCTL_CONFIG": str(cfg), "LANG": "C.UTF-8"}
        imexctl = str(VENV_BIN / "imexctl")
        cases = [
            ("python -c pass (baseline)", [sys.executable, "-c", "pass"]),
            ("imexctl --version", [imexctl, "--version"]),
            ("imexctl config check", [imexctl, "config", "check"]),
            ("imexctl status --json", [imexctl, "status", "--json"]),
        ]
        results = [(name, *measure(argv, args.n, env)) for name, argv in cases]
    base_t, base_m = results[0][1], results[0][2]
    print(f"{'command':32} {'median ms':>10} {'x base':>7} {'peak MiB':>9} {'x base':>7}")
    for name, t, m in results:
        print(f"{name:32} {t * 1000:10.1f} {t / base_t:7.2f} {m:9.1f} {m / base_m:7.2f}")
    print(f"(runs per command: {args.n}; machine load average {os.getloadavg()[0]:.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
