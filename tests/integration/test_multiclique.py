"""Multi-rack jobs on the real Slurm harness (issue 10).

Part 1 (runs now): the controller side against the real slurmctld of Slurm 22.05:
PrologSlurmctld / EpilogSlurmctld run as SlurmUser in the controller's namespace exactly as
slurmctld runs them (the repo's hooks, the job's environment), reading real job and node
records, writing the decision record into AdminComment with real `scontrol update`, the
channel table reconciled with real `squeue`, refusals with real `scancel`. Node hooks only
record meanwhile, so nothing else touches AdminComment.

Part 2: end to end through the real node prologs (hooks run imexctl): each tray follows
the sealed decision record (`decision.find`), domains per clique come UP, and the TaskProlog
(configured in the harness's slurm.conf) exports the domain to the job's tasks.
"""

from __future__ import annotations

import contextlib
import json
import shutil
from pathlib import Path

import pytest

from imexctl.rules import decision as dec
from tests.support.harness import age_reconciliation, harness_seal, wait_running_domain

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
U1 = "5b1b3a1e-1c1a-4d0e-9a5e-0000000000a1"
U2 = "5b1b3a1e-1c1a-4d0e-9a5e-0000000000a2"
CLIQUE = 32766  # real racks all report this clique id: the key must include the UUID


@pytest.fixture
def ctld(recording):
    """The recording cluster with every tray's identity published from its fabric file; the
    controller's channel table starts empty; afterwards fabric and Extra are restored."""
    c = recording
    table_dir = c.state_dir / "trays" / c.ctl_name / "state" / "slurmctld"
    shutil.rmtree(table_dir, ignore_errors=True)
    yield c
    with contextlib.suppress(Exception):
        c.client(["scancel", "--user", "nobody"], check=False)
        c.wait_quiet(timeout=90)
    for tray in c.trays:
        c.set_fabric(tray)
        c.imexctl(tray, "identity", "publish")
    shutil.rmtree(table_dir, ignore_errors=True)


def racks(c, layout: dict[str, str]) -> None:
    """Put trays into cliques (tray -> cluster UUID) and publish their identities."""
    for tray, uuid in layout.items():
        c.set_fabric(tray, cluster_uuid=uuid, clique_id=CLIQUE)
        out = c.imexctl(tray, "identity", "publish")
        assert f"published clique {uuid}.{CLIQUE}" in out, out


def table(c) -> dict:
    path = c.state_dir / "trays" / c.ctl_name / "state" / "slurmctld" / "channels.json"
    return json.loads(path.read_text())["jobs"] if path.exists() else {}


def controller_hook(c, hook: str, job: int, config: Path | None = None):
    """Run hooks/<hook> as slurmctld does: as SlurmUser, on the controller, job env only."""
    info = c.job_info(job)
    env = {"SLURM_JOB_ID": str(job), "SLURM_JOB_UID": "65534", "SLURM_JOB_USER": "nobody",
           "SLURM_JOB_GID": "65534", "SLURM_JOB_NODELIST": info["NodeList"],
           "SLURM_JOB_PARTITION": info["Partition"],
           "SLURM_JOB_RESTART_COUNT": info.get("Restarts", "0"),
           "SLURM_SCRIPT_CONTEXT": hook.replace("-", "_")}
    if config:
        env["IMEXCTL_CONFIG"] = str(config)
    runuser = shutil.which("runuser", path="/usr/sbin:/usr/bin:/sbin:/bin")
    res = c.exec_on(c.ctl_name, [runuser, "-u", "slurm", "--", str(c.hooks_dir / hook)],
                    env=env, timeout=60)
    return res


def start(c, nodes: str) -> int:
    job = c.submit(["-N", str(len(nodes.split(","))), "-w", nodes, "--wrap", "sleep 120"])
    c.wait_job_state(job, "RUNNING")
    return job


def node_prolog_view(c, monkeypatch, job: int) -> str:
    """AdminComment as a node prolog reads it: imexctl's own CLI backend and parser."""
    from imexctl.config import parse_config
    from imexctl.slurm.cli_backend import CliBackend

    raw = {"paths": {"slurm_bin_dir": str(c.slurm_bin)}, "slurm": {"backend": "cli"}}
    if c.root_path is not None:  # that Slurm's scontrol runs inside its root
        from tests.cluster.inroot import RootBackend
        return RootBackend(c, "imexctl.slurm.cli_backend:CliBackend", raw).job(job).admin_comment
    monkeypatch.setenv("SLURM_CONF", str(c.conf_path))
    return CliBackend(parse_config(raw, None, "tray01")).job(job).admin_comment


def test_two_rack_job_gets_one_group_and_channel_per_clique(ctld, monkeypatch):
    c = ctld
    racks(c, {"tray01": U1, "tray02": U1, "tray03": U2, "tray04": U2})
    job = start(c, "tray01,tray02,tray03,tray04")
    res = controller_hook(c, "prolog-slurmctld", job)
    assert res.returncode == 0, res.stderr
    comment = c.job_info(job)["AdminComment"]
    assert node_prolog_view(c, monkeypatch, job) == comment
    nodes = ["tray01", "tray02", "tray03", "tray04"]
    found = dec.find(comment, harness_seal(c), job, 0, nodes, cluster=c.cluster_name,
                     submit_time=0).decision
    assert found is not None, comment                       # sealed by SlurmUser
    a, b = dec.for_node(found, "tray02"), dec.for_node(found, "tray04")
    assert a.action == "domains" and a.channel_mode == "imexctl", comment
    assert a.group.key == f"{U1}.{CLIQUE}" and a.group.members == ("tray01", "tray02")
    assert b.group.key == f"{U2}.{CLIQUE}" and b.group.members == ("tray03", "tray04")
    assert table(c)[str(job)]["channels"] == {a.group.key: a.group.channel,
                                              b.group.key: b.group.channel}
    assert c.job_info(job)["JobState"] == "RUNNING"
    # the job's user cannot forge the record
    forged = c.client(["scontrol", "update", f"jobid={job}", f"admincomment={dec.TAG};j=1"],
                      user="nobody", check=False)
    assert forged.returncode != 0 and c.job_info(job)["AdminComment"] == comment
    c.client(["scancel", str(job)])
    c.wait_job_state(job, "CANCELLED")
    assert controller_hook(c, "epilog-slurmctld", job).returncode == 0
    assert table(c) == {}


def test_concurrent_jobs_in_one_clique_get_distinct_channels_and_a_crash_leaks_none(ctld):
    c = ctld
    racks(c, {t: U1 for t in c.trays})
    first = start(c, "tray01,tray02")
    second = start(c, "tray03,tray04")
    for job in (first, second):
        assert controller_hook(c, "prolog-slurmctld", job).returncode == 0
    channels = {job: dec.decode(c.job_info(job)["AdminComment"]).groups[0].channel
                for job in (first, second)}
    assert len(set(channels.values())) == 2 and all(1 <= ch < 2048 for ch in channels.values())
    # `first` ends and its EpilogSlurmctld never runs (controller crash): the first
    # allocation after [channels] reconcile_every_s reconciles with squeue and drops it.
    c.client(["scancel", str(first)])
    c.wait_job_state(first, "CANCELLED")
    age_reconciliation(c)
    third = start(c, "tray01,tray02")
    assert controller_hook(c, "prolog-slurmctld", third).returncode == 0
    assert set(table(c)) == {str(second), str(third)}
    for job in (second, third):
        c.client(["scancel", str(job)])
        c.wait_job_state(job, "CANCELLED")
        assert controller_hook(c, "epilog-slurmctld", job).returncode == 0
    assert table(c) == {}


def test_refuse_policy_cancels_with_reason_and_skip_warns(ctld, tmp_path, monkeypatch):
    c = ctld
    racks(c, {"tray01": U1, "tray02": U1, "tray03": U2, "tray04": U2})
    base = (c.state_dir / "etc" / "imexctl.toml").read_text()
    configs = {}
    for policy in ("refuse", "skip"):
        path = c.state_dir / "jobs" / f"imexctl-{policy}.toml"
        path.write_text(base + f'\n[policy.partition.{c.partition}]\nmulti_clique = "{policy}"\n')
        path.chmod(0o644)
        configs[policy] = path
    job = start(c, "tray01,tray02,tray03,tray04")
    controller_hook(c, "prolog-slurmctld", job, configs["refuse"])
    info = c.wait_job_state(job, "CANCELLED")
    assert info["AdminComment"].startswith(
        "imexctl: allocation spans 2 NVLink cliques: tray[01-02] in "
        f"{U1}.{CLIQUE}; tray[03-04] in {U2}.{CLIQUE} (policy refuse for this partition)")
    assert all("DRAIN" not in c.node_info(t)["state"] for t in c.trays)
    job = start(c, "tray01,tray02,tray03,tray04")
    assert controller_hook(c, "prolog-slurmctld", job, configs["skip"]).returncode == 0
    info = c.job_info(job)
    assert info["JobState"] == "RUNNING"
    assert dec.decode(info["AdminComment"]).action == "skip"
    assert node_prolog_view(c, monkeypatch, job) == info["AdminComment"]  # with its note
    assert "warning: allocation spans 2 NVLink cliques" in dec.decode(info["AdminComment"]).note
    assert table(c) == {}


def test_topology_export_and_local_addresses_agree_with_slurm(ctld, tmp_path):
    c = ctld
    racks(c, {"tray01": U1, "tray02": U1, "tray03": U2, "tray04": U2})
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
    res = c.exec_on(c.ctl_name, [str(c.imexctl_bin), "topology"], env=env)
    assert res.returncode == 0, res.stderr
    # U1 and U2 share their first 8 hex digits, so block names carry the whole UUID
    b1, b2 = (f"b_{u.replace('-', '')}_{CLIQUE}" for u in (U1, U2))
    assert f"BlockName={b1} Nodes=tray[01-02]" in res.stdout
    assert f"BlockName={b2} Nodes=tray[03-04]" in res.stdout
    assert "\nBlockSizes=2,4\n" in res.stdout
    written = c.state_dir / "jobs" / "topology.conf"
    written.write_text(res.stdout)
    c.set_fabric("tray02", cluster_uuid=U2, clique_id=CLIQUE)
    c.imexctl("tray02", "identity", "publish")
    res = c.exec_on(c.ctl_name, [str(c.imexctl_bin), "topology", "--check", str(written)],
                    env=env)
    assert res.returncode == 7, res.stdout + res.stderr
    assert f"tray02 moved: {b1} -> {b2}" in res.stdout
    # every tray reads the same addresses from its local slurm.conf as slurmctld reports
    probe = ("import json; from imexctl.slurm.localconf import load; "
             f"print(json.dumps(load().addresses({c.trays!r})))")
    python = str(c.imexctl_bin.parent / "python")
    local = json.loads(c.exec_on("tray03", [python, "-c", probe], env=env, check=True).stdout)
    for tray in c.trays:
        assert local[tray] == c.node_info(tray)["address"], tray


def controller_metrics(c) -> dict:
    """`imexctl metrics --controller` on the controller as SlurmUser, parsed:
    {(sample, frozenset(labels)): value}; nothing on stderr."""
    from prometheus_client.parser import text_string_to_metric_families

    runuser = shutil.which("runuser", path="/usr/sbin:/usr/bin:/sbin:/bin")
    res = c.exec_on(c.ctl_name, [runuser, "-u", "slurm", "--", str(c.imexctl_bin), "metrics",
                                 "--controller", "--stdout"], timeout=60)
    assert res.returncode == 0 and not res.stderr.strip(), res.stderr
    return {(s.name, frozenset(s.labels.items())): s.value
            for fam in text_string_to_metric_families(res.stdout) for s in fam.samples}


def controller_log_lines(c, job: int) -> list[dict]:
    """The controller hooks' log lines for ``job``: the configured log_file, else
    imexctl-controller.log in SlurmUser's controller directory (whichever they wrote)."""
    lines = []
    for path in (c.state_dir / "trays" / c.ctl_name / "log" / "imexctl.log",
                 c.table_dir / "imexctl-controller.log"):
        if path.exists():
            lines += [json.loads(line) for line in path.read_text().splitlines()
                      if f'"job_id": {job}' in line or f'"job_id":{job}' in line]
    return [line for line in lines if line.get("job_id") == job]


def test_end_to_end_two_domains_up_and_task_env(imex):
    """A job across two cliques: the controller decides, each tray follows the decision
    with one slurmctld query, two domains come UP, the tasks are told theirs. The
    controller's log has PrologSlurmctld's and EpilogSlurmctld's lines for the job, and
    `imexctl metrics --controller` shows the decision and the channel table per clique."""
    c = imex
    racks(c, {"tray01": U1, "tray02": U1, "tray03": U2, "tray04": U2})
    granted = ("imexctl_controller_decisions_total",
               frozenset({"outcome": "granted", "reason": "channel-table"}.items()))
    ran = {hook: ("imexctl_controller_hook_duration_seconds_count", frozenset({"hook": hook}.items()))
           for hook in ("prolog-slurmctld", "epilog-slurmctld")}
    before = controller_metrics(c)
    job = c.submit(["-N", "4", "--wrap", "srun -l env; sleep 5"])
    sts = wait_running_domain(c, job, c.trays)
    used = {clique: ("imexctl_controller_channels_in_use", frozenset({"clique": clique}.items()))
            for clique in (f"{U1}.{CLIQUE}", f"{U2}.{CLIQUE}")}
    running = controller_metrics(c)
    assert {k: running[v] for k, v in used.items()} == {k: 1 for k in used}, running
    digests = {t: s["domain"]["digest"] for t, s in sts.items()}
    assert digests["tray01"] == digests["tray02"] != digests["tray03"] == digests["tray04"]
    assert {t: s["domain"]["nodes"] for t, s in sts.items()} == {
        "tray01": ["tray01", "tray02"], "tray02": ["tray01", "tray02"],
        "tray03": ["tray03", "tray04"], "tray04": ["tray03", "tray04"]}
    assert all(s["domain"].get("domain_state") == "UP" for s in sts.values()), \
        json.dumps({t: (s["domain"], s["problems"]) for t, s in sts.items()}, indent=1)
    assert all(s["decision"]["source"] == "controller" for s in sts.values()), sts
    record = dec.decode(c.job_info(job)["AdminComment"])
    assert [g.channel for g in record.groups] == [sts["tray01"]["domain"]["channel"],
                                                  sts["tray03"]["domain"]["channel"]]
    # one channel per group (unique within a clique; two cliques may use the same number)
    assert sts["tray02"]["domain"]["channel"] == sts["tray01"]["domain"]["channel"]
    assert sts["tray04"]["domain"]["channel"] == sts["tray03"]["domain"]["channel"]
    assert sts["tray01"]["channels_present"] == [sts["tray01"]["domain"]["channel"]]
    c.wait_job_state(job, "COMPLETED", timeout=90)
    out = c.job_output(job)
    assert f"IMEX_CLIQUE={U1}.{CLIQUE}" in out and f"IMEX_CLIQUE={U2}.{CLIQUE}" in out
    assert "IMEX_DOMAIN_NODES=tray[01-02]" in out and "IMEX_DOMAIN_NODES=tray[03-04]" in out
    assert out.count("IMEX_DOMAIN_STATE=UP") == 4, out
    assert f"IMEX_CHANNEL={record.groups[1].channel}" in out
    c.wait_quiet(timeout=60)
    assert table(c) == {}
    logged = {(line.get("hook"), line.get("event")) for line in controller_log_lines(c, job)}
    assert ("prolog-slurmctld", "decision recorded") in logged, logged
    assert ("epilog-slurmctld", "channels released") in logged, logged
    after = controller_metrics(c)
    assert after[granted] == before.get(granted, 0) + 1
    for hook, key in ran.items():
        assert after[key] == before.get(key, 0) + 1, hook
    assert {k: after[v] for k, v in used.items()} == {k: 0 for k in used}
    assert after[("imexctl_controller_state_file",
                  frozenset({"file": "counters", "state": "ok"}.items()))] == 1


def test_concurrent_jobs_in_one_clique_get_distinct_channels_on_every_tray(imex):
    """Two 2-tray jobs at once in one clique of the 4-tray harness (nine at once on 18
    trays: test_rack.py): the controller gave them different channels, and every tray of
    each job made its job's channel (and no other)."""
    c = imex
    racks(c, {t: U1 for t in c.trays})
    jobs = [c.submit(["-N", "2", "-w", nodes, "--wrap", "sleep 30"])
            for nodes in ("tray01,tray02", "tray03,tray04")]
    sts = {**wait_running_domain(c, jobs[0], ["tray01", "tray02"]),
           **wait_running_domain(c, jobs[1], ["tray03", "tray04"])}
    channels = {}
    for job in jobs:
        group = dec.decode(c.job_info(job)["AdminComment"]).groups[0]
        for tray in group.members:
            assert sts[tray]["domain"]["job_id"] == job
            assert sts[tray]["domain"]["channel"] == group.channel
            assert sts[tray]["channels_present"] == [group.channel]
            assert sts[tray]["decision"]["source"] == "controller"
        channels[job] = group.channel
    assert len(set(channels.values())) == 2, channels
    for job in jobs:
        c.client(["scancel", str(job)])
    c.wait_quiet(timeout=90)
    assert table(c) == {}


def test_a_job_across_two_persistent_cliques_gets_a_channel_per_clique_on_each_domain(imex):
    """Issue 37: two cliques (tray01-02, tray03-04), each with its persistent domain
    brought up by `imexctl recover`; a job across both gets one channel per clique from the
    controller, each tray's prolog creates its clique's channel on its running domain
    (no daemon started), the tasks are told theirs, and the daemons outlive the job."""
    import os
    import signal

    from tests.cluster.imexctl_config import tray_dir
    from tests.support.harness import daemons_of, persistent_toml

    c = imex
    toml = c.state_dir / "etc" / "imexctl.toml"
    base = toml.read_text()
    dirs = {t: tray_dir(c, t) for t in c.trays}
    try:
        toml.write_text(persistent_toml(c))
        for tray in c.trays:
            (dirs[tray] / "sim-run" / "persist.dat").unlink(missing_ok=True)
        racks(c, {"tray01": U1, "tray02": U1, "tray03": U2, "tray04": U2})
        for tray in c.trays:
            assert "2 trays" in c.imexctl(tray, "recover")
        for tray in c.trays:        # slurmd's health run nudges the daemons started first
            c.run_healthcheck(tray)
        pids = {t: daemons_of(dirs[t]) for t in c.trays}
        job = c.submit(["-N", "4", "--wrap", "srun -l env"])
        info = c.wait_job_state(job, ("COMPLETED", "FAILED", "CANCELLED"), timeout=90)
        assert info["JobState"] == "COMPLETED", (info, c.job_output(job))
        record = dec.decode(info["AdminComment"])
        assert [(g.key, g.members) for g in record.groups] == [
            (f"{U1}.{CLIQUE}", ("tray01", "tray02")), (f"{U2}.{CLIQUE}", ("tray03", "tray04"))]
        out = c.job_output(job)
        assert out.count("IMEX_DOMAIN_STATE=UP") == 4, out
        for group in record.groups:
            assert out.count(f"IMEX_CHANNEL={group.channel}") >= 2, out
        c.wait_quiet(timeout=60)
        assert {t: daemons_of(dirs[t]) for t in c.trays} == pids
        assert all(len(p) == 1 for p in pids.values()), pids
        assert table(c) == {}
        # idle again, a daemon is still expected on each persistent tray
        expected = c.imexctl_status("tray01")["expected"]
        assert (expected["state"], expected["imex_expected"]) == ("idle", True), expected
    finally:
        toml.write_text(base)
        for tray in c.trays:
            for pid in daemons_of(dirs[tray]):
                os.kill(pid, signal.SIGKILL)
            (dirs[tray] / "state" / "persistent.json").unlink(missing_ok=True)
            (dirs[tray] / "sim-run" / "persist.dat").unlink(missing_ok=True)
            shutil.rmtree(dirs[tray] / "run" / "persistent", ignore_errors=True)
            c.imexctl(tray, "recover")      # lifetime job again: expected.json says so
