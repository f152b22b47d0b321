"""A rack of persistent and job-lifetime trays in MemorySlurm (issue 37's unit tests), and
the harness's persistent-domain helpers."""

from __future__ import annotations

import psutil

from tests.support.lifecycle import UUID, published
from tests.support.memory_slurm import MemorySlurm

OTHER_UUID = "5b1b3a1e-1c1a-4d0e-9a5e-000000000002"
ADDRS = {"tray1": "127.0.0.1", "tray2": "127.0.0.2", "tray10": "127.0.0.10",
         "tray3": "127.0.0.3", "tray4": "127.0.0.4", "tray5": "127.0.0.5"}


def world() -> MemorySlurm:
    """tray1, tray2, tray10: persistent in clique 1; tray3: job-lifetime in clique 1;
    tray4: persistent in clique 2; tray5: persistent in another cluster's clique 1."""
    s = MemorySlurm()
    s.add_nodes(ADDRS)
    for node in ("tray10", "tray2", "tray1"):
        s.publish(node, published(lifetime="persistent"))
    s.publish("tray3", published(lifetime="job"))
    s.publish("tray4", published(clique=2, lifetime="persistent"))
    s.publish("tray5", published(uuid=OTHER_UUID, lifetime="persistent"))
    return s


def persistent_toml(c) -> str:
    base = (c.state_dir / "etc" / "imexctl.toml").read_text()
    assert "\n[imex]\n" in base
    return base.replace("\n[imex]\n", '\n[imex]\nlifetime = "persistent"\n', 1)


def daemons_of(tray_dir) -> list[int]:
    """The simulated nvidia-imex processes running a config under ``tray_dir``."""
    out = []
    for p in psutil.process_iter(["cmdline"]):
        argv = p.info["cmdline"] or []
        if argv and any(a.endswith("imexctl-sim-imex") for a in argv[:2]) and \
                any(a.startswith(str(tray_dir)) for a in argv):
            out.append(p.pid)
    return sorted(out)
