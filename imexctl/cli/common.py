"""What every working command does first (load the config, start logging), and the
version text both the fast path and argparse print."""

from __future__ import annotations

import sys

from imexctl import __version__

TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse

    from imexctl.config import Config


def setup(args: argparse.Namespace, node: str | None = None, stderr_level: str = "warning",
           defer_logging: bool = False):
    """Load the config and start logging; shared by every subcommand that does work."""
    from imexctl.config import load_config

    cfg = load_config(args.config, node=node)
    start_logging(cfg, stderr_level, defer_logging)
    return cfg


def start_logging(cfg, stderr_level: str = "warning", defer: bool = False,
                   controller: bool = False) -> None:
    from imexctl.base import log

    log_file, fallback = cfg.paths.log_file, None
    if controller:      # SlurmUser's hooks: a log SlurmUser can write, out of the box
        from imexctl.controller.slurmctld import table_dir

        log_file = cfg.paths.controller_log_file or log_file
        if not cfg.paths.controller_log_file:
            fallback = table_dir(cfg) / CONTROLLER_LOG
    log.setup_logging(log_file, cfg.log.level, cfg.node, stderr_level=stderr_level,
                      max_bytes=cfg.log.max_bytes, defer=defer, fallback=fallback,
                      sink=cfg.log.sink, socket_path=cfg.log.socket)


CONTROLLER_LOG = "imexctl-controller.log"


def one_try(cfg: Config, timeout_cap_s: float | None = None) -> Config:
    """``cfg`` with one try per Slurm call (and at most ``timeout_cap_s`` each): for
    commands run while slurmctld may be the thing that is down (boot, an incident), where a
    quick answer beats the hooks' retries."""
    from imexctl.base.dataclass import replace

    timeout = cfg.slurm.timeout_s if timeout_cap_s is None else \
        min(cfg.slurm.timeout_s, timeout_cap_s)
    return replace(cfg, slurm=replace(cfg.slurm, attempts=1, timeout_s=timeout))


def version_text() -> str:
    """``imexctl <version>``, then what it runs on: the versions a bug report needs."""
    import platform
    from importlib import metadata

    lines = [f"imexctl {__version__}", f"python {platform.python_version()} ({sys.executable})"]
    for dist in ("structlog", "nvidia-ml-py", "pyslurm", "psutil", "tenacity"):
        try:
            lines.append(f"{dist} {metadata.version(dist)}")
        except metadata.PackageNotFoundError:
            lines.append(f"{dist} not installed")
        except Exception as exc:  # noqa: BLE001 - a broken install is reported, not raised
            lines.append(f"{dist} unreadable ({type(exc).__name__})")
    return "\n".join(lines)
