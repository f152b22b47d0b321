"""slurmctld load of the node prolog's Slurm queries, before and after issue 10.

For a job of N trays on a cluster whose definition grows (100 .. 10,000 nodes; only the
job's trays run slurmd, the rest are defined State=DOWN), every tray runs the Slurm
queries its prolog makes, through imexctl's own adapter, inside the tray's namespaces:

* before (the fallback path, and every prolog before issue 10): the job record, then the
  node records of the job's trays (`scontrol show node`, which loads the node table);
* after (the common path: a controller decision in AdminComment): the job record only,
  plus the local slurm.conf read for the members' addresses (no RPC).

slurmctld's RPC counters are reset (`sdiag -r`) before each run and read after it, by
message type. Prints RPCs per tray by type, the wall time of one tray's queries, and the
growth ratio from the smallest to the largest definition.
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
if mode == "before":
    slurm.nodes(list(job.nodes))
else:
    from imexctl.slurm import localconf
    localconf.load(cfg.paths.slurm_conf, nodes=list(job.nodes)).addresses(list(job.nodes))
print(json.dumps({"s": time.perf_counter() - t0}))
"""


def sdiag_rpcs(c: Cluster) -> dict[str, int]:
    """RPC counts by message type since the last reset (`sdiag`'s "Remote Procedure Call
    statistics by message type")."""
    out = c.client(["sdiag"]).stdout
    section = out.split("by message type", 1)[-1].split("by user", 1)[0]
    return {m[1]: int(m[2]) for m in re.finditer(
        r"^\s*([A-Z_0-9]+)\s*\(\s*\d+\)\s+count:(\d+)", section, re.M)}


def measure(c: Cluster, job: int, trays: list[str], mode: str) -> tuple[dict, float]:
    python = str(c.imexctl_bin.parent / "python")
    c.client(["sdiag", "-r"])
    walls = []
    for tray in trays:
        res = c.exec_on(tray, [python, "-c", PROBE, str(job), mode, tray],
                        env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "SLURMD_NODENAME": tray},
                        timeout=120)
        if res.returncode:
            raise RuntimeError(f"{tray}: {res.stderr.strip()[-300:]}")
        walls.append(json.loads(res.stdout.strip().splitlines()[-1])["s"])
    rpcs = sdiag_rpcs(c)
    rpcs.pop("REQUEST_STATS_INFO", None)    # our own sdiag
    return rpcs, sum(walls) / len(walls)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--trays", default="4,18")
    ap.add_argument("--defined", default="100,1000,10000")
    args = ap.parse_args()
    sizes = [int(x) for x in args.defined.split(",")]
    print(f"{'trays':>5} {'defined':>7} {'path':>6} {'RPCs/tray':>9} {'wall ms/tray':>12}  "
          "RPCs by type (whole job)")
    for n in (int(x) for x in args.trays.split(",")):
        first: dict[str, float] = {}
        for defined in sizes:
            c = Cluster(f"/tmp/imexctl-bench-load-{n}", n, net_prefix="imxl",
                        subnet="10.213.93", hooks="record", cluster_name="imxl",
                        down_nodes=max(defined - n, 0))
            c.up(timeout=300)
            try:
                job = c.submit(["-N", str(n), "--wrap", "sleep 300"])
                c.wait_job_state(job, "RUNNING", timeout=120)
                for mode in ("before", "after"):
                    rpcs, wall = measure(c, job, c.trays, mode)
                    per_tray = sum(rpcs.values()) / n
                    first.setdefault(mode, wall)
                    growth = wall / first[mode]
                    print(f"{n:5d} {defined:7d} {mode:>6} {per_tray:9.1f} {wall * 1000:12.1f}  "
                          f"{dict(sorted(rpcs.items()))}  (wall x{growth:.2f} vs {sizes[0]})",
                          flush=True)
                c.client(["scancel", str(job)], check=False)
            finally:
                c.down(purge=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
