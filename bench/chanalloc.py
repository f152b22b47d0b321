"""Channel allocation when many jobs start at once (PrologSlurmctld runs per job, in parallel).

N processes (default 200) are forked, wait on one barrier, and each allocates channels
for one job (one or two cliques, as a multi-rack job would) in one shared table, with
a live-job callback that sleeps like a squeue RPC (taken *outside* the lock). Prints the
makespan, per-allocation latency (p50/p95/max), how long the lock was held per
allocation, allocations per second, and checks that no clique has a channel twice.
Usage: .venv/bin/python bench/chanalloc.py [-n 200] [--cliques 12] [--rpc-ms 30]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from imexctl.controller.channel_table import ChannelTable  # noqa: E402


def clique(i: int) -> str:
    return f"5b1b3a1e-1c1a-4d0e-9a5e-{i:012d}.32766"


def worker(directory: str, job: int, cliques: list[str], rpc_s: float, live: set[int],
           barrier, out) -> None:
    table = ChannelTable(Path(directory), count=2048)
    held_s = []
    orig = table._locked

    def timed_lock():  # measure lock hold time around the real lock
        cm = orig()

        class Wrap:
            def __enter__(self):
                cm.__enter__()
                self.t = time.perf_counter()

            def __exit__(self, *exc):
                held_s.append(time.perf_counter() - self.t)
                return cm.__exit__(*exc)
        return Wrap()
    table._locked = timed_lock

    def live_jobs():
        time.sleep(rpc_s)
        return live

    barrier.wait()
    t0 = time.perf_counter()
    got = table.allocate(job, cliques, live_jobs=live_jobs)
    out.put((job, got, time.perf_counter() - t0, held_s[0]))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("-n", type=int, default=200)
    ap.add_argument("--cliques", type=int, default=12)
    ap.add_argument("--rpc-ms", type=float, default=30.0)
    args = ap.parse_args()
    ctx = multiprocessing.get_context("fork")
    jobs = list(range(1000, 1000 + args.n))
    plan = {j: [clique(j % args.cliques)] + ([clique((j + 1) % args.cliques)] if j % 3 == 0
                                             else []) for j in jobs}
    with tempfile.TemporaryDirectory() as tmp:
        barrier = ctx.Barrier(args.n + 1)
        out = ctx.Queue()
        procs = [ctx.Process(target=worker, args=(tmp, j, plan[j], args.rpc_ms / 1000,
                                                  set(jobs), barrier, out)) for j in jobs]
        for p in procs:
            p.start()
        barrier.wait()
        start = time.perf_counter()
        results = [out.get(timeout=120) for _ in jobs]
        makespan = time.perf_counter() - start
        for p in procs:
            p.join()
        final = ChannelTable(Path(tmp)).held()
    latency = sorted(r[2] for r in results)
    held = sorted(r[3] for r in results)
    seen: dict[str, list[int]] = {}
    for _, got, _, _ in results:
        for key, channel in got.items():
            seen.setdefault(key, []).append(channel)
    collisions = sum(len(v) - len(set(v)) for v in seen.values())
    bad = sum(1 for v in seen.values() for c in v if not 1 <= c < 2048)

    def pct(values, q):
        return values[min(len(values) - 1, int(q * len(values)))] * 1000

    print(f"jobs {args.n}, cliques {args.cliques}, simulated squeue {args.rpc_ms:g} ms "
          f"(outside the lock), groups allocated {sum(len(v) for v in seen.values())}")
    print(f"makespan            {makespan * 1000:8.1f} ms  "
          f"({args.n / makespan:.0f} allocations/s)")
    print(f"latency per job     p50 {pct(latency, .5):7.1f} ms  p95 {pct(latency, .95):7.1f} ms"
          f"  max {latency[-1] * 1000:7.1f} ms")
    print(f"lock held per job   p50 {pct(held, .5):7.2f} ms  p95 {pct(held, .95):7.2f} ms"
          f"  sum {sum(held) * 1000:7.1f} ms ({sum(held) / makespan:.0%} of the makespan)")
    print(f"collisions {collisions}, out-of-range channels {bad}, jobs in table "
          f"{len(final)}/{args.n}; machine load average {os.getloadavg()[0]:.2f}")
    return 0 if collisions == 0 and bad == 0 and len(final) == args.n else 1


if __name__ == "__main__":
    raise SystemExit(main())
