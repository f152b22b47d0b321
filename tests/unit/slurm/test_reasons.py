"""The drain-reason grammar ``imexctl: <hook>/<step>: <cause>`` and Slurm's 250-character
limit have one home, imexctl/slurm/reasons.py: what it writes it reads back, and no other
module of imexctl/ writes or parses the grammar, or cuts at 250, on its own."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from imexctl.slurm import reasons

IMEXCTL = Path(__file__).resolve().parents[3] / "imexctl"
HOME = IMEXCTL / "slurm" / "reasons.py"


def test_a_reason_reads_back_as_written():
    text = reasons.format("epilog", "stop-daemon", "daemon stuck: pid 7: still here")
    assert text == "imexctl: epilog/stop-daemon: daemon stuck: pid 7: still here"
    assert reasons.parse(text) == ("epilog", "stop-daemon", "daemon stuck: pid 7: still here")
    assert reasons.is_ours(text) and text.startswith(reasons.hook_prefix("epilog"))


@pytest.mark.parametrize("text", [
    "", None, "Kill task failed", "imexctl: allocation spans cliques: a, b",
    "imexctl:v3;g=1", "imexctl: Health/x: y", "NHC: imexctl: health/x: y"])
def test_what_is_not_the_grammar_parses_to_none(text):
    assert reasons.parse(text) is None


def test_refusals_and_foreign_reasons_are_told_apart():
    assert reasons.ours("job asked for IMEX but ...") == "imexctl: job asked for IMEX but ..."
    assert reasons.is_ours(reasons.ours("x"))
    assert not reasons.is_ours("Not responding") and not reasons.is_ours(None)


def test_writers_cut_at_what_slurm_keeps():
    long = reasons.format("health", "fabric", "x " * 300)
    assert len(reasons.bounded(long)) == reasons.MAX_LEN == 250
    assert reasons.one_line("imexctl: a/b:\n  two\tlines") == "imexctl: a/b: two lines"
    assert len(reasons.one_line(long)) == 250


# ------------------------------------------------------------------ one definition only

def _skipped(tree: ast.AST) -> set[int]:
    """Docstrings and what print() or ``stderr.write()`` write to a terminal (``imexctl:
    ...`` there is the program's name on a message line, not a Slurm reason)."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef)) and node.body \
                and isinstance(node.body[0], ast.Expr) \
                and isinstance(node.body[0].value, ast.Constant):
            out.add(id(node.body[0].value))
        if isinstance(node, ast.Call) and (
                isinstance(node.func, ast.Name) and node.func.id == "print"
                or isinstance(node.func, ast.Attribute) and node.func.attr == "write"
                and "stderr" in ast.unparse(node.func.value)):
            out |= {id(sub) for arg in node.args for sub in ast.walk(arg)}
    return out


# The prefix alone, a literal that writes the grammar (starts with the prefix and a
# space) or a pattern that parses it (the prefix anchored, or followed by a group or class).
GRAMMAR = re.compile(r"^imexctl: ?$|^imexctl: |\^imexctl: |imexctl: [(\[]")


def second_definitions(source: str, name: str = "<src>") -> list[str]:
    tree = ast.parse(source, name)
    skip = _skipped(tree)
    found = []
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Constant) and node.value == 250 \
                and not isinstance(node.value, bool):
            found.append(f"{name}:{node.lineno}: 250")
        if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and GRAMMAR.search(node.value):
            found.append(f"{name}:{node.lineno}: {node.value[:40]!r}")
    return found


@pytest.mark.parametrize("source", [
    'REASON_RE = r"imexctl: ([a-z-]+)/([a-z-]+):"',
    'text = f"imexctl: {hook}/{step}: {cause}"',
    'HEALTH_PREFIX = "imexctl: health/"',
    'pattern = rf"^imexctl: [a-z-]+/(?:{steps}): "',
    'reason = reason[:250]',
    'MAX_REASON = 250',
    'OUR_PREFIX = "imexctl:"',
    'pattern = rf"|{x}|^imexctl: health/record: {record}"',
])
def test_the_scan_finds_a_second_definition(source):
    assert second_definitions(source) != []


@pytest.mark.parametrize("source", [
    'def f():\n    """Drains with ``imexctl: health/<check>: <cause>``."""',
    'print(f"imexctl: status: {exc}", file=sys.stderr)',
    'stderr.write(f"imexctl: cannot open log file {path}")',
    'TAG = f"imexctl:v{VERSION}"',
    'line = f"drained by imexctl: {node.reason}"',
])
def test_the_scan_leaves_what_is_no_reason(source):
    assert second_definitions(source) == []


def test_the_grammar_and_the_limit_are_defined_once():
    found = []
    for path in sorted(IMEXCTL.rglob("*.py")):
        if path != HOME:
            found += second_definitions(path.read_text(), str(path.relative_to(IMEXCTL)))
    assert found == [], ("write and parse Slurm reasons with imexctl.slurm.reasons "
                         f"(format, ours, hook_prefix, parse, bounded, MAX_LEN): {found}")
    assert second_definitions(HOME.read_text()) != []   # the home itself is found
