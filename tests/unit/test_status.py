"""`imexctl status` on an idle node, with a live-looking record, and with leaks."""

import json
import os
import subprocess
import sys

import psutil

from imexctl.config import parse_config
from imexctl.state import DaemonIdentity, StateStore
from imexctl.status import collect, render_json, render_table
from tests.unit.test_state_fsutil import make_record


def cfg_for(tmp_path):
    return parse_config({"paths": {"state_dir": f"{tmp_path}/state",
                                   "run_dir": f"{tmp_path}/run",
                                   "channel_dir": f"{tmp_path}/ch",
                                   "imex_ctl_binary": f"{tmp_path}/no-ctl"}},
                        None, "tray01")


def test_idle_node(tmp_path):
    status = collect(cfg_for(tmp_path))
    assert status["state"] == "idle" and status["domain"] is None and status["problems"] == []
    assert "domain:        none" in render_table(status)
    assert json.loads(render_json(status))["node"] == "tray01"


def test_record_with_dead_daemon_and_leaked_channel(tmp_path):
    cfg = cfg_for(tmp_path)
    (tmp_path / "ch").mkdir()
    (tmp_path / "ch/channel3").write_text("")  # stands in for a leaked node in listing
    StateStore(cfg.paths.state_dir).save(make_record(
        channel=8, daemon=DaemonIdentity(pid=999999, create_time=1.0, exe="/x")))
    status = collect(cfg)
    assert status["state"] == "degraded"
    assert status["domain"]["daemon"]["alive"] is False
    assert "daemon pid 999999 is not running" in status["problems"]
    assert "leaked channel3" in status["problems"]
    assert any("channel8 missing" in p for p in status["problems"])
    table = render_table(status)
    assert "job:           7 (user nobody, uid 65534)" in table and "NOT RUNNING" in table


def test_live_daemon_is_reported_alive(tmp_path):
    cfg = cfg_for(tmp_path)
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        ps = psutil.Process(proc.pid)
        StateStore(cfg.paths.state_dir).save(make_record(
            channel=None, daemon=DaemonIdentity(pid=proc.pid, create_time=ps.create_time(),
                                                exe=ps.exe())))
        status = collect(cfg, live=True)
        assert status["domain"]["daemon"]["alive"] is True
        # ctl binary is missing: the live query reports it instead of crashing
        assert any("cannot run" in p for p in status["problems"])
    finally:
        proc.kill()
        proc.wait()
