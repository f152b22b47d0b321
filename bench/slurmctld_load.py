"""slurmctld load of the node prolog's Slurm queries, before and after issue 10.

For a job of N trays on a cluster whose definition grows (100 .. 10,000 nodes; only the
job's trays run slurmd, the rest are defined State=DOWN), every tray runs the Slurm
queries its prolog makes, through imexctl's own adapter, inside the tray's namespaces:

* before (the fallback path, and every prolog before issue 10): the job record, then the
  node records of the job's trays (`scontrol show node`, which loads the node table);
* after (the common path: a controller decision in AdminComment): the job record only,
  plus the local slurm.conf read for the members' addresses (no RPC).

slurmctld's RPC counters are reset (`sdiag -r`) before each run and read after it, by
message type. Prints RPCs per tray by type, slurmctld's own time per tray (sdiag
total_time), the wall time of one tray's queries (and of its job query alone), the growth
ratio from the smallest to the largest definition, and after/before per size.
Runs its own clusters (/tmp/imexctl-bench-load-*), never a test cluster. Needs root.
Usage: .venv/bin/python bench/slurmctld_load.py [--trays 4,18] [--defined 100,1000,10000]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.cluster import Cluster  # noqa: E402

PROBE = r"""
import json, sys, time
from imexctl.config import load_config
from imexctl.slurm.cli_backend import CliBackend
job_id, mode, node = int(sys.argv[1]), sys.argv[2], sys.argv[3]
cfg = load_config(None, node=node)
slurm = CliBackend(cfg)
t0 = time.perf_counter()
job = slurm.job(job_id)
t1 = time.perf_counter()
if mode == "before":
    slurm.nodes(list(job.nodes))
else:
    from imexctl.slurm import localconf
    localconf.load(cfg.paths.slurm_conf, nodes=list(job.nodes)).addresses(list(job.nodes))
print(json.dumps({"s": time.perf_counter() - t0, "job_s": t1 - t0}))
"""


def sdiag_rpcs(c: Cluster) -> tuple[dict[str, int], dict[str, int]]:
    """RPC counts and slurmctld's total time (µs) by message type since the last reset
    (`sdiag`'s "Remote Procedure Call statistics by message type")."""
    out = c.client(["sdiag"]).stdout
    section = out.split("by message type", 1)[-1].split("by user", 1)[0]
    rows = re.finditer(r"^\s*([A-Z_0-9]+)\s*\(\s*\d+\)\s+count:(\d+)\s+ave_time:\d+"
                       r"\s+total_time:(\d+)", section, re.M)
    counts, usec = {}, {}
    for m in rows:
        counts[m[1]], usec[m[1]] = int(m[2]), int(m[3])
    return counts, usec


def measure(c: Cluster, job: int, trays: list[str], mode: str) -> tuple[dict, float, float, float]:
    """RPCs by type, one tray's mean wall time (all queries; the job query alone), and
    slurmctld's own time per tray (µs, sdiag total_time)."""
    python = str(c.imexctl_bin.parent / "python")
    c.client(["sdiag", "-r"])
    walls, job_walls = [], []
    for tray in trays:
        res = c.exec_on(tray, [python, "-c", PROBE, str(job), mode, tray],
                        env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "SLURMD_NODENAME": tray},
                        timeout=120)
        if res.returncode:
            raise RuntimeError(f"{tray}: {res.stderr.strip()[-300:]}")
        got = json.loads(res.stdout.strip().splitlines()[-1])
        walls.append(got["s"])
        job_walls.append(got["job_s"])
    rpcs, usec = sdiag_rpcs(c)
    rpcs.pop("REQUEST_STATS_INFO", None)    # our own sdiag
    usec.pop("REQUEST_STATS_INFO", None)
    n = len(trays)
    return rpcs, sum(walls) / n, sum(job_walls) / n, sum(usec.values()) / n


def per_tray(rpcs: dict[str, int], n: int) -> dict[str, float]:
    """RPCs of the whole job, by message type, divided by its trays."""
    return {k.removeprefix("REQUEST_"): round(v / n, 2) for k, v in sorted(rpcs.items())}


def ratio(a: float, b: float) -> str:
    return f"x{a / b:.2f}" if b else "-"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--trays", default="4,18")
    ap.add_argument("--defined", default="100,1000,10000")
    args = ap.parse_args()
    sizes = [int(x) for x in args.defined.split(",")]
    print(f"{'trays':>5} {'defined':>7} {'path':>6} {'RPCs/tray':>9} {'growth':>7} "
          f"{'wall ms/tray':>12} {'growth':>7} {'job-query ms':>12} {'ctld us/tray':>12}  "
          "RPCs per tray by type")
    summary = []
    for n in (int(x) for x in args.trays.split(",")):
        first: dict[str, tuple[float, float]] = {}
        for defined in sizes:
            c = Cluster(f"/tmp/imexctl-bench-load-{n}", n, net_prefix="imxl",
                        subnet="10.213.93", hooks="record", cluster_name="imxl",
                        down_nodes=max(defined - n, 0))
            c.up(timeout=300 + 5 * n)
            try:
                job = c.submit(["-N", str(n), "--wrap", "sleep 600"])
                c.wait_job_state(job, "RUNNING", timeout=120)
                time.sleep(2)   # the job's own launch RPCs (COMPLETE_PROLOG) land first
                row = {}
                for mode in ("before", "after"):
                    rpcs, wall, job_wall, ctld = measure(c, job, c.trays, mode)
                    rpt = sum(rpcs.values()) / n
                    r0, w0 = first.setdefault(mode, (rpt, wall))
                    row[mode] = (rpt, wall, ctld)
                    print(f"{n:5d} {defined:7d} {mode:>6} {rpt:9.2f} {ratio(rpt, r0):>7} "
                          f"{wall * 1000:12.1f} {ratio(wall, w0):>7} {job_wall * 1000:12.1f} "
                          f"{ctld:12.0f}  {per_tray(rpcs, n)}",
                          flush=True)
                (rb, wb, cb), (ra, wa, ca) = row["before"], row["after"]
                print(f"{n:5d} {defined:7d} after/before: RPCs/tray {ratio(ra, rb)}, "
                      f"wall {ratio(wa, wb)}, slurmctld time {ratio(ca, cb)}", flush=True)
                summary.append((n, defined, rb, ra, wb, wa, cb, ca))
                c.client(["scancel", str(job)], check=False)
            finally:
                c.down(purge=True)
    print("\nbefore -> after, and growth from the smallest definition "
          "(RPCs/tray; wall; slurmctld time):")
    for n in sorted({s[0] for s in summary}):
        rows = [s for s in summary if s[0] == n]
        lo, hi = rows[0], rows[-1]
        print(f"  {n} trays: RPCs/tray {lo[2]:.2f} -> {lo[3]:.2f} at {lo[1]} nodes, "
              f"{hi[2]:.2f} -> {hi[3]:.2f} at {hi[1]} nodes; growth {lo[1]} -> {hi[1]}: "
              f"before {ratio(hi[2], lo[2])} RPCs, {ratio(hi[4], lo[4])} wall, "
              f"{ratio(hi[6], lo[6])} slurmctld; after {ratio(hi[3], lo[3])} RPCs, "
              f"{ratio(hi[5], lo[5])} wall, {ratio(hi[7], lo[7])} slurmctld")
    return 0


if __name__ == "__main__":
    sys.exit(main())
