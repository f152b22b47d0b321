"""What slurmd tells a HealthCheckProgram in its environment (Slurm 26.05.2+).

``run_script_health_check`` in slurmd (src/slurmd/slurmd/slurmd.c) sets
``SLURMD_NODENAME`` always, and ``SLURM_NODE_IS_HEALTHY=yes|no`` only when slurmctld sent
its verdict with the request (REQUEST_NODE_HEALTH_CHECK): ``no`` when slurmctld holds the
node DOWN, DRAIN(ED/ING), FAIL or in a MAINT reservation (``_node_unhealthy_for_hc`` in
src/slurmctld/ping_nodes.c), ``yes`` otherwise. It is unset at slurmd start-up, on Slurm
before 26.05.2, and on 26.05 unless ``SlurmctldParameters=health_check_report`` (26.11
sends it by default). The slurm.conf side (``HealthCheckTimeout``,
``HealthCheckNodeState``) is read by :mod:`imexctl.slurm.localconf`.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Mapping

NODE_IS_HEALTHY = "SLURM_NODE_IS_HEALTHY"


def node_is_healthy(env: Mapping[str, str]) -> bool | None:
    """slurmctld's verdict on this node as slurmd passed it: True (``yes``), False
    (``no``), None (unset, or a value slurmd never sets)."""
    value = env.get(NODE_IS_HEALTHY)
    return {"yes": True, "no": False}.get(value) if value is not None else None


__all__ = ["NODE_IS_HEALTHY", "node_is_healthy"]
