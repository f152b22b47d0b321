"""docs/operations.md lists the prolog and epilog steps exactly as the code declares them."""

from __future__ import annotations

import re
from pathlib import Path

from imexctl.lifecycle.epilog import EPILOG_STEPS, PERSISTENT_EPILOG_STEPS
from imexctl.lifecycle.prolog import PERSISTENT_PROLOG_STEPS, PROLOG_STEPS

DOC = Path(__file__).resolve().parents[2] / "docs" / "operations.md"


def documented_steps(heading: str) -> list[str]:
    """The backticked names that open the numbered items after ``heading``."""
    text = DOC.read_text()
    section = text[text.index(heading):]
    names = []
    for line in section.splitlines()[1:]:
        match = re.match(r"\d+\. `([a-z-]+)`", line)
        if match:
            names.append(match.group(1))
        elif names and not line.startswith(" ") and line.strip():
            break
        elif names and not line.strip():
            break
    return names


def test_prolog_steps_documented_in_order():
    assert documented_steps("Prolog steps, in order") == [s.name for s in PROLOG_STEPS]


def test_epilog_steps_documented_in_order():
    assert documented_steps("Epilog steps, in order") == [s.name for s in EPILOG_STEPS]


def test_persistent_tray_steps_documented_in_order():
    assert documented_steps("Prolog steps on a persistent tray") == \
        [s.name for s in PERSISTENT_PROLOG_STEPS]
    assert documented_steps("Epilog steps on a persistent tray") == \
        [s.name for s in PERSISTENT_EPILOG_STEPS]
