"""Tray fabric identity published in Slurm's node ``Extra`` field.

Every tray's prolog and the controller prolog judge an allocation from these records
without talking to the trays. ``Extra`` survives slurmctld restarts, unlike features
changed at run time. Our data lives under one key of a JSON object; other keys stay.
"""

from __future__ import annotations

import json
import sys

from imexctl.base import log
from imexctl.config import Config
from imexctl.errors import EXIT_NODE_FAULT, EXIT_OK, EXIT_USAGE
from imexctl.rules.cliques import EXTRA_KEY

TYPE_CHECKING = False   # typing is imported for type checkers only: ~3 ms of start-up
if TYPE_CHECKING:
    from typing import Any


def publish(cfg: Config, slurm: Any = None) -> int:
    """Publish this tray's clique. A tray without NVLink fabric publishes that it is not
    an IMEX tray (the all-zero cluster UUID) and succeeds; an unfit tray is a node fault."""
    from imexctl.tray.fabric import local_verdict

    verdict = local_verdict(cfg)
    if verdict.kind == "not_imex":
        # Published too, so the controller groups this tray as "no domain" rather than
        # "unpublished" (which would leave the decision to the node prologs).
        from imexctl.slurm.adapter import get_adapter
        from imexctl.rules.cliques import TrayIdentity

        slurm = slurm or get_adapter(cfg)
        slurm.extra_merge(cfg.node, EXTRA_KEY,
                          TrayIdentity.not_imex(len(verdict.gpus)).to_extra())
        log.get_logger().info("identity published: not an IMEX tray", detail=verdict.detail)
        print(f"{cfg.node}: published \"not an IMEX tray\": {verdict.detail}")
        return EXIT_OK
    if verdict.kind == "unfit" or verdict.clique is None:
        print(f"imexctl: {cfg.node}: fabric not usable: {verdict.detail}")
        return EXIT_NODE_FAULT
    from imexctl.slurm.adapter import get_adapter

    slurm = slurm or get_adapter(cfg)
    ident = verdict.clique
    slurm.extra_merge(cfg.node, EXTRA_KEY, ident.to_extra())
    log.get_logger().info("identity published", clique=ident.clique, gpus=ident.gpu_count,
                          degraded=verdict.degraded)
    print(f"{cfg.node}: published clique {ident.clique} ({ident.gpu_count} GPUs)")
    if verdict.degraded:
        print(f"{cfg.node}: warning: {verdict.detail}")
    return EXIT_OK


def show(cfg: Config, nodelist: str | None, as_json: bool = False, slurm: Any = None) -> int:
    from imexctl.rules.cliques import identity_from_extra
    from imexctl.slurm.adapter import get_adapter
    from imexctl.slurm.hostlist import expand

    try:
        names = expand(nodelist) if nodelist else [cfg.node]
    except ValueError as exc:
        print(f"imexctl: identity show: bad node list: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if not names or not all(names):
        print("imexctl: identity show: no node given and this host's node name is unknown",
              file=sys.stderr)
        return EXIT_USAGE
    slurm = slurm or get_adapter(cfg)
    records = slurm.nodes(names)
    rows: list[dict[str, Any]] = []
    for name in names:
        ident = identity_from_extra(getattr(records.get(name), "extra", ""))
        rows.append({"node": name, **(ident.to_extra() if ident else {}),
                     "clique": ident.clique if ident else None})
    if as_json:
        print(json.dumps(rows, indent=2, sort_keys=True))
        return EXIT_OK
    print(f"{'NODE':<14} {'CLUSTER UUID':<37} {'CLIQUE':>6} {'GPUS':>4} STATE")
    for row in rows:
        if row["clique"] is None:
            print(f"{row['node']:<14} {'(not published)':<37} {'-':>6} {'-':>4} -")
        else:
            print(f"{row['node']:<14} {row['cluster_uuid']:<37} {row['clique_id']:>6} "
                  f"{row['gpu_count']:>4} {row['state']}")
    return EXIT_OK
