"""This boot's id: a domain recorded in another boot is stale whatever its pids say
(pids are reused after a reboot). ``[paths] boot_id_file`` lets a test harness give each
simulated tray its own boot."""

from __future__ import annotations

from imexctl.base.fsutil import read_bytes

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path

    from imexctl.config import Config


def read_boot_id(path: Path) -> str | None:
    try:
        data = read_bytes(path, 4096)   # a FIFO or device there must not block a hook
        text = data.decode("ascii").strip() if data is not None else ""
    except (OSError, ValueError):
        return None
    return text or None


def current_boot_id(cfg: Config) -> str | None:
    """This boot's id from ``[paths] boot_id_file`` (the kernel's by default)."""
    return read_boot_id(cfg.paths.boot_id_file)
