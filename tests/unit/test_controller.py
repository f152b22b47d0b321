"""PrologSlurmctld/EpilogSlurmctld: groups and channels decided once, recorded in AdminComment."""

from __future__ import annotations

import json

import pytest

from imexctl.rules import decision as dec
from imexctl.controller.slurmctld import epilog_slurmctld, prolog_slurmctld
from imexctl.errors import EXIT_OK
from tests.support.controller import make_cfg
from tests.support.lifecycle import controller_ctx, controller_ctx_of
from tests.support.memory_slurm import job_record, MemorySlurm, SEAL, tray_view

U1 = "5b1b3a1e-1c1a-4d0e-9a5e-000000000001"
U2 = "5b1b3a1e-1c1a-4d0e-9a5e-000000000002"
RACK1 = [f"tray{i:02d}" for i in range(1, 5)]
RACK2 = [f"tray{i:02d}" for i in range(5, 9)]


@pytest.fixture(autouse=True)
def table_rebuilt_from_fake_slurm(monkeypatch, request):
    """A lost channel table is rebuilt from the live jobs' sealed records, which
    controller.held_by_live_jobs reads with Slurm's CLI: here from MemorySlurm's jobs."""
    from imexctl.controller import slurmctld as controller

    def held(cfg):
        if "slurm" not in request.fixturenames:
            return {}
        s = request.getfixturevalue("slurm")
        live = {j.job_id for j in s.jobs.values() if j.state.split("+")[0] in
                ("RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED")}
        jobs = [dec.JobText(j.job_id, j.admin_comment, j.admin_comment, j.submit_time)
                for j in s.jobs.values() if j.job_id in live]
        return {d.job_id: {g.key: g.channel for g in d.groups if g.channel}
                for d in dec.find_all(jobs, SEAL, cluster="unit").decisions}
    monkeypatch.setattr(controller, "held_by_live_jobs", held)


def ident(uuid, clique=32766):
    return {"cluster_uuid": uuid, "clique_id": clique, "gpu_count": 4, "state": "Completed"}


@pytest.fixture
def slurm():
    s = MemorySlurm()
    s.add_nodes({n: f"10.0.0.{i}" for i, n in enumerate(RACK1 + RACK2, 1)})
    for n in RACK1:
        s.publish(n, ident(U1))
    for n in RACK2:
        s.publish(n, ident(U2))
    return s


def ctx(slurm, job_id, restart=0):
    """The context slurmctld gives the job's PrologSlurmctld and EpilogSlurmctld."""
    return controller_ctx_of(slurm, job_id, restart)


def start(slurm, cfg, job_id, nodes, partition="trays", restart=0):
    slurm.jobs[job_id] = job_record(job_id, tuple(nodes), partition=partition)
    assert prolog_slurmctld(cfg, slurm, ctx(slurm, job_id, restart)) == EXIT_OK
    return slurm.jobs[job_id].admin_comment


def test_two_rack_job_gets_one_group_and_channel_per_clique(tmp_path, slurm):
    cfg = make_cfg(tmp_path)
    text = start(slurm, cfg, 42, RACK1 + RACK2)
    nodes = RACK1 + RACK2
    a = tray_view(text, "tray02", job_id=42, job_nodes=nodes, restart_count=0)
    b = tray_view(text, "tray07", job_id=42, job_nodes=nodes, restart_count=0)
    assert a.action == b.action == "domains" and a.source == "controller"
    assert a.group.members == tuple(RACK1) and b.group.members == tuple(RACK2)
    assert a.group.key == f"{U1}.32766" and b.group.key == f"{U2}.32766"
    assert a.group.channel == 1 and b.group.channel == 1   # different cliques: may share
    table = json.loads((tmp_path / "ctld" / "channels.json").read_text())
    assert table["jobs"]["42"]["channels"] == {f"{U1}.32766": 1, f"{U2}.32766": 1}
    assert slurm.jobs[42].state != "CANCELLED"


def test_concurrent_jobs_in_one_clique_get_distinct_channels(tmp_path, slurm):
    cfg = make_cfg(tmp_path)
    channels = []
    for job, node in zip(range(100, 104), RACK1):
        text = start(slurm, cfg, job, [node])
        channels.append(tray_view(text, node, job_id=job).group.channel)
    assert channels == [1, 2, 3, 4]
    for job in range(100, 104):
        slurm.set_job(job, state="COMPLETED")
        assert epilog_slurmctld(cfg, slurm, ctx(slurm, job)) == EXIT_OK
    assert json.loads((tmp_path / "ctld" / "channels.json").read_text())["jobs"] == {}


def test_a_missed_epilog_does_not_leak(tmp_path, slurm):
    cfg = make_cfg(tmp_path, channels={"reconcile_every_s": 0})
    start(slurm, cfg, 1, RACK1[:1])
    slurm.set_job(1, state="COMPLETED")      # its EpilogSlurmctld never ran (crash)
    start(slurm, cfg, 2, RACK1[1:2])       # the next allocation reconciles it away
    assert set(json.loads((tmp_path / "ctld" / "channels.json").read_text())["jobs"]) == {"2"}


def test_live_jobs_are_listed_at_most_once_per_reconcile_interval(tmp_path, slurm):
    """By default (60 s) a job start or end does not list Slurm's live jobs when the
    table was reconciled within the interval; a missed epilog's channels then stay held
    until the first allocation after it."""
    cfg = make_cfg(tmp_path)
    path = tmp_path / "ctld" / "channels.json"

    def listings():
        return sum(c == ("live_job_ids",) for c in slurm.calls)

    start(slurm, cfg, 1, RACK1[:1])        # a fresh table is due
    assert listings() == 1
    slurm.set_job(1, state="COMPLETED")      # its EpilogSlurmctld never ran (crash)
    start(slurm, cfg, 2, RACK1[1:2])
    slurm.set_job(2, state="COMPLETED")
    assert epilog_slurmctld(cfg, slurm, ctx(slurm, 2)) == EXIT_OK
    assert listings() == 1                 # neither the start nor the end asked
    assert set(json.loads(path.read_text())["jobs"]) == {"1"}   # 2 released; 1 still held
    table = json.loads(path.read_text())
    table["reconciled_at"] -= 61           # the interval has passed
    path.write_text(json.dumps(table))
    start(slurm, cfg, 3, RACK1[2:3])
    assert listings() == 2
    assert set(json.loads(path.read_text())["jobs"]) == {"3"}


def test_refuse_policy_cancels_with_reason_and_allocates_nothing(tmp_path, slurm):
    cfg = make_cfg(tmp_path, policy={"partition": {"nvl": {"multi_clique": "refuse"}}})
    text = start(slurm, cfg, 7, RACK1 + RACK2, partition="nvl")
    assert text.startswith("imexctl: allocation spans 2 NVLink cliques: tray[01-04] in ")
    assert slurm.calls[-1] == ("cancel", 7) and slurm.jobs[7].state == "CANCELLED"
    assert not (tmp_path / "ctld" / "channels.json").exists()
    # the same job in another partition gets the site default (per-clique)
    assert dec.decode(start(slurm, cfg, 8, RACK1 + RACK2)).action == "domains"


def test_skip_policy_runs_without_imex_and_warns(tmp_path, slurm):
    cfg = make_cfg(tmp_path, policy={"multi_clique": "skip"})
    text = start(slurm, cfg, 9, RACK1 + RACK2)
    record = dec.decode(text)
    assert record.action == "skip" and record.groups == ()
    note = dec.decode(text).note
    assert "warning: allocation spans 2 NVLink cliques" in note and "policy skip" in note
    assert slurm.jobs[9].state != "CANCELLED"
    assert tray_view(text, "tray01").group is None
    # one clique is fine under skip
    assert dec.decode(start(slurm, cfg, 10, RACK1)).action == "domains"


def test_switch_nvidia_imex_read_locally_means_no_channels(tmp_path, slurm):
    cfg = make_cfg(tmp_path, switch="switch/nvidia_imex")
    text = start(slurm, cfg, 11, RACK1 + RACK2)
    node = tray_view(text, "tray05")
    assert node.channel_mode == "slurm" and node.group.channel is None
    assert not (tmp_path / "ctld" / "channels.json").exists()
    assert not any(c[0] == "switch_type" for c in slurm.calls)   # no RPC for it


def test_unpublished_and_non_imex_trays(tmp_path, slurm):
    cfg = make_cfg(tmp_path)
    slurm.set_node("tray08", extra="")
    pending = dec.decode(start(slurm, cfg, 12, RACK2))
    assert pending.action == "pending" and "tray08" in pending.note
    slurm.publish("tray08", {"cluster_uuid": "00000000-0000-0000-0000-000000000000",
                             "clique_id": 0, "gpu_count": 0, "state": "NotSupported"})
    text = start(slurm, cfg, 13, RACK2)
    assert dec.decode(text).groups[0].members == tuple(RACK2[:3])
    assert tray_view(text, "tray08").group is None


def test_requeued_attempt_overwrites_the_stale_record(tmp_path, slurm):
    cfg = make_cfg(tmp_path)
    first = start(slurm, cfg, 14, RACK1)
    slurm.set_job(14, state="PENDING")
    epilog_slurmctld(cfg, slurm, ctx(slurm, 14))
    second = start(slurm, cfg, 14, RACK1, restart=1)
    assert tray_view(first, "tray01", restart_count=1) is None
    assert tray_view(second, "tray01", restart_count=1).group.members == tuple(RACK1)


@pytest.mark.parametrize("breakage", ["job", "nodes", "comment", "table"])
def test_any_failure_exits_zero_and_leaks_no_channel(tmp_path, slurm, breakage):
    cfg = make_cfg(tmp_path)
    # two cliques: the job record is asked (its segment size), beside what the
    # environment gives
    slurm.jobs[15] = job_record(15, tuple(RACK1[:2] + RACK2[:2]) if breakage == "job"
                                else tuple(RACK1))

    def boom(*a, **k):
        raise RecursionError("maximum recursion depth exceeded")
    if breakage == "job":
        slurm.job = boom
    elif breakage == "nodes":
        slurm.nodes = boom
    elif breakage == "comment":
        slurm.set_admin_comment = boom
    else:
        (tmp_path / "ctld").mkdir(mode=0o755)
        (tmp_path / "ctld" / "channels.json").write_text("{garbage")
    assert prolog_slurmctld(cfg, slurm, ctx(slurm, 15)) == EXIT_OK
    table = tmp_path / "ctld" / "channels.json"
    if breakage == "comment":
        assert json.loads(table.read_text())["jobs"] == {}
    if breakage == "table":   # kept aside for the admin, rebuilt from the live jobs' records
        record = dec.decode(slurm.jobs[15].admin_comment)
        assert record.action == "domains" and record.groups[0].channel == 1
        assert [p.read_text() for p in (tmp_path / "ctld").glob("channels.json.corrupt-*")] \
            == ["{garbage"]
    log = (tmp_path / "log" / "x.log")
    assert breakage == "table" or "failed open" in log.read_text()


def test_deep_or_huge_extra_is_not_published_not_a_crash(tmp_path, slurm):
    cfg = make_cfg(tmp_path)
    slurm.set_node("tray01", extra="[" * 100000 + "]" * 100000)
    slurm.set_node("tray02", extra='{"imex": {"cluster_uuid": "%s", "clique_id": 1e999}}' % U1)
    record = dec.decode(start(slurm, cfg, 16, RACK1))
    assert record.action == "pending" and "tray[01-02]" in record.note


def test_job_that_does_not_want_imex_is_left_alone(tmp_path, slurm):
    cfg = make_cfg(tmp_path, policy={"mode": "feature"})
    assert start(slurm, cfg, 17, RACK1) == ""
    assert not any(c[0] == "nodes" for c in slurm.calls)


def test_unwritable_table_dir_makes_the_job_wait(tmp_path, slurm):
    cfg = make_cfg(tmp_path)
    (tmp_path / "ctld").symlink_to(tmp_path)          # refused: a symlink
    text = start(slurm, cfg, 18, RACK1)
    record = tray_view(text, "tray01", job_id=18)
    assert record.action == "wait" and "symbolic link" in record.reason


def test_table_defaults_to_state_dir(tmp_path, slurm):
    cfg = make_cfg(tmp_path)
    from imexctl.base.dataclass import replace
    cfg = replace(cfg, paths=replace(cfg.paths, controller_dir=None))
    start(slurm, cfg, 19, RACK1)
    assert json.loads((tmp_path / "state" / "slurmctld" / "channels.json").read_text())["jobs"]


def test_record_too_large_refuses_the_job_and_frees_its_channels(tmp_path):
    cfg = make_cfg(tmp_path)
    s = MemorySlurm()
    names = [f"n{i}x" for i in range(25_000)]       # names that do not compress
    s.add_nodes({n: n for n in names})
    for n in names:
        s.publish(n, ident(U1))
    # a node list past what a hook's environment carries (context.MAX_NODELIST_LEN): the
    # context has none, and the job record gives the trays
    s.jobs[20] = job_record(20, tuple(names))
    assert prolog_slurmctld(cfg, s, controller_ctx(20, partition="trays")) == EXIT_OK
    text = s.jobs[20].admin_comment
    assert text.startswith("imexctl: decision record for job 20 is over 120000 characters")
    assert s.jobs[20].state == "CANCELLED"
    assert json.loads((tmp_path / "ctld" / "channels.json").read_text())["jobs"] == {}


def test_segment_spanning_cliques_is_reported_in_the_record(tmp_path, slurm):
    cfg = make_cfg(tmp_path)
    slurm.jobs[21] = job_record(21, tuple(RACK1[:3] + RACK2[:1]))
    slurm.set_job(21, segment_size=2)      # as the job record gives it (--segment=2)
    assert prolog_slurmctld(cfg, slurm, ctx(slurm, 21)) == EXIT_OK
    text = slurm.jobs[21].admin_comment
    assert dec.decode(text).action == "domains"
    note = dec.decode(text).note
    assert "warning: a segment spans cliques:" in note and "not a multiple of the segment size 2" in note


def hook_ctx(job_id, nodes):
    return controller_ctx(job_id, nodes, partition="trays")


def test_single_clique_job_costs_one_node_query_and_no_job_query(tmp_path, slurm):
    """The environment is the allocation: the job record is not asked for."""
    cfg = make_cfg(tmp_path)
    slurm.jobs[49] = job_record(49, tuple(RACK1))
    assert prolog_slurmctld(cfg, slurm, hook_ctx(49, RACK1)) == EXIT_OK
    record = dec.decode(slurm.jobs[49].admin_comment)
    assert record.action == "domains" and [g.members for g in record.groups] == [tuple(RACK1)]
    asked = [c for c in slurm.calls if c[0] in ("job", "nodes")]
    assert asked == [("nodes", tuple(RACK1))]


def test_multi_clique_job_asks_its_record_once_for_the_segment_size(tmp_path, slurm):
    cfg = make_cfg(tmp_path)
    slurm.jobs[50] = job_record(50, tuple(RACK1 + RACK2))
    assert prolog_slurmctld(cfg, slurm, hook_ctx(50, RACK1 + RACK2)) == EXIT_OK
    record = dec.decode(slurm.jobs[50].admin_comment)
    assert record.action == "domains" and len(record.groups) == 2
    asked = [c for c in slurm.calls if c[0] in ("job", "nodes")]
    assert sorted(asked) == [("job", 50), ("nodes", tuple(RACK1 + RACK2))]  # one of each


def test_environment_segment_check_uses_the_job_record(tmp_path, slurm):
    cfg = make_cfg(tmp_path)
    nodes = RACK1[:3] + RACK2[:1]
    slurm.jobs[51] = job_record(51, tuple(nodes))
    slurm.set_job(51, segment_size=2)
    assert prolog_slurmctld(cfg, slurm, hook_ctx(51, nodes)) == EXIT_OK
    text = slurm.jobs[51].admin_comment
    assert "warning: a segment spans cliques:" in dec.decode(text).note


def test_unknown_segment_size_is_a_warning_in_the_record(tmp_path, slurm):
    cfg = make_cfg(tmp_path)
    nodes = RACK1[:2] + RACK2[:2]
    slurm.jobs[53] = job_record(53, tuple(nodes))
    slurm.set_job(53, segment_size=None)      # SegmentSize seen twice: not to be trusted
    assert prolog_slurmctld(cfg, slurm, ctx(slurm, 53)) == EXIT_OK
    record = dec.decode(slurm.jobs[53].admin_comment)
    assert record.action == "domains" and "segment size unknown" in record.note


@pytest.mark.parametrize("policy, nodes", [({"mode": "feature"}, RACK1),
                                           ({"mode": "multi-node"}, RACK1[:1])])
def test_no_node_query_before_the_job_record_says_imex(tmp_path, slurm, policy, nodes):
    cfg = make_cfg(tmp_path, policy=policy)
    slurm.jobs[52] = job_record(52, tuple(nodes))
    assert prolog_slurmctld(cfg, slurm, hook_ctx(52, nodes)) == EXIT_OK
    assert not [c for c in slurm.calls if c[0] == "nodes"]   # the job wants no IMEX


# The node and live-job queries going out side by side, through the CLI backend and the
# fake executables: tests/unit/slurm/test_controller_queries.py.


def test_epilog_slurmctld_without_a_node_list_releases_the_channels(tmp_path):
    """EpilogSlurmctld needs only the job id: a job killed before it started may come
    without a node list (as the node Epilog did on Slurm 22.05), and its channels must
    not wait for the next reconciliation. Through the real command line."""
    import subprocess
    import sys
    from pathlib import Path

    from imexctl.controller.channel_table import ChannelTable

    ChannelTable(tmp_path / "ctld", count=16).allocate(77, [f"{U1}.1"])
    (tmp_path / "imexctl.toml").write_text(
        f'[paths]\nstate_dir = "{tmp_path}/state"\nlog_file = "{tmp_path}/log/x.log"\n'
        f'controller_dir = "{tmp_path}/ctld"\nslurm_bin_dir = "{tmp_path}/no-slurm"\n'
        '[channels]\nmode = "imexctl"\ncount = 16\n')
    env = {"PATH": "/usr/bin:/bin", "IMEXCTL_CONFIG": str(tmp_path / "imexctl.toml"),
           "SLURM_JOB_ID": "77", "SLURM_JOB_UID": "65534", "SLURM_JOB_USER": "nobody"}
    proc = subprocess.run([sys.executable, "-m", "imexctl", "epilog-slurmctld"], env=env,
                          capture_output=True, text=True, timeout=60,
                          cwd=Path(__file__).resolve().parents[2])
    assert proc.returncode == EXIT_OK and proc.stderr == "", proc.stderr
    assert json.loads((tmp_path / "ctld" / "channels.json").read_text())["jobs"] == {}
    assert '"channels released"' in (tmp_path / "log" / "x.log").read_text()
    # where the hook's time went, step by step, as the node hooks log theirs
    line = next(json.loads(x) for x in (tmp_path / "log" / "x.log").read_text().splitlines()
                if '"channels released"' in x)
    assert set(line["steps_ms"]) - {"live-jobs"} == {"config", "logging", "release", "metrics"}
    assert (line["job_id"], line["hook"]) == (77, "epilog-slurmctld")
    assert line["duration_ms"] >= sum(line["steps_ms"].values()) - 0.5


def test_the_decision_line_says_where_the_hook_spent_its_time(tmp_path, slurm):
    """An admin reads in the controller log how long PrologSlurmctld took and in which
    step: the Slurm queries, the table, the seal, the record, the metrics."""
    cfg = make_cfg(tmp_path, channels={"mode": "imexctl"})
    start(slurm, cfg, 60, RACK1)
    line = next(json.loads(x) for x in (tmp_path / "log" / "x.log").read_text().splitlines()
                if '"decision recorded"' in x)
    assert set(line["steps_ms"]) >= {"imports", "job", "node-records", "group", "allocate",
                                     "seal", "record", "metrics"}
    assert all(ms >= 0 for ms in line["steps_ms"].values())
    assert line["duration_ms"] >= sum(line["steps_ms"].values()) - 0.5


def het_start(slurm, cfg, leader, parts, restart=0, order=1):
    """Allocate het job ``leader`` (components ``parts``: node lists, ids leader+offset)
    and run every component's PrologSlurmctld (``order`` -1: the leader's last);
    {component id: its AdminComment}."""
    for offset, nodes in enumerate(parts):
        slurm.jobs[leader + offset] = job_record(leader + offset, tuple(nodes), het_job_id=leader)
    for offset in list(range(len(parts)))[::order]:
        hook = controller_ctx_of(slurm, leader + offset, restart)
        assert prolog_slurmctld(cfg, slurm, hook) == EXIT_OK
    return {leader + o: slurm.jobs[leader + o].admin_comment for o in range(len(parts))}


@pytest.mark.parametrize("order", [1, -1])
def test_het_job_gets_one_domain_per_clique_across_components(tmp_path, slurm, order):
    """Each component records a decision for itself whose groups span every component:
    tray02 (component 0) and tray03 (component 1) are in one domain, on one channel,
    keyed by the leader (ports included). Whichever PrologSlurmctld runs last, the
    leader's record never overwrites another component's."""
    cfg = make_cfg(tmp_path)
    start(slurm, cfg, 10, RACK1[3:])            # holds channel 1 in rack 1
    texts = het_start(slurm, cfg, 50, [RACK1[:2], RACK1[2:3]], order=order)
    a = tray_view(texts[50], "tray02", job_id=50, job_nodes=RACK1[:2])
    b = tray_view(texts[51], "tray03", job_id=51, job_nodes=RACK1[2:3])
    assert a.action == b.action == "domains"
    assert a.group.members == b.group.members == tuple(RACK1[:3])
    assert a.group.channel == b.group.channel == 2
    assert a.het_job_id == b.het_job_id == 50 and a.domain_id == b.domain_id == 50
    table = json.loads((tmp_path / "ctld" / "channels.json").read_text())
    assert set(table["jobs"]) == {"10", "50"}       # one entry: the leader's
    # a component's record is its own: another component's trays cannot use it
    assert tray_view(texts[50], "tray03", job_id=51, job_nodes=RACK1[2:3]) is None


def test_het_channels_are_held_while_any_component_runs(tmp_path, slurm):
    cfg = make_cfg(tmp_path, channels={"reconcile_every_s": 0})
    het_start(slurm, cfg, 50, [RACK1[:1], RACK1[1:2]])
    slurm.set_job(50, state="COMPLETED")                 # the leader's component ended first
    hook = ctx(slurm, 50)
    assert epilog_slurmctld(cfg, slurm, hook) == EXIT_OK
    def held():
        return json.loads((tmp_path / "ctld" / "channels.json").read_text())["jobs"]
    assert "50" in held()                               # the epilog did not release it
    text = start(slurm, cfg, 60, RACK1[2:3])            # reconciles: 51 still runs
    assert tray_view(text, "tray03", job_id=60).group.channel == 2
    assert "50" in held()
    slurm.set_job(51, state="COMPLETED")
    start(slurm, cfg, 61, RACK1[3:4])                   # reconciles: no component runs
    assert "50" not in held() and {"60", "61"} <= set(held())


def test_het_components_sharing_a_tray_are_refused(tmp_path, slurm):
    cfg = make_cfg(tmp_path)
    het_start(slurm, cfg, 70, [RACK1[:2], RACK1[1:3]])
    for job in (70, 71):
        assert slurm.jobs[job].state == "CANCELLED"
        assert "tray tray02 is in components 70 and 71" in slurm.jobs[job].admin_comment
    assert not (tmp_path / "ctld" / "channels.json").exists() or \
        json.loads((tmp_path / "ctld" / "channels.json").read_text())["jobs"] == {}


def test_an_array_element_holding_the_arrays_id_writes_only_its_own_record(tmp_path, slurm):
    """slurmctld applies an update by an array's id to every element: the element that
    kept that id writes ``<id>_<task>``, so an element that decided earlier keeps its
    record (the intermittent 'no controller decision' refusals of array elements)."""
    cfg = make_cfg(tmp_path)
    slurm.add_job(101, (RACK1[1],), array=(100, 0))
    assert prolog_slurmctld(cfg, slurm, ctx(slurm, 101)) == EXIT_OK
    slurm.add_job(100, (RACK1[0],), array=(100, 1))
    assert prolog_slurmctld(cfg, slurm, ctx(slurm, 100)) == EXIT_OK
    assert tray_view(slurm.jobs[101].admin_comment, RACK1[1], job_id=101).group.channel == 1
    assert tray_view(slurm.jobs[100].admin_comment, RACK1[0], job_id=100).group.channel == 2


def test_refusing_an_array_element_cancels_that_element_only(tmp_path, slurm):
    cfg = make_cfg(tmp_path, policy={"mode": "all", "multi_clique": "refuse"})
    slurm.add_job(101, (RACK1[1],), array=(100, 0))
    slurm.add_job(100, (RACK1[0], RACK2[0]), array=(100, 1))
    assert prolog_slurmctld(cfg, slurm, ctx(slurm, 100)) == EXIT_OK
    assert slurm.jobs[100].state == "CANCELLED"
    assert slurm.jobs[101].state == "RUNNING" and not slurm.jobs[101].admin_comment
