"""Backend selection (with a safe pyslurm probe) and the shared rules."""

import json
import sys
import textwrap

import pytest

from imexctl.errors import SlurmError
from imexctl.slurm import probe
from imexctl.slurm.records import NodeRecord, merged_extra
from imexctl.slurm.adapter import get_adapter
from imexctl.slurm.probe import probe_pyslurm
from imexctl.slurm.cli_backend import CliBackend
from imexctl.slurm.pyslurm_backend import PyslurmBackend


@pytest.fixture(autouse=True)
def _no_probe_cache(tmp_path, monkeypatch):
    """No answer kept in this process, and answers kept on disk go to this test's own
    directory (not /run/imexctl-config)."""
    import imexctl.base.cache
    kept = tmp_path / "kept"
    monkeypatch.setattr(imexctl.base.cache, "cache_dir", lambda: kept)
    probe._probe_cache.clear()
    yield kept
    probe._probe_cache.clear()


def no_child(mocker):
    """Fail the test if a probe child is started."""
    return mocker.patch("imexctl.base.subproc.run_text",
                        side_effect=AssertionError("a pyslurm probe was started"))


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
    mocker.patch.object(probe, "_pyslurm_origin", return_value=None)
    run = no_child(mocker)
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
    run = no_child(mocker)
    assert probe_pyslurm("tray01") is True
    run.assert_not_called()


def test_pyslurm_when_asked_but_missing(world, mocker):
    # where find_spec looks (the adapter holds its own pyslurm_installed): true even where
    # pyslurm is installed (the trixie root's venv)
    mocker.patch.object(probe, "_pyslurm_origin", return_value=None)
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
    probe._probe_cache.clear()
    mocker.patch.object(probe, "_pyslurm_origin", return_value=None)
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


def test_a_usable_pyslurm_is_remembered_across_processes(world, tmp_path, monkeypatch,
                                                        mocker, _no_probe_cache):
    """Every hook on every tray would probe (import pyslurm, one RPC to slurmctld): a
    "usable" answer is kept on disk for PROBE_KEEP_S, for exactly these files."""
    pkg = fake_pyslurm_package(tmp_path, monkeypatch, OK_BODY)
    assert isinstance(get_adapter(world.config(backend="auto")), PyslurmBackend)
    kept = _no_probe_cache / probe.PROBE_FILE
    assert kept.is_file() and kept.stat().st_mode & 0o777 == 0o600
    probe._probe_cache.clear()                  # a new process
    run = no_child(mocker)
    chosen = get_adapter(world.config(backend="auto"))
    assert isinstance(chosen, PyslurmBackend) and run.call_count == 0
    assert chosen.selection.startswith("auto: pyslurm")
    # pyslurm reinstalled: probed again
    mocker.stopall()
    probe._probe_cache.clear()
    (pkg / "__init__.py").write_text((pkg / "__init__.py").read_text() + "\n# reinstalled\n")
    spy = mocker.spy(probe, "_probe")
    assert isinstance(get_adapter(world.config(backend="auto")), PyslurmBackend)
    assert spy.call_count == 1


@pytest.mark.parametrize("change", ["slurm-upgraded", "too-old", "other-node", "unsafe-dir"])
def test_a_remembered_answer_is_not_used_when(world, tmp_path, monkeypatch, mocker, change,
                                             _no_probe_cache):
    fake_pyslurm_package(tmp_path, monkeypatch, OK_BODY)
    cfg = world.config(backend="auto")
    assert isinstance(get_adapter(cfg), PyslurmBackend)
    probe._probe_cache.clear()
    kept = _no_probe_cache / probe.PROBE_FILE
    if change == "slurm-upgraded":                 # a new scontrol (and libslurm)
        client = world.bin_dir / "scontrol"
        client.write_text(client.read_text() + "\n")
    elif change == "too-old":
        record = json.loads(kept.read_text())
        record["at"] -= probe.PROBE_KEEP_S + 1
        kept.write_text(json.dumps(record))
    elif change == "other-node":
        object.__setattr__(cfg, "node", "tray02")
    else:
        _no_probe_cache.chmod(0o777)               # others could plant an answer
    spy = mocker.spy(probe, "_probe")
    assert isinstance(get_adapter(cfg), PyslurmBackend)
    assert spy.call_count == 1


def test_a_failed_probe_is_not_remembered(world, tmp_path, monkeypatch, _no_probe_cache):
    """slurmctld may only have been down: the next hook asks again."""
    fake_pyslurm_package(tmp_path, monkeypatch, "import os\nos._exit(1)\n")
    assert isinstance(get_adapter(world.config(backend="auto")), CliBackend)
    assert not (_no_probe_cache / probe.PROBE_FILE).exists()
