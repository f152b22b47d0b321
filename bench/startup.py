"""Start-up cost of imexctl: every job start pays it on every tray, in every hook.

Prints, for each command, the median wall time, the median CPU time (user + sys) and the
peak RSS over N runs, next to a bare `python -c pass` with the same interpreter, and the
ratios, all measured in one run. Rows:
- `imexctl --version`, `config check`, `status --json` (target: status within 2x bare Python);
- "hook start-up": what a prolog/epilog/health run imports and sets up before its first
  step (CLI, lifecycle, Slurm adapter and context, fabric, logging to a file, one event).
  Its CPU minus bare Python's is imexctl's own start-up CPU per hook (target: the whole
  hook within 50 ms, so this must leave room for the work);
- `import structlog` (the whole package) for reference: what imexctl.log avoids paying.
Then the largest imports on the hook path (`python -X importtime`, cumulative).

Usage: .venv/bin/python bench/startup.py [-n 20]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

VENV_BIN = Path(sys.executable).parent
HOOK_STARTUP = """
import sys
from pathlib import Path
import imexctl.cli, imexctl.lifecycle, imexctl.slurm.adapter, imexctl.slurm.context
import imexctl.fabric
from imexctl import log
log.setup_logging(Path(sys.argv[1]), node="tray01", stderr=None)
log.bind(job_id=1, hook="prolog")
log.get_logger().info("prolog started")
"""


def measure(argv: list[str], runs: int, env: dict[str, str]) -> tuple[float, float, float]:
    """Median wall ms, median CPU ms (user+sys) and max peak RSS (MiB) over ``runs``."""
    walls, cpus, peaks = [], [], []
    for _ in range(runs + 1):  # the first run writes byte code; not counted
        t0 = time.perf_counter()
        pid = os.posix_spawn(argv[0], argv, env, file_actions=[
            (os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0),
            (os.POSIX_SPAWN_OPEN, 2, os.devnull, os.O_WRONLY, 0)])
        _, status, usage = os.wait4(pid, 0)
        walls.append((time.perf_counter() - t0) * 1000)
        cpus.append((usage.ru_utime + usage.ru_stime) * 1000)
        peaks.append(usage.ru_maxrss / 1024)
        if os.waitstatus_to_exitcode(status) != 0:
            raise SystemExit(f"{' '.join(argv)} failed with {os.waitstatus_to_exitcode(status)}")
    return statistics.median(walls[1:]), statistics.median(cpus[1:]), max(peaks[1:])


def top_imports(code: list[str], env: dict[str, str], count: int = 8) -> list[tuple[int, str]]:
    """The ``count`` largest top-level imports (cumulative microseconds) of one run."""
    out = subprocess.run([sys.executable, "-X", "importtime", *code], env=env,
                         capture_output=True, text=True, check=True).stderr
    rows = []
    for line in out.splitlines():
        parts = line.split("|")
        if len(parts) == 3 and parts[1].strip().isdigit():
            name = parts[2].rstrip()
            depth = (len(name) - len(name.lstrip())) // 2
            if depth <= 1:
                rows.append((int(parts[1]), name.strip()))
    return sorted(rows, reverse=True)[:count]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", type=int, default=20)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        cfg = Path(tmp) / "imexctl.toml"
        cfg.write_text(f'[paths]\nstate_dir = "{tmp}/state"\nrun_dir = "{tmp}/run"\n'
                       f'log_file = "{tmp}/log/imexctl.log"\nchannel_dir = "{tmp}/ch"\n')
        # A clean environment (no PYTHONDONTWRITEBYTECODE): hooks run with byte code cached.
        env = {"PATH": "/usr/bin:/bin", "IMEXCTL_CONFIG": str(cfg), "LANG": "C.UTF-8",
               "SLURMD_NODENAME": "tray01"}
        imexctl = str(VENV_BIN / "imexctl")
        py = sys.executable
        hook = ["-P", "-c", HOOK_STARTUP, f"{tmp}/log/hook.log"]  # -P: imexctl from the venv, not the cwd
        cases = [
            ("python -c pass (baseline)", [py, "-c", "pass"]),
            ("imexctl --version", [imexctl, "--version"]),
            ("imexctl config check", [imexctl, "config", "check"]),
            ("imexctl status --json", [imexctl, "status", "--json"]),
            ("hook start-up (imports+log)", [py, *hook]),
            ("import structlog (reference)", [py, "-P", "-c", "import structlog"]),
        ]
        results = [(name, *measure(argv, args.n, env)) for name, argv in cases]
        imports = top_imports(hook, env)
    base_w, base_c, base_m = results[0][1:]
    print(f"{'command':30} {'wall ms':>8} {'x base':>7} {'CPU ms':>7} {'x base':>7} "
          f"{'+CPU ms':>8} {'peak MiB':>9}")
    for name, wall, cpu, mem in results:
        print(f"{name:30} {wall:8.1f} {wall / base_w:7.2f} {cpu:7.1f} {cpu / base_c:7.2f} "
              f"{cpu - base_c:8.1f} {mem:9.1f}")
    by_name = {name: (wall, cpu) for name, wall, cpu, _ in results}
    status_ratio = by_name["imexctl status --json"][0] / base_w
    own_cpu = by_name["hook start-up (imports+log)"][1] - base_c
    print(f"\ntargets: status wall {status_ratio:.2f}x bare Python (target <= 2x); "
          f"imexctl's own start-up CPU per hook {own_cpu:.1f} ms (budget for the whole hook: 50 ms)")
    print("largest imports on the hook path (cumulative ms, one run):")
    for us, name in imports:
        print(f"  {us / 1000:7.1f}  {name}")
    print(f"(runs per command: {args.n}, median; {os.cpu_count()} CPUs; load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}; {sys.executable})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
