"""What the admin commands print, made from the data the library returns (ClusterShell's
CLI/Display rule: the library returns data, only ``cli/`` prints)."""

from __future__ import annotations

import json

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


def identity_json(rows: list[dict[str, Any]]) -> str:
    return json.dumps(rows, indent=2, sort_keys=True)


def identity_table(rows: list[dict[str, Any]]) -> str:
    """``imexctl identity show``: one line per node."""
    lines = [f"{'NODE':<14} {'CLUSTER UUID':<37} {'CLIQUE':>6} {'GPUS':>4} STATE"]
    for row in rows:
        if row["clique"] is None:
            lines.append(f"{row['node']:<14} {'(not published)':<37} {'-':>6} {'-':>4} -")
        else:
            lines.append(f"{row['node']:<14} {row['cluster_uuid']:<37} {row['clique_id']:>6} "
                         f"{row['gpu_count']:>4} {row['state']}")
    return "\n".join(lines)
