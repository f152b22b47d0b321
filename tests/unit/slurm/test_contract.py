"""One contract, three backends: CLI against fake scontrol, pyslurm against a fake module,
and the in-memory backend the lifecycle's unit tests use (tests/support/memory_slurm.py)."""

import inspect
import json
import time

import pytest

from imexctl.errors import SlurmError
from imexctl.slurm.records import MAX_COMMENT, CommentTooLarge, JobRecord, NodeRecord, SlurmNotFound
from imexctl.slurm.interface import SlurmAdapter
from tests.support.decision import record_of
from tests.support.slurm_world import make_backend
from tests.support.fakeslurm import SUBMIT_TIME


def test_is_an_adapter(backend):
    """Every method of the protocol, with the protocol's parameters (names, kinds and
    defaults) and return annotation; ``isinstance`` alone checks only the names."""
    assert isinstance(backend, SlurmAdapter)
    assert adapter_mismatches(type(backend)) == []


def adapter_mismatches(cls: type) -> list[str]:
    """How ``cls`` differs from SlurmAdapter: each method's signature, each attribute."""
    wanted = [n for n in dir(SlurmAdapter) if not n.startswith("_")]
    found = []
    for name in wanted:
        proto = inspect.getattr_static(SlurmAdapter, name)
        if not callable(proto):
            continue
        own = getattr(cls, name, None)
        if not callable(own):
            found.append(f"{name}: missing")
            continue
        want, have = inspect.signature(proto), inspect.signature(own)
        if list(want.parameters.items()) != list(have.parameters.items()):
            found.append(f"{name}{have} is not {name}{want}")
        elif want.return_annotation != have.return_annotation:
            found.append(f"{name} returns {have.return_annotation}, not "
                         f"{want.return_annotation}")
    for name in SlurmAdapter.__annotations__:
        if not isinstance(getattr(cls, name, None), str):
            found.append(f"{name}: no str attribute")
    return found


def test_the_signature_check_sees_a_difference():
    class Renamed:
        name = "x"
        selection = ""

    assert "job: missing" in adapter_mismatches(Renamed)

    from tests.support.memory_slurm import MemorySlurm

    class Drifted(MemorySlurm):
        def requeue(self, job_id: int) -> None: ...              # spec dropped
        def job_state(self, job_id: int) -> str: ...             # another return type

    bad = adapter_mismatches(Drifted)
    assert [b.split("(")[0].split(" ")[0] for b in bad] == ["job_state", "requeue"], bad


# pyslurm 24.11's Job has no segment_size: the pyslurm backend cannot tell (None).
NO_SEGMENT = {"cli": 0, "pyslurm": None, "memory": 0}


def test_job_record(backend, backend_kind):
    job = backend.job(7)
    assert job == JobRecord(job_id=7, state="RUNNING", user_id=65534,
                            nodes=("tray01", "tray02", "tray03", "tray04"), partition="trays",
                            features="imex", admin_comment="", comment="user text", batch=True,
                            segment_size=NO_SEGMENT[backend_kind], oversubscribe="OK",
                            submit_time=SUBMIT_TIME)


def test_job_submit_time_is_the_latest_in_the_record_as_epoch_seconds(backend, world):
    """SubmitTime binds a decision record to the job instance (audit F4-2): the CLI asks
    scontrol for epoch seconds (SLURM_TIME_FORMAT=%s); a ``SubmitTime=`` a user writes
    into JobName can only make it later (the job's own records older), never earlier."""
    world.set_job(7, SubmitTime=1800000000)
    assert backend.job(7).submit_time == 1800000000
    world.set_job(7, JobName="x SubmitTime=1000")
    assert backend.job(7).submit_time == 1800000000


def test_job_segment_size(backend, backend_kind, world):
    world.set_job(7, SegmentSize=2)
    assert backend.job(7).segment_size == {"cli": 2, "pyslurm": None, "memory": 2}[backend_kind]


def test_job_admin_comment_and_non_batch(backend, world):
    world.set_job(8, AdminComment="imexctl: channel=7")
    job = backend.job(8)
    assert job.admin_comment == "imexctl: channel=7"
    assert job.batch is False and job.nodes == ("tray03", "tray04") and job.comment == ""


def test_unknown_job(backend):
    with pytest.raises(SlurmNotFound):
        backend.job(999)


def test_nodes(backend, world):
    world.set_node("tray02", Extra='{"imex":{"clique_id":1}}', Reason="maint", State="IDLE+DRAIN")
    recs = backend.nodes(["tray02", "tray01", "nosuch"])
    assert set(recs) == {"tray01", "tray02"}
    assert recs["tray02"] == NodeRecord(name="tray02", addr="10.77.0.12", hostname="tray02",
                                        state="IDLE+DRAIN", reason="maint",
                                        extra='{"imex":{"clique_id":1}}', features=("tray",))
    assert recs["tray01"].reason == "" and recs["tray01"].extra == ""
    assert backend.nodes([]) == {}


def test_drain_idle_node(backend, world):
    assert backend.drain("tray01", "imexctl: prolog/start: boom") is True
    node = world.node("tray01")
    assert node["State"] == "IDLE+DRAIN" and node["Reason"] == "imexctl: prolog/start: boom"


@pytest.mark.parametrize("state", ["IDLE+DRAIN", "MIXED+DRAIN", "DOWN", "DOWN+NOT_RESPONDING"])
def test_drain_never_overwrites_foreign_reason(backend, world, state):
    world.set_node("tray01", State=state, Reason="hardware: PSU replaced by bob")
    world.clear_calls()
    assert backend.drain("tray01", "imexctl: prolog/start: boom") is False
    node = world.node("tray01")
    assert node["Reason"] == "hardware: PSU replaced by bob" and node["State"] == state
    assert not [c for c in world.calls() if "update" in c or "Node.modify" in c]


def test_drain_foreign_drain_without_reason_is_left_alone(backend, world):
    world.set_node("tray01", State="IDLE+DRAIN", Reason=None)
    assert backend.drain("tray01", "imexctl: x") is False


def test_drain_replaces_our_own_reason(backend, world):
    world.set_node("tray01", State="IDLE+DRAIN", Reason="imexctl: prolog/start: old")
    assert backend.drain("tray01", "imexctl: epilog/ports: new") is True
    assert world.node("tray01")["Reason"] == "imexctl: epilog/ports: new"


def test_drain_ignores_stale_foreign_reason_on_idle_node(backend, world):
    # Slurm keeps the reason after RESUME: state decides, not the reason.
    world.set_node("tray01", State="IDLE", Reason="old maintenance")
    assert backend.drain("tray01", "imexctl: x") is True
    assert world.node("tray01")["State"] == "IDLE+DRAIN"


def test_drain_reason_is_one_line(backend, world):
    assert backend.drain("tray01", "imexctl: a\nb") is True
    assert world.node("tray01")["Reason"] == "imexctl: a b"


def test_drain_unknown_node(backend):
    with pytest.raises(SlurmNotFound):
        backend.drain("nosuch", "imexctl: x")


def test_resume_if_ours(backend, world):
    world.set_node("tray01", State="IDLE+DRAIN", Reason="imexctl: prolog/start: boom")
    assert backend.resume_if_ours("tray01") is True
    assert world.node("tray01")["State"] == "IDLE"


@pytest.mark.parametrize("state, reason", [
    ("IDLE+DRAIN", "maintenance"),        # someone else's drain
    ("IDLE", "imexctl: stale reason"),    # not drained (reason survived a RESUME)
    ("IDLE", None),
    ("DOWN", "imexctl: x"),               # down, not drained: not ours to resume
])
def test_resume_leaves_others_alone(backend, world, state, reason):
    world.set_node("tray01", State=state, Reason=reason)
    assert backend.resume_if_ours("tray01") is False
    assert world.node("tray01")["State"] == state


def test_extra_merge_into_empty(backend, world):
    assert backend.extra_merge("tray01", "imex", {"clique_id": 3, "cluster_uuid": "c"}) is True
    assert json.loads(world.node("tray01")["Extra"]) == {"imex": {"clique_id": 3,
                                                                  "cluster_uuid": "c"}}


def test_extra_merge_keeps_other_keys(backend, world):
    world.set_node("tray01", Extra='{"rack": "r7", "imex": {"clique_id": 1}}')
    assert backend.extra_merge("tray01", "imex", {"clique_id": 2}) is True
    assert json.loads(world.node("tray01")["Extra"]) == {"rack": "r7", "imex": {"clique_id": 2}}


def test_extra_merge_unchanged_writes_nothing(backend, world):
    world.set_node("tray01", Extra='{"imex": {"clique_id": 2}}')
    world.clear_calls()
    assert backend.extra_merge("tray01", "imex", {"clique_id": 2}) is False
    assert not [c for c in world.calls() if "update" in c or "Node.modify" in c]


@pytest.mark.parametrize("extra", ["rack 7 slot 3", "[1, 2]", '"text"'])
def test_extra_merge_refuses_foreign_non_object(backend, world, extra):
    world.set_node("tray01", Extra=extra)
    with pytest.raises(SlurmError, match="tray01.*not a JSON object"):
        backend.extra_merge("tray01", "imex", {"clique_id": 2})
    assert world.node("tray01")["Extra"] == extra


def test_switch_type(backend, world):
    assert backend.switch_type() == "switch/none"
    world.edit(lambda s: s["config"].__setitem__("SwitchType", "switch/nvidia_imex"))
    assert backend.switch_type() == "switch/nvidia_imex"


def test_admin_comment_requeue_cancel(backend, world):
    backend.set_admin_comment(7, "imexctl: clique mismatch")
    assert world.state()["jobs"]["7"]["AdminComment"] == "imexctl: clique mismatch"
    backend.requeue_hold(7)
    assert world.state()["jobs"]["7"]["JobState"] == "PENDING"
    backend.cancel(7)
    assert world.state()["jobs"]["7"]["JobState"] == "CANCELLED"


def test_requeue_hold_of_interactive_job_fails(backend):
    with pytest.raises(SlurmError, match="Only batch jobs"):
        backend.requeue_hold(8)


@pytest.mark.parametrize("bad", ["tray 1", "-x", "a;b", ""])
def test_bad_node_names_refused(backend, bad):
    with pytest.raises(SlurmError):
        backend.drain(bad, "imexctl: x")


@pytest.mark.parametrize("bad", [0, -1, 2**32, "7", True])
def test_bad_job_ids_refused(backend, bad):
    with pytest.raises(SlurmError):
        backend.job(bad)


def _tool(kind):
    return "scontrol" if kind == "cli" else "pyslurm"


def test_transient_failure_is_retried(transport_kind, world):
    world.fault(_tool(transport_kind), "transient", count=2)
    backend = make_backend(transport_kind, world, attempts=3)
    assert backend.job(7).job_id == 7
    assert len(world.calls(_tool(transport_kind))) == 3


def test_persistent_transient_failure_gives_slurm_error(transport_kind, world):
    world.fault(_tool(transport_kind), "transient", count=-1)
    backend = make_backend(transport_kind, world, attempts=2)
    with pytest.raises(SlurmError, match="after 2 attempt.*Unable to contact slurm controller"):
        backend.nodes(["tray01"])
    assert len(world.calls(_tool(transport_kind))) == 2


def test_hard_error_is_not_retried(transport_kind, world):
    world.fault(_tool(transport_kind), "error", count=-1, message="Access/permission denied")
    backend = make_backend(transport_kind, world, attempts=3)
    with pytest.raises(SlurmError, match="permission denied"):
        backend.job(7)
    assert len(world.calls(_tool(transport_kind))) == 1


def test_drain_update_refused_raises(transport_kind, world):
    """Reading works, slurmctld refuses the change: a SlurmError, not a silent False."""
    match = "update" if transport_kind == "cli" else "Node.modify"
    world.fault(_tool(transport_kind), "error", count=-1, match=match,
                message="slurm_update error: Access/permission denied")
    backend = make_backend(transport_kind, world)
    with pytest.raises(SlurmError, match="permission denied"):
        backend.drain("tray01", "imexctl: x")
    assert world.node("tray01")["State"] == "IDLE"


def test_scontrol_timeout_does_not_hang(world):
    """A hung scontrol is killed at timeout_s, retried, then reported (both backends use
    the CLI for show config)."""
    world.fault("scontrol", "timeout", count=-1, sleep=60)
    backend = make_backend("cli", world, timeout_s=0.5, attempts=2)
    start = time.monotonic()
    with pytest.raises(SlurmError, match="scontrol show config.*after 2 attempt.*timed out"):
        backend.switch_type()
    assert time.monotonic() - start < 10
    assert len(world.calls("scontrol")) == 2


def test_resume_only_with_the_narrower_prefix(backend, world):
    world.set_node("tray01", State="IDLE+DRAIN", Reason="imexctl: prolog/fabric: GPU 1")
    assert backend.resume_if_ours("tray01", prefix="imexctl: health/") is False
    assert world.node("tray01")["State"] == "IDLE+DRAIN"
    world.set_node("tray01", Reason="imexctl: health/fabric: GPU 1")
    assert backend.resume_if_ours("tray01", prefix="imexctl: health/") is True
    with pytest.raises(ValueError):
        backend.resume_if_ours("tray01", prefix="ops:")



def test_job_channels_from_show_resources(backend, world):
    """switch/nvidia_imex's channel, as `scontrol show resources` (25.11+) reports it."""
    world.set_job(7, Channels={"tray01": 5, "tray02": 5, "tray03": 5, "tray04": 5})
    assert backend.job_channels(7) == {"tray01": 5, "tray02": 5, "tray03": 5, "tray04": 5}
    world.set_job(7, Channels={})                # no switch plugin: no Channel= field
    assert backend.job_channels(7) == {}
    with pytest.raises(SlurmNotFound):
        backend.job_channels(999)
    world.edit(lambda s: s["config"].update(NoShowResources=True))   # Slurm 24.11
    assert backend.job_channels(7) is None


@pytest.mark.parametrize("size", [1_001, 60_000, MAX_COMMENT])
def test_admin_comment_is_written_and_read_back_whole(backend, world, size):
    """F3-25: a sealed record of any size the format allows (up to what one `scontrol
    update` carries) is written whole, and the job query reads it back whole."""
    text = record_of(size)
    assert len(text) == size
    backend.set_admin_comment(7, text)
    assert world.state()["jobs"]["7"]["AdminComment"] == text
    job = backend.job(7)
    assert job.admin_comment == text and text in job.decision_text


def test_admin_comment_too_large_is_refused_before_anything_is_written(backend, world):
    world.set_job(7, AdminComment="imexctl: earlier")
    world.clear_calls()
    with pytest.raises(CommentTooLarge, match=r"^AdminComment for job 7 would be "
                                              rf"{MAX_COMMENT + 1} characters.*nothing written"):
        backend.set_admin_comment(7, record_of(MAX_COMMENT + 1))
    assert world.state()["jobs"]["7"]["AdminComment"] == "imexctl: earlier"
    assert not [c for c in world.calls() if "update" in c]


def test_live_job_ids_are_the_channel_holding_jobs_and_their_het_leaders(backend, world):
    """What the controller's channel table keeps channels for (states.CHANNEL_HOLDING):
    not a pending, requeued or ended job; a het component that runs keeps its leader's."""
    from tests.support.fakeslurm import JOB_DEFAULT
    world.edit(lambda s: s["jobs"].update({
        "9": {**JOB_DEFAULT, "NodeList": "tray01", "JobState": "COMPLETED"},
        "10": {**JOB_DEFAULT, "JobState": "PENDING"},
        "11": {**JOB_DEFAULT, "JobState": "REQUEUED"},
        "21": {**JOB_DEFAULT, "NodeList": "tray02", "JobState": "COMPLETING",
               "HetJobId": 20, "HetJobOffset": 1},
    }))
    assert backend.live_job_ids() == {7, 8, 20, 21}


def test_job_state_is_the_base_state_and_nodes_or_none(backend, world):
    world.set_job(7, JobState="COMPLETED")
    assert backend.job_state(7) == ("COMPLETED", ("tray01", "tray02", "tray03", "tray04"))
    assert backend.job_state(99) is None
