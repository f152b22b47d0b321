"""Can the simulator carry a full rack and a Kyber-size domain on this machine?

Starts 4, 18 and 72 simulated trays together on loopback and prints the time until
``nvidia-imex-ctl -N -j`` says UP, on the real back-off schedule (time scale 1.0 unless
``--scale``): once with the daemons left alone, once nudged the way imexctl's wait-ready
step nudges them (SIGUSR1 to a tray once every member accepts peers while a link of
that tray is down, at most once per 5 s per tray, judged from one ``-N -j`` answer). Then the cost
of the simulator itself: daemon CPU until UP and resident memory per tray, and the
simulated ctl's start-up (wall and CPU per call, through the ``-IS`` launcher and through
the venv's console script) against the 72-tray domain.

Usage: .venv/bin/python bench/sim_scale.py [--sizes 4,18,72] [--scale 1.0] [--calls 20]
"""

from __future__ import annotations

import argparse
import os
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# this checkout's imexctl and its simulator (sim/, a distribution of its own)
sys.path[:0] = [str(Path(__file__).resolve().parents[1]), str(Path(__file__).resolve().parents[1] / "sim")]

from imexctl.imex.ctl import parse_domain  # noqa: E402
from imexctl.imex.ready import NUDGE_INTERVAL_S, Member, nudge_use  # noqa: E402
from imexctl_sim.loopback import SimDomain  # noqa: E402

CLK = os.sysconf("SC_CLK_TCK")


def proc_cpu_s(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLK
    except (OSError, IndexError, ValueError):
        return 0.0


def proc_rss_mib(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def time_to_up(dom: SimDomain, scale: float, nudging: bool, limit: float) -> float | None:
    """Seconds from starting every tray until UP (None: not within ``limit``). Nudging
    follows imexctl.imex.ready (``nudge_use`` says now; at most once per 5 s x scale per tray),
    judged from tray 0's ``-N -j`` answer, which lists every member's links."""
    members = [Member(f"tray{i:02d}", a) for i, a in enumerate(dom.addresses)]
    started = time.monotonic()
    dom.start_all()
    next_nudge = [started] * len(dom.trays)
    while time.monotonic() - started < limit:
        proc = dom.trays[0].ctl("-N", "-j")
        view = parse_domain(proc.stdout.encode())
        if view.status == "UP":
            return time.monotonic() - started
        now = time.monotonic()
        for i, tray in enumerate(dom.trays):
            if nudging and now >= next_nudge[i] and nudge_use(view, members, members[i]) == "now":
                next_nudge[i] = now + NUDGE_INTERVAL_S * scale
                tray.signal(signal.SIGUSR1)
        time.sleep(0.2)
    return None


def ctl_cost(argv: list[str], env: dict, calls: int) -> tuple[float, float]:
    """(median wall ms, mean CPU ms) per call."""
    walls = []
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    for _ in range(calls):
        t0 = time.perf_counter()
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
                       check=True)
        walls.append(time.perf_counter() - t0)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime) / calls
    return statistics.median(walls) * 1000, cpu * 1000


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="4,18,72")
    ap.add_argument("--scale", type=float, default=1.0, help="IMEXCTL_SIM_TIME_SCALE")
    ap.add_argument("--calls", type=int, default=20)
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    limit = 300 * args.scale + 60
    print(f"time scale {args.scale:g}: back-off {15 * args.scale:g}/{31 * args.scale:g}/"
          f"{62 * args.scale:g}/{125 * args.scale:g} s, SIGUSR1 window "
          f"{NUDGE_INTERVAL_S * args.scale:g} s; {os.cpu_count()} CPUs")
    print(f"{'trays':>5} {'mode':>9} {'to UP':>8} {'daemon CPU':>11} {'RSS/tray':>9}")
    last = None
    with tempfile.TemporaryDirectory(prefix="imexctl-sim-scale-") as tmp:
        for n in sizes:
            for mode in ("alone", "nudged"):
                dom = SimDomain(Path(tmp) / f"{n}-{mode}", n, time_scale=f"{args.scale:g}")
                try:
                    up = time_to_up(dom, args.scale, mode == "nudged", limit)
                    cpu = sum(proc_cpu_s(t.proc.pid) for t in dom.trays)
                    rss = statistics.mean(proc_rss_mib(t.proc.pid) for t in dom.trays)
                    shown = f"{up:7.1f}s" if up is not None else "  never"
                    print(f"{n:>5} {mode:>9} {shown:>8} {cpu:10.2f}s {rss:8.1f}M", flush=True)
                    if n == max(sizes) and mode == "nudged" and up is not None:
                        last = dom
                        continue
                finally:
                    if dom is not last:
                        dom.cleanup()
        if last is None:
            print("largest domain never reached UP: no ctl figures")
            return 1
        try:
            t = last.trays[0]
            env = t.env()
            script = str(Path(sys.executable).parent / "imexctl-sim-imex-ctl")
            print(f"simulated nvidia-imex-ctl against the {len(last.trays)}-tray domain "
                  f"({args.calls} calls each):")
            bare = ctl_cost([sys.executable, "-IS", "-c", "pass"], env, args.calls)
            print(f"  {'bare python -IS':<34} wall {bare[0]:5.1f} ms  cpu {bare[1]:5.1f} ms")
            for label, binary in (("launcher (-IS)", last.ctl_bin), ("console script", script)):
                for mode in (["-q"], ["-N", "-j"]):
                    wall, cpu = ctl_cost([binary, "-c", str(t.cfg), *mode], env, args.calls)
                    print(f"  {label + ' ' + ' '.join(mode):<34} wall {wall:5.1f} ms  "
                          f"cpu {cpu:5.1f} ms  ({wall / bare[0]:.1f}x bare)")
        finally:
            last.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
