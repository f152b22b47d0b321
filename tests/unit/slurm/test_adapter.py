"""Backend selection (with a safe pyslurm probe) and the shared rules."""

import json
import sys
import textwrap

import pytest

from imexctl.errors import SlurmError
from imexctl.slurm import adapter
from imexctl.slurm.adapter import NodeRecord, get_adapter, merged_extra, probe_pyslurm
from imexctl.slurm.cli_backend import CliBackend
from imexctl.slurm.pyslurm_backend import PyslurmBackend


@pytest.fixture(autouse=True)
def _no_probe_cache():
    adapter._probe_cache.clear()
    yield
    adapter._probe_cache.clear()


def fake_pyslurm_package(tmp_path, monkeypatch, body: str):
    pkg = tmp_path / "site" / "pyslurm"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(textwrap.dedent(body))
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "site"))
    return pkg


OK_BODY = """
    __version__ = "25.11.2"
    class Node:
        @classmethod
        def load(cls, name): return cls()
    class Nodes:
        @classmethod
        def load(cls): return {}
"""


def test_cli_when_asked(world):
    assert isinstance(get_adapter(world.config(backend="cli")), CliBackend)


def test_auto_without_pyslurm_is_cli_and_starts_no_child(world, mocker):
    mocker.patch.object(adapter, "pyslurm_installed", return_value=False)
    run = mocker.patch("subprocess.run")
    assert isinstance(get_adapter(world.config(backend="auto")), CliBackend)
    run.assert_not_called()


def test_auto_with_working_pyslurm(world, tmp_path, monkeypatch):
    fake_pyslurm_package(tmp_path, monkeypatch, OK_BODY)
    assert isinstance(get_adapter(world.config(backend="auto")), PyslurmBackend)


def test_auto_with_pyslurm_that_kills_the_process(world, tmp_path, monkeypatch):
    # what libslurm's fatal() does when slurm.conf is unreadable
    fake_pyslurm_package(tmp_path, monkeypatch, "import os\nos._exit(1)\n")
    assert isinstance(get_adapter(world.config(backend="auto")), CliBackend)
    assert "pyslurm" not in sys.modules or not hasattr(sys.modules["pyslurm"], "_exit")


def test_auto_with_pyslurm_that_cannot_talk(world, tmp_path, monkeypatch):
    fake_pyslurm_package(tmp_path, monkeypatch, """
        class RPCError(Exception): pass
        class Node:
            @classmethod
            def load(cls, name): raise RPCError("Zero Bytes were transmitted or received")
    """)
    assert isinstance(get_adapter(world.config(backend="auto")), CliBackend)


def test_probe_times_out(tmp_path, monkeypatch):
    fake_pyslurm_package(tmp_path, monkeypatch, "import time\ntime.sleep(60)\n")
    import time
    start = time.monotonic()
    assert probe_pyslurm("tray01", timeout_s=1.0) is False
    assert time.monotonic() - start < 10


def test_probe_is_cached(tmp_path, monkeypatch, mocker):
    fake_pyslurm_package(tmp_path, monkeypatch, OK_BODY)
    assert probe_pyslurm("tray01") is True
    run = mocker.patch("subprocess.run")
    assert probe_pyslurm("tray01") is True
    run.assert_not_called()


def test_pyslurm_when_asked_but_missing(world, mocker):
    mocker.patch.object(adapter, "pyslurm_installed", return_value=False)
    with pytest.raises(SlurmError, match="pyslurm is not installed"):
        get_adapter(world.config(backend="pyslurm"))


def test_pyslurm_when_asked(world, tmp_path, monkeypatch):
    fake_pyslurm_package(tmp_path, monkeypatch, OK_BODY)
    assert isinstance(get_adapter(world.config(backend="pyslurm")), PyslurmBackend)


def test_merged_extra():
    assert json.loads(merged_extra("n", "", "imex", {"a": 1})) == {"imex": {"a": 1}}
    assert json.loads(merged_extra("n", '{"x": 1}', "imex", {"a": 1})) == {"x": 1, "imex": {"a": 1}}
    assert merged_extra("n", '{"imex": {"a": 1}}', "imex", {"a": 1}) is None
    with pytest.raises(SlurmError, match="node n: Extra is not a JSON object"):
        merged_extra("n", "free text", "imex", {})
    with pytest.raises(SlurmError):
        merged_extra("n", "", "", {})


@pytest.mark.parametrize("state, unavailable, drained", [
    ("IDLE", False, False), ("IDLE+DRAIN", True, True), ("MIXED+DRAIN", True, True),
    ("DOWN+NOT_RESPONDING", True, False), ("ALLOCATED", False, False),
    ("IDLE+NOT_RESPONDING", False, False), ("down*", True, False), ("drained", True, True),
])
def test_node_state_words(state, unavailable, drained):
    rec = NodeRecord("n", "", "", state, "", "", ())
    assert rec.unavailable is unavailable and rec.drained is drained


def test_selection_says_why(world, tmp_path, monkeypatch, mocker):
    assert get_adapter(world.config(backend="cli")).selection == 'slurm.backend = "cli"'
    fake_pyslurm_package(tmp_path, monkeypatch, OK_BODY)
    assert get_adapter(world.config(backend="auto")).selection.startswith("auto: pyslurm")
    adapter._probe_cache.clear()
    mocker.patch.object(adapter, "pyslurm_installed", return_value=False)
    chosen = get_adapter(world.config(backend="auto"))
    assert isinstance(chosen, CliBackend)
    assert chosen.selection == "auto: CLI, because pyslurm is not installed"


def test_pyslurm_built_for_another_slurm_is_not_used(world, tmp_path, monkeypatch):
    fake_pyslurm_package(tmp_path, monkeypatch, """
        __version__ = "25.11.2"
        class _Config:
            version = "26.05.5"
        class Config:
            @classmethod
            def load(cls): return _Config()
        class slurmctld:
            Config = Config
    """)
    chosen = get_adapter(world.config(backend="auto"))
    assert isinstance(chosen, CliBackend)
    assert chosen.selection == "auto: CLI, because pyslurm 25.11.2 does not match Slurm 26.05.5"
