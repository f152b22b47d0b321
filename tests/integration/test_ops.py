"""Operations on the real harness: the cluster view during and after jobs on two cliques
(table and JSON), imexctl's own drain with its age beside an admin's, and `imexctl
doctor` flagging each misconfiguration of a real slurm.conf."""

from __future__ import annotations

import json
import os
import re

import pytest

from tests.support.harness import wait_running_domain

CLIQUE_B = "5b1b3a1e-1c1a-4d0e-9a5e-000000000002"
STD_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"


def imexctl_json(c, tray, *args):
    res = c.exec_on(tray, [str(c.imexctl_bin), *args, "--json"],
                    env={"PATH": STD_PATH, "SLURMD_NODENAME": tray}, timeout=60)
    assert res.returncode in (0, 3), res.stderr
    return json.loads(res.stdout)


@pytest.fixture
def two_cliques(imex):
    """tray01-02 in the default clique, tray03-04 in clique B; put back afterwards."""
    c = imex
    for tray in ("tray03", "tray04"):
        c.set_fabric(tray, cluster_uuid=CLIQUE_B)
        c.imexctl(tray, "identity", "publish")
    yield c
    c.client(["scancel", "--user", "nobody"], check=False)
    c.wait_quiet(timeout=90)
    for tray in ("tray03", "tray04"):
        c.set_fabric(tray)
        c.imexctl(tray, "identity", "publish")


def test_cluster_view_during_and_after_jobs(two_cliques):
    c = two_cliques
    script = c.state_dir / "jobs" / "ops-sleep.sh"
    script.write_text("#!/bin/sh\nsleep 30\n")
    a = c.submit(["-N", "2", "-w", "tray[01-02]", str(script)])
    b = c.submit(["-N", "2", "-w", "tray[03-04]", str(script)])
    sts = {**wait_running_domain(c, a, ["tray01", "tray02"]),
           **wait_running_domain(c, b, ["tray03", "tray04"])}

    view = imexctl_json(c, "tray01", "status", "--nodes", "tray[01-04]")
    assert view["schema"] == "imexctl.status/1" and view["view"] == "cluster"
    cliques = {tuple(x["nodes"]): x["clique"] for x in view["cliques"]}
    assert set(cliques) == {("tray01", "tray02"), ("tray03", "tray04")}
    assert cliques[("tray03", "tray04")] == f"{CLIQUE_B}.1"
    jobs = {j["job_id"]: j for j in view["jobs"]}
    assert set(jobs) == {a, b}
    for job, trays in ((a, ["tray01", "tray02"]), (b, ["tray03", "tray04"])):
        assert jobs[job]["decision_source"] == "controller"   # PrologSlurmctld decided
        (dom,) = jobs[job]["domains"]
        assert dom["nodes"] == trays and dom["clique"] == cliques[tuple(trays)]
        # the channel the view derives is the one the trays really hold
        assert dom["channel"] == sts[trays[0]]["domain"]["channel"]
    use = {u["clique"]: u for u in view["channels"]}
    assert [x["jobs"] for x in use[f"{CLIQUE_B}.1"]["in_use"]] == [[b]]
    assert all(not u["collisions"] for u in use.values())
    assert view["imexctl_drains"] == []

    table = c.imexctl("tray02", "status", "--partition", c.partition)
    assert re.search(rf"^\s+{a} controller\s+{jobs[a]['domains'][0]['channel']}\s", table, re.M), table
    assert re.search(rf"^{CLIQUE_B}\.1\s+job\s+tray\[03-04\]$", table, re.M), table

    # the node view of the same moment: IMEX expected, the decision's source, members
    st = imexctl_json(c, "tray03", "status")
    assert st["expected"]["imex_expected"] is True and st["expected"]["job_id"] == b
    assert st["decision"]["source"] == "controller"
    assert st["slurm"]["published_clique"] == f"{CLIQUE_B}.1" and st["problems"] == []
    assert [(m["node"], m["status"]) for m in st["domain"]["members"]] == [
        ("tray03", "READY"), ("tray04", "READY")]

    c.client(["scancel", str(a), str(b)], check=False)
    c.wait_quiet(timeout=90)
    after = imexctl_json(c, "tray04", "status", "--partition", c.partition)
    assert after["jobs"] == [] and after["channels"] == [] and after["imexctl_drains"] == []
    assert "(no running job holds an IMEX domain)" in c.imexctl("tray01", "status", "--nodes",
                                                               "tray[01-04]")
    st = imexctl_json(c, "tray03", "status")
    assert st["expected"]["imex_expected"] is False and st["expected"]["state"] == "idle"
    assert st["domain"] is None


def test_cluster_view_lists_imexctl_drain_with_age_and_leaves_admin_drain(imex):
    c = imex
    try:
        c.scontrol("update", "nodename=tray02", "state=drain", "reason=admin: PSU swap")
        c.set_fabric("tray04", state="NOT_STARTED")
        assert c.run_healthcheck("tray04").returncode == 1
        view = imexctl_json(c, "tray01", "status", "--nodes", "tray[01-04]")
        (drain,) = view["imexctl_drains"]
        assert drain["node"] == "tray04"
        assert drain["reason"].startswith("imexctl: health/fabric: GPU 0 fabric state")
        assert drain["age_s"] is not None and 0 <= drain["age_s"] < 120
        assert [(d["node"], d["reason"]) for d in view["other_drains"]] == [
            ("tray02", "admin: PSU swap")]
        table = c.imexctl("tray01", "status", "--nodes", "tray[01-04]")
        assert re.search(r"^tray04\s+\d+m\d\ds\s+imexctl: health/fabric", table, re.M), table
        node = imexctl_json(c, "tray04", "status")
        assert any(p.startswith("drained by imexctl: imexctl: health/fabric")
                   for p in node["problems"])
    finally:
        c.set_fabric("tray04")
        c.run_healthcheck("tray04")
        c.scontrol("update", "nodename=tray02", "state=resume", check=False)
    assert "DRAIN" not in c.node_info("tray04")["state"]


def test_doctor_on_the_harness(imex):
    c = imex
    good = imexctl_json(c, "tray01", "doctor")
    assert good["schema"] == "imexctl.doctor/1" and good["failed"] == 0, good
    good = good["findings"]
    levels = {f["check"]: f["level"] for f in good}
    for check in ("prolog-flags", "hook-prolog", "hook-epilog", "hook-prologslurmctld",
                  "hook-healthcheckprogram", "hook-taskprolog", "imex-version",
                  "prolog-timeout", "fabric", "imex-channels",
                  "dir-state_dir", "dir-run_dir", "imex-binary", "imex-ctl-binary",
                  "executable"):    # bootstrap and the roots write the -IS executable
        assert levels[check] == "ok", (check, good)
    assert levels["defer-batch"] == "ok"    # the harness runs PrologFlags=Alloc,DeferBatch

    text = c.conf_path.read_text()
    text = re.sub(r"^PrologFlags=.*$", "PrologFlags=Contain,RunInJob", text, flags=re.M)
    text = re.sub(r"^PrologEpilogTimeout=.*$", "PrologEpilogTimeout=20", text, flags=re.M)
    text = re.sub(r"^Epilog=.*\n", "", text, flags=re.M)
    bad = c.state_dir / "jobs" / "doctor-bad.conf"
    bad.write_text(text)
    run_dir = c.state_dir / "trays" / "tray01" / "run"
    os.chmod(run_dir, 0o777)
    try:
        found = {f["check"]: f for f in imexctl_json(c, "tray01", "doctor", "--slurm-conf",
                                                     str(bad))["findings"]}
    finally:
        os.chmod(run_dir, 0o755)
    for check in ("prolog-flags", "run-in-job", "prolog-timeout", "hook-epilog",
                  "dir-run_dir"):
        assert found[check]["level"] == "fail" and found[check]["fix"], (check, found[check])
    assert found["defer-batch"]["level"] == "warn", found["defer-batch"]
    assert "PrologFlags=Alloc,DeferBatch" in found["defer-batch"]["fix"]
    assert "PrologEpilogTimeout=20s" in found["prolog-timeout"]["message"]
    res = c.exec_on("tray01", [str(c.imexctl_bin), "doctor", "--slurm-conf", str(bad)],
                    env={"PATH": STD_PATH, "SLURMD_NODENAME": "tray01"})
    assert res.returncode == 3 and "fix: set PrologFlags=Alloc,DeferBatch" in res.stdout


def _tray_snapshot(c, tray):
    """Every file of a tray's imexctl world (state, run, channel dirs) with mode, mtime and
    content: what a hook run may have changed."""
    out = {}
    for sub in ("state", "run", "dev"):
        for path in sorted((c.state_dir / "trays" / tray / sub).rglob("*")):
            st = path.lstat()
            out[str(path)] = (st.st_mode, st.st_mtime_ns,
                              path.read_bytes() if path.is_file() else None)
    return out


def _log_lines(c, tray):
    path = c.state_dir / "trays" / tray / "log" / "imexctl.log"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def test_epilog_run_again_by_hand_is_a_harmless_repeat_logged_once(imex):
    """Slurm may run an epilog twice. The tray's Epilog hook, run again with the job's own
    environment after the job ended: exit 0, not a file changed, no drain, and one log
    line saying it is a repeat (no warnings)."""
    c = imex
    c.set_hooks("record+imexctl")
    try:
        job = c.submit(["-N", "2", "-w", "tray[01-02]", "--wrap", "sleep 1"])
        assert c.wait_job_state(job, ("COMPLETED", "FAILED", "CANCELLED"),
                                timeout=60)["JobState"] == "COMPLETED"
        c.wait_quiet()
        c.wait_hook_records("epilog", job, 2)
    finally:
        c.set_hooks("imexctl")
    (rec,) = c.hook_records("epilog", job, "tray01")
    env = {k: v for k, v in rec.items() if not k.startswith("__")}
    first = [x for x in _log_lines(c, "tray01") if x.get("job_id") == job
             and x.get("hook") == "epilog"]
    assert any(x["event"] == "IMEX domain torn down and verified" for x in first), first
    before, node_before = _tray_snapshot(c, "tray01"), c.node_info("tray01")
    n = len(_log_lines(c, "tray01"))

    res = c.exec_on("tray01", [str(c.state_dir / "hooks" / "epilog")], env=env)

    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stderr == ""
    assert _tray_snapshot(c, "tray01") == before
    node = c.node_info("tray01")
    assert "DRAIN" not in node["state"] and node["reason"] == node_before["reason"]
    new = _log_lines(c, "tray01")[n:]
    assert [x["event"] for x in new if "repeat" in x["event"]] == [
        "epilog repeat: this job's epilog already tore everything down and verified it; "
        "nothing to do"], new
    assert [x["event"] for x in new] == ["epilog started", new[-1]["event"]]
    assert all(x["level"] == "info" and x["job_id"] == job for x in new)
    assert c.wait_job_state(job, ("COMPLETED",), timeout=5)["JobState"] == "COMPLETED"
