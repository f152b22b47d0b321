"""This tray's fabric identity: live from its GPUs, and as published in Slurm's Extra."""

from __future__ import annotations

from imexctl.config import Config
from imexctl.rules.cliques import TrayIdentity, TrayUnfit, identity_from_extra


def published_identity(extra: str | None) -> TrayIdentity | None:
    """The identity a tray published in its Slurm Extra field, if any and well-formed."""
    return identity_from_extra(extra)


def local_identity(cfg: Config) -> TrayIdentity:
    """The live identity from this tray's GPUs (``fabric.local_verdict``); TrayUnfit when
    it cannot serve IMEX (unfit, or not an IMEX tray at all)."""
    from imexctl.tray.fabric import local_verdict
    verdict = local_verdict(cfg)
    if verdict.kind != "imex" or verdict.clique is None:
        raise TrayUnfit(verdict.detail)
    return verdict.clique
