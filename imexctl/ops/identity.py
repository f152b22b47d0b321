"""Tray fabric identity published in Slurm's node ``Extra`` field.

Every tray's prolog and the controller prolog judge an allocation from these records
without talking to the trays. ``Extra`` survives slurmctld restarts, unlike features
changed at run time. Our data lives under one key of a JSON object; other keys stay.
The CLI prints what these functions return (``imexctl identity publish|show``).
"""

from __future__ import annotations

from imexctl.base import log
from imexctl.base.dataclass import dataclass, field
from imexctl.config import Config
from imexctl.errors import EXIT_NODE_FAULT, EXIT_OK, UsageError
from imexctl.imex.identity import published
from imexctl.rules.cliques import EXTRA_KEY, TrayIdentity, identity_from_extra
from imexctl.slurm.adapter import get_adapter
from imexctl.slurm.hostlist import expand
from imexctl.tray.fabric import local_verdict

TYPE_CHECKING = False
if TYPE_CHECKING:
    from imexctl.base.jsontypes import Json

    from imexctl.slurm.interface import SlurmAdapter


@dataclass
class Published:
    """What ``publish`` did: ``lines`` for the admin, ``exit_code`` for the command."""
    exit_code: int
    lines: list[str] = field(default_factory=list)


def publish(cfg: Config, slurm: SlurmAdapter | None = None) -> Published:
    """Publish this tray's clique. A tray without NVLink fabric publishes that it is not
    an IMEX tray (the all-zero cluster UUID) and succeeds; an unfit tray is a node fault."""
    verdict = local_verdict(cfg)
    if verdict.kind == "not_imex":
        # Published too, so the controller groups this tray as "no domain" rather than
        # "unpublished" (which would leave the decision to the node prologs).
        slurm = slurm or get_adapter(cfg)
        slurm.extra_merge(cfg.node, EXTRA_KEY,
                          TrayIdentity.not_imex(len(verdict.gpus)).to_extra())
        log.get_logger().info("identity published: not an IMEX tray", detail=verdict.detail)
        return Published(EXIT_OK, [f"{cfg.node}: published \"not an IMEX tray\": "
                                   f"{verdict.detail}"])
    if verdict.kind == "unfit" or verdict.clique is None:
        return Published(EXIT_NODE_FAULT,
                         [f"{cfg.node}: fabric not usable: {verdict.detail}"])
    slurm = slurm or get_adapter(cfg)
    ident = published(cfg, verdict.clique)
    slurm.extra_merge(cfg.node, EXTRA_KEY, ident.to_extra())
    log.get_logger().info("identity published", clique=ident.clique, gpus=ident.gpu_count,
                          auth=ident.auth, lifetime=ident.lifetime,
                          degraded=verdict.degraded)
    out = Published(EXIT_OK, [f"{cfg.node}: published clique {ident.clique} "
                              f"({ident.gpu_count} GPUs, imex.auth {ident.auth}, "
                              f"imex.lifetime {ident.lifetime})"])
    if verdict.degraded:
        out.lines.append(f"{cfg.node}: warning: {verdict.detail}")
    return out


def show(cfg: Config, nodelist: str | None, slurm: SlurmAdapter | None = None
         ) -> list[Json]:
    """One row per node: what it published (``clique`` None when nothing usable).
    UsageError for a bad node list, or none at all where this host's name is unknown."""
    try:
        names = expand(nodelist) if nodelist else [cfg.node]
    except ValueError as exc:
        raise UsageError(f"identity show: bad node list: {exc}") from None
    if not names or not all(names):
        raise UsageError("identity show: no node given and this host's node name is unknown")
    slurm = slurm or get_adapter(cfg)
    records = slurm.nodes(names)
    rows: list[Json] = []
    for name in names:
        ident = identity_from_extra(records[name].extra if name in records else "")
        rows.append({"node": name, **(ident.to_extra() if ident else {}),
                     "clique": ident.clique if ident else None})
    return rows
