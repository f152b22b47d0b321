"""`imexctl status --nodes/--partition`: the cluster view from Slurm alone, in two queries."""

import json
import time

from imexctl.ops import clusterstatus
from imexctl.cli import main
from imexctl.cli.display import cluster_table as render_table
from imexctl.ops.clusterstatus import GroupView, collect
from imexctl.config import parse_config
from tests.support.memory_slurm import job_record, MemorySlurm

A = "aaaaaaaa-0000-0000-0000-000000000001"
B = "bbbbbbbb-0000-0000-0000-000000000002"


def world():
    slurm = MemorySlurm()
    slurm.add_nodes({f"tray{i:02d}": f"10.0.0.{i}" for i in range(1, 9)})
    for i in range(1, 9):
        uuid = A if i <= 4 else B
        if i != 8:  # tray08 never published
            slurm.publish(f"tray{i:02d}", {"cluster_uuid": uuid, "clique_id": 7,
                                           "gpu_count": 4, "state": "Completed"})
    slurm.set_node("tray03", state="IDLE+DRAIN", reason="imexctl: prolog/wait-ready: local "
                   "daemon UNAVAILABLE after 60s", reason_time=1_800_000_000.0 - 3700)
    slurm.set_node("tray06", state="DOWN+DRAIN", reason="PSU swap (bob)")
    slurm.set_node("tray07", partitions=("debug",))
    return slurm


def cfg(**policy):
    return parse_config({"policy": policy} if policy else {}, None, "ctl")


def decoder(text):
    """Stands in for imexctl.rules.decision: 'dec:<clique>=<nodes>@<channel>;...'."""
    if not text.startswith("dec:"):
        return None
    out = []
    for part in text[4:].split(";"):
        clique, rest = part.split("=")
        nodes, ch = rest.split("@")
        out.append(GroupView(tuple(nodes.split(",")), clique, int(ch)))
    return out


def test_cluster_view_two_queries(monkeypatch):
    slurm = world()
    slurm.jobs[41] = job_record(41, ("tray01", "tray02", "tray05", "tray06"),
                         admin_comment=f"dec:{A}.7=tray01,tray02@5;{B}.7=tray05,tray06@5")
    slurm.jobs[42] = job_record(42, ("tray04",), state="RUNNING")       # one tray: no IMEX (multi-node)
    slurm.jobs[43] = job_record(43, ("tray03", "tray04"), state="RUNNING")  # no decision: fallback
    slurm.jobs[44] = job_record(44, ("tray01", "tray02"), state="COMPLETED")
    slurm.calls.clear()
    now = 1_800_000_000.0
    view = collect(cfg(), slurm, decode=decoder, now=now)
    assert [c[0] for c in slurm.calls] == ["node_table", "active_jobs"]
    assert view["schema"] == "imexctl.status/1" and view["view"] == "cluster"
    assert [{k: c[k] for k in ("clique", "nodes", "lifetime")} for c in view["cliques"]] == [
        {"clique": f"{A}.7", "nodes": ["tray01", "tray02", "tray03", "tray04"], "lifetime": None},
        {"clique": f"{B}.7", "nodes": ["tray05", "tray06", "tray07"], "lifetime": None}]
    assert view["unpublished"] == ["tray08"]
    assert view["imexctl_drains"] == [{
        "node": "tray03", "state": "IDLE+DRAIN", "since": now - 3700, "age_s": 3700,
        "reason": "imexctl: prolog/wait-ready: local daemon UNAVAILABLE after 60s",
        "stuck_daemon": False}]
    assert view["stuck_daemons"] == []
    assert view["other_drains"] == [{"node": "tray06", "state": "DOWN+DRAIN",
                                     "reason": "PSU swap (bob)"}]
    jobs = {j["job_id"]: j for j in view["jobs"]}
    assert sorted(jobs) == [41, 43]
    assert jobs[41]["decision_source"] == "controller"
    assert jobs[41]["domains"] == [
        {"nodes": ["tray01", "tray02"], "clique": f"{A}.7", "channel": 5},
        {"nodes": ["tray05", "tray06"], "clique": f"{B}.7", "channel": 5}]
    assert jobs[43]["decision_source"] == "fallback"
    assert jobs[43]["domains"] == [{"nodes": ["tray03", "tray04"], "clique": f"{A}.7",
                                    "channel": 1 + 43 % 2047}]
    # channel use per clique: 5 in both cliques (no collision), 44 in A
    use = {c["clique"]: c for c in view["channels"]}
    assert use[f"{A}.7"]["in_use"] == [{"channel": 5, "jobs": [41]},
                                       {"channel": 44, "jobs": [43]}]
    assert use[f"{A}.7"]["collisions"] == [] and use[f"{B}.7"]["collisions"] == []
    table = render_table(view)
    rows = [line.split() for line in table.splitlines()]
    assert [f"{A}.7", "-", "tray[01-04]"] in rows and ["(no", "published", "identity)", "tray08"] in rows
    assert "      41 controller       5" in table
    assert "      43 fallback        44" in table
    assert "tray03" in table and "1h01m" in table and "PSU swap (bob)" in table
    json.dumps(view)  # JSON-ready


def test_collision_is_flagged():
    slurm = world()
    slurm.jobs[1] = job_record(1, ("tray01", "tray02"), admin_comment=f"dec:{A}.7=tray01,tray02@9")
    slurm.jobs[2] = job_record(2, ("tray03", "tray04"), admin_comment=f"dec:{A}.7=tray03,tray04@9")
    view = collect(cfg(), slurm, decode=decoder)
    assert view["channels"][0]["collisions"] == [9]
    assert "CHANNEL COLLISION" in render_table(view)


def test_trays_without_nvlink_fabric_are_no_clique():
    """H100 trays share slurm.conf with GB200 trays and publish "not an IMEX tray" (zero
    UUID): they are no clique, get no fallback domain, and two jobs on them are no
    channel collision."""
    from imexctl.rules.cliques import TrayIdentity
    slurm = world()
    for t in ("tray05", "tray06"):
        slurm.publish(t, TrayIdentity.not_imex(8).to_extra())
    slurm.jobs[51] = job_record(51, ("tray05",), state="RUNNING")
    slurm.jobs[52] = job_record(52, ("tray06",), state="RUNNING")
    slurm.jobs[53] = job_record(53, ("tray01", "tray05"), state="RUNNING")   # mixed: one domain
    view = collect(cfg(mode="all"), slurm, decode=decoder)
    assert view["not_imex"] == ["tray05", "tray06"] and view["unpublished"] == ["tray08"]
    assert [c["clique"] for c in view["cliques"]] == [f"{A}.7", f"{B}.7"]
    assert not any(c["clique"].startswith("00000000-0000-0000-0000-000000000000")
                   for c in view["cliques"])
    jobs = {j["job_id"]: j for j in view["jobs"]}
    assert 51 not in jobs and 52 not in jobs
    assert [d["nodes"] for d in jobs[53]["domains"]] == [["tray01"]]
    assert all(not c["collisions"] for c in view["channels"])
    assert "(not an IMEX tray: no NVLink fabric)" in render_table(view)


def test_selection_by_partition_and_names():
    slurm = world()
    slurm.jobs[5] = job_record(5, ("tray05", "tray07"))
    view = collect(cfg(), slurm, partition="debug", decode=decoder)
    assert [n["node"] for n in view["nodes"]] == ["tray07"]
    assert [j["job_id"] for j in view["jobs"]] == [5]      # touches the selection
    view = collect(cfg(), slurm, names=["tray01", "tray02"], decode=decoder)
    assert [n["node"] for n in view["nodes"]] == ["tray01", "tray02"] and view["jobs"] == []


def test_channels_left_to_slurm():
    slurm = world()
    slurm.jobs[5] = job_record(5, ("tray01", "tray02"))
    view = collect(parse_config({"channels": {"mode": "slurm"}}, None, "x"), slurm,
                   decode=decoder)
    assert view["jobs"][0]["domains"][0]["channel"] is None and view["channels"] == []


def test_default_decoder_without_decision_module():
    assert clusterstatus.default_decoder("") is None
    assert clusterstatus.default_decoder("imexctl: allocation spans cliques") is None


def test_cli_cluster_view_json(monkeypatch, capsys, tmp_path):
    slurm = world()
    monkeypatch.setattr("imexctl.slurm.adapter.get_adapter", lambda cfg: slurm)
    conf = tmp_path / "c.toml"
    conf.write_text(f'[paths]\nlog_file = "{tmp_path}/log"\n')
    assert main(["--config", str(conf), "status", "--nodes", "tray[01-03]", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [n["node"] for n in out["nodes"]] == ["tray01", "tray02", "tray03"]
    assert main(["--config", str(conf), "status", "--nodes", "tray[01-", "--json"]) == 2
    assert main(["--config", str(conf), "status", "--partition", "trays"]) == 0
    assert "IMEX cluster view: partition trays, 7 trays" in capsys.readouterr().out
    assert main(["--config", str(conf), "status", "--partition", "tarys"]) == 2
    assert "status --partition tarys: Slurm knows no such tray" in capsys.readouterr().err
    assert main(["--config", str(conf), "status", "--nodes", "gpu[1-2]", "--json"]) == 2


def test_cluster_view_with_slurmctld_down_asks_once(tmp_path, capsys):
    """In an incident slurmctld may be what is down: the cluster view asks once (not
    ``slurm.attempts`` times with back-off) and exits 5 naming the query."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "calls"
    for tool in ("scontrol", "squeue"):
        (bin_dir / tool).write_text(f'#!/bin/sh\necho "$0 $*" >> {calls}\nsleep 60\n')
        (bin_dir / tool).chmod(0o755)
    conf = tmp_path / "c.toml"
    conf.write_text(f'[paths]\nstate_dir = "{tmp_path}/state"\nlog_file = "{tmp_path}/log"\n'
                    f'slurm_bin_dir = "{bin_dir}"\n[slurm]\nbackend = "cli"\n'
                    'timeout_s = 1\nattempts = 4\n')
    assert main(["--config", str(conf), "status", "--nodes", "tray[01-02]"]) == 5
    assert len(calls.read_text().splitlines()) == 1
    assert "'scontrol -o show node tray[01-02]' failed after 1 attempt(s): timed out after 1s" \
        in capsys.readouterr().err


def test_stuck_daemon_drains_are_singled_out():
    """A tray whose daemon could not be stopped is visible from Slurm alone by its drain
    reason, and is named apart from the other drains (audit F-02)."""
    slurm = world()
    reasons = {
        "tray01": "imexctl: epilog/stop-daemon: daemon stuck: pid 4242 survived SIGKILL "
                  "(uninterruptible?) (+1 more)",
        "tray02": "imexctl: epilog/ports: ports still in use: 18440 (pid 4243)",
        "tray04": "imexctl: health/record: record of job 9 is stuck: the epilog could not "
                  "verify its nvidia-imex (pid 4244) gone",
        "tray05": "imexctl: prolog/ownership: stale domain of job 8 could not be removed: "
                  "daemon stuck: pid 4245 survived SIGKILL",
        "tray07": "imexctl: health/stale-domain: job 9 ended but its domain could not be "
                  "removed (stop-daemon: daemon stuck: pid 1 survived SIGKILL)",
    }
    for node, reason in reasons.items():
        slurm.set_node(node, state="IDLE+DRAIN", reason=reason)
    slurm.set_node("tray06", reason="admin: epilog/stop-daemon: checked by hand")  # not ours
    view = collect(cfg(), slurm, decode=decoder)
    assert view["stuck_daemons"] == ["tray01", "tray02", "tray04", "tray05", "tray07"]
    stuck = {d["node"]: d["stuck_daemon"] for d in view["imexctl_drains"]}
    assert stuck == {"tray01": True, "tray02": True, "tray03": False, "tray04": True,
                     "tray05": True, "tray07": True}
    assert {n["node"] for n in view["nodes"] if n["stuck_daemon"]} == set(view["stuck_daemons"])
    assert "STUCK DAEMON on tray[01-02,04-05,07]: an nvidia-imex could not be stopped" in \
        render_table(view)
    assert "STUCK DAEMON" not in render_table(collect(cfg(), world(), decode=decoder))


class SlurmWithResources(MemorySlurm):
    """A Slurm of 25.11+: `scontrol show resources` says which channel switch/nvidia_imex
    gave each job on each node (None for an older Slurm, which has no such query)."""

    def __init__(self, channels):
        super().__init__()
        self.channels = channels

    def job_channels(self, job_id):
        self.calls.append(("job_channels", job_id))
        return None if self.channels is None else self.channels.get(job_id, {})


def test_channel_allocated_by_slurm_is_reported():
    slurm = SlurmWithResources({5: {"tray01": 3, "tray02": 3}})
    for name, node in world().nodes_.items():
        slurm.nodes_[name] = node
    slurm.jobs[5] = job_record(5, ("tray01", "tray02"))                      # switch/nvidia_imex
    slurm.jobs[6] = job_record(6, ("tray03", "tray04"), admin_comment=f"dec:{A}.7=tray03,tray04@9")
    view = collect(parse_config({"channels": {"mode": "slurm"}}, None, "x"), slurm,
                   decode=decoder)
    jobs = {j["job_id"]: j for j in view["jobs"]}
    assert jobs[5]["domains"][0] == {"nodes": ["tray01", "tray02"], "clique": f"{A}.7",
                                     "channel": 3, "channel_source": "slurm"}
    assert "channel_source" not in jobs[6]["domains"][0]                   # imexctl's own
    assert [c for c in slurm.calls if c[0] == "job_channels"] == [("job_channels", 5)]
    table = render_table(view)
    assert "       5 fallback      3(S) " in table and "(S): channel allocated by Slurm" in table
    slurm.channels = None                              # Slurm 24.11: nothing to report
    view = collect(parse_config({"channels": {"mode": "slurm"}}, None, "x"), slurm,
                   decode=decoder)
    assert view["jobs"][0]["domains"][0]["channel"] is None


def test_a_planted_decision_bomb_in_a_jobs_fields_costs_status_nothing(monkeypatch):
    """Audit F4-4's third consumer: ``AdminComment=imexctl:v2;...`` planted in a non-IMEX
    job's WorkDir reads as its AdminComment; four groups of a million names each once
    cost ``status --partition`` seconds. Counted from the text, never expanded."""
    from imexctl.ops.clusterstatus import default_decoder
    from imexctl.slurm import hostlist

    built = []
    real = hostlist.expand
    monkeypatch.setattr(hostlist, "expand", lambda e: built.extend(real(e)) or real(e))
    uuid = "5b1b3a1e-1c1a-4d0e-9a5e-000000000001"
    for tag in ("imexctl:v2", "imexctl:v3;c=x"):
        bomb = (f"{tag};j=999;r=0;h=000000000000;m=imexctl;a=domains;"
                + ";".join(f"g={uuid}.{i}/{i + 1}/b{i}x[0000000-0999999]" for i in range(4)))
        assert default_decoder(bomb) is None
    assert built == []


def test_cluster_view_names_each_cliques_lifetime_and_its_persistent_domain():
    """Issue 37: the lifetime per clique and the persistent domain's members, drained ones
    named, from the published identities alone (no query per tray)."""
    slurm = world()
    for i in range(1, 5):     # clique A persistent, tray03 drained by imexctl
        slurm.publish(f"tray{i:02d}", {"cluster_uuid": A, "clique_id": 7, "gpu_count": 4,
                                       "state": "Completed", "lifetime": "persistent"})
    for i, lifetime in ((5, "job"), (6, "persistent"), (7, "job")):   # clique B mixed
        slurm.publish(f"tray{i:02d}", {"cluster_uuid": B, "clique_id": 7, "gpu_count": 4,
                                       "state": "Completed", "lifetime": lifetime})
    slurm.calls.clear()
    view = collect(cfg(), slurm, decode=decoder, now=1_800_000_000.0)
    assert [c[0] for c in slurm.calls] == ["node_table", "active_jobs"]
    a, b = view["cliques"]
    assert a["lifetime"] == "persistent"
    assert a["persistent_domain"] == {"members": ["tray01", "tray02", "tray03", "tray04"],
                                      "drained": ["tray03"], "digests": {}, "split": False}
    assert b["lifetime"] == "mixed"
    assert b["lifetimes"] == {"job": ["tray05", "tray07"], "persistent": ["tray06"]}
    assert {n["node"]: n["lifetime"] for n in view["nodes"]}["tray08"] is None
    text = render_table(view)
    assert [f"{A}.7", "persistent", "tray[01-04]"] in [line.split() for line in text.splitlines()]
    assert "LIFETIME MISMATCH: tray[05,07] job; tray06 persistent" in text
    assert "persistent domain: tray03 of tray[01-04] drained by imexctl" in text


def test_a_persistent_clique_whose_trays_publish_two_digests_is_a_problem_naming_both_sides():
    """Issue 37: the domain digest (imex.domain) compared per clique from the published
    identities: trays running different nodes_config.cfg are named, each side apart; a tray
    publishing no digest (its daemon not READY) is on neither side."""
    slurm = world()
    ident = {"cluster_uuid": A, "clique_id": 7, "gpu_count": 4, "state": "Completed",
             "lifetime": "persistent"}
    for i, digest in ((1, "a" * 16), (2, "a" * 16), (3, "b" * 16), (4, "")):
        slurm.publish(f"tray{i:02d}", {**ident, "domain": digest})
    view = collect(cfg(), slurm, decode=decoder, now=1_800_000_000.0)
    a = view["cliques"][0]
    assert a["persistent_domain"]["digests"] == {"a" * 16: ["tray01", "tray02"],
                                                 "b" * 16: ["tray03"]}
    assert a["persistent_domain"]["split"] is True
    assert {n["node"]: n["domain"] for n in view["nodes"]}["tray04"] is None
    assert view["problems"] == [f"the persistent domain of clique {A}.7 is split: tray[01-02] "
                                f"digest {'a' * 16}; tray03 digest {'b' * 16} (the trays run "
                                "different nodes_config.cfg and do not reach each other; "
                                "imexctl maintain --membership restarts them on one)"]
    assert f"PERSISTENT DOMAIN SPLIT: tray[01-02] digest {'a' * 16}; tray03 digest " \
        f"{'b' * 16}" in render_table(view)
    slurm.publish("tray03", {**ident, "domain": "a" * 16})
    view = collect(cfg(), slurm, decode=decoder, now=1_800_000_000.0)
    assert view["cliques"][0]["persistent_domain"]["split"] is False
    assert view["problems"] == [] and "SPLIT" not in render_table(view)
