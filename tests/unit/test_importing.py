"""imexctl.base.importing, the one writer of sys.modules: its two partial imports, their
off switch, and the fall-back to a plain import when structlog's layout changes. Each case
runs in a fresh interpreter: what is imported is the subject."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import imexctl

STRUCTLOG = """
import json, sys
from imexctl.base import importing
{patch}
mod = importing.structlog()
partial = "get_logger" not in vars(mod)   # the package __init__ has not run
heavy = sorted(m for m in ("asyncio", "ssl", "structlog.stdlib", "structlog.dev")
               if m in sys.modules)
uses = all(hasattr(getattr(mod, sub, None), name)
           for sub, names in importing.STRUCTLOG_USES.items() for name in names)
import structlog
print(json.dumps([partial, heavy, uses, structlog is mod, structlog.get_logger.__module__,
                  sys.modules["structlog"] is mod]))
"""


def fresh(code: str, **env: str) -> list:
    environ = {k: v for k, v in os.environ.items() if k != "IMEXCTL_NO_IMPORT_TRICKS"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, env={**environ, **env})
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.splitlines()[-1])


def test_structlog_partial_until_something_else_is_used():
    partial, heavy, uses, same, where, registered = fresh(STRUCTLOG.format(patch=""))
    assert (partial, heavy, uses) == (True, [], True)
    # whoever imports structlog afterwards gets the whole package, in the same module
    assert (same, where, registered) == (True, "structlog._config", True)


@pytest.mark.parametrize("value", ["1", "yes"])
def test_off_switch_gives_the_whole_structlog(value):
    partial, heavy, uses, same, where, registered = fresh(STRUCTLOG.format(patch=""),
                                                          IMEXCTL_NO_IMPORT_TRICKS=value)
    assert partial is False and "asyncio" in heavy and "structlog.stdlib" in heavy
    assert (uses, same, where, registered) == (True, True, "structlog._config", True)


def test_off_switch_0_leaves_the_tricks_on():
    partial, heavy, *_ = fresh(STRUCTLOG.format(patch=""), IMEXCTL_NO_IMPORT_TRICKS="0")
    assert (partial, heavy) == (True, [])


@pytest.mark.parametrize("patch", [
    # a submodule that a later structlog renamed or removed: ImportError
    'importing.STRUCTLOG_USES = {**importing.STRUCTLOG_USES, "_renamed": ("X",)}',
    # a name a later structlog moved out of a submodule: AttributeError
    'importing.STRUCTLOG_USES = {**importing.STRUCTLOG_USES, "_base": ("MovedAway",)}',
], ids=["submodule-gone", "name-gone"])
def test_a_changed_structlog_layout_falls_back_to_import_structlog(patch):
    partial, heavy, uses, same, where, registered = fresh(STRUCTLOG.format(patch=patch))
    assert partial is False and "structlog.stdlib" in heavy     # the plain, whole import
    assert (same, where, registered) == (True, "structlog._config", True)


def test_logging_works_after_the_fall_back(tmp_path):
    code = f"""
import json
from pathlib import Path
from imexctl.base import importing
importing.STRUCTLOG_USES = {{**importing.STRUCTLOG_USES, "_renamed": ("X",)}}
from imexctl.base import log
log.setup_logging(Path({str(tmp_path / 'l.log')!r}), node="tray01", stderr=None)
log.bind(job_id=9)
with log.timed_step("render"):
    pass
print(json.dumps([]))
"""
    fresh(code)
    event = json.loads((tmp_path / "l.log").read_text().splitlines()[-1])
    assert (event["event"], event["step"], event["job_id"]) == ("step done", "render", 9)


PYNVML = """
import json, sys
from imexctl.base import importing
pynvml = importing.import_with_stand_in("pynvml", "ctypes.util", ("find_library",))
loaded = "ctypes.util" in sys.modules
libc = pynvml.find_library("c")
import ctypes.util
print(json.dumps([loaded, libc, libc == ctypes.util.find_library("c"),
                  type(sys.modules["ctypes.util"]).__name__,
                  sys.modules["ctypes.util"].__file__.endswith("ctypes/util.py")]))
"""


def test_pynvml_imports_with_a_stand_in_that_loads_the_real_module_when_called():
    pytest.importorskip("pynvml")
    loaded, libc, same, kind, real = fresh(PYNVML)
    assert loaded is False                      # the stand-in is gone after the import
    assert libc.startswith("libc.so") and same and kind == "module" and real


def test_off_switch_imports_pynvml_plainly():
    pytest.importorskip("pynvml")
    loaded, libc, same, kind, real = fresh(PYNVML, IMEXCTL_NO_IMPORT_TRICKS="1")
    assert loaded is True and libc.startswith("libc.so") and same and real


def _is_sys_modules(node: ast.AST) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "modules"
            and isinstance(node.value, ast.Name) and node.value.id in ("sys", "_sys"))


def test_only_base_importing_writes_sys_modules():
    """The start-up rule (docs/development.md): no module of the package but
    imexctl/base/importing.py assigns, deletes or changes an entry of sys.modules."""
    root = Path(imexctl.__file__).resolve().parent
    writers = set()
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets = (node.targets if isinstance(node, (ast.Assign, ast.Delete))
                       else [node.target] if isinstance(node, ast.AugAssign) else [])
            if any(isinstance(t, ast.Subscript) and _is_sys_modules(t.value) for t in targets) \
                    or (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                        and node.func.attr in ("pop", "popitem", "setdefault", "update",
                                               "clear", "__setitem__", "__delitem__")
                        and _is_sys_modules(node.func.value)):
                writers.add(path.relative_to(root.parent).as_posix())
    assert writers == {"imexctl/base/importing.py"}
