"""The licence pyproject declares ships as text, in the repository and in every build."""

from __future__ import annotations

import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_license_text_is_apache_2_0_and_packaged() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert project["project"]["license"] == {"text": "Apache-2.0"}
    text = (REPO / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text           # the full text, not a stub
    # setuptools >= 61 copies these into the wheel's .dist-info and the sdist
    assert project["tool"]["setuptools"]["license-files"] == ["LICENSE"]
