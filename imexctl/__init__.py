"""imexctl: per-job NVIDIA IMEX domains for Slurm (prolog/epilog lifecycle manager)."""

import sys as _sys

__version__ = "0.2.0"


def _defer_urllib_parse() -> None:
    """Let ``import pathlib`` skip ``urllib.parse`` (with ``ipaddress``): about 2 ms of
    every hook's start-up, for ``Path.as_uri`` alone, which imexctl never calls.

    pathlib does ``from urllib.parse import quote_from_bytes``. Until something else
    imports urllib.parse, that name is a stand-in module whose ``quote_from_bytes`` and
    every other attribute load the real module on first use and answer from it, so any
    later user of urllib.parse (or of ``as_uri``) gets the real thing. Nothing is done
    when pathlib or urllib.parse is already loaded (pytest, a host program)."""
    if "pathlib" in _sys.modules or "urllib.parse" in _sys.modules:
        return
    import types

    import urllib

    stub = types.ModuleType("urllib.parse", "stand-in until first use (imexctl/__init__.py)")
    real: list = []

    def load() -> types.ModuleType:
        if not real:
            if _sys.modules.get("urllib.parse") is stub:
                del _sys.modules["urllib.parse"]
            __import__("urllib.parse")
            real.append(_sys.modules["urllib.parse"])
            urllib.parse = real[0]
        return real[0]

    def quote_from_bytes(*args, **kwargs):
        return load().quote_from_bytes(*args, **kwargs)

    def attribute(name: str):
        if name.startswith("__") and name not in ("__all__", "__file__", "__doc__"):
            # the import system probes __path__ (is it a package?) and such on every
            # ``from urllib.parse import ...``: not a reason to load it
            raise AttributeError(name)
        return getattr(load(), name)

    stub.__getattr__ = attribute
    stub.quote_from_bytes = quote_from_bytes
    _sys.modules["urllib.parse"] = stub
    urllib.parse = stub


_defer_urllib_parse()
