"""Modules imported on first use: hooks and ``status`` start on every tray, and a module
that only some paths need (psutil: only when a daemon is recorded) should not cost the
others. The stdlib's ``importlib.util.LazyLoader`` does the work."""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType


def lazy_import(name: str) -> ModuleType:
    """``name`` as a module whose code runs on first attribute access (already imported:
    the module itself). A missing module raises ImportError here, as ``import`` would."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None:
        raise ImportError(f"No module named {name!r}", name=name)
    spec.loader = importlib.util.LazyLoader(spec.loader)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
