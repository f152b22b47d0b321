"""One version, visible everywhere a rolling upgrade is audited: every log line, the
ownership record, `status --json`, the build-info metric, and `--version` with what it
runs on."""

from __future__ import annotations

import io
import json

from imexctl import __version__
from imexctl.base import log
from imexctl.config import parse_config
from imexctl.tray.ownership import DomainRecord, StateStore


def test_every_log_line_carries_the_version(tmp_path):
    log.setup_logging(tmp_path / "log" / "imexctl.log", "info", "tray01", stderr=None)
    log.bind(job_id=7, hook="prolog")
    log.get_logger().info("something happened")
    line = json.loads((tmp_path / "log" / "imexctl.log").read_text().splitlines()[-1])
    assert line["version"] == __version__ and line["job_id"] == 7


def test_an_unusable_log_falls_back_and_says_where(tmp_path):
    """The controller hooks (SlurmUser) cannot open root's log: the fallback in the
    controller's directory gets the lines, and stderr says so once."""
    blocked = tmp_path / "root-only"
    blocked.write_text("")              # a file where the log's directory should be
    err = io.StringIO()
    log.setup_logging(blocked / "imexctl.log", "info", "ctl", stderr=err,
                      fallback=tmp_path / "ctld" / "imexctl-controller.log")
    log.get_logger().info("decision recorded")
    assert "cannot open log file" in err.getvalue()
    assert f"logging to {tmp_path / 'ctld' / 'imexctl-controller.log'}" in err.getvalue()
    line = json.loads((tmp_path / "ctld" / "imexctl-controller.log").read_text())
    assert line["event"] == "decision recorded" and line["version"] == __version__


def test_record_status_and_metric_name_the_version(tmp_path):
    from imexctl.ops import metrics
    from imexctl.ops import status

    cfg = parse_config({"paths": {"state_dir": f"{tmp_path}/state", "run_dir": f"{tmp_path}/run",
                                  "channel_dir": f"{tmp_path}/ch"}}, None, "tray01")
    StateStore(cfg.paths.state_dir).save(DomainRecord(
        job_id=5, uid=0, user="root", nodes=["tray01"], addresses=["127.0.0.1"], node_id=0,
        digest="d", server_port=1, cmd_port=2, channel=None, channel_rule="controller",
        job_dir="/x", phase="ready", imexctl_version="0.0.9"))
    view = status.collect(cfg, slurm=None, live=False)
    assert view["imexctl_version"] == __version__
    assert view["domain"]["imexctl_version"] == "0.0.9"
    text = metrics.render(cfg, live_fabric=False)
    assert f'imexctl_build_info{{version="{__version__}",python="' in text


def test_the_version_is_single_sourced():
    """pyproject.toml takes the version from imexctl/__init__.py: the installed
    distribution's metadata and the running code say the same."""
    import tomllib
    from importlib.metadata import version
    from pathlib import Path

    project = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml")
                            .read_text())["project"]
    assert "version" not in project and "version" in project["dynamic"]
    assert version("imexctl") == __version__
