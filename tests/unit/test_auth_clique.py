"""A tray whose imex.auth differs from its clique's is named before a job runs there
(issue 36, audit F4-6/S4-3): each tray publishes its mode and a fingerprint of its
secret; PrologSlurmctld compares them per clique, drains the odd trays (or refuses the job
when no side is a majority); health republishes the tag when the secret changes."""

from __future__ import annotations

import json
import os

import pytest

from imexctl.controller.slurmctld import prolog_slurmctld
from imexctl.errors import EXIT_OK
from imexctl.imex.identity import secret_fingerprint
from imexctl.ops.health import run_checks
from imexctl.ops.identity import publish
from imexctl.rules import decision as dec
from imexctl.rules.cliques import TrayIdentity, identity_from_extra
from imexctl.rules.groups import auth_splits, group_trays
from tests.support import controller as ctl
from tests.support.lifecycle import UUID, controller_ctx_of, make_cfg, published
from tests.support.memory_slurm import MemorySlurm

RACK = [f"tray{i:02d}" for i in range(1, 5)]
A, B = "job:" + "a" * 16, "job:" + "b" * 16


def ident(auth: str, clique: int = 1) -> TrayIdentity:
    return TrayIdentity(UUID, clique, 4, auth=auth)


def secret(tmp_path, name="auth.key", data=None):
    path = tmp_path / name
    path.write_bytes(data if data is not None else os.urandom(64))
    path.chmod(0o600)
    return path


# ----------------------------------------------------------------------- the rule
@pytest.mark.parametrize("tags, odd, majority", [
    ([A, A, A, A], None, None),                     # all agree: nothing to say
    (["", A, "", A], None, None),                   # untagged (older imexctl): not compared
    ([A, A, A, B], ("tray04",), A),                 # a strict majority: the rest is odd
    ([A, B, A, B], (), ""),                         # no majority: nobody can be blamed
    ([A, "job:unreadable", A, A], ("tray02",), A),  # an unreadable secret is always odd
    (["off", A, A, A], ("tray01",), A),             # another mode is a difference too
])
def test_auth_splits_name_the_odd_trays_of_a_clique(tags, odd, majority):
    ids = {n: ident(t) for n, t in zip(RACK, tags)}
    splits = auth_splits(group_trays(RACK, ids), ids)
    if odd is None:
        assert splits == []
        return
    (split,) = splits
    assert (split.odd, split.majority) == (odd, majority)
    assert split.reason.startswith(f"imex.auth differs within clique {UUID}.1: ")
    assert all(t in split.reason for t in set(tags) if t)


def test_auth_tags_are_compared_per_clique_only():
    ids = {"tray01": ident(A, 1), "tray02": ident(A, 1), "tray03": ident(B, 2)}
    assert auth_splits(group_trays(list(ids), ids), ids) == []


@pytest.mark.parametrize("tag, kept", [
    (A, A), ("off", "off"), ("site", "site"), ("job:unreadable", "job:unreadable"),
    ("job:" + "A" * 16, ""), ("job:abc", ""), ("job:" + "a" * 16 + "\n", ""), (7, ""),
])
def test_only_tags_imexctl_writes_are_read_from_extra(tag, kept):
    raw = json.dumps({"imex": {"cluster_uuid": UUID, "clique_id": 1, "auth": tag}})
    assert identity_from_extra(raw).auth == kept


# ------------------------------------------------------------- what a tray publishes
def test_a_tray_publishes_its_secrets_fingerprint_never_the_secret(tmp_path):
    key = secret(tmp_path)
    cfg = make_cfg(tmp_path, imex={"auth": "job", "auth_secret_file": str(key)})
    slurm = MemorySlurm()
    slurm.add_nodes({"tray01": "10.0.0.1"})
    assert publish(cfg, slurm).exit_code == 0
    extra = slurm.nodes_["tray01"].extra
    tag = json.loads(extra)["imex"]["auth"]
    assert tag == "job:" + secret_fingerprint(key.read_bytes()) and len(tag) == 20
    assert key.read_bytes().hex()[:16] not in extra


def test_a_tray_that_cannot_read_its_secret_publishes_so(tmp_path):
    key = secret(tmp_path, data=b"correct horse battery staple, a passphrase\n")
    cfg = make_cfg(tmp_path, imex={"auth": "job", "auth_secret_file": str(key)})
    slurm = MemorySlurm()
    slurm.add_nodes({"tray01": "10.0.0.1"})
    publish(cfg, slurm)
    assert json.loads(slurm.nodes_["tray01"].extra)["imex"]["auth"] == "job:unreadable"


def test_health_republishes_the_tag_after_the_secret_changes(tmp_path):
    key = secret(tmp_path)
    cfg = make_cfg(tmp_path, imex={"auth": "job", "auth_secret_file": str(key)})
    slurm = MemorySlurm()
    slurm.add_nodes({"tray01": "10.0.0.1"})
    publish(cfg, slurm)
    before = json.loads(slurm.nodes_["tray01"].extra)["imex"]["auth"]
    secret(tmp_path)         # rotated in place (rsync -a keeps the mtime: not looked at)
    report = run_checks(cfg, slurm, boot_id="b" * 32)
    after = json.loads(slurm.nodes_["tray01"].extra)["imex"]["auth"]
    assert after != before and after.startswith("job:")
    assert f"published imex.auth {after} (was {before})" in report.repaired


# ------------------------------------------------------------- the controller's view
@pytest.fixture
def world(tmp_path, monkeypatch):
    return ctl.rack(tmp_path, monkeypatch, RACK)


def decide(world, tags, job_id=42):
    cfg, slurm = world
    for node, tag in zip(RACK, tags):
        slurm.publish(node, published(auth=tag))
    slurm.add_job(job_id, RACK, partition="trays")
    assert prolog_slurmctld(cfg, slurm, controller_ctx_of(slurm, job_id)) == EXIT_OK
    return slurm.jobs[job_id]


def test_a_tray_with_another_secret_is_drained_and_the_job_waits(world):
    job = decide(world, [A, A, B, A])
    _, slurm = world
    assert dec.decode(job.admin_comment).action == "wait"
    assert "imex.auth differs within clique" in dec.decode(job.admin_comment).note
    assert job.state != "CANCELLED"
    odd = slurm.nodes_["tray03"]
    assert odd.drained and odd.reason == (f"imexctl: prolog-slurmctld/auth: imex.auth {B} "
                                          f"differs from clique {UUID}.1's {A}")
    assert not any(slurm.nodes_[n].drained for n in ("tray01", "tray02", "tray04"))
    assert not (world[0].paths.controller_dir / "channels.json").exists() or \
        json.loads((world[0].paths.controller_dir / "channels.json").read_text())["jobs"] == {}


def test_with_no_majority_the_job_is_refused_naming_both_sides_and_nothing_drains(world):
    job = decide(world, [A, B, A, B])
    _, slurm = world
    assert job.state == "CANCELLED"
    assert job.admin_comment.startswith(f"imexctl: imex.auth differs within clique {UUID}.1: ")
    assert "tray[01,03] " in job.admin_comment and "tray[02,04] " in job.admin_comment
    assert not any(slurm.nodes_[n].drained for n in RACK)


def test_agreeing_trays_get_their_domain(world):
    job = decide(world, [A, A, A, A])
    assert dec.decode(job.admin_comment).action == "domains"
    assert not any(world[1].nodes_[n].drained for n in RACK)


def test_job_certificates_start_before_the_submit_time_not_at_this_trays_clock(tmp_path):
    """A peer whose clock runs behind still accepts a tray's certificate: its start is
    the job's SubmitTime (slurmctld's clock) less CLOCK_SKEW_S, whatever this tray's
    clock says (audit S4-3)."""
    from cryptography import x509

    from imexctl.imex import auth

    submitted = 1_795_000_000
    jdir = tmp_path / "job"
    jdir.mkdir(mode=0o700)
    auth.issue_job_credentials(jdir, secret(tmp_path), cluster="unit", job_id=7, restart=0,
                               group=f"{UUID}.1", node="tray01", end_time=None,
                               lifetime_h=24, now=submitted + 7200, incarnation=submitted)
    for name in (auth.JOB_CERT, auth.JOB_CA):
        cert = x509.load_pem_x509_certificate((jdir / name).read_bytes())
        assert cert.not_valid_before_utc.timestamp() == submitted - auth.CLOCK_SKEW_S
