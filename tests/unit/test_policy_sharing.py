"""The shared-node gate on Slurm 22.05/23.02 (audit 2026-11b F3-19): their prologs get
neither SLURM_JOB_EXCLUSIVE nor SLURM_JOB_OVERSUBSCRIBE, so the job record's OverSubscribe=
decides. What 22.05.8 prints there was measured on the harness (2026-11-26, partition
without OverSubscribe=, select/cons_tres CR_Core): ``--exclusive`` -> NO, a default job ->
OK, ``--oversubscribe`` -> YES; in a partition with OverSubscribe=EXCLUSIVE every job -> NO.
"""

from __future__ import annotations

import os

import pytest

from imexctl.rules.policy import shared_node_refusal


@pytest.mark.parametrize("exclusive,oversubscribe,record,refused", [
    # 22.05 / 23.02: no variable, the record decides
    (None, None, "NO", None),                                   # --exclusive, EXCLUSIVE partition
    (None, None, "OK", "(job record OverSubscribe=OK)"),        # a default job
    (None, None, "YES", "(job record OverSubscribe=YES)"),      # --oversubscribe
    (None, None, "USER", "(job record OverSubscribe=USER)"),    # --exclusive=user
    (None, None, "MCS", "(job record OverSubscribe=MCS)"),
    (None, None, None, "cannot tell whether the job may share"),  # unreadable or forged
    # 24.11+: the variables decide, whatever the record says
    (None, "NO", "OK", None),
    (None, "OK", "NO", "(SLURM_JOB_OVERSUBSCRIBE=OK)"),
    (None, "TOPO", None, None),
    ("NODE", None, None, None),
    ("NODE", "OK", "OK", None),
    ("NO", "NO", "NO", "(SLURM_JOB_EXCLUSIVE=NO)"),
    ("USER", None, "NO", "(SLURM_JOB_EXCLUSIVE=USER)"),
])
def test_gate(exclusive, oversubscribe, record, refused):
    reason = shared_node_refusal(exclusive, oversubscribe, record)
    if refused is None:
        assert reason is None
    else:
        assert reason is not None and refused in reason
        assert "--exclusive" in reason


@pytest.mark.parametrize("record", [None, "OK", "YES"])
def test_refusal_without_variables_says_what_to_set(record):
    reason = shared_node_refusal(None, None, record)
    assert "--exclusive" in reason and "OverSubscribe=EXCLUSIVE" in reason


# ---------------------------------------------------------------- the node prolog
root_only = pytest.mark.skipif(os.geteuid() != 0, reason="channel mknod needs root")


@root_only
@pytest.mark.parametrize("record,refused", [
    ("OK", "job may share its trays with other jobs (job record OverSubscribe=OK)"),
    ("YES", "job may share its trays with other jobs (job record OverSubscribe=YES)"),
    (None, "cannot tell whether the job may share its trays with other jobs"),
    ("NO", None),
])
def test_prolog_on_a_slurm_without_sharing_variables(tmp_path, record, refused):
    """A 22.05 hook environment (no sharing variable): a job that may share its trays is
    refused before anything is touched, nothing drained; an exclusive one gets its domain."""
    from imexctl.lifecycle.epilog import run_epilog
    from imexctl.lifecycle.prolog import run_prolog
    from imexctl.slurm.context import job_context_from_env
    from imexctl.tray.ownership import StateStore
    from tests.support import decision as pd
    from tests.support.lifecycle import CLEAN, leftovers, published
    from tests.support.sim_daemon import sim_cfg, sim_processes
    from tests.support.memory_slurm import job_record, MemorySlurm

    job_id = 424242
    slurm = MemorySlurm()     # as test_prolog_decision's: tray01 alone in its clique
    slurm.add_nodes({n: f"127.0.0.{i}" for i, n in enumerate(pd.NODES, 1)})
    slurm.publish("tray01", published(1))
    slurm.publish("tray02", published(1, pd.OTHER))
    slurm.publish("tray03", published(1, pd.OTHER))
    slurm.jobs[job_id] = job_record(job_id, pd.NODES)
    cfg = sim_cfg(tmp_path, policy="all")
    try:
        slurm.set_job(job_id, admin_comment=pd.record_for(job_id, groups=pd.two_groups()),
                      oversubscribe=record)
        hook = job_context_from_env({
            "SLURM_JOB_ID": str(job_id), "SLURM_JOB_UID": "65534", "SLURM_JOB_USER": "nobody",
            "SLURM_JOB_NODELIST": "tray[01-03]", "SLURMD_NODENAME": "tray01"})
        assert hook.exclusive is None and hook.oversubscribe is None
        assert run_prolog(cfg, slurm, hook) == 0
        job = slurm.jobs[job_id]
        if refused:
            assert job.state == "CANCELLED"
            assert job.admin_comment.startswith(f"imexctl: {refused}"), job.admin_comment
            assert leftovers(tmp_path) == CLEAN and sim_processes(tmp_path) == []
            assert slurm.nodes_["tray01"].state == "IDLE"
        else:
            assert StateStore(cfg.paths.state_dir).load().phase == "ready"
            assert run_epilog(cfg, slurm, hook) == 0
    finally:
        for p in sim_processes(tmp_path):
            p.kill()
