"""An imexctl.toml written for a test."""

from __future__ import annotations

from pathlib import Path


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "imexctl.toml"
    path.write_text(text)
    return path
