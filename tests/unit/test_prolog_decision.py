"""The node prolog follows the controller's decision (issue 10), against MemorySlurm and the
simulated daemon: which branch each decision takes, how many slurmctld queries each path
makes, and what the tray ends up with (record, channel, facts for the TaskProlog)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from imexctl.rules import decision as dec
from imexctl.lifecycle.epilog import run_epilog
from imexctl.tray.expected import read as read_expected
from tests.support.fabric import not_imex_tray, simulated_tray, write_fabric_file
from imexctl.lifecycle.prolog import run_prolog
from imexctl.tray.ownership import StateStore
from imexctl.lifecycle.taskprolog import task_lines
from tests.support.decision import KEY1, KEY2, NODES, OTHER, record_for, two_groups
from tests.support.lifecycle import CLEAN, ctx_for, leftovers, published, write_slurm_conf
from tests.support.sim_daemon import sim_cfg, sim_processes
from tests.support.memory_slurm import job_record, MemorySlurm

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="channel mknod needs root")


@pytest.fixture
def job_id():
    import random
    return random.randrange(100_000, 900_000)


@pytest.fixture
def slurm(job_id):
    s = MemorySlurm()
    s.add_nodes({n: f"127.0.0.{i}" for i, n in enumerate(NODES, 1)})
    s.publish("tray01", published(1))
    s.publish("tray02", published(1, OTHER))
    s.publish("tray03", published(1, OTHER))
    s.jobs[job_id] = job_record(job_id, NODES)
    return s


@pytest.fixture
def cfg(tmp_path):
    from imexctl.base import log
    c = sim_cfg(tmp_path, policy="all")
    log.setup_logging(c.paths.log_file, "info", "tray01", stderr=None)
    yield c
    for p in sim_processes(tmp_path):
        p.kill()


def ctx(job_id, **kw):
    return ctx_for(job_id, nodes="tray[01-03]", **kw)


def slurm_queries(slurm):
    return [c[0] for c in slurm.calls if c[0] in ("job", "nodes", "node_table")]


def log_lines(cfg):
    path = Path(cfg.paths.log_file)
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def facts(tmp_path, job_id):
    return json.loads((tmp_path / "run" / f"job-{job_id}" / "imex-job.json").read_text())


def test_controller_decision_one_query_group_members_and_channel(tmp_path, cfg, slurm,
                                                                 job_id):
    slurm.set_job(job_id, admin_comment=record_for(job_id, groups=two_groups()))
    assert run_prolog(cfg, slurm, ctx(job_id)) == 0, \
        StateStore(cfg.paths.state_dir).last_outcome()
    assert slurm_queries(slurm) == ["job"]            # the one query of the common path
    record = StateStore(cfg.paths.state_dir).load()
    assert record.nodes == ["tray01"] and record.node_id == 0 and record.channel == 7
    assert record.channel_rule == "controller" and record.decision_source == "controller"
    assert record.clique == KEY1 and record.addresses == ["127.0.0.1"]
    assert leftovers(tmp_path)["channels"] == ["channel7"]
    nodes_cfg = (Path(record.job_dir) / "nodes_config.cfg").read_text()
    assert "127.0.0.1" in nodes_cfg and "127.0.0.2" not in nodes_cfg
    got = facts(tmp_path, job_id)
    assert got["state"] == "UP" and got["clique"] == KEY1 and got["members"] == "tray01"
    assert got["decision_source"] == "controller" and got["digest"] == record.digest
    lines = task_lines(cfg, {"SLURM_JOB_ID": str(job_id)})
    assert "export IMEX_CHANNEL=7" in lines and f"export IMEX_CLIQUE={KEY1}" in lines
    from imexctl.ops.status import collect
    shown = collect(cfg)
    assert shown["decision"]["source"] == "controller"
    assert shown["decision"]["clique"] == KEY1
    assert run_epilog(cfg, slurm, ctx(job_id)) == 0
    assert leftovers(tmp_path) == CLEAN


def test_expected_state_says_starting_once_the_node_is_taken(tmp_path, cfg, slurm, job_id,
                                                             monkeypatch):
    from imexctl.lifecycle import prolog
    seen = []
    real = prolog._render

    def spy(run):
        seen.append(read_expected(cfg))
        real(run)
    monkeypatch.setattr(prolog, "PROLOG_STEPS", [
        s if s.name != "render" else type(s)(s.name, spy) for s in prolog.PROLOG_STEPS])
    slurm.set_job(job_id, admin_comment=record_for(job_id, groups=two_groups()))
    assert run_prolog(cfg, slurm, ctx(job_id)) == 0
    assert seen[0].state == "starting" and seen[0].job_id == job_id
    assert run_epilog(cfg, slurm, ctx(job_id)) == 0


@pytest.mark.parametrize("comment", [
    "", "imexctl:v1;garbage", "imexctl:v9;j=1", "Comment written by a user",
], ids=["absent", "garbage", "other-version", "free-text"])
def test_no_usable_decision_falls_back_and_says_so(tmp_path, cfg, slurm, job_id, comment):
    slurm.set_job(job_id, admin_comment=comment)
    assert run_prolog(cfg, slurm, ctx(job_id)) == 0
    assert slurm_queries(slurm) == ["job", "nodes"]   # node records only on this path
    record = StateStore(cfg.paths.state_dir).load()
    assert record.decision_source == "fallback" and record.channel_rule == "job-id"
    assert record.nodes == ["tray01"] and record.clique == KEY1
    warned = [x for x in log_lines(cfg) if "(fallback;" in x.get("event", "")]
    assert warned and warned[0]["level"] == "warning"
    assert facts(tmp_path, job_id)["decision_source"] == "fallback"
    assert run_epilog(cfg, slurm, ctx(job_id)) == 0


@pytest.mark.parametrize("forge", ["job", "nodes", "restart"])
def test_decision_of_another_job_allocation_or_attempt_is_not_believed(tmp_path, cfg, slurm,
                                                                       job_id, forge):
    """A record copied from another job, or left from an earlier attempt (AdminComment
    survives a requeue), would put the tray in the wrong domain: fall back instead."""
    groups = (dec.GroupDecision(KEY1, 5, ("tray01", "tray02", "tray03")),)
    kw = {"job": dict(job_id=job_id + 1), "nodes": dict(nodes=("tray01", "tray04")),
          "restart": dict(restart=1)}[forge]
    args = {"job_id": job_id, "groups": groups, **kw}
    if forge == "nodes":
        args["groups"] = (dec.GroupDecision(KEY1, 5, ("tray01", "tray04")),)
    slurm.set_job(job_id, admin_comment=record_for(**args))
    assert run_prolog(cfg, slurm, ctx(job_id)) == 0
    record = StateStore(cfg.paths.state_dir).load()
    assert record.decision_source == "fallback" and record.nodes == ["tray01"]
    assert run_epilog(cfg, slurm, ctx(job_id)) == 0


@pytest.mark.parametrize("action", ["pending", "wait"])
@pytest.mark.parametrize("batch", [True, False])
def test_pending_or_wait_decision_requeues_the_job_and_starts_nothing(tmp_path, cfg, slurm,
                                                                      job_id, action, batch):
    """The controller found trays unpublished (pending) or no free channel (wait): the job
    waits for a later start, never runs on a channel the controller did not hand out. A
    job Slurm cannot requeue (srun, salloc) is cancelled with the same reason."""
    slurm.set_job(job_id, batch=batch)
    slurm.set_node("tray01", extra="")                     # unpublished: pending publishes it
    slurm.set_job(job_id, admin_comment=record_for(job_id, action=action,
                                                  note="clique full (2047 in use)"))
    assert run_prolog(cfg, slurm, ctx(job_id)) == 0
    job = slurm.jobs[job_id]
    assert job.state == ("PENDING" if batch else "CANCELLED")
    assert job.admin_comment.startswith("imexctl: waiting")
    assert "clique full (2047 in use)" in job.admin_comment
    assert not slurm.nodes_["tray01"].reason                            # nothing drained
    assert StateStore(cfg.paths.state_dir).load() is None
    assert ("tray01" in slurm.nodes_ and '"imex"' in slurm.nodes_["tray01"].extra) == (
        action == "pending")
    assert leftovers(tmp_path) == CLEAN


def test_refuse_decision_is_a_job_fault_that_touches_nothing(tmp_path, cfg, slurm, job_id):
    slurm.set_job(job_id, admin_comment=record_for(
        job_id, action="refuse", note="allocation spans 2 NVLink cliques"))
    assert run_prolog(cfg, slurm, ctx(job_id)) == 0
    job = slurm.jobs[job_id]
    assert job.state == "CANCELLED"
    assert job.admin_comment == "imexctl: allocation spans 2 NVLink cliques"
    assert slurm.nodes_["tray01"].state == "IDLE" and leftovers(tmp_path) == CLEAN
    assert StateStore(cfg.paths.state_dir).last_outcome()["step"] == "allocation"


@pytest.mark.parametrize("action", ["skip", "none"])
def test_skip_and_none_run_the_job_without_a_domain(tmp_path, cfg, slurm, job_id, action):
    slurm.set_job(job_id, admin_comment=record_for(job_id, action=action, note="why not"))
    assert run_prolog(cfg, slurm, ctx(job_id)) == 0
    assert slurm.jobs[job_id].state.startswith("RUNNING")
    assert slurm_queries(slurm) == ["job"]
    assert StateStore(cfg.paths.state_dir).load() is None and sim_processes(tmp_path) == []
    got = facts(tmp_path, job_id)
    assert got["state"] == "NONE" and got["channel"] is None and got["reason"] == "why not"
    assert "export IMEX_DOMAIN_STATE=NONE" in task_lines(cfg, {"SLURM_JOB_ID": str(job_id)})
    assert leftovers(tmp_path)["channels"] == []
    assert run_epilog(cfg, slurm, ctx(job_id)) == 0
    assert leftovers(tmp_path) == CLEAN


def test_tray_in_no_group_gets_no_domain(tmp_path, cfg, slurm, job_id):
    """The controller placed only the other trays (this one published "not IMEX" then)."""
    groups = (dec.GroupDecision(KEY2, 9, ("tray02", "tray03")),)
    slurm.set_job(job_id, admin_comment=record_for(job_id, groups=groups))
    assert run_prolog(cfg, slurm, ctx(job_id)) == 0
    assert StateStore(cfg.paths.state_dir).load() is None
    assert facts(tmp_path, job_id)["state"] == "NONE"
    assert slurm.jobs[job_id].state.startswith("RUNNING")


def test_non_imex_tray_without_a_group_asks_slurm_nothing_more(tmp_path, cfg, slurm, job_id):
    write_fabric_file(tmp_path / "fabric.json", not_imex_tray(4))
    assert run_prolog(cfg, slurm, ctx(job_id)) == 0   # no decision at all
    assert slurm_queries(slurm) == ["job"]
    assert facts(tmp_path, job_id)["state"] == "NONE"


def test_non_imex_tray_placed_in_a_group_republishes_and_refuses(tmp_path, cfg, slurm,
                                                                 job_id):
    write_fabric_file(tmp_path / "fabric.json", not_imex_tray(4))
    slurm.set_job(job_id, admin_comment=record_for(job_id, groups=two_groups()))
    assert run_prolog(cfg, slurm, ctx(job_id)) == 0
    assert slurm.jobs[job_id].state == "CANCELLED"
    assert "tray01 is in IMEX group" in slurm.jobs[job_id].admin_comment
    extra = json.loads(slurm.nodes_["tray01"].extra)["imex"]
    assert extra["cluster_uuid"] == "00000000-0000-0000-0000-000000000000"
    assert slurm.nodes_["tray01"].state == "IDLE"


def test_live_clique_differing_from_the_decision_drains_and_republishes(tmp_path, cfg, slurm,
                                                                        job_id):
    write_fabric_file(tmp_path / "fabric.json", simulated_tray(OTHER, 1))
    slurm.set_job(job_id, admin_comment=record_for(job_id, groups=two_groups()))
    assert run_prolog(cfg, slurm, ctx(job_id)) == 1
    assert slurm.nodes_["tray01"].reason == (
        f"imexctl: prolog/allocation: live clique {KEY2} differs from the decision's "
        f"{KEY1} (controller; identity republished)")
    assert json.loads(slurm.nodes_["tray01"].extra)["imex"]["cluster_uuid"] == OTHER
    assert leftovers(tmp_path) == CLEAN


def test_slurm_owned_channels_create_none(tmp_path, cfg, slurm, job_id):
    groups = (dec.GroupDecision(KEY1, None, ("tray01",)),
              dec.GroupDecision(KEY2, None, ("tray02", "tray03")))
    slurm.set_job(job_id, admin_comment=record_for(job_id, groups=groups, mode="slurm"))
    assert run_prolog(cfg, slurm, ctx(job_id)) == 0
    record = StateStore(cfg.paths.state_dir).load()
    assert record.channel is None and record.channel_rule == "slurm switch/nvidia_imex"
    assert leftovers(tmp_path)["channels"] == []
    assert facts(tmp_path, job_id)["channel_mode"] == "slurm"
    assert run_epilog(cfg, slurm, ctx(job_id)) == 0


def test_slurm_owned_channels_on_a_tray_without_the_major_is_a_node_fault(tmp_path, cfg, slurm,
                                                                         job_id):
    """switch/nvidia_imex disables itself on a tray whose driver registers no channel major:
    the job would get no channel at all, so the tray says so instead of running it."""
    groups = (dec.GroupDecision(KEY1, None, ("tray01",)),
              dec.GroupDecision(KEY2, None, ("tray02", "tray03")))
    slurm.set_job(job_id, admin_comment=record_for(job_id, groups=groups, mode="slurm"))
    cfg.paths.proc_devices.write_text("Character devices:\n195 nvidia\n")
    assert run_prolog(cfg, slurm, ctx(job_id)) == 1
    assert slurm.nodes_["tray01"].reason.startswith(
        "imexctl: prolog/channel: Slurm's switch/nvidia_imex owns the channel but cannot make "
        "one on this tray: nvidia-caps-imex-channels not registered")
    assert leftovers(tmp_path) == CLEAN


@pytest.mark.parametrize("env,refused", [
    ({"SLURM_JOB_EXCLUSIVE": "NO"}, "SLURM_JOB_EXCLUSIVE=NO"),
    ({"SLURM_JOB_EXCLUSIVE": "USER"}, "SLURM_JOB_EXCLUSIVE=USER"),
    ({"SLURM_JOB_EXCLUSIVE": "MCS", "SLURM_JOB_OVERSUBSCRIBE": "NO"}, "SLURM_JOB_EXCLUSIVE=MCS"),
    ({"SLURM_JOB_OVERSUBSCRIBE": "OK"}, "SLURM_JOB_OVERSUBSCRIBE=OK"),
    ({"SLURM_JOB_OVERSUBSCRIBE": "YES"}, "SLURM_JOB_OVERSUBSCRIBE=YES"),
    ({"SLURM_JOB_OVERSUBSCRIBE": "USER"}, "SLURM_JOB_OVERSUBSCRIBE=USER"),
    ({"SLURM_JOB_EXCLUSIVE": "YES"}, None),
    ({"SLURM_JOB_EXCLUSIVE": "NODE"}, None),   # what 26.05 sets for --exclusive (measured)
    ({"SLURM_JOB_EXCLUSIVE": "TOPO", "SLURM_JOB_OVERSUBSCRIBE": "OK"}, None),
    ({"SLURM_JOB_OVERSUBSCRIBE": "NO"}, None),
    ({"SLURM_JOB_OVERSUBSCRIBE": "TOPO"}, None),
    ({}, None),                                  # 22.05: the record's OverSubscribe=NO
    ({"record": "OK"}, "job record OverSubscribe=OK"),
])
def test_shared_node_gate(tmp_path, cfg, slurm, job_id, env, refused):
    from imexctl.slurm.context import job_context_from_env
    env = dict(env)
    slurm.set_job(job_id, oversubscribe=env.pop("record", "NO"))
    slurm.set_job(job_id, admin_comment=record_for(job_id, groups=two_groups()))
    hook = job_context_from_env({"SLURM_JOB_ID": str(job_id), "SLURM_JOB_UID": "65534",
                                 "SLURM_JOB_USER": "nobody", "SLURM_JOB_NODELIST": "tray[01-03]",
                                 "SLURMD_NODENAME": "tray01", **env})
    assert run_prolog(cfg, slurm, hook) == 0
    if refused:
        assert slurm.jobs[job_id].state == "CANCELLED"
        assert slurm.jobs[job_id].admin_comment.startswith(
            f"imexctl: job may share its trays with other jobs ({refused}")
        assert leftovers(tmp_path) == CLEAN and sim_processes(tmp_path) == []
        assert slurm.nodes_["tray01"].state == "IDLE"
    else:
        assert StateStore(cfg.paths.state_dir).load().phase == "ready"
        assert run_epilog(cfg, slurm, hook) == 0


def test_ready_timeout_derived_from_local_prolog_timeout(tmp_path, slurm, job_id, monkeypatch):
    """imex.ready_timeout_s unset: PrologTimeout 40 leaves 25 s for wait-ready."""
    from imexctl.lifecycle import prolog
    write_slurm_conf(tmp_path, extra="PrologEpilogTimeout=90\nPrologTimeout=40")
    c = sim_cfg(tmp_path, policy="all")
    from imexctl.base.dataclass import replace
    c = replace(c, imex=replace(c.imex, ready_timeout_s=None))
    budgets = []
    real = prolog.wait_ready
    monkeypatch.setattr(prolog, "wait_ready", lambda cfg, record, nodes, budget, local:
                        budgets.append(budget) or real(cfg, record, nodes, budget, local))
    slurm.set_job(job_id, admin_comment=record_for(job_id, groups=two_groups()))
    try:
        assert run_prolog(c, slurm, ctx(job_id)) == 0
        assert budgets == [25.0]
        c2 = replace(c, imex=replace(c.imex, ready_timeout_s=15.0))   # explicit wins
        assert run_epilog(c2, slurm, ctx(job_id)) == 0
        budgets.clear()
        assert run_prolog(c2, slurm, ctx(job_id)) == 0
        assert budgets == [15.0]
        assert run_epilog(c2, slurm, ctx(job_id)) == 0
    finally:
        for p in sim_processes(tmp_path):
            p.kill()


def test_an_unreadable_slurm_conf_under_controller_auto_drains_naming_the_file(tmp_path, cfg,
                                                                              slurm, job_id):
    """audit F4-9: under ``policy.controller = auto`` a slurm.conf that cannot be read
    (here an Include missing on this tray) means "cannot tell whether PrologSlurmctld
    decides": the tray drains naming the file, the job never runs on the fallback rule
    (whose channel the controller's table may have handed to a live job)."""
    assert cfg.policy.controller == "auto"
    with open(tmp_path / "slurm.conf", "a") as conf:
        conf.write(f"PrologSlurmctld=/usr/sbin/imexctl-prolog-slurmctld\n"
                   f"Include {tmp_path}/missing.conf\n")
    assert run_prolog(cfg, slurm, ctx(job_id)) == 1
    assert slurm.nodes_["tray01"].reason == (
        "imexctl: prolog/allocation: cannot tell whether PrologSlurmctld decides IMEX channels "
        f"here (policy.controller = auto): {tmp_path}/missing.conf: cannot open (No such file "
        "or directory)")
    assert leftovers(tmp_path) == CLEAN and sim_processes(tmp_path) == []
    assert [x for x in log_lines(cfg) if x.get("event") == "decision"] == []


@pytest.mark.parametrize("mode, conf, required", [
    ("auto", None, None), ("auto", {}, False), ("auto", {"prologslurmctld": "/x"}, True),
    ("required", None, True), ("none", None, False)])
def test_controller_required_cannot_tell_only_under_auto_without_slurm_conf(mode, conf,
                                                                            required):
    from imexctl.config import parse_config
    from imexctl.rules.decision import controller_required
    from imexctl.slurm.localconf import LocalSlurmConf

    cfg = parse_config({"policy": {"controller": mode}}, None, "t")
    local = None if conf is None else LocalSlurmConf(Path("/etc/slurm/slurm.conf"), settings=conf)
    assert controller_required(cfg, local) is required


# ------------------------------------------------ a record bound to its job instance (F4-2)
def sealed_v2(job_id, groups, nodes=NODES):
    """A genuine version 2 record (releases before 2026-11c), sealed by the test seal."""
    from imexctl.base.digest import sha256_hex
    from tests.support.memory_slurm import SEAL

    body = ";".join([f"imexctl:v2;j={job_id};r=0;h={dec.nodes_hash(list(nodes))};m=imexctl;"
                     "a=domains"] + [f"g={g.key}/{g.channel}/{','.join(g.members)}" for g in groups])
    return f"{body};s={SEAL.seal('imexctl-decision-v2:' + sha256_hex(body.encode()))}"


def assert_refused_nothing_drained(tmp_path, slurm, job_id, *words):
    job = slurm.jobs[job_id]
    assert job.state == "CANCELLED", job.admin_comment
    assert job.admin_comment.startswith("imexctl: ")
    for word in words:
        assert word in job.admin_comment
    assert slurm.nodes_["tray01"].state == "IDLE" and not slurm.nodes_["tray01"].reason
    assert StateStore(cfg_dir(tmp_path)).load() is None and leftovers(tmp_path) == CLEAN


def cfg_dir(tmp_path):
    return tmp_path / "state"


def test_a_genuine_record_sealed_before_the_job_was_submitted_is_a_replay(tmp_path, cfg,
                                                                          slurm, job_id):
    """Audit F4-2: Slurm handed job id N out again; the user put the id's earlier,
    genuinely sealed record (channel 5) into the new job. Sealed before this job's
    SubmitTime, it is refused: the job is cancelled, no tray drains, no channel made."""
    import time

    slurm.set_job(job_id, admin_comment=record_for(job_id, groups=two_groups(5, 5)))
    slurm.set_job(job_id, submit_time=int(time.time()) + 3600)   # submitted after the seal
    assert run_prolog(cfg, slurm, ctx(job_id)) == 0
    assert_refused_nothing_drained(tmp_path, slurm, job_id, "replayed",
                                   f"sealed decision record for job {job_id}")


def test_another_clusters_sealed_record_is_refused(tmp_path, cfg, slurm, job_id):
    """Two clusters sharing munge.key and node names: the other cluster's genuine record
    for the same job id is not this cluster's job's (a job fault, no drain)."""
    slurm.set_job(job_id, admin_comment=record_for(job_id, groups=two_groups(),
                                                  cluster="other"))
    assert run_prolog(cfg, slurm, ctx(job_id)) == 0
    assert_refused_nothing_drained(tmp_path, slurm, job_id, "sealed for cluster 'other'")


def test_a_decision_naming_a_clique_the_tray_published_it_is_not_in_is_a_job_fault(
        tmp_path, cfg, slurm, job_id):
    """The tray is (and published) OTHER.1; a sealed record puts it in KEY1: the record was
    not made from this tray's identity (replayed or foreign), so the job is refused and
    the tray, which is fine, is not drained (it was before: audit F4-2's variant)."""
    write_fabric_file(tmp_path / "fabric.json", simulated_tray(OTHER, 1))
    slurm.publish("tray01", published(1, OTHER))
    slurm.set_job(job_id, admin_comment=record_for(job_id, groups=two_groups()))
    assert run_prolog(cfg, slurm, ctx(job_id)) == 0
    assert_refused_nothing_drained(tmp_path, slurm, job_id, f"in clique {KEY1}",
                                   "not made for this allocation")


@pytest.mark.parametrize("batch", [True, False])
def test_a_version_2_record_from_before_an_upgrade_requeues_the_job(tmp_path, cfg, slurm,
                                                                     job_id, batch):
    """A job whose PrologSlurmctld ran before the upgrade has a v2 record (no cluster
    binding): it is not acted on; the job is requeued (a new attempt gets a v3 record from
    the upgraded controller), or cancelled where Slurm cannot requeue it."""
    slurm.set_job(job_id, batch=batch)
    slurm.set_job(job_id, admin_comment=sealed_v2(job_id, two_groups()))
    assert dec.decode(slurm.jobs[job_id].admin_comment).version == 2
    assert run_prolog(cfg, slurm, ctx(job_id)) == 0
    job = slurm.jobs[job_id]
    assert job.state == ("PENDING" if batch else "CANCELLED")
    assert "format v2, sealed before imexctl was upgraded" in job.admin_comment
    assert not slurm.nodes_["tray01"].reason and leftovers(tmp_path) == CLEAN
