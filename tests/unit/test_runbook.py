"""docs/runbook.md lists every `imexctl:` reason the code can produce.

The reasons are read from the source with the AST, not from a hand-kept list, so a new
step, check or refusal added anywhere in imexctl/ fails this test until the runbook says
what it means and what to do. What counts as a reason part:

* the text of any string literal (or f-string's leading literal) starting ``imexctl: ``,
  up to its first placeholder: the stem (``imexctl: health/``, ``imexctl: allocation
  spans cliques: ``);
* step and check names, which become ``imexctl: <hook>/<step>: ...``: the first string
  argument of ``NodeFault(...)``, ``timed_step(...)``, ``attempt(...)``, ``fail(...)``,
  ``step(...)``/``Step(...)`` (and ``name=``/``step=`` keywords of those), string
  assignments to a variable called ``step`` or ``check``, ``(step, cause)`` tuples put in
  a ``failures`` list, and the entries of a ``CHECKS``/``STEPS`` constant (functions
  named ``stale_domain`` count as ``stale-domain``);
* the leading literal of ``JobFault(...)`` messages and of strings returned by
  ``shared_node_refusal``-style verdict functions (they become ``imexctl: <text>``).

The runbook must contain each step as ``/<step>`` (e.g. ``prolog/wait-ready``) and each
stem's text.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RUNBOOK = REPO / "docs/runbook.md"
# Modules whose `imexctl:` strings are terminal messages, never Slurm reasons.
MESSAGES_ONLY = {"cli.py", "log.py"}
STEP_CALLS = {"NodeFault", "timed_step", "attempt", "fail", "step", "Step", "run_step"}
STEP_KEYWORDS = {"name", "step", "check"}
STEP_VARS = {"step", "check", "step_name"}
VERDICT_FUNCS = re.compile(r"(mismatch|verdict|refus|reason)", re.I)
PREFIX = "imexctl: "
NOT_STEPS = {"none", "unknown"}  # sentinels, e.g. a metrics label for "no step"


def sources():
    for path in sorted((REPO / "imexctl").rglob("*.py")):   # the product: no simulator in it
        yield path, ast.parse(path.read_text(), str(path))


def head(node: ast.AST) -> str | None:
    """The literal text of a str constant, or of an f-string up to its first field."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        text = ""
        for part in node.values:
            if isinstance(part, ast.Constant):
                text += part.value
            else:
                break
        return text
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return head(node.left)
    return None


def call_name(node: ast.Call) -> str:
    f = node.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""


def literal_parts(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.JoinedStr):
        return [p.value for p in node.values if isinstance(p, ast.Constant)]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return literal_parts(node.left) + literal_parts(node.right)
    return []


def longest_literal(node: ast.AST) -> str:
    """The longest fixed piece of a message: what any instance of it will contain."""
    return max((p.strip(" :;,()") for p in literal_parts(node)), key=len, default="")


def not_reasons(tree: ast.AST) -> set[int]:
    """Strings that are no reason: docstrings, what print() writes to a terminal, and
    patterns handed to re.* (which match reasons, e.g. in metrics), also by the name of
    the module-level pattern string (``re.match(REASON_RE, ...)``)."""
    out = set()
    pattern_names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and (call_name(node) == "print" or (
                isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "re")):
            for arg in node.args:
                out |= {id(sub) for sub in ast.walk(arg)}
            if node.args and isinstance(node.args[0], ast.Name):
                pattern_names.add(node.args[0].id)
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id in pattern_names
                                                for t in node.targets):
            out |= {id(sub) for sub in ast.walk(node.value)}
    return out | docstrings(tree)


def docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef)) and node.body \
                and isinstance(node.body[0], ast.Expr) \
                and isinstance(node.body[0].value, ast.Constant):
            out.add(id(node.body[0].value))
    return out


def failure_tuples(node: ast.AST) -> list[ast.AST]:
    """``failures = [("lock", ...)]`` / ``failures.append((step, ...))``: the step names."""
    found: list[ast.AST] = []
    value = None
    if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and "fail" in t.id
                                            for t in node.targets):
        value = node.value
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
            and node.func.attr == "append" and isinstance(node.func.value, ast.Name) \
            and "fail" in node.func.value.id and node.args:
        value = node.args[0]
    for sub in ast.walk(value) if value is not None else ():
        if isinstance(sub, ast.Tuple) and len(sub.elts) == 2:
            found.append(sub.elts[0])
    return found


def registry_names(node: ast.AST) -> list[str]:
    """``CHECKS = (dirs, stale_domain, ...)`` / ``STEPS = [Step("render", ...), "start"]``:
    a check or step named by its function is ``stale-domain``."""
    target, value = None, None
    if isinstance(node, ast.Assign) and len(node.targets) == 1:
        target, value = node.targets[0], node.value
    elif isinstance(node, ast.AnnAssign):
        target, value = node.target, node.value
    if not (isinstance(target, ast.Name) and re.fullmatch(r"[A-Z_]*(CHECKS|STEPS)", target.id)
            and isinstance(value, (ast.Tuple, ast.List))):
        return []
    out = []
    for elt in value.elts:
        if isinstance(elt, ast.Name):
            out.append(elt.id.replace("_", "-"))
        elif isinstance(elt, ast.Attribute):
            out.append(elt.attr.replace("_", "-"))
        elif head(elt):
            out.append(head(elt))
        elif isinstance(elt, ast.Call) and elt.args and head(elt.args[0]):
            out.append(head(elt.args[0]))
    return out


def extract() -> tuple[set[str], set[str]]:
    """(step/check names, reason stems) found in imexctl/."""
    steps: set[str] = set()
    stems: set[str] = set()
    for path, tree in sources():
        skip_text = not_reasons(tree)
        for node in ast.walk(tree):
            for first in failure_tuples(node):
                steps.add(head(first) or "")
            steps.update(registry_names(node))
            text = head(node) if isinstance(node, (ast.Constant, ast.JoinedStr)) \
                and id(node) not in skip_text and path.name not in MESSAGES_ONLY else None
            if text and text.startswith(PREFIX) and len(text) > len(PREFIX):
                stems.add(text[len(PREFIX):])
            if isinstance(node, ast.Call) and call_name(node) in STEP_CALLS:
                if node.args and isinstance(head(node.args[0]), str) and call_name(node) != "fail":
                    steps.add(head(node.args[0]))
                if call_name(node) == "fail" and node.args:
                    steps.add(head(node.args[0]) or "")
                for kw in node.keywords:
                    if kw.arg in STEP_KEYWORDS and isinstance(kw.value, ast.Constant):
                        steps.add(str(kw.value.value))
            if isinstance(node, ast.Call) and call_name(node) == "JobFault" and node.args:
                stems.add(longest_literal(node.args[0]))
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) \
                    and isinstance(node.value.value, str):
                for t in node.targets:
                    if isinstance(t, ast.Name) and t.id in STEP_VARS:
                        steps.add(node.value.value)
            if isinstance(node, ast.FunctionDef) and VERDICT_FUNCS.search(node.name):
                for sub in ast.walk(node):
                    if isinstance(sub, ast.Return) and sub.value is not None:
                        stems.add(longest_literal(sub.value))
    steps = {s for s in steps if re.fullmatch(r"[a-z][a-z0-9-]*", s or "")} - NOT_STEPS
    stems = {_stem(s) for s in stems if s and s.strip()}
    return steps, {s for s in stems if s}


def _stem(text: str) -> str:
    """What the runbook must quote: the text up to the first ': ' or '(' that follows
    variable data, trimmed."""
    return text.split("{")[0].strip().rstrip(":").strip()


def test_extraction_finds_known_reasons():
    """The extractor itself works: it finds reasons the code has today."""
    steps, stems = extract()
    assert {"fabric", "wait-ready", "stop-daemon", "stale-domain"} <= steps, steps
    # (the ``imexctl: <hook>/`` head itself is imexctl/slurm/reasons.py's, test_reasons.py)
    assert "job may share its trays with other jobs (SLURM_JOB_EXCLUSIVE=" in stems, stems


def missing_from(text: str) -> list[str]:
    steps, stems = extract()
    return sorted(f"/{s}" for s in steps if f"/{s}" not in text) + \
        sorted(s for s in stems if s not in text)


def test_a_missing_row_is_caught():
    text = RUNBOOK.read_text()
    assert missing_from(text.replace("/wait-ready", "/WAIT")) == ["/wait-ready"]
    stem = "job may share its trays with other jobs (SLURM_JOB_EXCLUSIVE="
    assert missing_from(text.replace(stem, "x")) == [stem]


def test_runbook_lists_every_reason():
    missing = missing_from(RUNBOOK.read_text())
    assert not missing, ("docs/runbook.md does not explain these imexctl: reasons "
                         f"(add a row: meaning, what to do): {missing}")
