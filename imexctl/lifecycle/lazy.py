"""The Slurm adapter picked on first use: hooks and ``status`` start on every tray, and
an epilog that never asks Slurm should not pay for picking (or probing) a backend."""

from __future__ import annotations


class LazyAdapter:
    """The Slurm adapter of ``cfg``, picked (``get_adapter``) on first use. An epilog that
    tears down cleanly never asks Slurm: it then loads no backend (and, with
    ``backend = "auto"`` and pyslurm installed, starts no probe process). A backend that
    cannot be used fails at its first use, inside the step that needed it."""

    def __init__(self, cfg: object):
        self._cfg = cfg
        self._real: object | None = None
        self._failed: Exception | None = None

    def __getattr__(self, name: str) -> object:
        if self._failed is not None:
            raise self._failed  # picked once: the same answer, not a new probe per call
        if self._real is None:
            from imexctl.slurm.adapter import get_adapter

            try:
                self._real = get_adapter(self._cfg)
            except Exception as exc:
                self._failed = exc
                raise
        return getattr(self._real, name)
