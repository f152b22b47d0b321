"""The house rules import-linter cannot see (its contract is in pyproject.toml, run by
scripts/test's static phase): no import circle anywhere in imexctl, also between two modules
of one part, and no module outside imexctl/cli/ prints or writes to sys.stdout/sys.stderr.

The import graph is read from the code with ``ast``: imports inside functions count (they
run when the function does), imports under ``if TYPE_CHECKING:`` do not (they never run),
and importing ``a.b.c`` runs the package ``__init__`` of ``a`` and ``a.b`` first (except a
package the importing module is in: that one is already loaded).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import imexctl

PACKAGE = Path(imexctl.__file__).resolve().parent

# Outside cli/, each with why it may write to the process's own streams.
MAY_PRINT = {
    "imexctl.base.log": "the log sink: stderr is where the hooks' log lines go (its default)",
}
# Circles present when this test was written, each to be broken and then struck from here
# (the test fails on a new one, and on one listed here that is gone).
KNOWN_CIRCLES: list[list[str]] = []


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


MODULES = _modules()


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _run_time_nodes(tree: ast.AST):
    """Every node of ``tree`` except the bodies of ``if TYPE_CHECKING:`` (their else runs)."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
            continue
        stack.extend(ast.iter_child_nodes(node))


def _loaded(name: str, importer: str, named: bool = True) -> list[str]:
    """The imexctl modules that importing ``name`` runs: the packages above it, except those
    the importer is in (loaded before it runs), and ``name`` itself when ``named`` (an
    ``import name``, or a ``from name import x`` where x is no submodule, needs its body)."""
    parts = name.split(".")
    chain = [".".join(parts[:i]) for i in range(1, len(parts) + 1)]
    return [m for m in chain if m in MODULES
            and ((named and m == name) or not importer.startswith(m + "."))]


def _imports(module: str, path: Path) -> set[str]:
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out: set[str] = set()
    for node in _run_time_nodes(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                out.update(_loaded(alias.name, module))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            submodules = {f"{source}.{a.name}" for a in node.names} & MODULES.keys()
            out.update(submodules)   # `from pkg import module` imports the module...
            # ...and a name that is no submodule needs the package's own body
            out.update(_loaded(source, module, named=len(submodules) < len(node.names)))
    out.discard(module)
    return {m for m in out if m.startswith("imexctl")}


def import_graph() -> dict[str, set[str]]:
    return {module: _imports(module, path) for module, path in MODULES.items()}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def _path_in(component: list[str], graph: dict[str, set[str]]) -> str:
    """One circle through the component, for the failure message: a -> b -> ... -> a."""
    start, members = component[0], set(component)
    trail, seen = [start], {start}
    while True:
        nxt = sorted(graph[trail[-1]] & members)
        back = [m for m in nxt if m == start]
        if back and len(trail) > 1:
            return " -> ".join([*trail, start])
        fresh = [m for m in nxt if m not in seen]
        if not fresh:
            return " -> ".join(trail) + " -> ..."
        trail.append(fresh[0])
        seen.add(fresh[0])


def test_the_graph_reader_sees_function_level_imports_and_skips_type_checking(tmp_path):
    """The reader itself, on the code it must judge: the circle rule is only as good as it."""
    graph = import_graph()
    assert "imexctl.base.dataclass" in graph["imexctl.config"]
    # circles() on a made-up graph: one circle of three, a self-contained chain without one
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []
    code = ("TYPE_CHECKING = False\nif TYPE_CHECKING:\n    import imexctl.config\nelse:\n"
            "    import imexctl.errors\ndef f():\n    from imexctl.base import proc\n")
    seen = {m for n in _run_time_nodes(ast.parse(code)) if isinstance(n, (ast.Import, ast.ImportFrom))
            for m in ([a.name for a in n.names] if isinstance(n, ast.Import) else [n.module])}
    assert seen == {"imexctl.errors", "imexctl.base"}


def test_no_import_circle_anywhere_in_imexctl():
    graph = import_graph()
    found = circles(graph)
    new = [c for c in found if c not in KNOWN_CIRCLES]
    assert not new, "import circles (imports inside functions count):\n" + "\n".join(
        _path_in(c, graph) for c in new)
    gone = [c for c in KNOWN_CIRCLES if c not in found]
    assert not gone, f"no longer a circle, strike it from KNOWN_CIRCLES: {gone}"


def _writes_to_the_console(tree: ast.AST) -> list[int]:
    lines = []
    for node in _run_time_nodes(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "print":
            lines.append(node.lineno)
        elif (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
              and node.value.id == "sys"
              and node.attr in ("stdout", "stderr", "__stdout__", "__stderr__")):
            lines.append(node.lineno)
        elif (isinstance(node, ast.ImportFrom) and node.module == "sys"
              and {a.name for a in node.names} & {"stdout", "stderr", "__stdout__", "__stderr__"}):
            lines.append(node.lineno)
    return sorted(set(lines))


@pytest.mark.parametrize("module", sorted(m for m in MODULES
                                          if not m.startswith("imexctl.cli")))
def test_only_cli_prints(module):
    """Library code returns data; cli/ decides what reaches the terminal."""
    lines = _writes_to_the_console(ast.parse(MODULES[module].read_text()))
    if module in MAY_PRINT:
        return
    assert not lines, (f"{MODULES[module].relative_to(PACKAGE.parent)} writes to the console at "
                       f"lines {lines}: return the text and let imexctl/cli/ print it")


def test_the_print_exceptions_still_exist_and_print():
    """An exception whose module stopped printing (or moved) is dropped from MAY_PRINT."""
    for module in MAY_PRINT:
        assert module in MODULES, module
        assert _writes_to_the_console(ast.parse(MODULES[module].read_text())), module


# ---------------------------------------------------------------------- typed seams
# Objects whose type imexctl defines (issue 38): read by attribute, never through a
# getattr default that would hide a missing field (and let a stand-in of another shape
# through). Here the Slurm seam: the hook context, the job and node records, the adapter.
# Each part's owner adds its own names (cfg, records, stores) as their defaults go.
SEAM_NAMES = ("ctx", "job", "node", "slurm", "records", "fresh")


def seam_getattrs(source: str) -> list[str]:
    """``getattr(<seam>, "<field>", <default>)`` calls in ``source`` (``<seam>`` one of
    SEAM_NAMES, an attribute such as ``run.ctx``, or ``records.get(n)``): ``line: text``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id == "getattr" and len(node.args) == 3
                and isinstance(node.args[1], ast.Constant)):
            continue
        target = node.args[0]
        if isinstance(target, ast.Call) and isinstance(target.func, ast.Attribute):
            target = target.func.value          # records.get(n) -> records
        name = target.attr if isinstance(target, ast.Attribute) else \
            target.id if isinstance(target, ast.Name) else ""
        if name in SEAM_NAMES:
            found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_getattr_default_on_a_slurm_seam_object():
    bad = {name: hits for name, path in MODULES.items()
           if (hits := seam_getattrs(path.read_text(encoding="utf-8")))}
    assert bad == {}, "read the field; the type says it is there: " + repr(bad)


@pytest.mark.parametrize("source", [
    'getattr(ctx, "het_job_id", None)',
    'getattr(run.ctx, "cluster", "")',
    'getattr(records.get(n), "extra", "")',
    'x = getattr(slurm, "name", "") == "pyslurm"',
])
def test_a_seam_getattr_is_found(source):
    assert seam_getattrs(source) != []


@pytest.mark.parametrize("source", [
    'getattr(exc, "value", None)',          # a foreign object (pynvml's error)
    'getattr(self.real, name)',             # no default
    'ctx.het_job_id',
])
def test_other_getattrs_pass(source):
    assert seam_getattrs(source) == []
