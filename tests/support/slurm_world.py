"""A fake Slurm world for the adapter tests: a state file of four trays and two jobs, the
fake Slurm executables reading it (tests/support/fakeslurm.py), and a backend on it."""

from __future__ import annotations

from pathlib import Path

from imexctl.config import parse_config
from tests.support import fakeslurm

NODES = {
    "tray01": {"NodeAddr": "10.77.0.11"},
    "tray02": {"NodeAddr": "10.77.0.12"},
    "tray03": {"NodeAddr": "10.77.0.13"},
    "tray04": {"NodeAddr": "10.77.0.14"},
}
JOBS = {
    7: {"NodeList": "tray[01-04]", "Features": "imex", "Comment": "user text"},
    8: {"NodeList": "tray[03-04]", "BatchFlag": 0, "JobName": "interactive"},
}


class World:
    def __init__(self, root: Path):
        self.root = root
        self.state_path = root / "slurm-state.json"
        self.bin_dir = root / "bin"
        fakeslurm.save(self.state_path, fakeslurm.new_state(NODES, JOBS))
        fakeslurm.install_bin(self.bin_dir, self.state_path)

    def state(self) -> dict:
        return fakeslurm.load(self.state_path)

    def edit(self, fn) -> None:
        state = self.state()
        fn(state)
        fakeslurm.save(self.state_path, state)

    def node(self, name: str) -> dict:
        return self.state()["nodes"][name]

    def set_node(self, name: str, **fields) -> None:
        self.edit(lambda s: s["nodes"][name].update(fields))

    def set_job(self, job_id: int, **fields) -> None:
        self.edit(lambda s: s["jobs"][str(job_id)].update(fields))

    def fault(self, tool: str, mode: str, count: int = -1, **kw) -> None:
        self.edit(lambda s: s["faults"].__setitem__(tool, {"mode": mode, "count": count, **kw}))

    def add_fault(self, tool: str, mode: str, count: int = -1, **kw) -> None:
        """One more fault for ``tool``: the first of its faults that applies acts."""
        def add(s):
            old = s["faults"].get(tool) or []
            s["faults"][tool] = [*(old if isinstance(old, list) else [old]),
                                 {"mode": mode, "count": count, **kw}]
        self.edit(add)

    def calls(self, tool: str | None = None) -> list[list]:
        return [c for c in self.state()["calls"] if tool is None or c[0] == tool]

    def clear_calls(self) -> None:
        self.edit(lambda s: s.__setitem__("calls", []))

    def config(self, **slurm):
        from tests.support.memory_slurm import FAKE_MUNGE

        raw = {"paths": {"slurm_bin_dir": str(self.bin_dir), "munge_bin_dir": str(FAKE_MUNGE)},
               "slurm": {"backend": "cli", "timeout_s": 10.0, "attempts": 3, **slurm}}
        return parse_config(raw, None, "tray01")


def make_backend(kind: str, world: World, **slurm):
    cfg = world.config(**slurm)
    if kind == "cli":
        from imexctl.slurm.cli_backend import CliBackend
        return CliBackend(cfg)
    from imexctl.slurm.pyslurm_backend import PyslurmBackend
    return PyslurmBackend(cfg)
