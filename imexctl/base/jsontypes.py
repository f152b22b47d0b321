"""Type names for JSON values, for type checkers only (nothing imports this at run time:
``if TYPE_CHECKING:``)."""

from __future__ import annotations

from typing import Any

# A decoded JSON object: state files, status and report payloads, parsed TOML tables.
Json = dict[str, Any]

__all__ = ["Json"]
