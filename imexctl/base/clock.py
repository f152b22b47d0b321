"""Times as an admin reads them, in what imexctl reports and prints."""

from __future__ import annotations

import time


def when(ts: float | None) -> str:
    """``2026-11-27 05:30:00`` (local time); ``?`` when unknown."""
    if not ts:
        return "?"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts))


def age(seconds: float | None) -> str:
    """``4m05s``, ``2h03m``, ``3d04h``; ``?`` when unknown."""
    if seconds is None:
        return "?"
    seconds = max(0, int(seconds))
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    if seconds < 86400:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    return f"{seconds // 86400}d{seconds % 86400 // 3600:02d}h"
