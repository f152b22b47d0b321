"""No test module imports another (issue 27): a helper two test modules share lives in
tests/support/, a fixture they share in a conftest.py (pytest finds it without an import).
A test module can then be renamed, split or run alone without breaking its neighbours,
and bench/ scripts use the same helpers the tests do.

A "test module" is a ``test_*`` module or a ``conftest`` under tests/. Every Python file
under tests/ (tests/support/ and the conftest.py files too) and bench/ is checked, except
tests/audit/ (a dated record that stays as it was written). Code in a string run by a
subprocess counts too."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXEMPT = (ROOT / "tests" / "audit",)
T, C = "test_", "conftest"   # spelled apart: the examples below are no violations themselves

# an import statement in a string (code a test hands to a subprocess)
IN_TEXT = re.compile(r"\b(?:from\s+tests(?:\.\w+)*\.(?:test_\w+|conftest)\s+import"
                     r"|from\s+tests(?:\.\w+)*\s+import\s+(?:test_\w+|conftest)\b"
                     r"|import\s+tests(?:\.\w+)*\.(?:test_\w+|conftest)\b)")


def is_test_module(dotted: str) -> bool:
    last = dotted.rsplit(".", 1)[-1]
    return last.startswith(T) or last == C


def violations(source: str) -> list[str]:
    """The imports of test modules in ``source``: ``line: what``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [f"{node.lineno}: import {a.name}" for a in node.names
                      if a.name.startswith("tests.") and is_test_module(a.name)]
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            where = "." * node.level + module
            ours = node.level > 0 or module == "tests" or module.startswith("tests.")
            if not ours:
                continue
            if module and is_test_module(module):
                found.append(f"{node.lineno}: from {where} import ...")
            found += [f"{node.lineno}: from {where} import {a.name}" for a in node.names
                      if is_test_module(a.name)]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            found += [f"{node.lineno}: {m.group(0)!r} in a string"
                      for m in IN_TEXT.finditer(node.value)]
    return found


def checked_files() -> list[Path]:
    files = sorted((ROOT / "tests").rglob("*.py")) + sorted((ROOT / "bench").glob("*.py"))
    return [p for p in files if not any(p.is_relative_to(d) for d in EXEMPT)]


def test_no_module_imports_a_test_module():
    bad = {str(p.relative_to(ROOT)): v for p in checked_files()
           if (v := violations(p.read_text(encoding="utf-8")))}
    assert bad == {}, ("move the shared helper to tests/support/ or the shared fixture to a "
                       f"conftest.py: {bad}")


def test_the_check_sees_the_files_it_is_about():
    names = {str(p.relative_to(ROOT)) for p in checked_files()}
    assert {"tests/unit/test_lifecycle.py", "tests/support/lifecycle.py",
            "tests/unit/conftest.py", "tests/sim/conftest.py", "bench/decision.py"} <= names
    assert not [n for n in names if n.startswith("tests/audit/")]


@pytest.mark.parametrize("source", [
    f"from tests.unit.{T}lifecycle import make_cfg",
    f"from tests.unit.{T}lifecycle_daemon import job_id, slurm  # noqa: F401",
    f"import tests.integration.{T}domain as d",
    f"from tests.unit import {T}prolog_decision as pd",
    f"from .{T}domain import wait_running_domain",
    f"from .{C} import poll",
    f"from tests.sim.{C} import PY, poll",
    f"from . import {C}",
    f"from tests.unit.slurm.{C} import make_backend",
    f"def f():\n    from tests.unit.{T}health import needs_root\n",
    f"CODE = 'import sys\\nfrom tests.unit.{T}lifecycle import ctx_for\\n'",
])
def test_a_test_module_import_is_found(source):
    assert violations(source) != []


@pytest.mark.parametrize("source", [
    "from tests.support.lifecycle import make_cfg",
    "from tests.support.memory_slurm import MemorySlurm",
    "from tests.support import fakeslurm",
    "from tests.cluster import Cluster",
    "import pytest",
    "from imexctl.ops import status",
    '_mod("tests.support.lifecycle", "tests.unit.test_lifecycle")',   # bench's v1 fall-back
])
def test_other_imports_pass(source):
    assert violations(source) == []


def support_violations(source: str) -> list[str]:
    """The imports of tests.unit in ``source`` (a tests/support/ module): ``line: what``.
    tests/support/ is shared by the unit, sim and integration tests and bench/: it sits
    below them all and must not reach into one of them."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [f"{node.lineno}: import {a.name}" for a in node.names
                      if a.name == "tests.unit" or a.name.startswith("tests.unit.")]
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            module = node.module or ""
            if module == "tests.unit" or module.startswith("tests.unit."):
                found.append(f"{node.lineno}: from {module} import ...")
            elif module == "tests":
                found += [f"{node.lineno}: from tests import unit" for a in node.names
                          if a.name == "unit"]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            found += [f"{node.lineno}: {m.group(0)!r} in a string"
                      for m in re.finditer(r"\b(?:from|import)\s+tests\.unit\b", node.value)]
    return found


def test_support_imports_nothing_from_the_unit_tests():
    files = sorted((ROOT / "tests" / "support").rglob("*.py"))
    assert ROOT / "tests" / "support" / "memory_slurm.py" in files
    bad = {str(p.relative_to(ROOT)): v for p in files
           if (v := support_violations(p.read_text(encoding="utf-8")))}
    assert bad == {}, f"tests/support/ must not import from tests/unit/: {bad}"


@pytest.mark.parametrize("source", [
    "from tests.unit.slurm import fakeslurm",
    f"from tests.unit.{C} import x",
    "import tests.unit.fakes",
    "from tests import unit",
    "CODE = 'from tests.unit.fakes import main'",
])
def test_a_support_import_of_the_unit_tests_is_found(source):
    assert support_violations(source) != []


@pytest.mark.parametrize("source", [
    "from tests.support import fakeslurm",
    "from tests.support.memory_slurm import SEAL",
    "from tests.cluster import Cluster",
])
def test_support_imports_of_support_pass(source):
    assert support_violations(source) == []
