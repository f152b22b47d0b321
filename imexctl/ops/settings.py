"""``imexctl config show`` and ``config check``: every effective setting with where its value
came from, and the settings that are valid but do nothing."""

from __future__ import annotations

from pathlib import Path

from imexctl.base.dataclass import dataclass, fields
from imexctl.config import FROM_TABLES, SECTIONS, AuthMode, Config, Lifetime
from imexctl.imex.render import persistent_grace_time


@dataclass(frozen=True)
class Setting:
    """One effective setting for ``imexctl config show``: where its value came from."""
    key: str            # "imex.launcher"
    value: object       # JSON-friendly: paths as strings, modes as octal strings
    origin: str         # "file" | "default"


def inert_settings(cfg: Config) -> list[str]:
    """Settings that make imexctl do nothing, or that nothing reads: valid, but almost
    certainly not what the site meant (``config check`` warns)."""
    out = []
    pol = cfg.policy
    if pol.mode == "partitions" and not pol.partitions:
        out.append('policy.mode = "partitions" with no policy.partitions: no job gets an '
                   "IMEX domain")
    if pol.partitions and pol.mode != "partitions":
        out.append(f"policy.partitions is set but policy.mode = {pol.mode!r}: the list is "
                   "not used")
    if pol.mode == "feature" and not pol.feature.strip():
        out.append('policy.mode = "feature" with an empty policy.feature: no job gets an '
                   "IMEX domain")
    if cfg.fabric.file is not None and cfg.fabric.source != "file":
        out.append(f"fabric.file is set but fabric.source = {cfg.fabric.source!r}: the file "
                   "is not read")
    auth = cfg.imex.auth
    for mode in AuthMode:
        for key in mode.keys if mode != auth else ():
            if f"imex.{key}" in cfg.from_file:
                out.append(f"imex.{key} is set but imex.auth = '{auth}': it is not used "
                           f"(only auth = \"{mode}\" reads it)")
    if cfg.imex.lifetime == Lifetime.PERSISTENT and cfg.imex.node_disconnected_grace_time < 0 \
            and "imex.node_disconnected_grace_time" in cfg.from_file:
        out.append(f"imex.node_disconnected_grace_time = "
                   f"{cfg.imex.node_disconnected_grace_time} is not used by the persistent "
                   f"domain: it runs with {persistent_grace_time(-1)} s (with -1 a tray keeps "
                   "a lost peer's imports referenced for as long as its daemon lives)")
    if cfg.imex.lifetime == Lifetime.PERSISTENT and "persistent" in cfg.health.skip:
        out.append('health.skip lists "persistent" with imex.lifetime = "persistent": a dead '
                   "or hung persistent daemon is neither restarted nor drained by health")
    for part in sorted(pol.partition_multi_clique):
        if pol.mode == "partitions" and pol.partitions and part not in pol.partitions:
            out.append(f"[policy.partition.{part}] is set but {part} is not in "
                       "policy.partitions: its jobs get no IMEX domain at all")
    return out


def effective_settings(cfg: Config) -> list[Setting]:
    """Every key of every section with its value and origin, in reference order."""
    out = []
    for name in SECTIONS:
        section = getattr(cfg, name)
        for f in fields(section):
            key = f"{name}.{f.name}"
            if key in FROM_TABLES:   # one row per [policy.partition.<name>] table
                out += [Setting(f"{name}.partition.{part}.multi_clique", value, "file")
                        for part, value in sorted(getattr(section, f.name).items())]
                continue
            out.append(Setting(key, _shown(key, getattr(section, f.name)),
                               "file" if key in cfg.from_file else "default"))
    return out


def _shown(key: str, value: object) -> object:
    if key == "channels.file_mode" and isinstance(value, int):
        return f"{value:04o}"
    if isinstance(value, (AuthMode, Lifetime)):
        return value.value
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, tuple):
        return list(value)
    return value
