"""PrologSlurmctld's Slurm queries through the real CLI backend and the fake executables:
the node query and the live-job query go out side by side before the decision is made,
each answer is read by the query that needs it, and a failed early query is retried."""

from __future__ import annotations

import json
import time

import pytest

from imexctl.controller import slurmctld as controller
from imexctl.controller import table_source
from imexctl.rules import decision as dec
from imexctl.config import parse_config
from imexctl.slurm.cli_backend import CliBackend
from tests.support import fakeslurm
from tests.support.memory_slurm import FAKE_MUNGE
from tests.support.lifecycle import controller_ctx

U1 = "5b1b3a1e-1c1a-4d0e-9a5e-000000000001"
NODES = ["tray01", "tray02", "tray03", "tray04"]


def publish(world):
    extra = {"imex": {"cluster_uuid": U1, "clique_id": 1, "gpu_count": 4, "state": "Completed"}}
    for name in NODES:
        world.set_node(name, Extra=json.dumps(extra, separators=(",", ":")))


def setup(world, tmp_path, switch="switch/none", **policy):
    (tmp_path / "slurm.conf").write_text(f"ClusterName=unit\nSwitchType={switch}\nNodeName=tray[01-04]\n")
    raw = {"paths": {"slurm_bin_dir": str(world.bin_dir), "state_dir": f"{tmp_path}/state",
                     "controller_dir": f"{tmp_path}/ctld", "log_file": f"{tmp_path}/log/x.log",
                     "slurm_conf": f"{tmp_path}/slurm.conf", "munge_bin_dir": str(FAKE_MUNGE)},
           "slurm": {"backend": "cli", "timeout_s": 10.0, "attempts": 3},
           "policy": {"mode": "all", **policy}, "channels": {"count": 16}}
    cfg = parse_config(raw, None, "ctld")
    # This host's channel table exists, written in this boot: a missing one would be
    # rebuilt first (one job query and one squeue more, the world's other jobs being live).
    from imexctl.controller.channel_table import ChannelTable
    from imexctl.tray.bootid import read_boot_id
    ChannelTable(tmp_path / "ctld", count=16,
                 boot=read_boot_id(cfg.paths.boot_id_file)).allocate(1, [])
    publish(world)
    world.set_job(7, JobState="CONFIGURING")
    ctx = controller_ctx(7, "tray[01-04]", partition="trays")
    return cfg, CliBackend(cfg), ctx


def rendezvous(world, tmp_path, wait_s=5.0):
    """The node query answers only once squeue has started (or after ``wait_s``)."""
    marker = tmp_path / "squeue-started"
    world.fault("squeue", "touch", file=str(marker))
    world.fault("scontrol", "await", match="node", file=str(marker), sleep=wait_s)
    return tmp_path / "squeue-started.result"


def test_node_and_live_job_queries_are_sent_side_by_side(world, tmp_path):
    cfg, slurm, ctx = setup(world, tmp_path)
    result = rendezvous(world, tmp_path)
    sent = controller.send_queries(cfg, slurm, ctx)
    assert sent.early and sent.local_owner is False and sent.live_asked_at is not None
    assert controller.prolog_slurmctld(cfg, slurm, ctx, sent) == 0
    assert result.read_text() == "seen\n"        # squeue ran while the node query waited
    record = dec.decode(world.state()["jobs"]["7"]["AdminComment"])
    assert record.action == "domains" and record.groups[0].channel == 1
    assert record.groups[0].members == tuple(NODES)
    # Each answer was read by its own query: one node query, one squeue, one job update.
    calls = [" ".join(c) for c in world.calls()]
    assert sum("show node" in c for c in calls) == 1
    assert sum(c.startswith("squeue") for c in calls) == 1
    assert not [c for c in calls if "show job" in c]


def test_no_live_job_query_when_slurm_owns_the_channels(world, tmp_path):
    cfg, slurm, ctx = setup(world, tmp_path, switch="switch/nvidia_imex")
    result = rendezvous(world, tmp_path, wait_s=0.5)
    assert controller.prolog_slurmctld(cfg, slurm, ctx) == 0
    assert result.read_text() == "missed\n"
    assert not world.calls("squeue")
    assert dec.decode(world.state()["jobs"]["7"]["AdminComment"]).channel_mode == "slurm"


def test_nothing_is_asked_for_a_job_whose_environment_wants_no_imex(world, tmp_path):
    """The allocation's node list says the job wants no IMEX (one tray, policy
    multi-node): PrologSlurmctld asks Slurm nothing, not even the job record, and
    records nothing."""
    cfg, slurm, ctx = setup(world, tmp_path, mode="multi-node")
    ctx = controller_ctx(7, "tray01", partition="trays")
    sent = controller.send_queries(cfg, slurm, ctx)
    assert not sent.early and sent.live_asked_at is None
    assert world.calls() == []
    assert controller.prolog_slurmctld(cfg, slurm, ctx, sent) == 0
    assert world.calls() == []
    assert not world.state()["jobs"]["7"].get("AdminComment")


def test_the_job_record_decides_where_the_environment_cannot(world, tmp_path):
    """Policy partitions without SLURM_JOB_PARTITION: the job record is asked."""
    cfg, slurm, ctx = setup(world, tmp_path, mode="partitions", partitions=["trays"])
    ctx = controller_ctx(7, "tray[01-04]")   # slurmctld gave no partition
    sent = controller.send_queries(cfg, slurm, ctx)
    assert not sent.early and not sent.unwanted
    assert controller.prolog_slurmctld(cfg, slurm, ctx, sent) == 0
    assert [c for c in world.calls() if "show job" in " ".join(c)]


def test_an_early_query_that_failed_is_asked_again(world, tmp_path):
    cfg, slurm, ctx = setup(world, tmp_path)
    world.fault("scontrol", "transient", count=1, match="node")
    assert controller.prolog_slurmctld(cfg, slurm, ctx) == 0
    assert sum("show node" in " ".join(c) for c in world.calls("scontrol")) == 2
    record = dec.decode(world.state()["jobs"]["7"]["AdminComment"])
    assert record.action == "domains" and record.groups[0].members == tuple(NODES)


@pytest.mark.parametrize("named", [["tray01", "tray02"], ["tray05"]])
def test_a_query_for_other_nodes_is_not_answered_by_the_early_one(world, tmp_path, named):
    cfg, slurm, _ = setup(world, tmp_path)
    slurm.prestart_nodes(["tray03", "tray04"])
    got = slurm.nodes(named)
    assert set(got) == set(named) & set(NODES)
    # The early query is never read here, so nothing waits for it: give its process time
    # to reach the fake's call log before looking (under CI load it may not have yet).
    expected = sorted(["tray[03-04]", "tray[01-02]" if len(named) == 2 else "tray05"])
    deadline = time.monotonic() + 20
    while True:
        asked = sorted(c[-1] for c in world.calls("scontrol") if "node" in c)
        if asked == expected or len(asked) > len(expected) or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert asked == expected


U2 = "5b1b3a1e-1c1a-4d0e-9a5e-000000000002"


def big_job(world, tmp_path, n, second_clique_from):
    """Job 7 on tray01..tray<n>; trays from ``second_clique_from`` on publish a second
    clique. The live-job query is not due (a fresh table is reconciled: switch owns)."""
    cfg, slurm, ctx = setup(world, tmp_path, switch="switch/nvidia_imex")
    names = [f"tray{i:02d}" for i in range(1, n + 1)]
    (tmp_path / "slurm.conf").write_text(f"ClusterName=unit\nSwitchType=switch/nvidia_imex\nNodeName=tray[01-{n:02d}]\n")

    def add(state):
        for i, name in enumerate(names, 1):
            uuid, clique = (U2, 2) if i >= second_clique_from else (U1, 1)
            extra = {"imex": {"cluster_uuid": uuid, "clique_id": clique, "gpu_count": 4,
                              "state": "Completed"}}
            state["nodes"][name] = {**fakeslurm.NODE_DEFAULT, "NodeAddr": f"10.77.1.{i}",
                                    "Extra": json.dumps(extra, separators=(",", ":"))}
        state["jobs"]["7"]["NodeList"] = f"tray[01-{n:02d}]"
    world.edit(add)
    ctx = controller_ctx(7, f"tray[01-{n:02d}]", partition="trays")
    return cfg, slurm, ctx


def test_a_job_on_more_trays_than_a_clique_sends_its_job_query_beside_the_node_query(world, tmp_path):
    """20 trays span cliques (18 + 2): the job record (for the segment size) is asked
    while the node query is still out, not after it; both answers are read once."""
    cfg, slurm, ctx = big_job(world, tmp_path, 20, second_clique_from=19)
    marker = tmp_path / "job-query-started"
    world.add_fault("scontrol", "touch", match="job", file=str(marker))
    world.add_fault("scontrol", "await", match="node", file=str(marker), sleep=5.0)
    assert controller.prolog_slurmctld(cfg, slurm, ctx) == 0
    assert (tmp_path / "job-query-started.result").read_text() == "seen\n"
    record = dec.decode(world.state()["jobs"]["7"]["AdminComment"])
    assert record.action == "domains"
    assert [len(g.members) for g in record.groups] == [18, 2]
    calls = [" ".join(c) for c in world.calls("scontrol")]
    assert sum("show job" in c for c in calls) == 1 and sum("show node" in c for c in calls) == 1


def test_a_job_that_fits_one_clique_asks_no_job_record(world, tmp_path):
    """18 trays of one clique: no segment to check, so no job query at all."""
    cfg, slurm, ctx = big_job(world, tmp_path, 18, second_clique_from=99)
    assert controller.prolog_slurmctld(cfg, slurm, ctx) == 0
    record = dec.decode(world.state()["jobs"]["7"]["AdminComment"])
    assert [len(g.members) for g in record.groups] == [18]
    assert not [c for c in world.calls("scontrol") if "job" in c and "show" in c]


def test_a_job_over_eighteen_cliques_gets_its_whole_sealed_record(world, tmp_path):
    """F3-25: 18 trays, each its own clique: the sealed record (over 1,000 characters) goes
    through the CLI backend whole, and a tray's one job query finds it sealed."""
    from imexctl.slurm.munge import seal_for

    trays = [f"tray{i:02d}" for i in range(1, 19)]
    cfg, slurm, ctx = setup(world, tmp_path)
    (tmp_path / "slurm.conf").write_text("ClusterName=unit\nSwitchType=switch/none\n"
                                         "NodeName=tray[01-18]\n")

    def grow(state):
        for i, name in enumerate(trays, 1):
            extra = {"imex": {"cluster_uuid": f"5b1b3a1e-1c1a-4d0e-9a5e-{i:012d}", "clique_id": 32766,
                              "gpu_count": 4, "state": "Completed"}}
            state["nodes"][name] = {**fakeslurm.NODE_DEFAULT, "NodeAddr": f"10.77.0.{10 + i}",
                                    "NodeHostName": name,
                                    "Extra": json.dumps(extra, separators=(",", ":"))}
        state["jobs"]["7"]["NodeList"] = "tray[01-18]"
    world.edit(grow)
    ctx = controller_ctx(7, "tray[01-18]", partition="trays")
    assert controller.prolog_slurmctld(cfg, slurm, ctx) == 0
    written = world.state()["jobs"]["7"]["AdminComment"]
    assert len(written) > 1000 and written.startswith(dec.TAG) and written.endswith(":")
    job = slurm.job(7)
    found = dec.find(job.decision_text, seal_for(cfg), 7, 0, trays, cluster="unit",
                     submit_time=job.submit_time, admin_comment=job.admin_comment)
    assert found.decision is not None, found.why
    assert [g.members for g in found.decision.groups] == [(t,) for t in trays]


def test_slurm_conf_is_read_once_per_job_start(world, tmp_path, monkeypatch):
    """Who owns the channels, where the channel table is and how the decision is sealed
    all come from the local slurm.conf, read once per PrologSlurmctld (at 10,000 node
    lines, 3.5 ms a read)."""
    from imexctl.slurm import localconf

    cfg, slurm, ctx = setup(world, tmp_path)
    # the table where imexctl keeps it by default: on the StateSaveLocation it names
    from imexctl.base.dataclass import replace
    with open(tmp_path / "slurm.conf", "a") as conf:
        conf.write(f"StateSaveLocation={tmp_path}/spool\n")
    cfg = replace(cfg, paths=replace(cfg.paths, controller_dir=None))
    monkeypatch.setattr(table_source, "_LOCATIONS", {})
    # this host's table there, of this boot: the common path (a rebuild reads more)
    from imexctl.controller.channel_table import ChannelTable
    from imexctl.tray.bootid import read_boot_id
    ChannelTable(tmp_path / "spool" / "imexctl", count=16,
                 boot=read_boot_id(cfg.paths.boot_id_file)).allocate(1, [])
    reads = []
    real = localconf.load
    monkeypatch.setattr(localconf, "load", lambda *a, **k: reads.append(a) or real(*a, **k))
    sent = controller.send_queries(cfg, slurm, ctx)
    assert controller.prolog_slurmctld(cfg, slurm, ctx, sent) == 0
    assert dec.decode(world.state()["jobs"]["7"]["AdminComment"]).action == "domains"
    assert (tmp_path / "spool" / "imexctl" / "channels.json").exists()
    assert len(reads) == 1
