"""Where the controller keeps its channel table, and what a lost one is rebuilt from
(audit F3-12): the live jobs' sealed decision records, read with one job query and one
squeue only when a rebuild is needed."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from imexctl.controller import slurmctld as controller
from imexctl.controller import table_source
from imexctl.rules import decision as dec
from imexctl.base import log
from imexctl.config import parse_config
from imexctl.controller.slurmctld import prolog_slurmctld
from imexctl.errors import SlurmError
from imexctl.slurm.cli_backend import LIVE_JOBS_QUERY, CliBackend
from tests.support.memory_slurm import FAKE_MUNGE, job_record, MemorySlurm, SEAL
from tests.support.lifecycle import controller_ctx_of

U1 = "5b1b3a1e-1c1a-4d0e-9a5e-000000000001"
KEY = f"{U1}.32766"
RACK = [f"tray{i:02d}" for i in range(1, 5)]


@pytest.fixture(autouse=True)
def fresh_locations(monkeypatch):
    """Each test decides where its table is: none sees another's slurm.conf."""
    monkeypatch.setattr(table_source, "_LOCATIONS", {})


def make_cfg(tmp_path, slurm_conf="", controller_dir=True, boot_id=None):
    (tmp_path / "slurm.conf").write_text(f"ClusterName=unit\nSwitchType=switch/none\n{slurm_conf}"
                                         "NodeName=tray[01-04]\n")
    paths = {"state_dir": f"{tmp_path}/state", "log_file": f"{tmp_path}/log/x.log",
             "munge_bin_dir": str(FAKE_MUNGE), "slurm_conf": f"{tmp_path}/slurm.conf"}
    if controller_dir:
        paths["controller_dir"] = f"{tmp_path}/ctld"
    if boot_id is not None:
        paths["boot_id_file"] = str(boot_id)
    cfg = parse_config({"paths": paths, "policy": {"mode": "all"},
                        "channels": {"mode": "imexctl", "count": 16}}, None, "ctld")
    log.setup_logging(cfg.paths.log_file, "debug", "ctld", stderr_level="critical")
    return cfg


# ---------------------------------------------------------------- where the table lives
def test_table_is_on_the_state_save_location_by_default(tmp_path):
    save = tmp_path / "spool" / "ctld"
    cfg = make_cfg(tmp_path, f"StateSaveLocation={save}\n", controller_dir=False)
    assert table_source.table_dir(cfg) == save / "imexctl"
    assert table_source.table_location(cfg)[1] == f"StateSaveLocation in {tmp_path}/slurm.conf"


def test_controller_dir_wins_and_no_slurm_conf_falls_back_to_the_host(tmp_path):
    cfg = make_cfg(tmp_path, f"StateSaveLocation={tmp_path}/spool\n")
    assert table_source.table_dir(cfg) == tmp_path / "ctld"
    from imexctl.base.dataclass import replace
    missing = replace(cfg, paths=replace(cfg.paths, controller_dir=None,
                                         slurm_conf=tmp_path / "no-such.conf"))
    directory, where = table_source.table_location(missing)
    assert directory == tmp_path / "state" / "slurmctld"
    assert where.startswith("host-local: no slurm.conf read (") and "no-such.conf" in where
    (tmp_path / "r").mkdir()
    relative = make_cfg(tmp_path / "r", "StateSaveLocation=spool\n", controller_dir=False)
    assert table_source.table_location(relative) == (
        tmp_path / "r" / "state" / "slurmctld",
        f"host-local: no absolute StateSaveLocation in {tmp_path}/r/slurm.conf")


def test_slurm_conf_is_read_once_per_process(tmp_path, monkeypatch):
    """PrologSlurmctld asks where the table is before and after logging is set up."""
    cfg = make_cfg(tmp_path, f"StateSaveLocation={tmp_path}/spool\n", controller_dir=False)
    from imexctl.slurm import localconf
    loads = []
    real = localconf.load
    monkeypatch.setattr(localconf, "load", lambda *a, **k: loads.append(k) or real(*a, **k))
    controller.channel_table(cfg)
    controller.channel_table(cfg)
    assert loads == [{"nodes": ()}]


# ---------------------------------------------------------------- the rebuild source
def sealed(job_id, channel, restart=0, action="domains"):
    groups = (dec.GroupDecision(KEY, channel, tuple(RACK[:2])),) if action == "domains" else ()
    return dec.encode(dec.Decision(job_id=job_id, action=action, groups=groups,
                                   restart_count=restart, cluster="unit",
                                   nodes_hash=dec.nodes_hash(RACK[:2])), SEAL)


def answer(monkeypatch, cli):
    monkeypatch.setattr(CliBackend, "run", lambda backend, *a, **k: cli(*a, **k))


class Cli:
    """CliBackend.run answering the two rebuild queries from canned text."""

    def __init__(self, jobs_text, squeue, fail=None):
        self.jobs_text, self.squeue, self.fail, self.calls = jobs_text, squeue, fail, []

    def __call__(self, tool, *args, **kw):
        self.calls.append((tool, *args))
        if self.fail == tool:
            raise SlurmError(f"'{tool}' -> rc 1: Unable to contact slurm controller")
        if (tool, *args) == table_source.ALL_JOBS_QUERY:
            return SimpleNamespace(stdout=self.jobs_text, returncode=0, stderr="")
        if (tool, *args) == LIVE_JOBS_QUERY:
            return SimpleNamespace(stdout=self.squeue, returncode=0, stderr="")
        raise AssertionError(f"unexpected query {tool} {args}")


SUBMIT = " SubmitTime=1795335854"   # scontrol -o with SLURM_TIME_FORMAT=%s: epoch seconds


def test_live_jobs_channels_come_from_their_sealed_records_only(tmp_path, monkeypatch):
    cfg = make_cfg(tmp_path)
    text = "\n".join([
        f"JobId=5 JobName=a{SUBMIT} AdminComment={sealed(5, 3, restart=1)} Comment=x",
        f"JobId=6 JobName=b{SUBMIT} AdminComment={sealed(6, 4)}",                  # ended
        f"JobId=7 JobName=c{SUBMIT} AdminComment=",                                # no IMEX
        f"JobId=8 JobName=old:{sealed(5, 11)}{SUBMIT} AdminComment={sealed(8, 1, action='wait')}",
        f"JobId=9 JobName=a{SUBMIT} AdminComment={sealed(9, 6)}",
    ])
    cli = Cli(text, "5|RUNNING\n7|RUNNING\n8|CONFIGURING\n9|COMPLETING\n")
    answer(monkeypatch, cli)
    # job 5's record is its own line's (the copy naming job 5 in job 8's name is not job
    # 5's); 6 ended; 7 has no record; 8 waits (no channel).
    assert table_source.held_by_live_jobs(cfg) == {5: {KEY: 3}, 9: {KEY: 6}}
    assert cli.calls == [table_source.ALL_JOBS_QUERY, LIVE_JOBS_QUERY]


def test_a_live_job_whose_record_does_not_verify_fails_the_rebuild_closed(tmp_path,
                                                                         monkeypatch):
    """Audit F4-1: a running job whose record cannot be vouched for (a forgery in its
    own fields, a record sealed under a rotated munge.key) reserves: no rebuild, the job
    that asked waits, rather than get that job's channel."""
    cfg = make_cfg(tmp_path)
    forged = sealed(7, 9).rpartition(";s=")[0] + ";s=MUNGE:forgedcopy0001AAAA:"
    text = "\n".join([f"JobId=5 JobName=a{SUBMIT} AdminComment={sealed(5, 3)}",
                      f"JobId=7 JobName=b{SUBMIT} AdminComment={forged}"])
    answer(monkeypatch, Cli(text, "5|RUNNING\n7|RUNNING\n"))
    assert table_source.held_by_live_jobs(cfg) is None
    assert "unverified_jobs" in (tmp_path / "log" / "x.log").read_text()


def test_copies_in_an_older_jobs_fields_do_not_hide_a_running_job(tmp_path, monkeypatch):
    """Audit F4-1: four unsealed copies of victim 9's record in an older held job's
    JobName (printed first) once spent job 9's four tries: its channel was free."""
    cfg = make_cfg(tmp_path)
    real = sealed(9, 1)
    copies = " ".join(real.rpartition(";s=")[0] + f";s=MUNGE:forgedcopy{i:02d}AAAA:"
                      for i in range(4))
    text = "\n".join([f"JobId=5 JobName={copies}{SUBMIT} JobState=PENDING AdminComment=",
                      f"JobId=9 JobName=v{SUBMIT} AdminComment={real}"])
    answer(monkeypatch, Cli(text, "9|RUNNING\n5|RUNNING\n"))
    assert table_source.held_by_live_jobs(cfg) == {9: {KEY: 1}}


def test_a_record_sealed_before_the_job_was_submitted_does_not_count(tmp_path, monkeypatch):
    """Audit F4-2 in a rebuild: a reissued job id whose line carries an earlier
    incarnation's genuine record (sealed before this job's SubmitTime) is unverified."""
    cfg = make_cfg(tmp_path)
    later = " SubmitTime=%d" % (__import__("time").time() + 3600)
    answer(monkeypatch, Cli(f"JobId=9 JobName=v{later} AdminComment={sealed(9, 1)}",
                            "9|RUNNING\n"))
    assert table_source.held_by_live_jobs(cfg) is None


def test_the_rebuild_opens_at_most_its_global_cap_of_seals(tmp_path, monkeypatch):
    """Each live job's own forged copies cost at most MAX_CANDIDATES unmunge calls, and all
    of them together at most MAX_REBUILD_OPENS: past it the rebuild fails closed."""
    from imexctl.rules import decision as dec
    from imexctl.slurm.munge import MungeSeal

    cfg = make_cfg(tmp_path)
    opened = []
    monkeypatch.setattr(MungeSeal, "open_sealed", lambda self, cred: opened.append(cred))
    monkeypatch.setattr(dec, "MAX_REBUILD_OPENS", 10)
    lines, live = [], []
    for job in range(100, 110):
        body = sealed(job, 1).rpartition(";s=")[0]
        copies = " ".join(f"{body};s=MUNGE:forgedcopy{i:02d}AAAA:" for i in range(9))
        lines.append(f"JobId={job} JobName={copies}{SUBMIT} AdminComment=")
        live.append(f"{job}|RUNNING")
    answer(monkeypatch, Cli("\n".join(lines), "\n".join(live) + "\n"))
    assert table_source.held_by_live_jobs(cfg) is None
    assert len(opened) == 10


@pytest.mark.parametrize("fail", ["scontrol", "squeue"])
def test_slurm_unreachable_means_unknown_not_empty(tmp_path, monkeypatch, fail):
    cfg = make_cfg(tmp_path)
    answer(monkeypatch, Cli("", "", fail=fail))
    assert table_source.held_by_live_jobs(cfg) is None
    assert "the channel table is not rebuilt" in (tmp_path / "log" / "x.log").read_text()


# ---------------------------------------------------------------- through PrologSlurmctld
def ident():
    return {"cluster_uuid": U1, "clique_id": 32766, "gpu_count": 4, "state": "Completed"}


@pytest.fixture
def slurm():
    s = MemorySlurm()
    s.add_nodes({n: f"10.0.0.{i}" for i, n in enumerate(RACK, 1)})
    for n in RACK:
        s.publish(n, ident())
    return s


def start(slurm, cfg, job_id, nodes):
    slurm.jobs[job_id] = job_record(job_id, tuple(nodes))
    assert prolog_slurmctld(cfg, slurm, controller_ctx_of(slurm, job_id)) == 0
    return dec.decode(slurm.jobs[job_id].admin_comment)


def test_a_failover_rebuilds_the_table_and_the_channel_is_not_handed_out_twice(
        tmp_path, slurm, monkeypatch):
    """F3-12 as seen: job 10 got controller/ch1 on the primary; on the backup, which
    kept its own table, job 11 got ch1 as well. Here the backup finds the primary's
    table (written by another host) *and* would find none at all: both rebuild."""
    cfg = make_cfg(tmp_path)
    first = start(slurm, cfg, 10, RACK[:2])
    assert first.groups[0].channel == 1
    table = tmp_path / "ctld" / "channels.json"
    raw = json.loads(table.read_text())
    for lost in ("another host", "deleted"):
        if lost == "another host":
            table.write_text(json.dumps({**raw, "host": "primary-ctl"}))
        else:
            table.unlink()
        answer(monkeypatch, Cli(
            f"JobId=10{SUBMIT} AdminComment={slurm.jobs[10].admin_comment}\n", "10|RUNNING\n11|RUNNING\n"))
        slurm.jobs.pop(11, None)
        second = start(slurm, cfg, 11, RACK[2:])
        assert second.action == "domains" and second.groups[0].channel == 2, lost
        log_text = (tmp_path / "log" / "x.log").read_text()
        assert "channel table rebuilt from the live jobs' decision records" in log_text
        raw = json.loads(table.read_text())
        assert set(raw["jobs"]) == {"10", "11"}


def test_a_reboot_rebuilds_the_table_whose_last_write_it_may_have_lost(
        tmp_path, slurm, monkeypatch):
    """The table is written without fsync: a power loss may take its last write with it
    (here job 10's channel). Stamped with the boot that wrote it, a table of an earlier
    boot of this host is rebuilt from the live jobs' records, so job 10's channel is
    not handed out again."""
    boot = tmp_path / "boot_id"
    boot.write_text("boot-1\n")
    cfg = make_cfg(tmp_path, boot_id=boot)
    start(slurm, cfg, 9, RACK[3:])
    table = tmp_path / "ctld" / "channels.json"
    before = table.read_text()
    assert json.loads(before)["boot"] == "boot-1"
    first = start(slurm, cfg, 10, RACK[:2])
    table.write_text(before)            # the power loss took job 10's allocation
    boot.write_text("boot-2\n")
    answer(monkeypatch, Cli(f"JobId=10{SUBMIT} AdminComment={slurm.jobs[10].admin_comment}\n",
                            "9|RUNNING\n10|RUNNING\n11|RUNNING\n"))
    second = start(slurm, cfg, 11, RACK[2:3])
    assert second.action == "domains"
    assert second.groups[0].channel not in (first.groups[0].channel, 1)
    raw = json.loads(table.read_text())
    assert set(raw["jobs"]) == {"9", "10", "11"} and raw["boot"] == "boot-2"
    log_text = (tmp_path / "log" / "x.log").read_text()
    assert "written before this host's boot boot-2" in log_text
    from imexctl.base.counting import label_key
    from imexctl.controller import counters
    state, _ = counters.load(tmp_path / "ctld")
    rebuilds = state["counters"]["imexctl_controller_channel_table_rebuilds_total"]
    assert rebuilds == {label_key({"why": "reboot"}): 1}


def test_a_table_of_an_older_imexctl_without_a_boot_stamp_is_rebuilt_once(tmp_path):
    """After the upgrade the table has its host but no boot: it cannot tell whether a
    reboot took a write, so the first allocation rebuilds it (counted as "older")."""
    from imexctl.controller.channel_table import ChannelTable
    from imexctl.controller.counters import rebuild_class

    ChannelTable(tmp_path, count=16, host="ctl").allocate(5, [KEY])   # no boot stamp
    asked = []
    table = ChannelTable(tmp_path, count=16, host="ctl", boot="boot-1",
                         rebuild_from=lambda: asked.append(1) or {5: {KEY: 1}})
    assert table.allocate(6, [KEY], live_jobs=lambda: {5, 6}) == {KEY: 2}
    assert asked == [1] and rebuild_class(table.last_rebuild.why) == "older"
    again = ChannelTable(tmp_path, count=16, host="ctl", boot="boot-1",
                         rebuild_from=lambda: asked.append(2) or {})
    assert again.allocate(7, [KEY], live_jobs=lambda: {5, 6, 7}) == {KEY: 3}
    assert asked == [1] and again.last_rebuild is None


def test_the_table_is_flushed_to_disk_only_without_a_boot_stamp(tmp_path, monkeypatch):
    """With a boot id (the controller's), a table write costs no fsync; without one
    every write is flushed, as before."""
    import os

    from imexctl.base import fsutil
    from imexctl.controller.channel_table import ChannelTable

    synced = []
    real = os.fsync
    monkeypatch.setattr(fsutil.os, "fsync", lambda fd: synced.append(fd) or real(fd))
    ChannelTable(tmp_path / "a", count=16, boot="boot-1").allocate(1, [KEY])
    ChannelTable(tmp_path / "a", count=16, boot="boot-1").release(1)
    assert synced == []
    ChannelTable(tmp_path / "b", count=16).allocate(1, [KEY])
    assert synced


def test_a_lost_table_that_cannot_be_rebuilt_makes_the_job_wait(tmp_path, slurm, monkeypatch):
    cfg = make_cfg(tmp_path)
    start(slurm, cfg, 10, RACK[:2])
    (tmp_path / "ctld" / "channels.json").unlink()
    answer(monkeypatch, Cli("", "", fail="scontrol"))
    second = start(slurm, cfg, 11, RACK[2:])
    assert second.action == "wait" and "not rebuilt" in second.note
    assert not (tmp_path / "ctld" / "channels.json").exists()


def test_the_common_path_asks_nothing_for_a_rebuild(tmp_path, slurm, monkeypatch):
    cfg = make_cfg(tmp_path)
    cli = Cli("", "")
    answer(monkeypatch, cli)
    for job, tray in zip(range(20, 24), RACK):
        assert start(slurm, cfg, job, [tray]).groups[0].channel == job - 19
    assert cli.calls == []      # the first: nothing else ran, so nothing to rebuild from


def test_a_het_leaders_channels_are_live_while_any_component_runs(tmp_path, monkeypatch):
    """squeue's %i names a component's leader: the leader's channels (every component's
    domain) stay held after the leader's own component ended; the rebuild files a
    component's sealed record under its leader."""
    cfg = make_cfg(tmp_path)
    rec = dec.encode(dec.Decision(job_id=51, action="domains", het_job_id=50, cluster="unit",
                                  groups=(dec.GroupDecision(KEY, 5, tuple(RACK[:2])),),
                                  nodes_hash=dec.nodes_hash(RACK[1:2])), SEAL)
    cli = Cli(f"JobId=51 JobName=b{SUBMIT} AdminComment={rec}",
              "51|RUNNING|50+1\n60|RUNNING|60\n61|RUNNING|61_3\n")
    answer(monkeypatch, cli)
    assert CliBackend(cfg).live_job_ids() == {50, 51, 60, 61}
    assert table_source.held_by_live_jobs(cfg) == {50: {KEY: 5}}


def test_the_table_is_written_on_one_line(tmp_path):
    """Rewritten at every job start and end: one line, by the json module's C encoder
    (an indent takes the pure Python one, 4x the time at thousands of jobs)."""
    from imexctl.controller.channel_table import ChannelTable

    table = ChannelTable(tmp_path, count=16, boot="boot-1")
    for job in range(1, 4):
        table.allocate(job, [KEY])
    text = (tmp_path / "channels.json").read_text()
    assert text.count("\n") == 1 and json.loads(text)["jobs"]["3"]["channels"] == {KEY: 3}
