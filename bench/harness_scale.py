"""Harness scale: bring-up and tear-down time and memory for 4, 18 and 72 trays.

Runs its own clusters (state dirs /tmp/imexctl-bench-N, link prefix `imxb`) so it never
touches a test cluster. Needs root. Prints one row per size, measured in one run:
bring-up seconds, an `srun -N N hostname` across all trays, tear-down seconds, and the
memory the cluster's processes use (sum of RSS).
Usage: .venv/bin/python bench/harness_scale.py [--sizes 4,18,72]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.cluster import Cluster, procs  # noqa: E402


def rss_mib(cluster: Cluster) -> float:
    total = 0
    for ino in cluster._recorded_netns():
        for pid in procs.pids_in_netns(ino):
            try:
                with open(f"/proc/{pid}/statm") as f:
                    total += int(f.read().split()[1]) * 4096
            except OSError:
                pass
    return total / 2**20


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--sizes", default="4,18,72")
    args = ap.parse_args()
    print(f"{'trays':>5} {'up s':>6} {'srun s':>7} {'down s':>7} {'RSS MiB':>8} {'MiB/tray':>8}")
    for n in (int(x) for x in args.sizes.split(",")):
        c = Cluster(f"/tmp/imexctl-bench-{n}", n, net_prefix="imxb", subnet="10.213.91",
                    hooks="record", cluster_name="imxb")
        t0 = time.monotonic()
        c.up(timeout=120)
        up = time.monotonic() - t0
        t0 = time.monotonic()
        res = c.srun(["-N", str(n), "hostname"], user="nobody", timeout=120)
        srun = time.monotonic() - t0
        ok = res.returncode == 0 and len(set(res.stdout.split())) == n
        mem = rss_mib(c)
        t0 = time.monotonic()
        c.down(purge=True)
        down = time.monotonic() - t0
        print(f"{n:5d} {up:6.1f} {srun:7.2f} {down:7.2f} {mem:8.0f} {mem / (n + 1):8.1f}"
              + ("" if ok else "  (srun FAILED: " + res.stderr.strip()[:80] + ")"), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
