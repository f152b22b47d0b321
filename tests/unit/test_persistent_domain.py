"""Issue 37: the persistent domain of a clique, brought up by ``imexctl recover``.

Its members are the trays Slurm shows published in the clique as persistent (natural
order), its files under ``<run_dir>/persistent`` byte-identical on every tray of the
clique, its daemon (the simulated nvidia-imex) started by the direct launcher, recorded in
the state dir's persistent.json and READY; a tray with ``lifetime = "job"`` gets nothing.
"""

from __future__ import annotations

import json
import random

import pytest

from imexctl.imex import launcher
from imexctl.imex.render import PERSISTENT_GRACE_TIME_S
from imexctl.ops.health import default_teardown
from imexctl.ops.recover import recover
from imexctl.rules.cliques import persistent_members
from imexctl.tray import jobdir
from imexctl.tray.ownership import PERSISTENT_RECORD, RECORD, RecordUnreadable, StateStore
from tests.support.lifecycle import UUID, published, write_slurm_conf
from tests.support.persistent import ADDRS, OTHER_UUID, world
from tests.support.records import make_record
from tests.support.sim_daemon import sim_cfg, sim_processes

THIS_BOOT = "aaaaaaaa-0000-0000-0000-000000000001"
def tray_cfg(tmp_path, node="tray1", base=None, **imex):
    """A persistent tray of clique 1 running the simulated daemon; ports of its own so
    parallel runs do not meet."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    write_slurm_conf(tmp_path, ADDRS)
    base = base or random.randrange(10000, 14000)
    cfg = sim_cfg(tmp_path, **{"lifetime": "persistent", "server_port_base": base,
                               "cmd_port_base": base + 5000, "port_span": 100, **imex})
    from imexctl.base.dataclass import replace
    return replace(cfg, node=node)


@pytest.fixture
def stop_daemons(tmp_path):
    yield
    for proc in sim_processes(tmp_path):
        proc.kill()


def test_members_are_the_cliques_persistent_trays_in_natural_order():
    s = world()
    extras = {n: r.extra for n, r in s.nodes_.items()}
    assert persistent_members(extras, f"{UUID}.1") == ["tray1", "tray2", "tray10"]
    assert persistent_members(extras, f"{UUID}.2") == ["tray4"]
    assert persistent_members(extras, f"{OTHER_UUID}.1") == ["tray5"]
    assert persistent_members(extras, f"{UUID}.9") == []


def test_recover_starts_records_and_readies_the_persistent_domain(tmp_path, stop_daemons):
    cfg = tray_cfg(tmp_path)
    slurm = world()
    done = recover(cfg, default_teardown(cfg), slurm, current_boot=THIS_BOOT)
    assert done.failures == []
    # one node-table query for the members
    assert [c for c in slurm.calls if c[0] == "node_table"] == [("node_table", None, None)]
    pdir = tmp_path / "run" / jobdir.PERSISTENT
    assert (pdir / jobdir.NODES_CONFIG).read_text() == "127.0.0.1\n127.0.0.2\n127.0.0.10\n"
    config = (pdir / jobdir.CONFIG).read_text()
    assert f"IMEX_NODE_CONFIG_FILE={pdir / jobdir.NODES_CONFIG}\n" in config
    assert f"IMEX_NODE_DISCONNECTED_GRACE_TIME={PERSISTENT_GRACE_TIME_S}\n" in config
    assert f"SERVER_PORT={cfg.imex.server_port_base}\n" in config
    # recorded as a persistent domain, not as a job's
    assert not (tmp_path / "state" / RECORD).exists()
    record = StateStore(cfg.paths.state_dir).load_persistent()
    assert record is not None and record.persistent and record.job_id == 0
    assert record.phase == "ready" and record.nodes == ["tray1", "tray2", "tray10"]
    assert record.clique == f"{UUID}.1" and record.boot_id == THIS_BOOT
    assert record.node_id == 0 and record.channel is None
    # the recorded daemon runs the persistent config, and says READY
    assert record.daemon is not None and launcher.is_alive(record.daemon)
    procs = sim_processes(tmp_path)
    assert [p.pid for p in procs] == [record.daemon.pid]
    assert str(pdir / jobdir.CONFIG) in procs[0].cmdline()
    assert any(line.startswith("started the persistent IMEX domain (clique "
                               f"{UUID}.1, 3 trays tray[1-2,10], digest {record.digest}")
               for line in done.repaired), done.repaired
    # not a second owner of IMEX to the foreign-daemon check
    owners, _ = launcher.find_foreign_daemons(cfg.paths.imex_binary)
    assert record.daemon.pid not in [pid for pid, _ in owners]


def test_a_second_recover_keeps_the_running_daemon(tmp_path, stop_daemons):
    cfg = tray_cfg(tmp_path)
    slurm = world()
    recover(cfg, default_teardown(cfg), slurm, current_boot=THIS_BOOT)
    first = StateStore(cfg.paths.state_dir).load_persistent()
    again = recover(cfg, default_teardown(cfg), slurm, current_boot=THIS_BOOT)
    assert again.failures == [] and again.repaired == []
    second = StateStore(cfg.paths.state_dir).load_persistent()
    assert second.daemon.pid == first.daemon.pid and len(sim_processes(tmp_path)) == 1


def test_changed_members_are_reported_not_applied(tmp_path, stop_daemons):
    cfg = tray_cfg(tmp_path)
    slurm = world()
    recover(cfg, default_teardown(cfg), slurm, current_boot=THIS_BOOT)
    before = (tmp_path / "run" / jobdir.PERSISTENT / jobdir.NODES_CONFIG).read_text()
    pid = StateStore(cfg.paths.state_dir).load_persistent().daemon.pid
    slurm.publish("tray3", published(lifetime="persistent"))   # tray3 switched
    again = recover(cfg, default_teardown(cfg), slurm, current_boot=THIS_BOOT)
    assert again.failures == [] and again.repaired == []
    assert any("persistent domain's members changed" in n and "4 trays tray[1-3,10]" in n
               for n in again.notes), again.notes
    assert (tmp_path / "run" / jobdir.PERSISTENT / jobdir.NODES_CONFIG).read_text() == before
    assert StateStore(cfg.paths.state_dir).load_persistent().daemon.pid == pid


def test_a_daemon_of_an_earlier_boot_is_started_anew(tmp_path, stop_daemons):
    cfg = tray_cfg(tmp_path)
    slurm = world()
    recover(cfg, default_teardown(cfg), slurm, current_boot=THIS_BOOT)
    old = StateStore(cfg.paths.state_dir).load_persistent()
    for proc in sim_processes(tmp_path):   # the reboot
        proc.kill()
        proc.wait(5)
    done = recover(cfg, default_teardown(cfg), slurm,
                   current_boot="cccccccc-0000-0000-0000-000000000003")
    assert done.failures == []
    new = StateStore(cfg.paths.state_dir).load_persistent()
    assert new.daemon.pid != old.daemon.pid and launcher.is_alive(new.daemon)
    assert new.boot_id == "cccccccc-0000-0000-0000-000000000003"


def test_two_trays_of_a_clique_render_byte_identical_nodes_config(tmp_path, stop_daemons):
    """Each tray renders on its own from Slurm's identities: the same node list and digest;
    config.cfg differs only in this tray's command address."""
    from imexctl.imex import persistent

    slurm = world()
    rendered, planned = {}, {}
    base = random.randrange(10000, 14000)     # one site config: the same ports
    for node in ("tray1", "tray10"):
        cfg = tray_cfg(tmp_path / node, node=node, base=base)
        done = recover(cfg, default_teardown(cfg), slurm, current_boot=THIS_BOOT, dry_run=True)
        assert done.failures == [] and done.actions[-1].step == "persistent"
        planned[node] = done.actions[-1].what
        rendered[node] = persistent.render(cfg, f"{UUID}.1", ["tray1", "tray2", "tray10"],
                                           ["127.0.0.1", "127.0.0.2", "127.0.0.10"])
    assert planned["tray1"] == planned["tray10"]     # same members, same digest
    one, ten = rendered["tray1"], rendered["tray10"]
    assert one.nodes_config == ten.nodes_config and one.digest == ten.digest
    assert (one.node_id, ten.node_id) == (0, 2)
    differ = set(one.config.splitlines()) ^ set(ten.config.splitlines())
    assert {"IMEX_CMD_BIND_INTERFACE_IP=127.0.0.1", "IMEX_CMD_BIND_INTERFACE_IP=127.0.0.10"} \
        <= differ
    assert {line.split("=")[0] for line in differ} <= {"IMEX_CMD_BIND_INTERFACE_IP",
                                                      "IMEX_NODE_CONFIG_FILE", "LOG_FILE_NAME",
                                                      "STATS_FILE_NAME"}


def test_a_dry_run_starts_nothing(tmp_path, stop_daemons):
    cfg = tray_cfg(tmp_path)
    done = recover(cfg, default_teardown(cfg), world(), current_boot=THIS_BOOT, dry_run=True)
    assert any(a.what.startswith("start the persistent IMEX domain") for a in done.actions)
    assert sim_processes(tmp_path) == []
    assert not (tmp_path / "run" / jobdir.PERSISTENT).exists()
    assert not (tmp_path / "state" / PERSISTENT_RECORD).exists()


def test_a_job_lifetime_tray_gets_no_persistent_domain(tmp_path, stop_daemons):
    cfg = tray_cfg(tmp_path, node="tray3", lifetime="job")
    slurm = world()
    done = recover(cfg, default_teardown(cfg), slurm, current_boot=THIS_BOOT)
    assert done.failures == [] and not any("persistent" in r for r in done.repaired)
    assert [c for c in slurm.calls if c[0] == "node_table"] == []
    assert sim_processes(tmp_path) == []
    assert not (tmp_path / "run" / jobdir.PERSISTENT).exists()
    assert not (tmp_path / "state" / PERSISTENT_RECORD).exists()


def test_a_daemon_that_never_gets_ready_is_a_failure_and_stays_recorded(tmp_path,
                                                                         stop_daemons):
    cfg = tray_cfg(tmp_path, ready_timeout_s=1)
    (tmp_path / "faults.json").write_text(json.dumps({"never_ready": True}))
    done = recover(cfg, default_teardown(cfg), world(), current_boot=THIS_BOOT)
    assert [step for step, _ in done.failures] == ["persistent"]
    assert "not READY after 1s" in done.failures[0][1]
    record = StateStore(cfg.paths.state_dir).load_persistent()
    assert record.phase == "starting" and launcher.is_alive(record.daemon)


def test_old_records_are_jobs_and_a_job_record_is_no_persistent_one(tmp_path):
    store = StateStore(tmp_path / "state")
    store.save(make_record())
    raw = json.loads((tmp_path / "state" / RECORD).read_text())
    raw.pop("lifetime")                     # as imexctl before issue 37 wrote it
    (tmp_path / "state" / RECORD).write_text(json.dumps(raw))
    record = store.load()
    assert record is not None and record.lifetime == "job" and not record.persistent
    (tmp_path / "state" / PERSISTENT_RECORD).write_text(json.dumps(raw))
    with pytest.raises(RecordUnreadable, match="lifetime 'job'"):
        store.load_persistent()
    raw["job_id"] = 0                       # job 0 is no job's
    (tmp_path / "state" / RECORD).write_text(json.dumps(raw))
    with pytest.raises(RecordUnreadable):
        store.load()
    with pytest.raises(ValueError):
        store.save_persistent(make_record())


def test_health_leaves_the_persistent_domain_alone(tmp_path, stop_daemons):
    """Until health has its persistent check, it must at least not take the persistent
    daemon for a second owner of IMEX, nor its directory for a leftover job's."""
    from imexctl.ops.health import run_checks

    cfg = tray_cfg(tmp_path)
    slurm = world()
    assert recover(cfg, default_teardown(cfg), slurm, current_boot=THIS_BOOT).failures == []
    record = StateStore(cfg.paths.state_dir).load_persistent()
    report = run_checks(cfg, slurm, boot_id=THIS_BOOT)
    assert not [p for p in report.problems if "imex" in str(p).lower()], report.problems
    assert [c for c in slurm.calls if c[0] == "drain"] == []
    assert launcher.is_alive(record.daemon)
    assert (tmp_path / "run" / jobdir.PERSISTENT / jobdir.CONFIG).exists()


def test_natural_node_name_order():
    from imexctl.slurm.hostlist import natural_key

    names = ["rack2-tray10", "rack10-tray1", "rack2-tray9", "gpu", "rack2-tray09", "rack1"]
    assert sorted(names, key=natural_key) == ["gpu", "rack1", "rack2-tray09", "rack2-tray9",
                                              "rack2-tray10", "rack10-tray1"]


def test_a_tray_switched_back_to_job_removes_its_persistent_domain(tmp_path, stop_daemons):
    cfg = tray_cfg(tmp_path)
    slurm = world()
    assert recover(cfg, default_teardown(cfg), slurm, current_boot=THIS_BOOT).failures == []
    pid = StateStore(cfg.paths.state_dir).load_persistent().daemon.pid
    from imexctl.base.dataclass import replace
    from imexctl.config import Lifetime
    job_cfg = replace(cfg, imex=replace(cfg.imex, lifetime=Lifetime.JOB))
    plan = recover(job_cfg, default_teardown(job_cfg), slurm, current_boot=THIS_BOOT,
                   dry_run=True)
    assert f"remove the persistent IMEX domain left from imex.lifetime = persistent " \
           f"(stop pid {pid})" in plan.would
    done = recover(job_cfg, default_teardown(job_cfg), slurm, current_boot=THIS_BOOT)
    assert done.failures == []
    assert f"removed the persistent IMEX domain left from imex.lifetime = persistent " \
           f"(stopped pid {pid})" in done.repaired
    assert sim_processes(tmp_path) == []
    assert not (tmp_path / "run" / jobdir.PERSISTENT).exists()
    assert not (tmp_path / "state" / PERSISTENT_RECORD).exists()
    again = recover(job_cfg, default_teardown(job_cfg), slurm, current_boot=THIS_BOOT)
    assert again.failures == [] and not any("persistent" in r for r in again.repaired)


def sim_persist(cfg, tmp_path):
    """The tray's persist.dat where the simulated daemon keeps it (its host's run dir)."""
    from imexctl.base.dataclass import replace
    return replace(cfg, paths=replace(cfg.paths,
                                      imex_persist_file=tmp_path / "sim-run" / "persist.dat"))


def test_recover_after_a_killed_daemon_is_ready_again(tmp_path, stop_daemons):
    """A SIGKILLed persistent daemon leaves persist.dat naming its importers; a daemon
    started on it waits in WAITING_FOR_RECOVERY for them (for ever while their own daemons
    restart after this one): the restart forgets it and is READY at once."""
    cfg = sim_persist(tray_cfg(tmp_path, ready_timeout_s=1), tmp_path)
    slurm = world()
    assert recover(cfg, default_teardown(cfg), slurm, current_boot=THIS_BOOT).failures == []
    old = StateStore(cfg.paths.state_dir).load_persistent()
    for proc in sim_processes(tmp_path):
        proc.kill()
        proc.wait(5)
    persist = cfg.paths.imex_persist_file
    data = json.loads(persist.read_text())
    data["importers"] = {"1": ADDRS["tray2"]}     # tray2 imported memory from tray1
    persist.write_text(json.dumps(data) + "\n")
    done = recover(cfg, default_teardown(cfg), slurm, current_boot=THIS_BOOT)
    assert done.failures == [], done.failures
    new = StateStore(cfg.paths.state_dir).load_persistent()
    assert new.phase == "ready" and new.daemon.pid != old.daemon.pid
    assert launcher.is_alive(new.daemon)
    assert json.loads(persist.read_text())["importers"] == {}   # the new daemon's own



def test_importers_reads_the_guides_lines_and_json_and_never_follows_a_symlink_or_fifo(
        tmp_path):
    """persist.dat's importers, as the epilog's note reads them: never through a symlink
    or a FIFO (a FIFO would block the epilog), nothing from a file that is not there."""
    import os

    from imexctl.imex.persistent import importers

    path = tmp_path / "persist.dat"
    assert importers(path) == []
    path.write_text("Node 1: 10.0.0.2\nNode #2: 10.0.0.3\n")
    assert importers(path) == ["Node 1: 10.0.0.2", "Node 2: 10.0.0.3"]
    path.write_text('{"key": "k", "importers": {"1": "127.0.0.2"}}')
    assert importers(path) == ["Node 1: 127.0.0.2"]
    link = tmp_path / "link.dat"
    link.symlink_to(path)
    assert importers(link) == []
    fifo = tmp_path / "fifo.dat"
    os.mkfifo(fifo)
    assert importers(fifo) == []
