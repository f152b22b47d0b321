"""Issue 37: a job spanning two cliques where persistent domains run (docs/multi-rack.md:
one domain per clique). The controller gives each clique's group its own channel whatever
the cliques' lifetimes (the lifetime is compared within a clique only); each tray's prolog
then serves its own group on its own model: a persistent tray gives the job its group's
channel on the running persistent domain, a job-lifetime tray starts the group's domain."""

from __future__ import annotations

import os

import pytest

from imexctl.controller.slurmctld import prolog_slurmctld
from imexctl.errors import EXIT_OK
from imexctl.lifecycle.epilog import run_epilog
from imexctl.lifecycle.prolog import run_prolog
from imexctl.lifecycle.taskprolog import task_lines
from imexctl.rules import decision as dec
from imexctl.tray.ownership import StateStore
from tests.support import controller as ctl
from tests.support.decision import record_for
from tests.support.lifecycle import UUID, controller_ctx_of, ctx_for, published
from tests.support.persistent import channels, up  # noqa: F401
from tests.support.sim_daemon import sim_processes

RACK = ["tray01", "tray02", "tray03", "tray04"]


@pytest.mark.parametrize("second", ["persistent", "job"])
def test_the_controller_gives_each_clique_of_the_job_its_group_and_channel(
        tmp_path, monkeypatch, second):
    cfg, slurm = ctl.rack(tmp_path, monkeypatch, RACK)
    for node in ("tray01", "tray02"):
        slurm.publish(node, published(1, lifetime="persistent"))
    for node in ("tray03", "tray04"):
        slurm.publish(node, published(2, lifetime=second))
    slurm.add_job(42, RACK, partition="trays")
    assert prolog_slurmctld(cfg, slurm, controller_ctx_of(slurm, 42)) == EXIT_OK
    job = slurm.jobs[42]
    assert job.state != "CANCELLED"
    decision = dec.decode(job.admin_comment)
    assert decision.action == "domains"
    assert {g.key: g.members for g in decision.groups} == {
        f"{UUID}.1": ("tray01", "tray02"), f"{UUID}.2": ("tray03", "tray04")}
    assert all(g.channel is not None and g.channel > 0 for g in decision.groups)
    assert not any(slurm.nodes_[n].drained for n in RACK)


def test_a_persistent_tray_serves_its_group_of_a_two_clique_job_on_its_domain(
        tmp_path, up, job_id):   # noqa: F811
    """tray1 (persistent clique 1) in a job with tray4 (clique 2): its prolog gives the job
    its group's channel on the running persistent domain, waits for its group's trays only,
    starts no daemon; the epilog removes the channel and leaves the daemon."""
    cfg, slurm, pid = up
    nodes = ("tray1", "tray4")
    slurm.add_job(job_id, nodes)
    slurm.set_job(job_id, admin_comment=record_for(
        job_id, nodes=nodes, groups=(dec.GroupDecision(f"{UUID}.1", 5, ("tray1",)),
                                     dec.GroupDecision(f"{UUID}.2", 5, ("tray4",)))))
    ctx = ctx_for(job_id, node="tray1", nodes="tray[1,4]", uid=1234, user="alice", gid=1234)
    assert run_prolog(cfg, slurm, ctx) == 0, StateStore(cfg.paths.state_dir).last_outcome()
    record = StateStore(cfg.paths.state_dir).load()
    # the record lists the persistent domain's members (clique 1 only), not the job's trays
    assert (record.nodes, record.clique, record.channel, record.daemon) == \
        (["tray1", "tray2", "tray10"], f"{UUID}.1", 5, None)
    assert record.on_persistent and record.decision_source == "controller"
    assert [p.pid for p in sim_processes(tmp_path)] == [pid]
    assert channels(tmp_path)["channel5"].st_uid == 1234
    assert "export IMEX_CHANNEL=5" in task_lines(cfg, {"SLURM_JOB_ID": str(job_id)})
    assert run_epilog(cfg, slurm, ctx) == 0
    assert channels(tmp_path) == {} and [p.pid for p in sim_processes(tmp_path)] == [pid]
    assert not [c for c in slurm.calls if c[0] == "drain"]
