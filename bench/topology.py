"""`imexctl topology` at cluster scale: 10,000 trays (555 racks of 18 + a partial one).

Times each stage of what the command does after Slurm answered: parse every tray's
published Extra, group into blocks, validate, render topology.conf and topology.yaml,
and --check against the file in place (one tray moved). Target: well under 2 s in all.
Usage: .venv/bin/python bench/topology.py [-n 10000] [--runs 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from imexctl.ops import topoconf  # noqa: E402
from imexctl.rules.cliques import identity_from_extra  # noqa: E402


def extras(n: int) -> dict[str, str]:
    out = {}
    for i in range(n):
        rack = i // 18 + 1
        ident = {"cluster_uuid": f"{rack:08x}-1c1a-4d0e-9a5e-00000000abcd", "clique_id": 32766,
                 "gpu_count": 4, "state": "Completed", "observed": 1.0}
        out[f"tray{i + 1:05d}"] = json.dumps({"imex": ident, "rack": rack})
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("-n", type=int, default=10000)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    raw = extras(args.n)
    names = list(raw)
    stages: dict[str, list[float]] = {}

    def timed(stage, fn):
        t0 = time.perf_counter()
        result = fn()
        stages.setdefault(stage, []).append(time.perf_counter() - t0)
        return result

    for _ in range(args.runs):
        ids = timed("parse Extra", lambda: {n: identity_from_extra(raw[n]) for n in names})
        topo = timed("build + validate", lambda: topoconf.build(names, ids))
        conf = timed("render topology.conf", lambda: topoconf.render_conf(topo))
        timed("render topology.yaml", lambda: topoconf.render_yaml(topo))
        moved = dict(ids)
        moved[names[0]] = ids[names[-1]]
        changed = topoconf.build(names, moved)
        drift = timed("--check (1 tray moved)", lambda: topoconf.check(conf, changed))
        assert names[0] in drift.moved
    total = sum(statistics.median(v) for v in stages.values())
    print(f"trays {args.n}, blocks {len(topo.blocks)}, BlockSizes "
          f"{','.join(map(str, topo.block_sizes))}, runs {args.runs} (median per stage)")
    for stage, values in stages.items():
        print(f"  {stage:26} {statistics.median(values) * 1000:8.1f} ms")
    print(f"  {'total':26} {total * 1000:8.1f} ms  ({total / 2.0:.1%} of the 2 s target)")
    print(f"machine load average {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
