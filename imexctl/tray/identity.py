"""This tray's fabric identity, live from its GPUs (what it publishes in Slurm's Extra is
decoded by :func:`imexctl.rules.cliques.identity_from_extra`, the one Extra codec)."""

from __future__ import annotations

from imexctl.config import Config
from imexctl.rules.cliques import TrayIdentity, TrayUnfit


def local_identity(cfg: Config) -> TrayIdentity:
    """The live identity from this tray's GPUs (``fabric.local_verdict``); TrayUnfit when
    it cannot serve IMEX (unfit, or not an IMEX tray at all)."""
    from imexctl.tray.fabric import local_verdict
    verdict = local_verdict(cfg)
    if verdict.kind != "imex" or verdict.clique is None:
        raise TrayUnfit(verdict.detail)
    return verdict.clique
