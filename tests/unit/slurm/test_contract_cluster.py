"""Contract of the cluster-view queries (``node_table``, ``active_jobs``), every backend.

The cluster view must cost one or two Slurm queries for the whole cluster, never one per
node: the call log of the fake Slurm is the evidence.
"""

import time

from imexctl.slurm.records import JobRecord


def slurm_calls(world):
    """The queries sent: each run of a Slurm tool, or each call of the in-memory backend."""
    return [c for c in world.calls() if c[0] in ("scontrol", "squeue", "scancel")
            or (c[0] == "memory" and c[1] != "update")]


def test_node_table_all_nodes_in_one_query(backend, world):
    world.set_node("tray02", State="IDLE+DRAIN", Reason="imexctl: health/fabric: x",
                   ReasonTime="2026-11-22T09:00:05", Partitions="trays,gb200")
    world.clear_calls()
    table = backend.node_table()
    assert sorted(table) == ["tray01", "tray02", "tray03", "tray04"]
    assert len(slurm_calls(world)) == 1
    t2 = table["tray02"]
    assert t2.reason == "imexctl: health/fabric: x" and t2.drained and t2.ours
    assert t2.reason_time == time.mktime(time.strptime("2026-11-22T09:00:05",
                                                       "%Y-%m-%dT%H:%M:%S"))
    assert t2.partitions == ("trays", "gb200")
    assert table["tray01"].reason_time is None and table["tray01"].addr == "10.77.0.11"


def test_node_table_by_names_and_partition(backend, world):
    world.set_node("tray03", Partitions="gb200")
    world.set_node("tray04", Partitions="gb200,debug")
    world.clear_calls()
    assert sorted(backend.node_table(partition="gb200")) == ["tray03", "tray04"]
    assert sorted(backend.node_table(["tray01", "tray04", "nosuch"])) == ["tray01", "tray04"]
    assert sorted(backend.node_table(["tray01", "tray04"], partition="gb200")) == ["tray04"]
    assert backend.node_table([]) == {}
    assert len(slurm_calls(world)) == 3


def test_active_jobs_one_query_with_admin_comment(backend, world):
    world.set_job(8, AdminComment="imexctl-decision/1 something")
    from tests.support.fakeslurm import JOB_DEFAULT
    world.edit(lambda s: s["jobs"].update({
        "9": {**JOB_DEFAULT, "NodeList": "tray01", "JobState": "COMPLETED"},
        "10": {**JOB_DEFAULT, "JobState": "PENDING"}}))
    world.clear_calls()
    jobs = {j.job_id: j for j in backend.active_jobs()}
    assert sorted(jobs) == [7, 8]
    assert jobs[8] == JobRecord(job_id=8, state="RUNNING", user_id=65534,
                                nodes=("tray03", "tray04"), partition="trays", features="",
                                admin_comment="imexctl-decision/1 something", comment="",
                                batch=False, oversubscribe="OK")
    assert len(slurm_calls(world)) == 1


def test_active_jobs_distrusts_forged_fields(backend, backend_kind, world):
    # A user puts Key= text in JobName: identity comes from squeue, AdminComment is dropped.
    world.set_job(8, JobName="x AdminComment=imexctl-forged NodeList=tray01")
    world.clear_calls()
    jobs = {j.job_id: j for j in backend.active_jobs()}
    assert jobs[8].admin_comment == "" and jobs[8].nodes == ("tray03", "tray04")
    # the CLI confirms the forged record with squeue; in memory there is no text to forge
    assert len(slurm_calls(world)) == (1 if backend_kind == "memory" else 2)


def test_active_jobs_none(backend, world):
    world.edit(lambda s: s["jobs"].clear())
    assert backend.active_jobs() == []
