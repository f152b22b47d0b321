"""The Slurm adapter contract against the real slurmctld of the harness, on every Slurm the
harness runs (the same promises tests/unit/slurm/test_contract.py checks with fakes): the CLI
backend everywhere, the pyslurm backend where a pyslurm for that Slurm exists (the trixie
root's pyslurm 24.11). With a Slurm root each call runs in the root's Python."""

from __future__ import annotations

import json

import pytest

from imexctl.config import parse_config
from imexctl.slurm.records import MAX_COMMENT, CommentTooLarge, SlurmNotFound
from imexctl.slurm.adapter import get_adapter
from imexctl.slurm.interface import SlurmAdapter
from tests.cluster.inroot import RootBackend
from tests.support.decision import record_of

pytestmark = pytest.mark.integration
FACTORIES = {"cli": "imexctl.slurm.cli_backend:CliBackend", "pyslurm": "imexctl.slurm.pyslurm_backend:PyslurmBackend",
             "auto": "imexctl.slurm.adapter:get_adapter"}


def backend_on(cluster, backend: str, monkeypatch):
    """The backend (cli | pyslurm | auto) as the hooks would build it, where Slurm runs."""
    raw = {"paths": {"slurm_bin_dir": str(cluster.slurm_bin)},
           "slurm": {"backend": backend, "timeout_s": 10, "attempts": 2}}
    if cluster.root_path is not None:
        remote = RootBackend(cluster, FACTORIES[backend], raw)
        assert remote.describe()["adapter"] is True
        return remote
    monkeypatch.setenv("SLURM_CONF", str(cluster.conf_path))
    local = get_adapter(parse_config(raw, None, "tray01"))
    assert isinstance(local, SlurmAdapter)
    return local


@pytest.fixture(params=["cli", pytest.param("pyslurm", marks=pytest.mark.pyslurm)])
def real(request, recording, monkeypatch):
    """Each backend talking to the harness's slurmctld (hooks only record meanwhile)."""
    yield recording, backend_on(recording, request.param, monkeypatch)
    recording.cancel_all()
    recording.wait_quiet()
    for tray in recording.trays:
        recording.scontrol("update", f"nodename={tray}", "extra=", check=False)
    recording.resume_all()


def test_job_record_of_a_running_job(real):
    c, slurm = real
    job = c.submit(["-N", "3", "-w", "tray02,tray01,tray04", "--comment", "NodeList=evil x",
                    "--wrap", "sleep 30"])
    c.wait_job_state(job, "RUNNING")
    rec = slurm.job(job)
    assert rec.job_id == job and rec.state == "RUNNING" and rec.user_id == 65534
    assert rec.nodes == ("tray01", "tray02", "tray04")  # Slurm's order, forged comment ignored
    assert rec.partition == "trays" and rec.batch is True
    assert rec.comment == "NodeList=evil x"
    slurm.set_admin_comment(job, "imexctl: test comment")
    assert c.job_info(job)["AdminComment"] == "imexctl: test comment"
    assert slurm.job(job).admin_comment == "imexctl: test comment"
    slurm.cancel(job)
    assert c.wait_job_state(job, "CANCELLED")["JobState"] == "CANCELLED"


def test_a_long_record_round_trips_whole(real):
    """F3-25: a 60,000-character record, and one of MAX_COMMENT (the most one `scontrol
    update` argument carries), are written and read back whole by each backend: the job
    query the node prolog makes and the cluster view's; one character more is refused
    before anything is written. slurmctld keeps the text as it is on every Slurm."""
    c, slurm = real
    job = c.submit(["-N", "1", "-w", "tray01", "--wrap", "sleep 60"])
    c.wait_job_state(job, "RUNNING")
    for size in (60_000, MAX_COMMENT):
        text = record_of(size, job)
        slurm.set_admin_comment(job, text)
        assert c.job_info(job)["AdminComment"] == text
        rec = slurm.job(job)
        assert rec.admin_comment == text and text in rec.decision_text
        assert {j.job_id: j.admin_comment for j in slurm.active_jobs()}[job] == text
    with pytest.raises(CommentTooLarge):
        slurm.set_admin_comment(job, record_of(MAX_COMMENT + 1, job))
    assert c.job_info(job)["AdminComment"] == text


def test_unknown_job_and_node(real):
    c, slurm = real
    with pytest.raises(SlurmNotFound):
        slurm.job(987654)
    recs = slurm.nodes(["tray03", "tray01", "nosuch"])
    assert set(recs) == {"tray01", "tray03"}
    assert recs["tray03"].addr == c.tray_addrs()["tray03"] and recs["tray03"].hostname == "tray03"


def test_drain_resume_and_foreign_reasons(real):
    c, slurm = real
    assert slurm.drain("tray02", "imexctl: prolog/start: test") is True
    node = c.wait_node_state("tray02", lambda st: "DRAIN" in st)
    assert node["reason"] == "imexctl: prolog/start: test"
    assert slurm.nodes(["tray02"])["tray02"].reason == "imexctl: prolog/start: test"
    assert slurm.resume_if_ours("tray02") is True
    c.wait_node_state("tray02", "IDLE")
    c.scontrol("update", "nodename=tray03", "state=drain", "reason=PSU swap (ops)")
    assert slurm.drain("tray03", "imexctl: epilog/ports: test") is False
    assert slurm.resume_if_ours("tray03") is False
    assert c.node_info("tray03")["reason"] == "PSU swap (ops)"


def test_extra_merge_keeps_other_keys(real):
    c, slurm = real
    c.scontrol("update", "nodename=tray04", 'extra={"rack":"r07"}')
    slurm.extra_merge("tray04", "imex", {"cluster_uuid": "u", "clique_id": 3})
    extra = json.loads(c.node_info("tray04")["extra"])
    assert extra == {"rack": "r07", "imex": {"cluster_uuid": "u", "clique_id": 3}}
    assert json.loads(slurm.nodes(["tray04"])["tray04"].extra) == extra


def test_switch_type_and_requeue_hold(real):
    c, slurm = real
    assert slurm.switch_type() in ("", "(null)", "switch/none")
    job = c.submit(["-N", "1", "--wrap", "sleep 30"])
    c.wait_job_state(job, "RUNNING")
    slurm.requeue_hold(job)
    info = c.wait_job_state(job, "PENDING")
    assert info["Priority"] == "0"


def test_cluster_queries_on_real_slurm(real):
    """node_table / active_jobs (the cluster view's two queries) against real 22.05 output:
    reason time, partitions, AdminComment, forged text in a user field."""
    import time

    c, slurm = real
    job = c.submit(["-N", "2", "-w", "tray01,tray02", "-J", "x AdminComment=forged",
                    "--wrap", "sleep 30"])
    other = c.submit(["-N", "1", "-w", "tray03", "--wrap", "sleep 30"])
    c.wait_job_state(job, "RUNNING")
    c.wait_job_state(other, "RUNNING")
    slurm.set_admin_comment(other, "imexctl-decision test")
    before = time.time()
    c.scontrol("update", "nodename=tray04", "state=drain", "reason=imexctl: health/fabric: x")
    table = slurm.node_table()
    assert set(c.trays) <= set(table)
    t4 = table["tray04"]
    assert t4.drained and t4.ours and t4.reason == "imexctl: health/fabric: x"
    assert t4.reason_time is not None and abs(t4.reason_time - before) < 5
    assert t4.partitions == (c.partition,)
    assert sorted(slurm.node_table(partition=c.partition)) == sorted(table)
    assert slurm.node_table(partition="nosuch") == {}
    jobs = {j.job_id: j for j in slurm.active_jobs()}
    assert jobs[other].admin_comment == "imexctl-decision test"
    assert jobs[job].nodes == ("tray01", "tray02") and jobs[job].admin_comment == ""
def test_auto_selection_says_why(recording, monkeypatch):
    """auto picks pyslurm only where it is built for this Slurm (trixie), else the CLI, and
    says why (what `imexctl status` shows)."""
    chosen = backend_on(recording, "auto", monkeypatch)
    info = chosen.describe() if isinstance(chosen, RootBackend) else {"name": chosen.name,
                                                                     "selection": chosen.selection}
    root = recording.root
    if root is not None and root.has_pyslurm:
        assert info == {**info, "name": "pyslurm", "selection": "auto: pyslurm answered and matches this Slurm"}
    else:
        assert info["name"] == "cli"
        assert info["selection"] == "auto: CLI, because pyslurm is not installed"


SELECTION = ("from imexctl.config import load_config; from imexctl.slurm.adapter import get_adapter; "
             "a = get_adapter(load_config(node='{node}')); print(a.name + '|' + a.selection)")


def test_hooks_on_the_trays_pick_the_backend_for_their_slurm(cluster):
    """What the real hooks get on each tray (imexctl's config, the tray's Slurm, auto): pyslurm
    where it is built for this Slurm (so the whole suite on trixie runs the hooks on pyslurm),
    otherwise the CLI with the reason."""
    python = str(cluster.imexctl_bin.parent / "python")
    for tray in cluster.trays[:2]:
        res = cluster.exec_on(tray, [python, "-c", SELECTION.format(node=tray)],
                              env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "SLURMD_NODENAME": tray})
        assert res.returncode == 0, res.stderr
        name, _, why = res.stdout.strip().partition("|")
        if cluster.root is not None and cluster.root.has_pyslurm and cluster.slurm_backend != "cli":
            assert name == "pyslurm", why
        elif cluster.slurm_backend in ("", "auto"):
            assert (name, why) == ("cli", "auto: CLI, because pyslurm is not installed")
