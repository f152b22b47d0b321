"""Prolog/epilog decisions, step by step, against an in-memory Slurm and real files.

The daemon-dependent paths (domain UP, never READY, SIGTERM ignored, reused pid) run the
simulated nvidia-imex for real: see test_lifecycle_daemon.py.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import stat

import pytest

from tests.support.fabric import simulated_tray, write_fabric_file
from imexctl.lifecycle.epilog import run_epilog
from imexctl.rules.policy import wants_imex
from imexctl.lifecycle.prolog import run_prolog
from imexctl.lifecycle.teardown import job_dir
from imexctl.tray.ownership import DaemonIdentity, StateStore
from tests.support.lifecycle import (CLEAN, UUID, ctx_for, leftovers, make_cfg, published,
                                     write_slurm_conf)
from tests.support.records import make_record
from tests.support.memory_slurm import job_record


def test_policy(tmp_path):
    one, two = job_record(1, ("a",)), job_record(2, ("a", "b"), partition="gpu", features="imex&fast")
    assert not wants_imex(make_cfg(tmp_path), one) and wants_imex(make_cfg(tmp_path), two)
    assert wants_imex(make_cfg(tmp_path, policy={"mode": "all"}), one)
    assert not wants_imex(make_cfg(tmp_path, policy={"mode": "none"}), two)
    parts = make_cfg(tmp_path, policy={"mode": "partitions", "partitions": ["gpu"]})
    assert wants_imex(parts, two) and not wants_imex(parts, one)
    feat = make_cfg(tmp_path, policy={"mode": "feature", "feature": "imex"})
    assert wants_imex(feat, two) and not wants_imex(feat, one)


def test_single_node_job_is_left_alone(tmp_path, slurm):
    slurm.jobs[42] = job_record(42, ("tray01",))
    rc = run_prolog(make_cfg(tmp_path), slurm, ctx_for(nodes="tray01"))
    assert rc == 0 and leftovers(tmp_path) == CLEAN
    assert not [c for c in slurm.calls if c[0] in ("drain", "cancel", "extra_merge")]


def test_unfit_tray_is_drained_with_named_gpu(tmp_path, slurm):
    cfg = make_cfg(tmp_path)
    write_fabric_file(tmp_path / "fabric.json", simulated_tray(UUID, 1, **{"1": {"state": 2}}))
    rc = run_prolog(cfg, slurm, ctx_for())
    assert rc == 1
    node = slurm.nodes_["tray01"]
    assert node.state == "IDLE+DRAIN"
    assert node.reason == "imexctl: prolog/fabric: GPU 1 fabric state In Progress, not Completed"
    assert slurm.jobs[42].state.startswith("RUNNING")  # Slurm requeues it on our exit 1
    assert leftovers(tmp_path) == CLEAN
    outcome = StateStore(cfg.paths.state_dir).last_outcome()
    assert outcome["result"] == "node-fault" and "fabric" in outcome["steps_ms"]


def test_missing_fabric_file_is_a_node_fault(tmp_path, slurm):
    cfg = make_cfg(tmp_path)
    (tmp_path / "fabric.json").unlink()
    assert run_prolog(cfg, slurm, ctx_for()) == 1
    assert "fabric file not found" in slurm.nodes_["tray01"].reason


def test_allocation_across_cliques_refused_by_policy_without_drain(tmp_path, slurm):
    """No controller decision: the fallback groups the trays and applies the policy."""
    slurm.publish("tray02", published(clique=2))
    rc = run_prolog(make_cfg(tmp_path, policy={"multi_clique": "refuse"}), slurm, ctx_for())
    assert rc == 0
    job = slurm.jobs[42]
    assert job.state == "CANCELLED"
    assert job.admin_comment == (f"imexctl: allocation spans 2 NVLink cliques: tray01 in "
                                 f"{UUID}.1; tray02 in {UUID}.2 (policy refuse for this "
                                 "partition)")
    assert all(n.state == "IDLE" for n in slurm.nodes_.values())
    assert leftovers(tmp_path) == CLEAN


def test_unpublished_peer_refuses_job(tmp_path, slurm):
    slurm.set_node("tray02", extra="")
    assert run_prolog(make_cfg(tmp_path), slurm, ctx_for()) == 0
    assert slurm.jobs[42].admin_comment == "imexctl: no published fabric identity for tray02"


def test_own_identity_published_when_missing(tmp_path, slurm):
    slurm.set_node("tray01", extra=json.dumps({"rack": "r07"}))
    slurm.jobs[42] = job_record(42, ("tray01", "tray02"), state="CANCELLED")  # stop after the gate
    cfg = make_cfg(tmp_path, paths={"proc_devices": f"{tmp_path}/absent"})
    run_prolog(cfg, slurm, ctx_for())
    extra = json.loads(slurm.nodes_["tray01"].extra)
    assert extra["rack"] == "r07" and extra["imex"]["clique_id"] == 1


def test_live_identity_differing_from_published_drains_and_republishes(tmp_path, slurm):
    slurm.publish("tray01", published(clique=9))
    rc = run_prolog(make_cfg(tmp_path), slurm, ctx_for())
    assert rc == 1
    assert slurm.nodes_["tray01"].reason == (
        f"imexctl: prolog/allocation: live clique {UUID}.1 differs from published "
        f"{UUID}.9 (republished)")
    assert json.loads(slurm.nodes_["tray01"].extra)["imex"]["clique_id"] == 1


def test_node_owned_by_another_running_job_is_a_job_fault(tmp_path, slurm):
    cfg = make_cfg(tmp_path)
    slurm.jobs[41] = job_record(41, ("tray01", "tray03"), state="RUNNING")
    StateStore(cfg.paths.state_dir).save(make_record(job_id=41, channel=None))
    assert run_prolog(cfg, slurm, ctx_for()) == 0
    assert slurm.jobs[42].state == "CANCELLED"
    assert "owned by running job 41" in slurm.jobs[42].admin_comment
    assert StateStore(cfg.paths.state_dir).load().job_id == 41  # the owner is untouched
    assert slurm.nodes_["tray01"].state == "IDLE"


def test_busy_port_is_a_node_fault_naming_port(tmp_path, slurm):
    from imexctl.imex.render import job_ports
    cfg = make_cfg(tmp_path)
    ports = job_ports(42, cfg.imex.server_port_base, cfg.imex.cmd_port_base, cfg.imex.port_span)
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", ports.server))
    sock.listen()
    try:
        assert run_prolog(cfg, slurm, ctx_for()) == 1
    finally:
        sock.close()
    assert slurm.nodes_["tray01"].reason.startswith(
        f"imexctl: prolog/render: port {ports.server} (pid {os.getpid()}) already in use")
    assert leftovers(tmp_path) == CLEAN


def test_missing_node_address_is_a_node_fault(tmp_path, slurm, monkeypatch):
    """tray02 is in neither the local slurm.conf nor name resolution, and Slurm's record
    has no NodeAddr of its own (Slurm then reports the node name)."""
    write_slurm_conf(tmp_path, {"tray01": "127.0.0.1"})
    monkeypatch.setattr("imexctl.imex.addresses.resolve", lambda name: None)
    slurm.set_node("tray02", addr="tray02")
    assert run_prolog(make_cfg(tmp_path), slurm, ctx_for()) == 1
    assert slurm.nodes_["tray01"].reason == (
        f"imexctl: prolog/render: no address for tray02 (not in {tmp_path}/slurm.conf, "
        "the name does not resolve, and Slurm has no NodeAddr for it)")


def test_address_missing_locally_is_asked_from_slurm_as_a_last_resort(tmp_path, slurm,
                                                                      monkeypatch):
    """A tray whose slurm.conf lacks a peer (and DNS does not know it) takes the peer's
    NodeAddr from slurmctld, in one query for the missing trays only."""
    from imexctl.imex.addresses import member_addresses, record_addrs
    from imexctl.slurm import localconf

    write_slurm_conf(tmp_path, {"tray01": "127.0.0.1"})
    monkeypatch.setattr("imexctl.imex.addresses.resolve", lambda name: None)
    conf = localconf.load(tmp_path / "slurm.conf", nodes=["tray01", "tray02"])
    slurm.calls.clear()
    got = member_addresses(["tray01", "tray02"], conf,
                           ask_slurm=lambda names: record_addrs(slurm.nodes(names)))
    assert got == ["127.0.0.1", "127.0.0.2"]
    assert slurm.calls == [("nodes", ("tray02",))]
    slurm.calls.clear()  # addresses already read on the fallback path cost nothing more
    assert member_addresses(["tray01", "tray02"], conf, {"tray02": "127.0.0.9"},
                            ask_slurm=lambda names: record_addrs(slurm.nodes(names))) == \
        ["127.0.0.1", "127.0.0.9"]
    assert slurm.calls == []


@pytest.mark.skipif(os.geteuid() != 0, reason="mknod of a channel device needs root")
def test_daemon_that_cannot_start_is_undone(tmp_path, slurm):
    """Everything the run created before the failed step is removed again."""
    cfg = make_cfg(tmp_path)
    assert run_prolog(cfg, slurm, ctx_for()) == 1
    assert slurm.nodes_["tray01"].reason.startswith("imexctl: prolog/start: cannot execute")
    assert leftovers(tmp_path) == CLEAN


def test_foreign_drain_reason_is_kept(tmp_path, slurm):
    slurm.set_node("tray01", state="IDLE+DRAIN", reason="bad DIMM (ops)")
    write_fabric_file(tmp_path / "fabric.json", simulated_tray(UUID, 1, **{"0": {"status": 23}}))
    assert run_prolog(make_cfg(tmp_path), slurm, ctx_for()) == 1
    assert slurm.nodes_["tray01"].reason == "bad DIMM (ops)"


def test_epilog_without_prolog_is_quiet(tmp_path, slurm):
    cfg = make_cfg(tmp_path)
    assert run_epilog(cfg, slurm, ctx_for()) == 0
    assert leftovers(tmp_path) == CLEAN
    assert not [c for c in slurm.calls if c[0] == "drain"]


@pytest.mark.skipif(os.geteuid() != 0, reason="mknod of a channel device needs root")
def test_epilog_removes_leaked_channel_and_job_dir(tmp_path, slurm):
    from imexctl.tray.channels import create_channel
    cfg = make_cfg(tmp_path)
    create_channel(cfg.paths.channel_dir, 5, 234, 65534, 0o600)
    job_dir(cfg, 42).mkdir(parents=True)
    (job_dir(cfg, 42) / "config.cfg").write_text("x")
    assert run_epilog(cfg, slurm, ctx_for()) == 0
    assert leftovers(tmp_path) == CLEAN


def test_epilog_never_signals_a_reused_pid(tmp_path, slurm):
    """A record whose pid now belongs to another process (start time differs)."""
    import subprocess
    import sys
    cfg = make_cfg(tmp_path)
    victim = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        StateStore(cfg.paths.state_dir).save(make_record(
            job_id=42, channel=None, job_dir=str(job_dir(cfg, 42)),
            daemon=DaemonIdentity(pid=victim.pid, create_time=1.0, exe=sys.executable)))
        assert run_epilog(cfg, slurm, ctx_for()) == 0
        assert victim.poll() is None, "a process that is not our daemon was signalled"
        assert leftovers(tmp_path) == CLEAN
    finally:
        victim.kill()
        victim.wait()


def test_channel_mode_is_least_privilege(tmp_path):
    """The channel node a prolog creates: char device, job's uid, 0600 by default."""
    if os.geteuid() != 0:
        pytest.skip("mknod needs root")
    from imexctl.tray.channels import create_channel
    path = create_channel(tmp_path, 9, 234, 65534, 0o600)
    st = os.lstat(path)
    assert stat.S_ISCHR(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600
    assert (st.st_uid, os.major(st.st_rdev), os.minor(st.st_rdev)) == (65534, 234, 9)


def test_stale_owner_unknown_to_slurm_is_torn_down(tmp_path, slurm):
    cfg = make_cfg(tmp_path, paths={"proc_devices": f"{tmp_path}/absent"})  # stop at channel
    job_dir(cfg, 41).mkdir(parents=True)
    StateStore(cfg.paths.state_dir).save(make_record(job_id=41, channel=None,
                                                     job_dir=str(job_dir(cfg, 41))))
    run_prolog(cfg, slurm, ctx_for())
    assert not job_dir(cfg, 41).exists()
    assert StateStore(cfg.paths.state_dir).load() is None


def test_slurm_unreachable_never_tears_down_an_owner(tmp_path, slurm):
    from imexctl.errors import SlurmError
    cfg = make_cfg(tmp_path)
    StateStore(cfg.paths.state_dir).save(make_record(job_id=41, channel=None))
    real_job = slurm.job

    def job(job_id):
        if job_id == 41:
            raise SlurmError("Unable to contact slurm controller (connect failure)")
        return real_job(job_id)
    slurm.job = job
    assert run_prolog(cfg, slurm, ctx_for()) == 5  # EXIT_SLURM; Slurm drains with its own
    assert slurm.nodes_["tray01"].state == "IDLE"
    assert StateStore(cfg.paths.state_dir).load().job_id == 41


def test_peer_publishing_meanwhile_is_waited_for(tmp_path, slurm):
    """First job after a reboot: every tray publishes itself in the same step."""
    slurm.set_node("tray02", extra="")
    real_nodes = slurm.nodes

    def nodes(names):
        if names == ["tray02"]:
            slurm.publish("tray02", published())
        return real_nodes(names)
    slurm.nodes = nodes
    cfg = make_cfg(tmp_path, paths={"proc_devices": f"{tmp_path}/absent"})  # stop at channel
    run_prolog(cfg, slurm, ctx_for())
    assert slurm.jobs[42].admin_comment == ""
    assert slurm.nodes_["tray01"].reason.startswith("imexctl: prolog/channel:")


def test_job_already_cancelled_by_a_peer_is_not_a_node_fault(tmp_path, slurm):
    """Two trays refuse the same job; the second finds it finished: exit 0, no drain."""
    from imexctl.errors import SlurmError
    slurm.publish("tray02", published(clique=2))
    slurm.set_job(42, partition="onerack")

    def too_late(job_id, text, spec=None):
        slurm.set_job(job_id, state="CANCELLED")
        raise SlurmError("Job has already finished for job 42")
    slurm.set_admin_comment = too_late
    cfg = make_cfg(tmp_path, policy={"partition": {"onerack": {"multi_clique": "refuse"}}})
    assert run_prolog(cfg, slurm, ctx_for()) == 0
    assert slurm.nodes_["tray01"].state == "IDLE"


def test_refused_job_that_cannot_be_cancelled_fails_the_hook(tmp_path, slurm):
    from imexctl.errors import SlurmError
    slurm.publish("tray02", published(clique=2))

    def refuse(job_id):
        raise SlurmError("Access/permission denied")
    slurm.cancel = refuse
    assert run_prolog(make_cfg(tmp_path, policy={"multi_clique": "refuse"}), slurm,
                      ctx_for()) == 1


@pytest.mark.skipif(os.geteuid() != 0, reason="mknod of a channel device needs root")
def test_switch_type_from_local_slurm_conf_leaves_channels_to_slurm(tmp_path, slurm,
                                                                    monkeypatch):
    """Issue 10: SwitchType is read from the local slurm.conf, never asked of slurmctld."""
    write_slurm_conf(tmp_path, extra="SwitchType=switch/nvidia_imex")
    cfg = make_cfg(tmp_path, channels={"mode": "auto"})
    made = []
    monkeypatch.setattr("imexctl.tray.channels.create_channel", lambda *a, **k: made.append(a))
    slurm.switch_type = lambda: pytest.fail("asked slurmctld for SwitchType")
    assert run_prolog(cfg, slurm, ctx_for()) == 1  # fails at start (no daemon binary)
    assert "imexctl: prolog/start:" in slurm.nodes_["tray01"].reason  # past the channel step
    assert made == []


def test_unreadable_local_slurm_conf_in_auto_mode_is_a_node_fault(tmp_path, slurm):
    # policy.controller = none: under auto the same file stops the prolog one question
    # earlier (test_prolog_decision.py, audit F4-9)
    cfg = make_cfg(tmp_path, channels={"mode": "auto"}, policy={"controller": "none"},
                   paths={"slurm_conf": f"{tmp_path}/absent.conf"})
    slurm.switch_type = lambda: pytest.fail("asked slurmctld for SwitchType")
    assert run_prolog(cfg, slurm, ctx_for()) == 1
    assert slurm.nodes_["tray01"].reason.startswith(
        "imexctl: prolog/allocation: cannot tell whether Slurm manages IMEX channels "
        f"(SwitchType): {tmp_path}/absent.conf: cannot open")
    assert leftovers(tmp_path) == CLEAN


def test_duplicate_node_address_is_a_render_fault(tmp_path, slurm):
    """F-06 / issue 9: was a ValueError traceback."""
    write_slurm_conf(tmp_path, {"tray01": "127.0.0.1", "tray02": "127.0.0.1"})
    assert run_prolog(make_cfg(tmp_path), slurm, ctx_for()) == 1
    assert slurm.nodes_["tray01"].reason == (
        "imexctl: prolog/render: duplicate node address 127.0.0.1 (from tray01, tray02)")
    assert leftovers(tmp_path) == CLEAN


def test_job_node_list_without_this_tray_is_a_context_fault(tmp_path, slurm):
    """F-06: the hook's environment and Slurm's job record disagree."""
    slurm.jobs[42] = job_record(42, ("tray02", "tray03"))
    assert run_prolog(make_cfg(tmp_path), slurm, ctx_for()) == 1
    assert slurm.nodes_["tray01"].reason == (
        "imexctl: prolog/context: this tray (tray01) is not in the job's node list from Slurm")
    assert leftovers(tmp_path) == CLEAN


def test_bad_config_template_leaves_no_job_directory(tmp_path, slurm):
    """Issue 9: a bad template drained the tray but left run_dir/job-<id> behind."""
    (tmp_path / "template.cfg").write_text("# site template\nthis is not a key value line\n")
    cfg = make_cfg(tmp_path, paths={"imex_config_template": f"{tmp_path}/template.cfg"})
    assert run_prolog(cfg, slurm, ctx_for()) == 1
    assert slurm.nodes_["tray01"].reason.startswith(
        f"imexctl: prolog/render: {tmp_path}/template.cfg:2: not a KEY=VALUE line")
    assert leftovers(tmp_path) == CLEAN


def _hold_node_lock(state_dir, ready, release):
    with StateStore(state_dir).locked():
        ready.set()
        release.wait(20)


@contextlib.contextmanager
def lock_held_elsewhere(state_dir):
    """Another process (another job's prolog) holds the node lock meanwhile."""
    import multiprocessing
    ready, release = multiprocessing.Event(), multiprocessing.Event()
    holder = multiprocessing.Process(target=_hold_node_lock, args=(state_dir, ready, release))
    holder.start()
    try:
        assert ready.wait(10)
        yield
    finally:
        release.set()
        holder.join()


def test_lock_held_by_another_prolog_refuses_the_job_without_drain(tmp_path, slurm,
                                                                   monkeypatch):
    """F-10: the second job's prolog was drained 'prolog/allocation: ... lock held'."""
    cfg = make_cfg(tmp_path)
    monkeypatch.setattr("imexctl.lifecycle.prolog.lock_wait_s", lambda cfg: 0.3)
    with lock_held_elsewhere(cfg.paths.state_dir):
        assert run_prolog(cfg, slurm, ctx_for()) == 0
    job = slurm.jobs[42]
    assert job.state == "CANCELLED"
    assert job.admin_comment.startswith("imexctl: node tray01 is busy with another IMEX domain")
    assert slurm.nodes_["tray01"].state == "IDLE" and not slurm.nodes_["tray01"].reason
    outcome = StateStore(cfg.paths.state_dir).last_outcome()
    assert outcome["result"] == "job-fault" and outcome["step"] == "ownership"
    assert leftovers(tmp_path) == CLEAN


def test_epilog_sweeps_temp_files_of_a_killed_writer(tmp_path, slurm):
    """F-22: no hook removed '.domain.json.XXXXXXXX'."""
    cfg = make_cfg(tmp_path)
    (tmp_path / "state").mkdir(mode=0o755)
    (tmp_path / "state" / ".domain.json.abcd1234").write_text("{")
    assert run_epilog(cfg, slurm, ctx_for()) == 0
    assert not (tmp_path / "state" / ".domain.json.abcd1234").exists()


@pytest.mark.parametrize("constraint,wanted", [
    ("imex", True), ("imex&fast", True), ("[imex|gpu]", True), ("imex*2", True),
    ("(imex&fast)", True), ("(fast|imex*4)&big", True), ("imex, fast", True),
    ("!imex", False), ("imexx", False), ("fast*2", False), ("", False)])
def test_feature_policy_understands_slurm_constraint_grammar(tmp_path, constraint, wanted):
    """F-25: 'imex*2' and '(imex&fast)' silently got no IMEX domain."""
    cfg = make_cfg(tmp_path, policy={"mode": "feature", "feature": "imex"})
    assert wants_imex(cfg, job_record(1, ("a", "b"), features=constraint)) is wanted


def test_epilog_with_the_lock_busy_drains_only_when_a_record_is_left(tmp_path, slurm,
                                                                    monkeypatch):
    """A refused job's epilog while another job's prolog holds the lock (F-10's second
    half): nothing of this job is here, so nothing to drain for."""
    cfg = make_cfg(tmp_path)
    monkeypatch.setattr("imexctl.lifecycle.epilog.LOCK_WAIT_S", 0.3)
    with lock_held_elsewhere(cfg.paths.state_dir):
        assert run_epilog(cfg, slurm, ctx_for()) == 0
        assert slurm.nodes_["tray01"].state == "IDLE"
        job_dir(cfg, 42).mkdir(parents=True)
        StateStore(cfg.paths.state_dir).save(make_record(job_id=42, channel=None,
                                                         job_dir=str(job_dir(cfg, 42))))
        assert run_epilog(cfg, slurm, ctx_for()) == 1
    assert slurm.nodes_["tray01"].reason.startswith(
        "imexctl: epilog/record: record of job 42 not cleared: ")
    assert not job_dir(cfg, 42).exists()


@pytest.mark.parametrize("which,step", [("run", "files"), ("dev/channels", "channel")])
def test_epilog_never_deletes_through_a_symlinked_dir(tmp_path, slurm, which, step):
    """Audit F-16 (epilog side): a symlinked run_dir/channel_dir made root delete the
    job's files or channels in the link's target."""
    cfg = make_cfg(tmp_path)
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "job-42").mkdir()
    (victim / "channel5").write_text("")
    link = tmp_path / which
    if link.exists():
        link.rmdir()
    link.symlink_to(victim)
    assert run_epilog(cfg, slurm, ctx_for()) == 1
    assert slurm.nodes_["tray01"].reason.startswith(
        f"imexctl: epilog/{step}: {link} is a symbolic link")
    assert sorted(os.listdir(victim)) == ["channel5", "job-42"]


def test_tray_without_nvlink_fabric_runs_the_job_without_a_domain(tmp_path, slurm):
    """Issue 9: a multi-node job on an H100 partition drained every tray."""
    from tests.support.fabric import not_imex_tray
    cfg = make_cfg(tmp_path)
    write_fabric_file(tmp_path / "fabric.json", not_imex_tray())
    assert run_prolog(cfg, slurm, ctx_for()) == 0
    assert slurm.nodes_["tray01"].state == "IDLE" and slurm.jobs[42].state.startswith("RUNNING")
    assert leftovers(tmp_path) == {**CLEAN, "job_dirs": ["job-42"]}  # the facts, below
    facts = json.loads((tmp_path / "run" / "job-42" / "imex-job.json").read_text())
    assert facts["state"] == "NONE" and facts["channel"] is None
    assert not [c for c in slurm.calls if c[0] in ("drain", "cancel", "extra_merge")]
    assert [c[0] for c in slurm.calls] == ["job"]   # no node records for a non-IMEX tray
    assert run_epilog(cfg, slurm, ctx_for()) == 0
    assert leftovers(tmp_path) == CLEAN


def test_feature_job_on_a_tray_without_nvlink_fabric_is_a_job_fault(tmp_path, slurm):
    from tests.support.fabric import not_imex_tray
    cfg = make_cfg(tmp_path, policy={"mode": "feature", "feature": "imex"})
    slurm.jobs[42] = job_record(42, ("tray01", "tray02"), features="imex")
    write_fabric_file(tmp_path / "fabric.json", not_imex_tray())
    assert run_prolog(cfg, slurm, ctx_for()) == 0
    assert slurm.jobs[42].state == "CANCELLED"
    assert slurm.jobs[42].admin_comment.startswith(
        "imexctl: job asked for IMEX but tray01 is not an IMEX tray (no NVLink fabric")
    assert slurm.nodes_["tray01"].state == "IDLE"


@pytest.mark.parametrize("on_degraded", ["warn", "drain"])
def test_degraded_fabric_warns_or_drains_as_the_site_says(tmp_path, slurm, on_degraded):
    cfg = make_cfg(tmp_path, fabric={"on_degraded": on_degraded},
                   paths={"proc_devices": f"{tmp_path}/absent"})  # stop at the channel step
    write_fabric_file(tmp_path / "fabric.json",
                      simulated_tray(UUID, 1, **{"2": {"health_summary": 3}}))  # LIMITED
    assert run_prolog(cfg, slurm, ctx_for()) == 1
    reason = slurm.nodes_["tray01"].reason
    if on_degraded == "drain":
        assert reason.startswith("imexctl: prolog/fabric: fabric bandwidth degraded: GPU 2")
    else:
        assert reason.startswith("imexctl: prolog/channel:")  # went on past the fabric


@pytest.mark.skipif(os.geteuid() != 0, reason="mknod of a channel device needs root")
def test_leaked_channel_of_an_earlier_job_is_replaced_not_drained(tmp_path, slurm):
    """A channel device of the job's number that no domain owns (an earlier job's, uid
    4242) is removed by the prolog under the node lock, not blamed on the tray."""
    from imexctl.tray.channels import create_channel
    from imexctl.rules.groups import channel_for_job
    cfg = make_cfg(tmp_path)
    number = channel_for_job(42).number
    create_channel(cfg.paths.channel_dir, number, 234, 4242, 0o600)
    assert run_prolog(cfg, slurm, ctx_for()) == 1   # no nvidia-imex here: fails at start
    # past the channel step (was: 'prolog/channel: ... another job holds channel N')
    assert slurm.nodes_["tray01"].reason.startswith("imexctl: prolog/start:")
    assert leftovers(tmp_path) == CLEAN   # the undo removed the job's own channel too


def test_epilog_forgets_the_daemons_importers(tmp_path, slurm):
    """persist.dat left by a daemon killed uncleanly would keep the next job's daemon on the
    same trays in WAITING_FOR_RECOVERY: the epilog removes it once the daemon is gone."""
    persist = tmp_path / "imex-run" / "persist.dat"
    persist.parent.mkdir()
    persist.write_text('{"key": "x", "importers": {"1": "10.0.0.2"}}')
    cfg = make_cfg(tmp_path, paths={"imex_persist_file": str(persist)})
    assert run_epilog(cfg, slurm, ctx_for()) == 0
    assert not persist.exists()
    link = tmp_path / "victim"
    link.write_text("keep")
    persist.symlink_to(link)          # never followed: the link goes, its target stays
    # (the next job's epilog: job 42's own again would be a repeat that touches nothing)
    assert run_epilog(cfg, slurm, ctx_for(job_id=43)) == 0
    assert not os.path.lexists(persist) and link.read_text() == "keep"


def test_prolog_forgets_importers_left_by_a_daemon_it_did_not_start(tmp_path, slurm):
    """A persist.dat from an earlier daemon killed uncleanly (another tool's, or ours after
    a crash) would hold the new daemon in WAITING_FOR_RECOVERY: gone before the start."""
    cfg = make_cfg(tmp_path)
    persist = cfg.paths.imex_persist_file
    persist.parent.mkdir(parents=True, exist_ok=True)
    persist.write_text('{"key": "x", "importers": {"1": "10.0.0.2"}}')
    assert run_prolog(cfg, slurm, ctx_for()) == 1    # no nvidia-imex here: fails at start
    assert slurm.nodes_["tray01"].reason.startswith("imexctl: prolog/start:")
    assert not persist.exists()


def test_a_node_prolog_refusal_of_an_array_element_cancels_that_element_only(tmp_path, slurm):
    """The node prolog is not told the array task (slurmd's environment has no
    SLURM_ARRAY_*): squeue's %i names the element, and scancel gets ``<id>_<task>``."""
    slurm.publish("tray02", published(clique=2))
    slurm.add_job(42, ("tray01", "tray02"), partition="onerack", array=(42, 7))
    slurm.add_job(43, ("tray03",), array=(42, 6))
    cfg = make_cfg(tmp_path, policy={"partition": {"onerack": {"multi_clique": "refuse"}}})
    assert run_prolog(cfg, slurm, ctx_for()) == 0
    assert slurm.jobs[42].state == "CANCELLED" and slurm.jobs[43].state != "CANCELLED"
    assert slurm.nodes_["tray01"].state == "IDLE"


def test_site_text_in_extra_is_an_owned_drain_not_a_slurm_failure(tmp_path, slurm):
    """The tray's Extra holds the site's own text: imexctl cannot publish its identity
    beside it. That is this tray's setup fault (imexctl: drain naming it), not exit 5
    and Slurm's anonymous 'Prolog error' (audit 2026-11 r06 extra-not-json)."""
    slurm.set_node("tray01", extra="rack=7")
    cfg = make_cfg(tmp_path, policy={"mode": "all", "controller": "none"})
    assert run_prolog(cfg, slurm, ctx_for()) == 1
    reason = slurm.nodes_["tray01"].reason
    assert reason.startswith("imexctl: prolog/allocation: node tray01: Extra is not a JSON "
                             "object ('rack=7')"), reason
    assert "put the site's text into a JSON object" in reason
    assert slurm.nodes_["tray01"].extra == "rack=7"      # never clobbered
