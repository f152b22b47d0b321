"""The configuration file's parsed table, kept as JSON so that hooks skip ``tomllib``.

Importing tomllib (with datetime) is paid by every hook on every tray, while
the file changes a few times a year. The table parsed from a file is stored under the
SHA-256 of the file's bytes, so a cached table is used only for exactly the bytes it was
parsed from: an edited file is parsed again, never served stale. Validation
(``config.parse_config``) still runs every time.

The directory is trusted like the state dir: owned by this user, not writable by group
or others, never through a symlink; a cache that is not is ignored, and any failure
falls back to tomllib. Root's lives on /run (tmpfs): emptied at boot, nothing to clean
up. Another user (SlurmUser runs PrologSlurmctld and EpilogSlurmctld, on the path of every
job start) cannot create one there: its cache is ``/tmp/imexctl-config-<uid>``, trusted
by the same rules, so a directory planted there by someone else is never used.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

CACHE_DIR = Path("/run/imexctl-config")
KEEP = 8          # tables kept (one per config version seen); older ones are removed


def cache_dir() -> Path:
    """This user's cache directory (see the module's docstring)."""
    uid = os.geteuid()
    return CACHE_DIR if uid == 0 else Path(f"/tmp/imexctl-config-{uid}")


def _path(data: bytes) -> Path:
    from imexctl.base.digest import sha256_hex
    return cache_dir() / f"{sha256_hex(data)}.json"


def load(data: bytes) -> dict[str, Any] | None:
    """The table parsed earlier from exactly ``data``; None when there is none to trust."""
    from imexctl.base.fsutil import check_secure_dir, read_bytes
    try:
        check_secure_dir(cache_dir())
        text = read_bytes(_path(data))
        value = json.loads(text) if text is not None else None
    except (OSError, ValueError):   # not ours, not a regular file, not JSON: parse again
        return None
    return value if isinstance(value, dict) else None


def store(data: bytes, table: dict[str, Any]) -> None:
    """Keep ``table``, parsed from ``data``, for the next run (best effort, silent)."""
    from imexctl.base.fsutil import atomic_write, ensure_secure_dir
    try:
        text = json.dumps(table, sort_keys=True)
        ensure_secure_dir(cache_dir(), 0o700)
        atomic_write(_path(data), text, 0o600, durable=False)
        _prune(cache_dir())
    except (OSError, TypeError, ValueError):   # TypeError: a TOML date, never ours anyway
        pass


def _prune(directory: Path) -> None:
    entries = []
    for name in os.listdir(directory):
        if name.endswith(".json"):
            try:
                entries.append((os.lstat(directory / name).st_mtime, name))
            except FileNotFoundError:
                continue
    for _, name in sorted(entries, reverse=True)[KEEP:]:
        try:
            os.unlink(directory / name)
        except FileNotFoundError:
            pass


__all__ = ["CACHE_DIR", "cache_dir", "load", "store"]
