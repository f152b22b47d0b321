"""Issue 37: what a job's prolog and epilog check on a persistent tray beyond its channel.

The prolog's persistent-ready step waits for the job's trays (only those, not the whole
clique) UP in ``nvidia-imex-ctl -N``; the ownership step refuses a second owner of IMEX and
writes the expected state. The epilog tears down as the job's own record says
(``on_persistent``), whatever ``imex.lifetime`` says by then, and notes importers the
persistent daemon's persist.dat still lists once no job is left on the tray.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from imexctl.base import log
from imexctl.base.dataclass import replace
from imexctl.config import Lifetime
from imexctl.imex import launcher
from imexctl.imex.ctl import DomainView
from imexctl.imex.persistent import importers, job_trays_lacking
from imexctl.lifecycle.epilog import run_epilog
from imexctl.lifecycle.prolog import run_prolog
from imexctl.tray import expected
from imexctl.tray.ownership import StateStore
from tests.support.lifecycle import ctx_for
from tests.support.records import make_record
from tests.support.sim_daemon import sim_processes
from tests.support.persistent import channels, job, up  # noqa: F401 - fixture

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="channel mknod needs root")


def row(status, **links):
    return {"status": status, "host": "", "hostName": "", "version": "",
            "connections": {int(k[1:]): {"host": "", "status": v} for k, v in links.items()}}


def test_only_the_jobs_trays_must_be_up():
    record = make_record(nodes=["tray1", "tray2", "tray10"], node_id=0)
    view = DomainView("DEGRADED", {0: row("READY", n1="CONNECTED", n2="NEVER_CONNECTED"),
                                   1: row("READY", n0="CONNECTED", n2="NEVER_CONNECTED"),
                                   2: row("UNAVAILABLE")})
    assert job_trays_lacking(view, record, ["tray1", "tray2"]) == []
    assert job_trays_lacking(view, record, ["tray1", "tray10"]) == [
        "tray1->tray10 NEVER_CONNECTED", "tray10 UNAVAILABLE"]
    assert job_trays_lacking(view, record, ["tray1", "tray3"]) == [
        "tray3 is not a member of the persistent domain"]
    assert job_trays_lacking(DomainView("UNKNOWN", error="connection refused"), record,
                             ["tray1"]) == ["connection refused"]


def test_a_job_tray_not_up_refuses_the_job_and_drains_nothing(tmp_path, up, job_id):
    """tray2 runs no daemon: the job cannot share memory with it; tray1 is not at fault."""
    cfg, slurm, pid = up
    slurm.add_job(job_id, ("tray1", "tray2"))
    ctx = ctx_for(job_id, node="tray1", nodes="tray[1-2]", uid=1234, user="alice", gid=1234)
    run_prolog(cfg, slurm, ctx)
    comment = slurm.jobs[job_id].admin_comment
    assert comment.startswith("imexctl: the job's trays are not UP in the persistent IMEX "
                              "domain after 4s (tray1->tray2 NEVER_CONNECTED; tray2 "
                              "UNAVAILABLE"), comment
    assert not [c for c in slurm.calls if c[0] == "drain"]
    assert channels(tmp_path) == {} and StateStore(cfg.paths.state_dir).load() is None
    assert [p.pid for p in sim_processes(tmp_path)] == [pid]


def test_a_second_owner_of_imex_drains_at_ownership(tmp_path, up, job_id):
    cfg, slurm, pid = up
    other = tmp_path / "pkg" / cfg.paths.imex_binary.name
    other.parent.mkdir()
    other.write_text("import time\ntime.sleep(60)\n")
    proc = subprocess.Popen([sys.executable, str(other), "-c", "/etc/nvidia-imex/config.cfg"])
    try:
        time.sleep(0.3)
        assert run_prolog(cfg, slurm, job(slurm, job_id, 1234, "alice")) == 1
        reason = slurm.nodes_["tray1"].reason
        assert reason.startswith("imexctl: prolog/ownership: a second owner of IMEX runs "
                                 f"here: systemctl mask --now nvidia-imex.service, or stop its "
                                 f"orchestrator; pid {proc.pid}: "), reason
    finally:
        proc.kill()
        proc.wait()
    assert channels(tmp_path) == {}


def test_the_prolog_writes_the_expected_state(tmp_path, up, job_id):
    cfg, slurm, _ = up
    assert run_prolog(cfg, slurm, job(slurm, job_id, 1234, "alice")) == 0
    now = expected.read(cfg)
    assert (now.state, now.job_id) == (expected.STARTING, job_id)   # the after-hook: up


def test_the_epilog_follows_the_jobs_record_after_a_switch_to_job(tmp_path, up, job_id):
    """The prolog ran on the persistent domain; imex.lifetime became "job" before the
    epilog: the epilog still leaves the persistent daemon and its persist.dat alone."""
    cfg, slurm, pid = up
    ctx = job(slurm, job_id, 1234, "alice")
    assert run_prolog(cfg, slurm, ctx) == 0
    persist = cfg.paths.imex_persist_file
    persist.parent.mkdir(parents=True, exist_ok=True)
    persist.write_text("persistent domain's importers\n")
    switched = replace(cfg, imex=replace(cfg.imex, lifetime=Lifetime.JOB))
    log.setup_logging(cfg.paths.log_file, "info", "tray1", stderr=None)
    assert run_epilog(switched, slurm, ctx) == 0
    assert channels(tmp_path) == {} and StateStore(cfg.paths.state_dir).load() is None
    assert [p.pid for p in sim_processes(tmp_path)] == [pid]
    assert persist.read_text() == "persistent domain's importers\n"
    steps = {e.get("step") for e in map(json.loads, cfg.paths.log_file.read_text().splitlines())
             if e.get("event") == "step done"}     # the epilog's: logging began with it
    assert "stop-daemon" not in steps and "channel" in steps, steps


def test_the_epilog_notes_importers_left_once_no_job_is_here(tmp_path, up, job_id):
    cfg, slurm, _ = up
    ctx = job(slurm, job_id, 1234, "alice")
    assert run_prolog(cfg, slurm, ctx) == 0
    persist = cfg.paths.imex_persist_file
    persist.parent.mkdir(parents=True, exist_ok=True)
    persist.write_text(json.dumps({"key": "k", "importers": {"1": "127.0.0.2"}}))
    log.setup_logging(cfg.paths.log_file, "info", "tray1", stderr=None)
    assert run_epilog(cfg, slurm, ctx) == 0
    notes = [e for e in map(json.loads, cfg.paths.log_file.read_text().splitlines())
             if e.get("event", "").startswith("the persistent IMEX daemon lists importers")]
    assert [n["importers"] for n in notes] == [["Node 1: 127.0.0.2"]]
    assert launcher.is_alive(StateStore(cfg.paths.state_dir).load_persistent().daemon)


def test_importers_read_in_the_guides_words_and_none_from_a_key_only_file(tmp_path):
    path = tmp_path / "persist.dat"
    path.write_text("key: 3f2a\nNode 1: 10.0.0.2\nNode #3: 10.0.0.4\n")
    assert importers(path) == ["Node 1: 10.0.0.2", "Node 3: 10.0.0.4"]
    path.write_text("key: 3f2a\n")
    assert importers(path) == []
    assert importers(tmp_path / "missing") == []
