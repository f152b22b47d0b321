"""Logs: JSON lines in the file with job_id/node/step/duration_ms, a short stderr line."""

import io
import json

import pytest

from imexctl import log


def test_json_file_and_stderr_line(tmp_path):
    err = io.StringIO()
    path = tmp_path / "sub" / "imexctl.log"
    log.setup_logging(path, level="debug", node="tray03", stderr=err, stderr_level="info")
    log.bind(job_id=42)
    timings = {}
    with log.timed_step("render", timings):
        pass
    with pytest.raises(RuntimeError):
        with log.timed_step("start-daemon", timings):
            raise RuntimeError("boom")
    events = [json.loads(line) for line in path.read_text().splitlines()]
    done = [e for e in events if e["event"] == "step done"][0]
    assert done["job_id"] == 42 and done["node"] == "tray03" and done["step"] == "render"
    assert isinstance(done["duration_ms"], float)
    failed = [e for e in events if e["event"] == "step failed"][0]
    assert failed["step"] == "start-daemon" and failed["error"] == "boom"
    assert set(timings) == {"render", "start-daemon"}
    assert "imexctl[tray03] job 42 start-daemon: step failed" in err.getvalue()


def test_unwritable_log_file_falls_back_to_stderr(tmp_path):
    target = tmp_path / "real.log"
    link = tmp_path / "link.log"
    link.symlink_to(target)
    err = io.StringIO()
    log.setup_logging(link, node="n", stderr=err)  # O_NOFOLLOW refuses the symlink
    assert "cannot open log file" in err.getvalue()
    log.get_logger().error("still reported")
    assert "still reported" in err.getvalue()
    assert not target.exists()
