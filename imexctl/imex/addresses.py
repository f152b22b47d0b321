"""The addresses of a domain's members, for nodes_config.cfg: NodeAddr from the local
slurm.conf, node records already read, the system resolver, and only then slurmctld.
Address resolution does I/O (DNS, slurm.conf); rendering the config (render.py) does not."""

from __future__ import annotations

from imexctl.base import log
from imexctl.config import Config
from imexctl.errors import NodeFault
from imexctl.slurm import localconf

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Callable, Mapping

    from imexctl.slurm.records import NodeRecord


def local_conf(cfg: Config, members: list[str]) -> localconf.LocalSlurmConf | None:
    """The local slurm.conf, parsing only the members' node lines; None (logged) when
    there is none: addresses then come from name resolution."""
    try:
        return localconf.load(cfg.paths.slurm_conf, nodes=members)
    except localconf.LocalConfError as exc:
        log.get_logger().warning("no local slurm.conf: node addresses from name resolution, "
                                 "default ready timeout", error=str(exc))
        return None


def member_addresses(members: list[str], conf: localconf.LocalSlurmConf | None,
                     known: dict[str, str] | None = None,
                     ask_slurm: Callable[[list[str]], dict[str, str]] | None = None) -> list[str]:
    """The members' addresses in group order: NodeAddr from the local slurm.conf, else from
    node records this prolog already read (fallback path), else the name resolved here.
    Only when all of those fail does it ask slurmctld (one query for the missing trays,
    logged: a tray without its slurm.conf is a setup fault, not the common path).
    NodeFault naming the trays with no address at all."""
    found = dict(known or {})
    if conf is not None:
        found.update(conf.addresses(members))
    addrs = {n: found.get(n) or resolve(n) for n in members}
    missing = [n for n, a in addrs.items() if not a]
    if missing and ask_slurm is not None:
        log.get_logger().warning("node addresses asked from slurmctld (no local slurm.conf "
                                 "entry and the names do not resolve)", nodes=",".join(missing))
        try:
            addrs.update({n: a for n, a in ask_slurm(missing).items() if n in addrs})
        except Exception as exc:  # noqa: BLE001 - reported as the missing address below
            log.get_logger().warning("cannot read node addresses from Slurm", error=str(exc))
        missing = [n for n, a in addrs.items() if not a]
    if missing:
        where = f"not in {conf.path}" if conf is not None else "no local slurm.conf"
        raise NodeFault(f"no address for {','.join(missing)} ({where}, the name "
                        "does not resolve, and Slurm has no NodeAddr for it)")
    return [str(addrs[n]) for n in members]


def record_addrs(records: Mapping[str, NodeRecord]) -> dict[str, str]:
    """NodeAddr of node records, leaving out the ones Slurm defaults to the node name."""
    return {n: r.addr for n, r in records.items()
            if r.addr and r.addr != n}


def resolve(name: str) -> str | None:
    import socket  # the per-hook import test keeps it off a prolog without IMEX

    try:
        infos = socket.getaddrinfo(name, None, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return None
    return str(infos[0][4][0]) if infos else None
