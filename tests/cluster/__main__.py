"""`python -m tests.cluster up|down|status [-n N]` for humans and the demo.

Knobs come from IMEXCTL_HARNESS_<KNOB> (see docs/harness.md) and the flags below.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from tests.cluster.harness import Cluster, HarnessError


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.cluster", description=__doc__)
    ap.add_argument("action", choices=("up", "down", "status"))
    ap.add_argument("-n", type=int, help="number of trays (default 4)")
    ap.add_argument("--state-dir", help="harness state dir (default /tmp/imexctl-harness)")
    ap.add_argument("--hooks", choices=("imexctl", "record", "record+imexctl"))
    ap.add_argument("--purge", action="store_true", help="down: also remove the state dir")
    args = ap.parse_args(argv)
    overrides = {k: v for k, v in (("state_dir", args.state_dir), ("hooks", args.hooks), ("n", args.n)) if v}
    cluster = Cluster.from_env(**overrides)
    t0 = time.monotonic()
    try:
        if args.action == "up":
            cluster.up()
            print(f"up: {cluster.n} trays in {time.monotonic() - t0:.1f}s; clients need "
                  f"SLURM_CONF={cluster.conf_path}")
        elif args.action == "down":
            cluster.down(purge=args.purge)
            print(f"down in {time.monotonic() - t0:.1f}s")
        else:
            print(json.dumps(cluster.status(), indent=1))
    except (HarnessError, TimeoutError) as exc:
        print(f"harness: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
