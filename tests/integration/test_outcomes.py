"""The outcome table of docs/operations.md, measured on the Slurm the harness runs: what the
job and the node look like after each failure imexctl reports (batch and interactive), and
that a held job runs after the fix. Each observation is also written to
/tmp/imexctl-outcomes-<slurm>.json (IMEXCTL_OUTCOMES_DIR), from which the table's per-version
columns are filled."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.support.harness import assert_clean

pytestmark = pytest.mark.integration
BAD_GPU = [{"index": i, "cluster_uuid": "5b1b3a1e-1c1a-4d0e-9a5e-000000000001", "clique_id": 1,
            "state": "IN_PROGRESS" if i == 1 else "COMPLETED"} for i in range(4)]


@pytest.fixture
def observe(cluster):
    """record(situation, **facts): keep what was seen, per Slurm version."""
    out = Path(os.environ.get("IMEXCTL_OUTCOMES_DIR", "/tmp")) / f"imexctl-outcomes-{cluster.slurm}.json"

    def record(situation: str, **facts):
        data = json.loads(out.read_text()) if out.exists() else {}
        data["slurm"] = "%d.%02d" % cluster.slurm_version
        data[situation] = facts
        out.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    return record


def _node(c, tray) -> dict:
    n = c.node_info(tray)
    return {"state": n["state"], "reason": n["reason"]}


def test_unfit_tray_batch_job_is_requeued_held_then_runs_after_the_fix(imex, observe):
    c = imex
    c.set_fabric("tray02", BAD_GPU)
    job = c.submit(["-N", "4", "--wrap", "echo ran"])
    node = c.wait_node_state("tray02", lambda st: "DRAIN" in st, timeout=60)
    info = c.wait_job_state(job, "PENDING", timeout=60)
    assert node["reason"] == "imexctl: prolog/fabric: GPU 1 fabric state In Progress, not Completed"
    assert info["Priority"] == "0" and info["Restarts"] == "1", info
    held = {"job": f"{info['JobState']} {info['Reason']} Priority={info['Priority']} Restarts={info['Restarts']}",
            "node": _node(c, "tray02"), "drained": [t for t in c.trays if "DRAIN" in c.node_info(t)["state"]]}
    assert held["drained"] == ["tray02"]
    c.set_fabric("tray02")
    c.imexctl("tray02", "identity", "publish")
    c.scontrol("update", "nodename=tray02", "state=resume")
    c.scontrol("release", str(job))
    info = c.wait_job_state(job, ("COMPLETED", "FAILED", "CANCELLED"), timeout=120)  # after cred_expire
    assert info["JobState"] == "COMPLETED" and c.job_output(job).strip() == "ran"
    observe("tray unfit, batch", **held, after_fix=f"{info['JobState']} Restarts={info['Restarts']}")
    c.wait_quiet(timeout=60)
    assert_clean(c, c.trays)


def test_unfit_tray_interactive_srun_fails(imex, observe):
    c = imex
    c.set_fabric("tray03", BAD_GPU)
    res = c.srun(["-N", "2", "-w", "tray02,tray03", "hostname"], timeout=90)
    assert res.returncode != 0
    assert "tray03" in res.stderr and "rolog" in res.stderr, res.stderr
    node = c.wait_node_state("tray03", lambda st: "DRAIN" in st, timeout=30)
    assert node["reason"].startswith("imexctl: prolog/fabric:")
    c.wait_quiet(timeout=60)
    last = max(int(j) for j in c.client(["squeue", "-h", "-t", "all", "-o", "%A"]).stdout.split())
    info = c.job_info(last)
    observe("tray unfit, srun", rc=res.returncode,
            srun=[line for line in res.stderr.splitlines() if "rolog" in line][:2],
            node=_node(c, "tray03"), job=f"{info['JobState']} Reason={info['Reason']} ExitCode={info['ExitCode']}")


def test_daemon_never_ready_batch(imex, observe):
    c = imex
    c.inject_fault("tray03", {"never_ready": True})
    job = c.submit(["-N", "4", "--wrap", "echo ran"])
    node = c.wait_node_state("tray03", lambda st: "DRAIN" in st, timeout=90)
    info = c.wait_job_state(job, ("PENDING", "CANCELLED"), timeout=60)
    assert node["reason"].startswith("imexctl: prolog/wait-ready: local daemon"), node["reason"]
    drained = [t for t in c.trays if "DRAIN" in c.node_info(t)["state"]]
    assert drained == ["tray03"]
    observe("daemon never READY, batch", job=f"{info['JobState']} {info['Reason']} Priority={info['Priority']}",
            node=_node(c, "tray03"), drained=drained)
    c.cancel_all()
    c.wait_quiet(timeout=90)
    assert not (c.state_dir / "jobs" / f"{job}.out").exists()


def test_job_spanning_cliques_batch_and_srun(imex, observe):
    """Under `[policy] multi_clique = "refuse"` (the default, per-clique, gives such a job one
    domain per clique: test_domain.py, test_multiclique.py)."""
    from tests.cluster import imexctl_config

    c = imex
    toml = c.state_dir / "etc" / "imexctl.toml"
    original = toml.read_text()
    imexctl_config.atomic_write(toml, original + '\n[policy]\nmulti_clique = "refuse"\n')
    try:
        c.set_fabric("tray04", 4, clique_id=2)
        c.imexctl("tray04", "identity", "publish")
        job = c.submit(["-N", "4", "--wrap", "echo ran"])
        info = c.wait_job_state(job, ("CANCELLED", "COMPLETED", "FAILED"), timeout=60)
        assert info["JobState"] == "CANCELLED", info
        assert info["AdminComment"].startswith("imexctl: allocation spans 2 NVLink cliques: "), \
            info["AdminComment"]
        res = c.srun(["-N", "2", "-w", "tray03,tray04", "hostname"], timeout=90)
        assert res.returncode != 0
    finally:
        imexctl_config.atomic_write(toml, original)
    c.wait_quiet(timeout=60)
    drained = [t for t in c.trays if "DRAIN" in c.node_info(t)["state"]]
    assert drained == []
    observe("allocation spans cliques", batch=f"{info['JobState']} Reason={info['Reason']}",
            srun_rc=res.returncode, srun=res.stderr.strip().splitlines()[:2], drained=drained)


def test_second_job_on_an_owned_tray_is_refused(imex, observe):
    c = imex
    # Two-tray jobs that may share their trays (--oversubscribe); a one-tray job has no
    # IMEX domain. Every Slurm says so before anything is touched: 24.11+ in the hook's
    # environment (SLURM_JOB_OVERSUBSCRIBE=OK / SLURM_JOB_EXCLUSIVE), 22.05 in the job
    # record (OverSubscribe=YES): the shared-node gate refuses it, no drain, so a second
    # job never reaches a tray another job's domain owns.
    job = c.submit(["-N", "2", "-n", "2", "--oversubscribe", "-w", "tray01,tray02",
                    "--wrap", "echo ran"])
    info = c.wait_job_state(job, ("CANCELLED", "COMPLETED", "FAILED"), timeout=60)
    assert info["JobState"] == "CANCELLED", info
    assert "may share its trays" in info["AdminComment"], info["AdminComment"]
    assert not {"tray01", "tray02"} & {t for t in c.trays if "DRAIN" in c.node_info(t)["state"]}
    observe("node owned by another running job", job=f"{info['JobState']} Reason={info['Reason']}",
            admin_comment=info["AdminComment"], node=_node(c, "tray01"))
    c.wait_quiet(timeout=60)
