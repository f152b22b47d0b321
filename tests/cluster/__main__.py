"""`python -m tests.cluster up|down|status [-n N]` for humans and the demo.

Knobs come from IMEXCTL_HARNESS_<KNOB> (see docs/harness.md) and the flags below.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from tests.cluster.harness import SLURMS, Cluster, HarnessError


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.cluster", description=__doc__)
    ap.add_argument("action", choices=("up", "down", "status", "run"))
    ap.add_argument("cmd", nargs=argparse.REMAINDER, help="run: a Slurm client command line (sinfo, srun ...) "
                    "run on the login node, inside the Slurm root when there is one")
    ap.add_argument("-n", type=int, help="number of trays (default 4)")
    ap.add_argument("--state-dir", help="harness state dir (default /tmp/imexctl-harness)")
    ap.add_argument("--hooks", choices=("imexctl", "record", "record+imexctl"))
    ap.add_argument("--purge", action="store_true", help="down: also remove the state dir")
    ap.add_argument("--slurm", choices=SLURMS, help="host (22.05), trixie (24.11), sid (26.05); default IMEXCTL_SLURM")
    args = ap.parse_args(argv)
    overrides = {k: v for k, v in (("state_dir", args.state_dir), ("hooks", args.hooks), ("n", args.n),
                                   ("slurm", args.slurm)) if v}
    cluster = Cluster.from_env(**overrides)
    t0 = time.monotonic()
    try:
        if args.action == "up":
            cluster.up()
            where = f" from the {cluster.slurm} root (run clients there, see docs/harness.md)" if cluster.root else ""
            print(f"up: {cluster.n} trays, Slurm {'%d.%02d' % cluster.slurm_version}{where} in "
                  f"{time.monotonic() - t0:.1f}s; clients need SLURM_CONF={cluster.conf_path}")
        elif args.action == "down":
            cluster.down(purge=args.purge)
            print(f"down in {time.monotonic() - t0:.1f}s")
        elif args.action == "run":
            res = cluster.client([a for a in args.cmd if a != "--"], check=False, timeout=3600)
            sys.stdout.write(res.stdout)
            sys.stderr.write(res.stderr)
            return res.returncode
        else:
            print(json.dumps(cluster.status(), indent=1))
    except (HarnessError, TimeoutError) as exc:
        print(f"harness: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
