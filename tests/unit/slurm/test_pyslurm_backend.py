"""pyslurm backend specifics, against a fake module with the documented 25.11 API."""

import sys

import pytest

from imexctl.errors import SlurmError
from imexctl.slurm.records import SlurmNotFound
from imexctl.slurm.pyslurm_backend import PyslurmBackend


def test_construction_does_not_import_pyslurm(world, monkeypatch):
    monkeypatch.delitem(sys.modules, "pyslurm", raising=False)
    monkeypatch.setattr(sys, "meta_path", [])  # any import attempt would fail loudly
    PyslurmBackend(world.config())


def test_uses_pyslurm_for_reads_and_node_changes(world, fake_pyslurm):
    be = PyslurmBackend(world.config())
    be.job(7)
    be.nodes(["tray01", "tray02"])
    be.drain("tray03", "imexctl: x")
    kinds = [c[1] for c in world.calls("pyslurm")]
    assert kinds[:3] == ["Job.load", "Node.load", "Node.load"]  # by name, never the whole table
    assert "Nodes.load" not in kinds
    assert "Node.modify" in kinds
    assert not world.calls("scontrol")


def test_job_changes_go_through_cli(world, fake_pyslurm):
    be = PyslurmBackend(world.config())
    be.set_admin_comment(7, "imexctl: x")
    be.cancel(7)
    assert ["scancel", "7"] in world.calls()
    assert not world.calls("pyslurm")


def test_drain_passes_state_and_reason(world, fake_pyslurm, mocker):
    spy = mocker.spy(fake_pyslurm.Node, "modify")
    PyslurmBackend(world.config(), isolate=False).drain("tray02", "imexctl: prolog/wait-ready: t")
    changes = spy.call_args.args[1]
    assert changes.state == "DRAIN" and changes.reason == "imexctl: prolog/wait-ready: t"


def test_nodes_by_name_list_never_node_objects(world, fake_pyslurm, mocker):
    # pyslurm 25.11.2: Nodes([Node,...]) raises KeyError; we only load.
    init = mocker.spy(fake_pyslurm.Nodes, "__init__")
    PyslurmBackend(world.config()).nodes(["tray01", "tray02"])
    for call in init.call_args_list:
        arg = call.args[1] if len(call.args) > 1 else None
        assert not (isinstance(arg, list) and arg and not isinstance(arg[0], str))


def test_rpc_not_found(world, fake_pyslurm):
    with pytest.raises(SlurmNotFound):
        PyslurmBackend(world.config()).job(4242)
    assert PyslurmBackend(world.config()).nodes(["nosuch"]) == {}


def test_value_error_becomes_slurm_error(world, fake_pyslurm, mocker):
    mocker.patch.object(fake_pyslurm.Job, "load", side_effect=ValueError("bad"))
    with pytest.raises(SlurmError, match="Job.load.*bad"):
        PyslurmBackend(world.config()).job(7)


def test_state_reason_and_missing_fields(world, fake_pyslurm, mocker):
    node = fake_pyslurm.Node("tray09")
    node.state = "MIXED+DRAIN"
    node.reason = None
    node.extra = None
    node.comment = None
    node.address = "10.0.0.9"
    node.hostname = "tray09"
    node.available_features = ["a"]
    node.active_features = []
    mocker.patch.object(fake_pyslurm.Node, "load", return_value=node)
    rec = PyslurmBackend(world.config()).nodes(["tray09"])["tray09"]
    assert rec.drained and rec.reason == "" and rec.extra == "" and rec.features == ("a",)


def test_a_hung_call_is_killed_at_the_timeout(world, fake_pyslurm, mocker):
    import time

    mocker.patch.object(fake_pyslurm.Job, "load", side_effect=lambda *_: time.sleep(60))
    start = time.monotonic()
    with pytest.raises(SlurmError, match="timed out after 1s"):
        PyslurmBackend(world.config(timeout_s=1.0, attempts=2)).job(7)
    assert time.monotonic() - start < 10


def test_calls_run_in_a_child_process(world, fake_pyslurm, mocker):
    import os

    parent = os.getpid()
    seen = []
    real = fake_pyslurm.Job.load
    mocker.patch.object(fake_pyslurm.Job, "load", side_effect=lambda *a: (seen.append(os.getpid()), real(*a))[1])
    assert PyslurmBackend(world.config()).job(7).job_id == 7
    assert seen == []  # the call ran in a forked child; the parent's list never saw it
    assert PyslurmBackend(world.config(), isolate=False).job(7).job_id == 7 and seen == [parent]
