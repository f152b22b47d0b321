"""The "IMEX expected here now" file: transitions, schema, atomicity, never raising."""

from __future__ import annotations

import json
import os
import time

import pytest

from imexctl.tray import expected
from tests.support.lifecycle import make_cfg
from tests.support.records import make_record


def test_a_jobs_life_as_monitors_see_it(tmp_path):
    cfg = make_cfg(tmp_path)
    path = tmp_path / "run" / "expected.json"
    assert expected.read(cfg) is None and expected.path_for(cfg) == path
    expected.write(cfg, expected.STARTING, job_id=42)
    raw = json.loads(path.read_text())
    assert raw["state"] == "starting" and raw["imex_expected"] is True
    assert raw["job_id"] == 42 and raw["node"] == "tray01" and raw["version"] == 1
    up = expected.write(cfg, expected.UP, job_id=42)
    again = expected.write(cfg, expected.UP, job_id=42)
    assert again.since == up.since and again.updated_at >= up.updated_at  # "up since T" holds
    expected.write(cfg, expected.IDLE)
    raw = json.loads(path.read_text())
    assert (raw["state"], raw["imex_expected"], raw["job_id"]) == ("idle", False, None)
    failed = expected.write(cfg, expected.FAILED, job_id=43, step="prolog/wait-ready",
                            reason="imexctl: prolog/wait-ready: local daemon DOWN after 60s")
    assert expected.read(cfg) == failed and not failed.imex_expected
    assert [n for n in os.listdir(tmp_path / "run") if n != "expected.json"] == []  # no temp
    assert oct(os.stat(path).st_mode & 0o777) == "0o600"   # root's (audit S3-2)


def test_unknown_state_is_a_programming_error(tmp_path):
    with pytest.raises(ValueError, match="unknown expected state 'down'"):
        expected.write(make_cfg(tmp_path), "down")


@pytest.mark.parametrize("content", ["{not json", "[]", '{"state": "maybe"}', "\xff"])
def test_unusable_file_reads_as_absent(tmp_path, content):
    cfg = make_cfg(tmp_path)
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "expected.json").write_text(content, errors="surrogateescape")
    assert expected.read(cfg) is None
    assert expected.write(cfg, expected.IDLE).state == "idle"


def test_unsafe_run_dir_is_refused_without_raising(tmp_path):
    cfg = make_cfg(tmp_path)
    victim = tmp_path / "victim"
    victim.mkdir()
    os.symlink(victim, tmp_path / "run")
    assert expected.write(cfg, expected.UP, job_id=1) is None
    assert os.listdir(victim) == []


def test_transitions_derived_after_each_hook(tmp_path):
    from imexctl.tray.ownership import StateStore
    cfg = make_cfg(tmp_path)
    store = StateStore(cfg.paths.state_dir)

    def outcome(job, hook, result, reason=""):
        store.save_outcome({"job_id": job, "hook": hook, "result": result, "reason": reason,
                            "steps_ms": {}, "finished_at": time.time(), "duration_ms": 5.0})

    t0 = time.time()
    store.save(make_record(job_id=42, phase="ready"))
    outcome(42, "prolog", "ok")
    assert expected.after_hook(cfg, "prolog", 42, t0)["result"] == "ok"
    assert (expected.read(cfg).state, expected.read(cfg).job_id) == ("up", 42)
    # a second job refused because 42 owns the node: 42's state stands
    outcome(43, "prolog", "job-fault", "imexctl: node tray01 IMEX domain is owned by job 42")
    expected.after_hook(cfg, "prolog", 43, t0)
    assert (expected.read(cfg).state, expected.read(cfg).job_id) == ("up", 42)
    store.clear()
    outcome(42, "epilog", "ok")
    expected.after_hook(cfg, "epilog", 42, t0)
    assert expected.read(cfg).state == "idle"
    outcome(44, "prolog", "node-fault", "imexctl: prolog/wait-ready: local daemon DOWN after 15s")
    expected.after_hook(cfg, "prolog", 44, t0)
    now = expected.read(cfg)
    assert (now.state, now.job_id, now.step) == ("failed", 44, "prolog/wait-ready")
    # the epilog of the failed job has nothing to do and records nothing: failed stays
    assert expected.after_hook(cfg, "epilog", 44, time.time() + 1) is None
    assert expected.read(cfg).state == "failed"
