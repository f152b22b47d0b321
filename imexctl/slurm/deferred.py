"""The Slurm adapter picked at first use: hooks start on every tray, and an epilog that
never asks Slurm loads no backend and probes nothing (tests/unit/test_lazy.py)."""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from imexctl.config import Config
    from typing import Any

    from imexctl.slurm.interface import SlurmAdapter


class _Deferred:
    """Stands for the adapter ``get_adapter(cfg)`` will pick, picked at first use (see
    :func:`deferred_adapter`). Picked once: a backend that cannot be used gives the same
    error at every use, never a new probe per call."""

    def __init__(self, cfg: Config):
        self._cfg = cfg
        self._real: SlurmAdapter | None = None
        self._failed: Exception | None = None

    def __getattr__(self, name: str) -> Any:
        if self._failed is not None:
            raise self._failed
        if self._real is None:
            try:
                from imexctl.slurm.adapter import get_adapter  # on first use only

                self._real = get_adapter(self._cfg)
            except Exception as exc:
                self._failed = exc
                raise
        return getattr(self._real, name)


def deferred_adapter(cfg: Config) -> SlurmAdapter:
    """The adapter of ``cfg``, picked when first used. Hooks start on every tray: an
    epilog that tears down cleanly never asks Slurm, and then picks no backend (with
    ``backend = "auto"`` and pyslurm installed, starts no probe process). A backend that
    cannot be used fails at its first use, inside the step that needed it."""
    return _Deferred(cfg)  # it forwards every attribute
