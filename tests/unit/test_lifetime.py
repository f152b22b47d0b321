"""``[imex] lifetime`` (issue 37's foundation): the key is parsed once into its type,
``auth = "job"`` cannot serve a persistent domain, each tray publishes its lifetime in its
identity (health republishes it when it changes), and PrologSlurmctld refuses a job whose
trays of one clique publish different lifetimes, naming both sides and draining nothing.
The persistent domain is started by recover (test_persistent_domain.py); the prolog still
runs a daemon per job on a persistent tray."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from imexctl import config
from imexctl.config import AuthMode, Lifetime, parse_config
from imexctl.controller import counters
from imexctl.controller.slurmctld import prolog_slurmctld
from imexctl.errors import EXIT_OK, ConfigError
from imexctl.ops import controller_metrics
from imexctl.ops.identity import publish
from imexctl.ops.settings import effective_settings, inert_settings
from imexctl.rules import decision as dec
from imexctl.rules.cliques import TrayIdentity, identity_from_extra
from imexctl.rules.groups import group_trays, lifetime_splits
from tests.support import controller as ctl
from tests.support.lifecycle import UUID, controller_ctx_of, make_cfg, published
from tests.support.memory_slurm import MemorySlurm

RACK = [f"tray{i:02d}" for i in range(1, 5)]
SENTENCE = 'auth = "job" cannot serve a persistent domain: the daemon outlives jobs'


# ------------------------------------------------------------------------ the key
def test_imex_lifetime_is_parsed_once_into_its_type_and_defaults_to_job():
    assert config.CHOICES["imex.lifetime"] == ("job", "persistent") == tuple(Lifetime)
    assert parse_config({}, None, "t").imex.lifetime is Lifetime.JOB
    for lifetime in Lifetime:
        got = parse_config({"imex": {"lifetime": lifetime.value}}, None, "t").imex.lifetime
        assert got is lifetime


@pytest.mark.parametrize("value, needle", [
    ("persistant", "imex.lifetime = 'persistant' is not allowed; use one of: job, persistent "
                   "(did you mean 'persistent'?)"),
    ("Job", "imex.lifetime = 'Job' is not allowed; use one of: job, persistent (did you mean "
            "'job'?)"),
    (1, "imex.lifetime must be a string, got 1"),
])
def test_a_bad_lifetime_is_refused_naming_the_key_and_the_choices(value, needle):
    with pytest.raises(ConfigError) as exc:
        parse_config({"imex": {"lifetime": value}}, None, "t")
    assert str(exc.value) == f"<config>: {needle}"


@pytest.mark.parametrize("auth, refused", [
    ("job", True), ("site", False), ("off", False),
])
def test_auth_job_cannot_serve_a_persistent_domain(auth, refused):
    raw = {"imex": {"auth": auth, "lifetime": "persistent"}}
    if auth == "site":
        raw["imex"].update(auth_ca_file="/c", auth_cert_file="/t", auth_key_file="/k")
    if not refused:
        cfg = parse_config(raw, None, "t")
        assert (cfg.imex.auth, cfg.imex.lifetime) == (AuthMode(auth), Lifetime.PERSISTENT)
        return
    with pytest.raises(ConfigError) as exc:
        parse_config(raw, None, "t")
    assert SENTENCE in str(exc.value)
    assert str(exc.value).startswith('<config>: imex.auth = "job" with imex.lifetime = '
                                     '"persistent": ')
    # a per-job domain still takes per-job credentials
    assert parse_config({"imex": {"auth": "job"}}, None, "t").imex.lifetime is Lifetime.JOB


def check(path):
    return subprocess.run([sys.executable, "-m", "imexctl", "--config", str(path), "config",
                           "check"], capture_output=True, text=True, timeout=60)


def test_config_check_refuses_job_auth_on_a_persistent_tray_naming_file_and_key(tmp_path):
    path = tmp_path / "imexctl.toml"
    path.write_text('[imex]\nauth = "job"\nlifetime = "persistent"\n')
    res = check(path)
    assert res.returncode == 3 and "Traceback" not in res.stderr
    (line,) = res.stderr.splitlines()
    assert line.startswith(f"imexctl: {path}: imex.auth = \"job\" with imex.lifetime = ")
    assert SENTENCE in line


def test_config_check_warns_of_what_persistent_ignores_and_show_prints_the_value(tmp_path):
    path = tmp_path / "imexctl.toml"
    path.write_text('[imex]\nlifetime = "persistent"\n')
    res = check(path)
    assert res.returncode == 0, res.stderr
    assert "warning" not in res.stdout + res.stderr
    path.write_text('[imex]\nlifetime = "persistent"\nnode_disconnected_grace_time = -1\n'
                    '[health]\nskip = ["persistent"]\n')
    res = check(path)
    assert res.returncode == 0, res.stderr
    assert "warning: imex.node_disconnected_grace_time = -1 is not used by the persistent " \
           "domain: it runs with 300 s" in res.stdout
    assert 'warning: health.skip lists "persistent" with imex.lifetime = "persistent"' \
           in res.stdout
    cfg = parse_config({"imex": {"lifetime": "persistent"}}, None, "t")
    row = next(s for s in effective_settings(cfg) if s.key == "imex.lifetime")
    assert (row.value, type(row.value), row.origin) == ("persistent", str, "file")
    assert not any("lifetime" in w for w in inert_settings(parse_config({}, None, "t")))


# ------------------------------------------------------------- what a tray publishes
@pytest.mark.parametrize("lifetime", ["job", "persistent"])
def test_a_tray_publishes_its_lifetime(tmp_path, lifetime):
    cfg = make_cfg(tmp_path, imex={"lifetime": lifetime})
    slurm = MemorySlurm()
    slurm.add_nodes({"tray01": "10.0.0.1"})
    done = publish(cfg, slurm)
    assert done.exit_code == 0
    assert done.lines == [f"tray01: published clique {UUID}.1 (4 GPUs, imex.auth off, "
                          f"imex.lifetime {lifetime})"]
    assert json.loads(slurm.nodes_["tray01"].extra)["imex"]["lifetime"] == lifetime
    assert identity_from_extra(slurm.nodes_["tray01"].extra).lifetime == lifetime


def test_identity_show_prints_each_trays_lifetime_and_auth(tmp_path):
    from imexctl.cli.display import identity_table
    from imexctl.ops.identity import show

    slurm = MemorySlurm()
    slurm.add_nodes({"tray01": "10.0.0.1", "tray02": "10.0.0.2", "tray03": "10.0.0.3"})
    slurm.publish("tray01", published(lifetime="persistent", auth="site"))
    slurm.publish("tray02", published(lifetime=""))     # an older imexctl
    rows = show(make_cfg(tmp_path), "tray[01-03]", slurm=slurm)
    assert [r.get("lifetime") for r in rows] == ["persistent", "", None]
    head, one, two, three = identity_table(rows).splitlines()
    assert head.split()[-2:] == ["LIFETIME", "AUTH"]
    assert one.split()[-2:] == ["persistent", "site"] and two.split()[-2:] == ["-", "off"]
    assert three.split()[:2] == ["tray03", "(not"] and three.split()[-2:] == ["-", "-"]


@pytest.mark.parametrize("tag, kept", [
    ("job", "job"), ("persistent", "persistent"), (None, ""), ("", ""), ("Job", ""),
    ("persistent\n", ""), ("jobs", ""), (1, ""), (["job"], ""),
])
def test_only_lifetimes_imexctl_writes_are_read_from_extra(tag, kept):
    entry = {"cluster_uuid": UUID, "clique_id": 1}
    if tag is not None:
        entry["lifetime"] = tag
    raw = json.dumps({"imex": entry})
    assert identity_from_extra(raw).lifetime == kept
    assert TrayIdentity.from_extra(entry).lifetime == kept


def test_health_republishes_the_lifetime_after_it_changes(tmp_path):
    from imexctl.ops.health import run_checks

    slurm = MemorySlurm()
    slurm.add_nodes({"tray01": "10.0.0.1"})
    publish(make_cfg(tmp_path), slurm)
    assert json.loads(slurm.nodes_["tray01"].extra)["imex"]["lifetime"] == "job"
    cfg = make_cfg(tmp_path, imex={"lifetime": "persistent"})
    report = run_checks(cfg, slurm, boot_id="b" * 32)
    assert json.loads(slurm.nodes_["tray01"].extra)["imex"]["lifetime"] == "persistent"
    assert "published imex.lifetime persistent (was job)" in report.repaired
    again = run_checks(cfg, slurm, boot_id="b" * 32)     # published: nothing to repair
    assert not any("imex.lifetime" in line for line in again.repaired)


def test_health_publishes_a_lifetime_an_older_imexctl_never_did(tmp_path):
    from imexctl.ops.health import run_checks

    slurm = MemorySlurm()
    slurm.add_nodes({"tray01": "10.0.0.1"})
    slurm.publish("tray01", published(lifetime=""))
    report = run_checks(make_cfg(tmp_path), slurm, boot_id="b" * 32)
    assert "published imex.lifetime job (was unpublished)" in report.repaired
    assert json.loads(slurm.nodes_["tray01"].extra)["imex"]["lifetime"] == "job"


# ----------------------------------------------------------------------- the rule
def ident(lifetime: str, clique: int = 1) -> TrayIdentity:
    return TrayIdentity(UUID, clique, 4, lifetime=lifetime)


@pytest.mark.parametrize("tags, reason", [
    (["job"] * 4, None),
    (["persistent"] * 4, None),
    (["", "persistent", "", "persistent"], None),     # older imexctl: not compared
    (["job", "job", "persistent", "job"], "tray[01-02,04] job; tray03 persistent"),
    (["job", "persistent", "persistent", "job"], "tray[01,04] job; tray[02-03] persistent"),
    (["persistent", "", "job", "persistent"], "tray[01,04] persistent; tray03 job"),
])
def test_lifetime_splits_name_every_side_of_a_clique(tags, reason):
    ids = {n: ident(t) for n, t in zip(RACK, tags)}
    got = lifetime_splits(group_trays(RACK, ids), ids)
    assert got == ([] if reason is None else
                   [f"imex.lifetime differs within clique {UUID}.1: {reason}"])


def test_lifetimes_are_compared_per_clique_only():
    ids = {"tray01": ident("job", 1), "tray02": ident("job", 1),
           "tray03": ident("persistent", 2), "tray04": ident("persistent", 2)}
    assert lifetime_splits(group_trays(list(ids), ids), ids) == []


# ------------------------------------------------------------- the controller's view
@pytest.fixture
def world(tmp_path, monkeypatch):
    return ctl.rack(tmp_path, monkeypatch, RACK)


def decide(world, tags, job_id=42, auths=None):
    cfg, slurm = world
    for node, tag, auth in zip(RACK, tags, auths or ["off"] * len(RACK)):
        slurm.publish(node, published(auth=auth, lifetime=tag))
    slurm.add_job(job_id, RACK, partition="trays")
    assert prolog_slurmctld(cfg, slurm, controller_ctx_of(slurm, job_id)) == EXIT_OK
    return slurm.jobs[job_id]


def refusals(cfg):
    from prometheus_client.parser import text_string_to_metric_families

    text, problems = controller_metrics.render(cfg)
    assert problems == []
    return {s.labels["reason"]: s.value for fam in text_string_to_metric_families(text)
            for s in fam.samples if s.name == "imexctl_controller_decisions_total"
            and s.labels["outcome"] == counters.REFUSED}


def test_a_clique_of_job_and_persistent_trays_refuses_the_job_naming_both_sides(world):
    cfg, slurm = world
    job = decide(world, ["job", "job", "persistent", "job"])
    assert job.state == "CANCELLED"
    assert job.admin_comment == (f"imexctl: imex.lifetime differs within clique {UUID}.1: "
                                 "tray[01-02,04] job; tray03 persistent (set imex.lifetime "
                                 "alike on every tray of the clique)")
    assert not any(slurm.nodes_[n].drained for n in RACK)
    assert refusals(cfg)["lifetime-mismatch"] == 1
    table = cfg.paths.controller_dir / "channels.json"
    assert not table.exists() or json.loads(table.read_text())["jobs"] == {}


def test_a_lifetime_split_refuses_before_an_auth_split_drains_anyone(world):
    _, slurm = world
    odd = "job:" + "b" * 16
    job = decide(world, ["job", "job", "job", "persistent"],
                 auths=["site", "site", "site", odd])
    assert job.state == "CANCELLED" and "imex.lifetime differs" in job.admin_comment
    assert not any(slurm.nodes_[n].drained for n in RACK)


@pytest.mark.parametrize("tags", [
    ["persistent"] * 4,
    ["job", "", "job", ""],          # trays of an older imexctl beside this one's
])
def test_trays_that_agree_get_their_domain(world, tags):
    cfg, slurm = world
    job = decide(world, tags)
    assert dec.decode(job.admin_comment).action == "domains"
    assert job.state != "CANCELLED"
    assert not any(slurm.nodes_[n].drained for n in RACK)
    assert refusals(cfg).get("lifetime-mismatch", 0) == 0


def test_the_lifetime_reason_is_one_docs_monitoring_lists():
    from pathlib import Path

    assert "lifetime-mismatch" in counters.DECISIONS[counters.REFUSED]
    doc = (Path(__file__).resolve().parents[2] / "docs" / "monitoring.md").read_text()
    assert "| `refused` | `lifetime-mismatch` |" in doc
