"""What slurmd tells a HealthCheckProgram in its environment (Slurm 26.05.2+).

``run_script_health_check`` in slurmd (src/slurmd/slurmd/slurmd.c) sets
``SLURMD_NODENAME`` always, and ``SLURM_NODE_IS_HEALTHY=yes|no`` only when slurmctld sent
its verdict with the request (REQUEST_NODE_HEALTH_CHECK): ``no`` when slurmctld holds the
node DOWN, DRAIN(ED/ING), FAIL or in a MAINT reservation (``_node_unhealthy_for_hc`` in
src/slurmctld/ping_nodes.c), ``yes`` otherwise. It is unset at slurmd start-up, on Slurm
before 26.05.2, and on 26.05 unless ``SlurmctldParameters=health_check_report`` (26.11
sends it by default). The slurm.conf side (``HealthCheckTimeout``,
``HealthCheckNodeState``) is read by :mod:`imexctl.slurm.localconf`; :class:`SlurmdFacts`
holds both sides, and :func:`budget_s` turns them into the checks' deadline.
"""

from __future__ import annotations

import os

from imexctl.base.dataclass import dataclass

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Mapping

    from imexctl.config import Config

NODE_IS_HEALTHY = "SLURM_NODE_IS_HEALTHY"


def node_is_healthy(env: Mapping[str, str]) -> bool | None:
    """slurmctld's verdict on this node as slurmd passed it: True (``yes``), False
    (``no``), None (unset, or a value slurmd never sets)."""
    value = env.get(NODE_IS_HEALTHY)
    return {"yes": True, "no": False}.get(value) if value is not None else None



@dataclass(frozen=True)
class SlurmdFacts:
    """What slurmd and the local slurm.conf tell a HealthCheckProgram (Slurm 26.05+):
    ``node_is_healthy`` from ``SLURM_NODE_IS_HEALTHY`` (yes/no; None when unset: older
    Slurm, a start-up run, or 26.05 without SlurmctldParameters=health_check_report),
    ``timeout_s`` from ``HealthCheckTimeout`` (None when unset: before 26.05 slurmd
    kills the program after a fixed 60 s), ``post_reboot`` when
    ``HealthCheckNodeState=REBOOT_ONLY`` (slurmd then runs the program only when the node
    registers after a reboot Slurm issued; no variable says so, the setting does)."""
    node_is_healthy: bool | None = None
    timeout_s: int | None = None
    post_reboot: bool = False
    conf: str = ""                       # the slurm.conf read, or why none

    def describe(self) -> dict[str, str]:
        out = {}
        if self.node_is_healthy is not None:
            out["SLURM_NODE_IS_HEALTHY"] = "yes" if self.node_is_healthy else "no"
        if self.timeout_s is not None:
            out["HealthCheckTimeout"] = str(self.timeout_s)
        if self.post_reboot:
            out["HealthCheckNodeState"] = "REBOOT_ONLY"
        return out


def slurmd_facts(cfg: Config, env: Mapping[str, str] | None = None) -> SlurmdFacts:
    """Read :class:`SlurmdFacts` from the environment and the local slurm.conf (no
    slurm.conf: the Slurm settings are unknown, and health behaves as before 26.05)."""
    from imexctl.slurm import localconf

    env = os.environ if env is None else env
    try:
        conf = localconf.load(cfg.paths.slurm_conf, nodes=())
    except Exception as exc:  # noqa: BLE001 - facts are best effort: never a traceback
        return SlurmdFacts(node_is_healthy(env), conf=str(exc))
    return SlurmdFacts(node_is_healthy(env), conf.health_check_timeout_s,
                       conf.health_check_reboot_only, str(conf.path))


def budget_s(cfg: Config, facts: SlurmdFacts) -> float:
    """The checks' deadline: ``[health] timeout_s``, and under Slurm's HealthCheckTimeout
    T that less a margin for the drain and exit (max(5 s, T/5), at most T/2), so slurmd
    never kills a run halfway. Without HealthCheckTimeout: ``[health] timeout_s`` alone."""
    own = cfg.health.timeout_s
    if facts.timeout_s is None:
        return own
    limit = facts.timeout_s
    return round(min(own, limit - min(max(5.0, limit / 5), limit / 2)), 1)


__all__ = ["NODE_IS_HEALTHY", "node_is_healthy", "SlurmdFacts", "slurmd_facts", "budget_s"]
