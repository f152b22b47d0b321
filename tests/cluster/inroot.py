"""Call a Slurm backend where the cluster's Slurm is: in-process on the host Slurm, or, with a
Slurm root, in a child Python of the root's venv (the root's scontrol, libslurm and pyslurm),
one child per call. Results and exceptions come back pickled, so a test asserts on the same
records and exception classes either way."""

from __future__ import annotations

import importlib
import pickle
import subprocess

_CHILD = r"""
import importlib, pickle, sys
req = pickle.load(sys.stdin.buffer)
try:
    from imexctl.config import parse_config
    cfg = parse_config(req["config"], None, req["node"])
    mod, _, cls = req["factory"].rpartition(":")
    backend = getattr(importlib.import_module(mod), cls)(cfg)
    if req["method"] == "__describe__":
        from imexctl.slurm.interface import SlurmAdapter
        result = ("ok", {"name": backend.name, "adapter": isinstance(backend, SlurmAdapter),
                         "selection": getattr(backend, "selection", None)})
    else:
        result = ("ok", getattr(backend, req["method"])(*req["args"], **req["kwargs"]))
except BaseException as exc:
    result = ("err", (type(exc).__module__, type(exc).__qualname__, str(exc)))
sys.stdout.flush()
pickle.dump(result, sys.stdout.buffer)
"""


class RootBackend:
    """A backend proxy: each method call runs `factory(parse_config(config))`.method in the
    cluster's Slurm root (factory is "module:callable", e.g. imexctl.slurm.adapter:get_adapter)."""

    def __init__(self, cluster, factory: str, config: dict, node: str = "tray01", timeout: float = 60):
        self.cluster, self.factory, self.config, self.node, self.timeout = cluster, factory, config, node, timeout

    def describe(self) -> dict:
        """name, whether it satisfies SlurmAdapter, and its `selection` (why it was picked)."""
        return self._call("__describe__", (), {})

    def __getattr__(self, method: str):
        if method.startswith("_"):
            raise AttributeError(method)
        return lambda *args, **kwargs: self._call(method, args, kwargs)

    def _call(self, method: str, args: tuple, kwargs: dict):
        req = pickle.dumps({"config": self.config, "node": self.node, "factory": self.factory,
                            "method": method, "args": args, "kwargs": kwargs})
        argv = self.cluster.in_root([str(self.cluster.imexctl_bin.parent / "python"), "-c", _CHILD])
        res = subprocess.run(argv, input=req, capture_output=True, timeout=self.timeout,
                             env=self.cluster.env, cwd="/tmp")
        try:
            kind, value = pickle.loads(res.stdout[res.stdout.index(b"\x80"):])
        except (ValueError, pickle.UnpicklingError, EOFError) as exc:
            raise RuntimeError(f"{method} in the {self.cluster.slurm} root: rc {res.returncode} "
                               f"{res.stderr.decode(errors='replace')[-800:]}") from exc
        if kind == "ok":
            return value
        module, name, text = value
        try:
            cls = getattr(importlib.import_module(module), name)
            exc = cls(text)
        except Exception:  # noqa: BLE001 - an exception type that cannot be rebuilt here
            exc = RuntimeError(f"{module}.{name}: {text}")
        raise exc
