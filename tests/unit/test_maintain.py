"""Issue 37: ``imexctl maintain`` (ops/maintain.py) and its tray side (recover restarts a
persistent daemon drained for maintenance; the identity publishes its digest and token).

The controller side runs on MemorySlurm: the drains and resumes it writes, the jobs it
names, what it waits for. The tray side runs the simulated daemon for real.
"""

from __future__ import annotations

import json
import random

import pytest

from imexctl.base.dataclass import replace
from imexctl.cli import main
from imexctl.config import Lifetime
from imexctl.errors import EXIT_PENDING, EXIT_REFUSED, EXIT_USAGE
from imexctl.ops import maintain
from imexctl.ops.health import default_teardown
from imexctl.ops.recover import recover
from imexctl.rules.cliques import identity_from_extra
from imexctl.slurm import reasons
from imexctl.tray import jobdir
from imexctl.tray.ownership import StateStore
from tests.support.lifecycle import UUID, published, write_slurm_conf
from tests.support.memory_slurm import MemorySlurm
from tests.support.persistent import ADDRS, world
from tests.support.records import make_record
from tests.support.sim_daemon import sim_cfg, sim_processes

CLIQUE = f"{UUID}.1"
OLD, NEW = "0123456789abcdef", "fedcba9876543210"
TOKEN = "20261128T030000Z"


def rack(domains=None, lifetime="persistent") -> MemorySlurm:
    """tray1-tray3 of clique 1 run the persistent domain OLD; tray4 was just added and
    runs NEW (it rendered the whole clique at its first start); tray9 is another clique."""
    s = MemorySlurm()
    s.add_nodes({f"tray{i}": f"10.0.0.{i}" for i in (1, 2, 3, 4, 9)})
    domains = domains or {"tray1": OLD, "tray2": OLD, "tray3": OLD, "tray4": NEW}
    for node, digest in domains.items():
        s.publish(node, {**published(lifetime=lifetime), "domain": digest})
    s.publish("tray9", published(clique=2, lifetime="persistent"))
    return s


def restarted(s: MemorySlurm, token: str, digest: str = NEW, nodes=("tray1", "tray2",
                                                                     "tray3", "tray4")):
    """What each tray's health publishes once its daemon restarted for the maintenance."""
    for node in nodes:
        s.publish(node, {**published(lifetime="persistent"), "domain": digest,
                         "maintenance": token})


def drains(s: MemorySlurm) -> list[str]:
    return [c[1] for c in s.calls if c[0] == "drain"]


def resumed(s: MemorySlurm) -> list[str]:
    return [c[1] for c in s.calls if c[0] == "resume_if_ours" and not s.nodes_[c[1]].drained]


# ---------------------------------------------------------------- the reason and token


def test_the_maintenance_reason_keeps_the_grammar_and_carries_its_token():
    text = maintain.Change.membership().reason(CLIQUE, TOKEN)
    assert reasons.parse(text) == ("maintain", "membership",
                                   f"clique {CLIQUE} restarts its persistent IMEX daemons "
                                   f"(maintenance {TOKEN})")
    assert len(text) <= reasons.MAX_LEN
    assert reasons.parse(maintain.Change.tls().reason(CLIQUE, TOKEN))[:2] == ("maintain", "tls")
    switch = maintain.Change.switch(Lifetime.JOB).reason(CLIQUE, TOKEN)
    assert reasons.parse(switch)[:2] == ("maintain", "lifetime")
    assert "switches to imex.lifetime = job" in switch
    s = rack()
    s.drain("tray1", text)
    assert maintain.maintenance_token(s.nodes_["tray1"]) == TOKEN
    s.resume_if_ours("tray1")           # Slurm keeps the reason after RESUME: no token
    assert maintain.maintenance_token(s.nodes_["tray1"]) == ""
    s.drain("tray2", "imexctl: health/persistent: the daemon cannot start")
    assert maintain.maintenance_token(s.nodes_["tray2"]) == ""
    assert maintain.new_token(0) == "19700101T000000Z"


def test_the_identity_reads_domain_and_maintenance_tags_and_drops_anything_else():
    extra = json.dumps({"imex": {**published(lifetime="persistent"), "domain": NEW,
                                 "maintenance": TOKEN}})
    ident = identity_from_extra(extra)
    assert (ident.domain, ident.maintenance) == (NEW, TOKEN)
    bad = json.dumps({"imex": {**published(lifetime="persistent"), "domain": "x; rm",
                               "maintenance": 5}})
    ident = identity_from_extra(bad)
    assert (ident.domain, ident.maintenance) == ("", "")
    assert ident.to_extra()["domain"] == ""


# ---------------------------------------------------------------- the membership change


def test_a_membership_change_drains_waits_for_jobs_and_trays_then_resumes_its_own():
    s = rack()
    s.add_job(12, ["tray1", "tray2"])
    s.add_job(13, ["tray9"])              # another clique's job is not waited for
    s.set_node("tray3", state="IDLE+DRAIN", reason="disk replaced")    # an admin's drain
    first = maintain.step(s, maintain.Change.membership(), node="tray2", now=lambda: 0)
    assert first.clique == CLIQUE and first.phase == maintain.WAITING_JOBS
    assert first.jobs == {12: ["tray1", "tray2"]} and first.token == "19700101T000000Z"
    assert drains(s) == ["tray1", "tray2", "tray4"] == first.drained
    assert s.nodes_["tray1"].reason == maintain.Change.membership().reason(
        CLIQUE, first.token)
    assert [t.name for t in first.held] == ["tray3"]
    assert s.nodes_["tray3"].reason == "disk replaced"
    # the job ends: no tray runs the maintenance's daemon yet
    s.set_job(12, state="COMPLETED")
    second = maintain.step(s, maintain.Change.membership(), clique=CLIQUE)
    assert second.phase == maintain.WAITING_TRAYS and second.token == first.token
    assert {t.name for t in second.trays if t.waiting} == {"tray1", "tray2", "tray4"}
    assert drains(s) == ["tray1", "tray2", "tray4"]      # not drained again
    # two trays restarted, one not yet: still waiting, nothing resumed
    restarted(s, first.token, nodes=("tray1", "tray4"))
    third = maintain.step(s, maintain.Change.membership(), clique=CLIQUE)
    assert third.phase == maintain.WAITING_TRAYS
    assert [t.name for t in third.trays if t.waiting] == ["tray2"]
    assert all(c[0] != "resume_if_ours" for c in s.calls)
    restarted(s, first.token, nodes=("tray2",))
    done = maintain.step(s, maintain.Change.membership(), clique=CLIQUE)
    assert done.phase == maintain.DONE and done.digest == NEW
    assert done.resumed == ["tray1", "tray2", "tray4"] == resumed(s)
    assert s.nodes_["tray3"].state == "IDLE+DRAIN"       # the admin's drain is kept


def test_trays_on_two_digests_are_not_done_though_each_restarted():
    s = rack()
    first = maintain.step(s, maintain.Change.membership(), clique=CLIQUE)
    restarted(s, first.token, nodes=("tray1", "tray2"))
    restarted(s, first.token, digest=OLD, nodes=("tray3", "tray4"))
    again = maintain.step(s, maintain.Change.membership(), clique=CLIQUE)
    assert again.phase == maintain.WAITING_TRAYS
    assert all("the clique's trays run" in t.waiting for t in again.trays if not t.held)
    assert s.nodes_["tray1"].drained


def test_a_daemon_of_an_earlier_maintenance_does_not_count():
    """Same digest as asked (a TLS change: nodes_config.cfg alike), but started before
    this maintenance: the tray has not restarted yet."""
    s = rack(domains={f"tray{i}": NEW for i in (1, 2, 3, 4)})
    restarted(s, "20250101T000000Z")
    again = maintain.step(s, maintain.Change.tls(), clique=CLIQUE, now=lambda: 0)
    assert s.nodes_["tray1"].reason.startswith("imexctl: maintain/tls: ")
    assert again.phase == maintain.WAITING_TRAYS
    assert "not restarted for maintenance 19700101T000000Z" in again.trays[0].waiting


def test_a_drain_of_an_earlier_given_up_maintenance_is_renewed():
    s = rack()
    s.drain("tray1", maintain.Change.membership().reason(CLIQUE, "20250101T000000Z"))
    s.drain("tray2", maintain.Change.membership().reason(CLIQUE, TOKEN))
    progress = maintain.step(s, maintain.Change.membership(), clique=CLIQUE)
    assert progress.token == TOKEN
    assert progress.drained == ["tray1", "tray3", "tray4"]
    assert all(maintain.maintenance_token(s.nodes_[f"tray{i}"]) == TOKEN for i in (1, 2, 3, 4))


def test_a_dry_run_changes_nothing_and_says_what_it_would_drain():
    s = rack()
    s.updates.clear()
    progress = maintain.step(s, maintain.Change.membership(), clique=CLIQUE, dry_run=True)
    assert drains(s) == [] and s.updates == []
    assert [w.split(":")[0] for w in progress.would] == [
        "drain tray1", "drain tray2", "drain tray3", "drain tray4"]


def test_an_unknown_clique_or_tray_is_a_usage_error():
    s = rack()
    with pytest.raises(maintain.MaintainError, match="no tray publishes clique"):
        maintain.step(s, maintain.Change.membership(), clique=f"{UUID}.7")
    with pytest.raises(maintain.MaintainError, match="unknown to Slurm"):
        maintain.step(s, maintain.Change.membership(), node="tray77")
    assert drains(s) == []


# ---------------------------------------------------------------- the lifetime switch


def test_a_lifetime_switch_under_a_live_job_is_refused_naming_it_and_drains_nothing():
    s = rack()
    s.add_job(21, ["tray3", "tray4"])
    s.add_job(22, ["tray1"], state="COMPLETING")
    s.updates.clear()
    progress = maintain.step(s, maintain.Change.switch(Lifetime.JOB), clique=CLIQUE)
    assert progress.phase == maintain.REFUSED
    assert progress.job_list() == "job 21 (tray[3-4]), job 22 (tray1)"
    assert drains(s) == [] and s.updates == []


def test_a_lifetime_switch_waits_for_the_config_then_resumes():
    s = rack()
    first = maintain.step(s, maintain.Change.switch(Lifetime.JOB), clique=CLIQUE)
    assert first.phase == maintain.WAITING_TRAYS and len(first.drained) == 4
    assert 'deploy imex.lifetime = "job"' in first.trays[0].waiting
    for i in (1, 2, 3, 4):        # config management deployed it; health republished
        s.publish(f"tray{i}", published(lifetime="job"))
    done = maintain.step(s, maintain.Change.switch(Lifetime.JOB), clique=CLIQUE)
    assert done.phase == maintain.DONE and done.resumed == ["tray1", "tray2", "tray3",
                                                            "tray4"]


def test_once_drained_a_lifetime_switch_waits_for_jobs_rather_than_refuse():
    """A job that slipped in between the look and the drains: the switch has begun (its
    drains are there), so it waits for the job instead of leaving trays drained."""
    s = rack()
    maintain.step(s, maintain.Change.switch(Lifetime.JOB), clique=CLIQUE)
    s.add_job(30, ["tray2"])
    again = maintain.step(s, maintain.Change.switch(Lifetime.JOB), clique=CLIQUE)
    assert again.phase == maintain.WAITING_JOBS and again.jobs == {30: ["tray2"]}


# ---------------------------------------------------------------- waiting, deadline, abandon


def test_run_stops_at_the_deadline_leaving_the_trays_drained():
    s = rack()
    s.add_job(12, ["tray1"])
    ticks = iter(range(0, 1000, 5))
    slept = []
    progress = maintain.run(s, maintain.Change.membership(), clique=CLIQUE, deadline_s=12,
                            poll_s=5, clock=lambda: next(ticks), sleep=slept.append)
    assert progress.phase == maintain.DEADLINE and progress.jobs == {12: ["tray1"]}
    assert slept and all(0 <= x <= 5 for x in slept)
    assert all(s.nodes_[f"tray{i}"].drained for i in (1, 2, 3, 4))


def test_run_waits_until_done():
    s = rack()
    passes = []

    def tray_health(progress):           # the trays restart between two looks
        passes.append(progress.phase)
        if progress.phase == maintain.WAITING_TRAYS:
            restarted(s, progress.token)

    progress = maintain.run(s, maintain.Change.membership(), clique=CLIQUE, poll_s=0.01,
                            on_pass=tray_health, sleep=lambda _: None)
    assert passes == [maintain.WAITING_TRAYS, maintain.DONE]
    assert progress.phase == maintain.DONE and not any(r.drained for r in s.nodes_.values())


def test_abandon_resumes_only_the_maintenance_drains():
    s = rack()
    maintain.step(s, maintain.Change.membership(), clique=CLIQUE)
    s.set_node("tray2", reason="imexctl: health/persistent: cannot start")
    key, back = maintain.abandon(s, clique=CLIQUE)
    assert key == CLIQUE and back == ["tray1", "tray3", "tray4"]
    assert s.nodes_["tray2"].drained


# ---------------------------------------------------------------- the command line


@pytest.mark.parametrize("argv, words", [
    (["maintain", "--clique", CLIQUE], "one of the arguments"),
    (["maintain", "--node", "../x", "--membership"], "not a valid node name"),
    (["maintain", "--clique", "../x", "--lifetime", "job"], "is not a clique key"),
    (["maintain", "--clique", CLIQUE + ";id", "--tls"], "is not a clique key"),
    (["maintain", "--node", "tray1", "--membership", "--deadline", "soon"],
     "is not a duration"),
    (["maintain", "--node", "tray1", "--membership", "--poll", "0"], "--poll"),
])
def test_bad_command_lines_exit_2_naming_the_fault(argv, words, capsys):
    assert main(argv) == EXIT_USAGE
    assert words in capsys.readouterr().err


def test_exit_codes_are_documented():
    from imexctl.errors import EXIT_CODES
    assert "maintain" in EXIT_CODES[EXIT_PENDING] and "maintain" in EXIT_CODES[EXIT_REFUSED]


# ---------------------------------------------------------------- the tray side


def tray_cfg(tmp_path, node="tray1"):
    tmp_path.mkdir(parents=True, exist_ok=True)
    write_slurm_conf(tmp_path, ADDRS)
    base = random.randrange(10000, 14000)
    cfg = sim_cfg(tmp_path, lifetime="persistent", server_port_base=base,
                  cmd_port_base=base + 5000, port_span=100)
    return replace(cfg, node=node)


@pytest.fixture
def stop_daemons(tmp_path):
    yield
    for proc in sim_processes(tmp_path):
        proc.kill()


def published_tags(slurm, node):
    ident = identity_from_extra(slurm.nodes_[node].extra)
    return ident.domain, ident.maintenance


def test_a_tray_drained_for_maintenance_restarts_its_daemon_once_and_publishes_it(
        tmp_path, stop_daemons):
    cfg = tray_cfg(tmp_path)
    slurm = world()
    recover(cfg, default_teardown(cfg), slurm)
    store = StateStore(cfg.paths.state_dir)
    first = store.load_persistent()
    # the daemon's digest is published once it is READY
    assert published_tags(slurm, "tray1") == (first.digest, "")
    slurm.publish("tray3", published(lifetime="persistent"))      # tray3 joins the clique
    reason = maintain.Change.membership().reason(CLIQUE, TOKEN)
    slurm.drain("tray1", reason)
    done = recover(cfg, default_teardown(cfg), slurm)
    assert done.failures == [], done.failures
    again = store.load_persistent()
    assert again.daemon.pid != first.daemon.pid and again.maintenance == TOKEN
    assert again.nodes == ["tray1", "tray2", "tray3", "tray10"]
    assert [p.pid for p in sim_processes(tmp_path)] == [again.daemon.pid]
    nodes_cfg = (tmp_path / "run" / jobdir.PERSISTENT / jobdir.NODES_CONFIG).read_text()
    assert nodes_cfg == "127.0.0.1\n127.0.0.2\n127.0.0.3\n127.0.0.10\n"
    assert any(r.startswith(f"restarted the persistent IMEX domain (for maintenance {TOKEN}; "
                            f"was pid {first.daemon.pid}, digest {first.digest}; clique ")
               for r in done.repaired), done.repaired
    assert published_tags(slurm, "tray1") == (again.digest, TOKEN)
    assert slurm.nodes_["tray1"].drained      # the maintenance command resumes it, not recover
    # once for the token: the next run keeps the daemon
    third = recover(cfg, default_teardown(cfg), slurm)
    assert third.repaired == [] and store.load_persistent().daemon.pid == again.daemon.pid


def test_the_same_members_restart_for_a_maintenance_too(tmp_path, stop_daemons):
    """A TLS change leaves nodes_config.cfg alike: the daemon restarts all the same."""
    cfg = tray_cfg(tmp_path)
    slurm = world()
    recover(cfg, default_teardown(cfg), slurm)
    pid = StateStore(cfg.paths.state_dir).load_persistent().daemon.pid
    slurm.drain("tray1", maintain.Change.membership().reason(CLIQUE, TOKEN))
    recover(cfg, default_teardown(cfg), slurm)
    record = StateStore(cfg.paths.state_dir).load_persistent()
    assert record.daemon.pid != pid and record.maintenance == TOKEN


@pytest.mark.parametrize("drain", [None, "imexctl: health/fabric: unfit", "an admin's"])
def test_without_the_maintenance_drain_a_changed_membership_is_only_reported(
        tmp_path, stop_daemons, drain):
    cfg = tray_cfg(tmp_path)
    slurm = world()
    recover(cfg, default_teardown(cfg), slurm)
    pid = StateStore(cfg.paths.state_dir).load_persistent().daemon.pid
    slurm.publish("tray3", published(lifetime="persistent"))
    if drain:
        slurm.set_node("tray1", state="IDLE+DRAIN", reason=drain)
    done = recover(cfg, default_teardown(cfg), slurm)
    assert done.repaired == [] and any("imexctl maintain --membership" in n
                                       for n in done.notes), done.notes
    assert StateStore(cfg.paths.state_dir).load_persistent().daemon.pid == pid


def test_a_job_on_the_tray_keeps_the_daemon_until_it_ends(tmp_path, stop_daemons):
    cfg = tray_cfg(tmp_path)
    slurm = world()
    recover(cfg, default_teardown(cfg), slurm)
    store = StateStore(cfg.paths.state_dir)
    pid = store.load_persistent().daemon.pid
    slurm.drain("tray1", maintain.Change.membership().reason(CLIQUE, TOKEN))
    store.save(make_record(job_id=41, on_persistent=True))
    done = recover(cfg, default_teardown(cfg), slurm)
    assert any("job 41 still runs on this tray" in n for n in done.notes), done.notes
    assert store.load_persistent().daemon.pid == pid


def test_a_tray_switched_to_job_publishes_its_leftover_daemon_until_recover_removes_it(
        tmp_path, stop_daemons):
    from imexctl.imex.identity import domain_tags

    cfg = tray_cfg(tmp_path)
    recover(cfg, default_teardown(cfg), world())
    digest = StateStore(cfg.paths.state_dir).load_persistent().digest
    job_cfg = replace(cfg, imex=replace(cfg.imex, lifetime=Lifetime.JOB))
    assert domain_tags(job_cfg) == (digest, "")      # the maintenance waits for it
    done = recover(job_cfg, default_teardown(job_cfg), world())
    assert any("removed the persistent IMEX domain" in r for r in done.repaired), done
    assert domain_tags(job_cfg) == ("", "") and sim_processes(tmp_path) == []


def test_slurm_not_answering_during_the_wait_is_looked_at_again():
    from imexctl.errors import SlurmError

    s = rack()
    s.add_job(12, ["tray1"])
    real, failed = s.active_jobs, []

    def flaky():
        if len(s.calls) > 3 and not failed:
            failed.append(1)
            raise SlurmError("slurmctld restarting")
        return real()

    s.active_jobs = flaky
    seen = []

    def on_pass(progress):
        seen.append((progress.phase, progress.error))
        if len(seen) == 2:
            s.set_job(12, state="COMPLETED")
            restarted(s, progress.token)

    progress = maintain.run(s, maintain.Change.membership(), clique=CLIQUE, poll_s=0.01,
                            on_pass=on_pass, sleep=lambda _: None)
    assert seen[:2] == [(maintain.WAITING_JOBS, ""),
                        (maintain.WAITING_JOBS, "slurmctld restarting")]
    assert progress.phase == maintain.DONE


def test_slurm_not_answering_at_the_first_look_raises_and_drains_nothing():
    from imexctl.errors import SlurmError

    s = rack()

    def down():
        raise SlurmError("connect failure")

    s.active_jobs = down
    with pytest.raises(SlurmError):
        maintain.run(s, maintain.Change.membership(), clique=CLIQUE)
    assert drains(s) == []


def test_health_applies_the_maintenance_on_its_tray_and_publishes_it(tmp_path, stop_daemons):
    """HealthCheckProgram on each tray is what applies a maintenance: its identity check
    restarts the persistent daemon while the tray is drained by imexctl maintain, then
    publishes the new digest and token; the drain stays for the command to lift."""
    from imexctl.ops.health import run_checks
    from imexctl.tray.bootid import current_boot_id

    cfg = tray_cfg(tmp_path)
    slurm = world()
    recover(cfg, default_teardown(cfg), slurm)
    store = StateStore(cfg.paths.state_dir)
    first = store.load_persistent()
    quiet = run_checks(cfg, slurm, boot_id=current_boot_id(cfg))      # not drained: nothing
    assert store.load_persistent().daemon.pid == first.daemon.pid, quiet
    slurm.publish("tray3", published(lifetime="persistent"))
    slurm.drain("tray1", maintain.Change.membership().reason(CLIQUE, TOKEN))
    report = run_checks(cfg, slurm, boot_id=current_boot_id(cfg))
    again = store.load_persistent()
    assert again.daemon.pid != first.daemon.pid and again.maintenance == TOKEN, report
    assert any(r.startswith("restarted the persistent IMEX domain (for maintenance")
               for r in report.repaired), report.repaired
    assert published_tags(slurm, "tray1") == (again.digest, TOKEN)
    assert slurm.nodes_["tray1"].reason.startswith("imexctl: maintain/membership: ")
    assert slurm.nodes_["tray1"].drained
    # the next run keeps it (once per maintenance)
    run_checks(cfg, slurm, boot_id=current_boot_id(cfg))
    assert store.load_persistent().daemon.pid == again.daemon.pid


def test_a_tray_down_under_the_maintenance_is_named_so():
    s = rack()
    first = maintain.step(s, maintain.Change.membership(), clique=CLIQUE)
    s.set_node("tray2", state="DOWN+DRAIN")
    restarted(s, first.token, nodes=("tray1", "tray3", "tray4"))
    again = maintain.step(s, maintain.Change.membership(), clique=CLIQUE)
    assert again.phase == maintain.WAITING_TRAYS
    assert [t.waiting.split(":")[0] for t in again.trays if t.waiting] == [
        "is DOWN+DRAIN in Slurm"]


def test_health_on_a_tray_switched_to_job_removes_the_persistent_daemon_while_drained(
        tmp_path, stop_daemons):
    from imexctl.ops.health import run_checks
    from imexctl.tray.bootid import current_boot_id

    cfg = tray_cfg(tmp_path)
    slurm = world()
    recover(cfg, default_teardown(cfg), slurm)
    job_cfg = replace(cfg, imex=replace(cfg.imex, lifetime=Lifetime.JOB))
    run_checks(job_cfg, slurm, boot_id=current_boot_id(cfg))    # not drained: kept
    assert len(sim_processes(tmp_path)) == 1
    slurm.drain("tray1", maintain.Change.switch(Lifetime.JOB).reason(CLIQUE, TOKEN))
    report = run_checks(job_cfg, slurm, boot_id=current_boot_id(cfg))
    assert any("removed the persistent IMEX domain" in r for r in report.repaired), report
    assert sim_processes(tmp_path) == []
    ident = identity_from_extra(slurm.nodes_["tray1"].extra)
    assert (ident.lifetime, ident.domain) == ("job", "")
