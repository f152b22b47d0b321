"""Type names for JSON values, for type checkers only (nothing imports this at run time:
``if TYPE_CHECKING:``)."""

from __future__ import annotations

from typing import Any

# A JSON object as read or written: a status document, a metrics state, a raw record.
Json = dict[str, Any]

__all__ = ["Json"]
