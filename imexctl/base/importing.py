"""The one module of imexctl that writes to ``sys.modules`` (docs/development.md).

Two imports are made cheaper here, each for every hook that takes that path:

- :func:`structlog`: structlog's processor chain (``structlog._base``), its
  ``contextvars`` and ``exceptions``, without the package's ``__init__`` (which loads
  every submodule, asyncio and ssl among them). ``sys.modules["structlog"]`` is then a
  module whose ``__getattr__`` runs the real ``__init__`` into that same module on the
  first access to any other name, so every other user of structlog in the process gets
  the whole package.
- :func:`import_with_stand_in`: a module imported while a module it imports and does not
  call at import time is a stand-in (``pynvml`` and ``ctypes.util``); the stand-in's
  functions load the real module when called, and the stand-in is out of
  ``sys.modules`` when the import returns.

Rules: a module already imported is never replaced (then the plain import is done);
whatever goes wrong while a partial import is made (structlog moved or renamed what is
used here: ``ImportError`` or ``AttributeError``) undoes it and falls back to the plain
import. Off switch: ``IMEXCTL_NO_IMPORT_TRICKS=1`` (any value but empty or ``0``) makes
every function here a plain import.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from types import ModuleType
    from typing import Any

OFF_SWITCH = "IMEXCTL_NO_IMPORT_TRICKS"

# What imexctl.base.log uses of structlog, by submodule: the partial import is trusted only
# when each of these is there.
STRUCTLOG_USES = {
    "exceptions": ("DropEvent",),
    "contextvars": ("merge_contextvars", "clear_contextvars", "bind_contextvars",
                    "bound_contextvars"),
    "_base": ("BoundLoggerBase",),
}


def tricks_off() -> bool:
    """True when ``IMEXCTL_NO_IMPORT_TRICKS`` asks for plain imports."""
    return os.environ.get(OFF_SWITCH, "") not in ("", "0")


def structlog() -> ModuleType:
    """The ``structlog`` package with the submodules in ``STRUCTLOG_USES`` loaded; its
    ``__init__`` deferred to the first use of anything else, unless structlog is already
    imported, the tricks are off, or the partial import fails (then ``import structlog``)."""
    if "structlog" not in sys.modules and not tricks_off():
        before = set(sys.modules)
        try:
            _partial_structlog()
        except (ImportError, AttributeError):
            for name in set(sys.modules) - before:
                if name == "structlog" or name.startswith("structlog."):
                    del sys.modules[name]
    import structlog as package   # the partial one made above, or the whole package
    import structlog._base  # noqa: F401
    import structlog.contextvars  # noqa: F401
    import structlog.exceptions  # noqa: F401
    return package


def _partial_structlog() -> ModuleType:
    import importlib
    import importlib.util

    spec = importlib.util.find_spec("structlog")
    if spec is None or spec.loader is None:
        raise ImportError("structlog is not installed")
    loader = spec.loader
    mod = importlib.util.module_from_spec(spec)

    def complete(name: str) -> Any:
        del mod.__getattr__
        loader.exec_module(mod)
        return getattr(mod, name)
    mod.__getattr__ = complete  # type: ignore[method-assign]
    sys.modules["structlog"] = mod
    for sub, names in STRUCTLOG_USES.items():
        part = importlib.import_module(f"structlog.{sub}")
        missing = [n for n in names if not hasattr(part, n)]
        if missing:
            raise AttributeError(f"structlog.{sub} has no {', '.join(missing)}")
    return mod


def import_with_stand_in(name: str, unused: str, functions: tuple[str, ...]) -> ModuleType:
    """``import name`` while ``sys.modules[unused]`` is a stand-in whose ``functions``
    import the real ``unused`` when called. A plain import when the tricks are off or
    either module is already imported."""
    if tricks_off() or name in sys.modules or unused in sys.modules:
        return _import(name)
    stand_in = type(sys)(unused, f"stand-in for {unused} (imexctl.base.importing)")

    def forward(function: str) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            if sys.modules.get(unused) is stand_in:
                del sys.modules[unused]
            return getattr(_import(unused), function)(*args, **kwargs)
        call.__name__ = function
        return call
    for function in functions:
        setattr(stand_in, function, forward(function))
    sys.modules[unused] = stand_in
    try:
        return _import(name)
    finally:
        if sys.modules.get(unused) is stand_in:
            del sys.modules[unused]


def _import(name: str) -> ModuleType:
    __import__(name)
    return sys.modules[name]
