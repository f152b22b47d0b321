"""Logs: JSON lines in the file with job_id/node/step/duration_ms, a short stderr line."""

import io
import json
import os
import subprocess
import sys

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


def _fresh(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)


def test_logging_does_not_pay_for_asyncio_and_structlog_stays_whole(tmp_path):
    """The hook path loads structlog's processor chain only; anyone else still gets the
    whole package (its __init__ runs on first use)."""
    out = _fresh(f"""
import sys, json
from pathlib import Path
from imexctl import log
log.setup_logging(Path({str(tmp_path / 'l.log')!r}), node="tray01", stderr=None)
log.bind(job_id=7)
with log.timed_step("render"):
    pass
print(json.dumps(sorted(m for m in ("asyncio", "ssl", "structlog.stdlib", "structlog.dev")
                        if m in sys.modules)))
import structlog
print(structlog.get_logger.__module__, "asyncio" in sys.modules)
""")
    assert out.returncode == 0, out.stderr
    first, second = out.stdout.splitlines()
    assert json.loads(first) == []
    assert second == "structlog._config True"
    event = json.loads((tmp_path / "l.log").read_text().splitlines()[-1])
    assert (event["event"], event["step"], event["job_id"], event["level"]) == (
        "step done", "render", 7, "info")
    assert event["timestamp"].endswith("Z")


def test_symlinked_log_dir_is_not_followed(tmp_path):
    victim = tmp_path / "victim"
    victim.mkdir()
    (tmp_path / "logdir").symlink_to(victim)
    err = io.StringIO()
    log.setup_logging(tmp_path / "logdir" / "imexctl.log", node="n", stderr=err)
    assert "cannot open log file" in err.getvalue() and "not a directory" in err.getvalue()
    assert os.listdir(victim) == []


def test_log_dir_writable_by_others_is_refused(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    err = io.StringIO()
    log.setup_logging(shared / "imexctl.log", node="n", stderr=err)
    assert "others could plant files there" in err.getvalue()
    assert not (shared / "imexctl.log").exists()


@pytest.mark.parametrize("kind", ["fifo", "dir"])
def test_non_regular_log_file_is_refused_without_blocking(tmp_path, kind):
    path = tmp_path / "imexctl.log"
    os.mkfifo(path) if kind == "fifo" else path.mkdir()
    out = _fresh(f"""
import io, sys
from pathlib import Path
from imexctl import log
err = io.StringIO()
log.setup_logging(Path({str(path)!r}), node="n", stderr=err)
log.get_logger().error("reported anyway")
print(err.getvalue())
""")
    assert out.returncode == 0, out.stderr
    assert "cannot open log file" in out.stdout and "reported anyway" in out.stdout


class BrokenPipe(io.StringIO):
    def write(self, _text):
        raise BrokenPipeError(32, "Broken pipe")


def test_stderr_write_errors_do_not_replace_the_outcome(tmp_path):
    """F-21: a hook whose stderr reader is gone still logs to the file and carries on."""
    path = tmp_path / "imexctl.log"
    log.setup_logging(path, node="tray01", stderr=BrokenPipe(), stderr_level="info")
    with pytest.raises(RuntimeError, match="the real failure"):
        with log.timed_step("fabric"):
            raise RuntimeError("the real failure")
    events = [json.loads(line) for line in path.read_text().splitlines()]
    assert [e["event"] for e in events] == ["step failed"]
    closed = io.StringIO()
    closed.close()
    log.setup_logging(path, node="tray01", stderr=closed)
    log.get_logger().error("written to the file only")
    assert json.loads(path.read_text().splitlines()[-1])["event"] == "written to the file only"


def test_level_filter(tmp_path):
    path = tmp_path / "imexctl.log"
    log.setup_logging(path, level="warning", node="n", stderr=None)
    logger = log.get_logger()
    logger.debug("d")
    logger.info("i")
    logger.warning("w")
    logger.error("e", code=3)
    events = [json.loads(line) for line in path.read_text().splitlines()]
    assert [(e["event"], e["level"]) for e in events] == [("w", "warning"), ("e", "error")]
    assert events[1]["code"] == 3 and events[1]["node"] == "n"


def test_critical_and_exception(tmp_path):
    path = tmp_path / "imexctl.log"
    log.setup_logging(path, node="n", stderr=None)
    try:
        raise KeyError("gone")
    except KeyError:
        log.get_logger().exception("lookup failed", key="x")
    log.get_logger().critical("stop")
    first, second = [json.loads(line) for line in path.read_text().splitlines()]
    assert (first["level"], first["key"]) == ("error", "x")
    assert "KeyError: 'gone'" in first["exception"]
    assert (second["event"], second["level"]) == ("stop", "critical")
