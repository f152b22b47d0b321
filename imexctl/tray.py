"""This tray's fabric identity: live from its GPUs, and as published in Slurm's Extra."""

from __future__ import annotations

import json

from imexctl.config import Config
from imexctl.topology import EXTRA_KEY, TrayIdentity, TrayUnfit, tray_identity


def published_identity(extra: str | None) -> TrayIdentity | None:
    """The identity a tray published in its Slurm Extra field, if any and well-formed."""
    if not extra:
        return None
    try:
        raw = json.loads(extra)
        return TrayIdentity.from_extra(raw[EXTRA_KEY])
    except (ValueError, KeyError, TypeError, OverflowError, RecursionError):
        return None


def local_identity(cfg: Config) -> TrayIdentity:
    """The live identity from this tray's GPUs; TrayUnfit when it cannot serve IMEX."""
    from imexctl.fabric import FabricError, read_fabric
    try:
        gpus = read_fabric(cfg.fabric.source, str(cfg.fabric.file) if cfg.fabric.file else None)
    except FabricError as exc:
        raise TrayUnfit(str(exc)) from None
    return tray_identity(gpus)
