"""Which Slurm backend a command gets: the Slurm CLI (``scontrol``/``scancel``) or pyslurm.

Callers see only :class:`~imexctl.slurm.interface.SlurmAdapter` and the records of
:mod:`imexctl.slurm.records`. ``get_adapter(cfg)`` picks the backend from ``[slurm]
backend``. With ``auto`` pyslurm is used only when it is installed *and* a child process
proved that it talks to the running Slurm (:mod:`imexctl.slurm.probe`).
"""

from __future__ import annotations

import re
from pathlib import Path

from imexctl.errors import SlurmError
from imexctl.slurm.probe import pyslurm_installed, pyslurm_unavailable
from imexctl.slurm.records import NODE_NAME

TYPE_CHECKING = False
if TYPE_CHECKING:
    from imexctl.config import Config

    from imexctl.slurm.interface import SlurmAdapter


def get_adapter(cfg: Config) -> SlurmAdapter:
    """The backend named by ``cfg.slurm.backend`` (auto | cli | pyslurm). The backend's
    ``selection`` attribute says which was picked and why (shown by ``imexctl status``)."""
    backend = cfg.slurm.backend
    if backend == "cli":
        from imexctl.slurm.cli_backend import CliBackend
        return _selected(CliBackend(cfg), 'slurm.backend = "cli"')
    if backend == "pyslurm":
        from imexctl.slurm.pyslurm_backend import PyslurmBackend
        if not pyslurm_installed():
            raise SlurmError("slurm.backend = \"pyslurm\" but pyslurm is not installed "
                             "(install imexctl[pyslurm] or use backend \"cli\")")
        return _selected(PyslurmBackend(cfg), 'slurm.backend = "pyslurm"')
    if backend == "auto":
        node = cfg.node if re.fullmatch(NODE_NAME, cfg.node or "") else ""
        reason = pyslurm_unavailable(node, timeout_s=min(cfg.slurm.timeout_s, 10.0),
                                     slurm_client=Path(cfg.paths.slurm_bin_dir) / "scontrol")
        if reason is None:
            from imexctl.slurm.pyslurm_backend import PyslurmBackend
            return _selected(PyslurmBackend(cfg), "auto: pyslurm answered and matches this Slurm")
        from imexctl.slurm.cli_backend import CliBackend
        return _selected(CliBackend(cfg), f"auto: CLI, because {reason}")
    raise SlurmError(f"unknown slurm.backend {backend!r}; use auto, cli or pyslurm")


def _selected(adapter: SlurmAdapter, why: str) -> SlurmAdapter:
    adapter.selection = why
    return adapter


__all__ = ["get_adapter"]
