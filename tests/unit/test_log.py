"""Logs: JSON lines in the file with job_id/node/step/duration_ms, a short stderr line."""

import io
import json
import os
import subprocess
import sys

import pytest

from imexctl.base import log


def test_json_file_and_stderr_line(tmp_path):
    err = io.StringIO()
    path = tmp_path / "sub" / "imexctl.log"
    log.setup_logging(path, level="debug", node="tray03", stderr=err, stderr_level="info")
    log.bind(job_id=42)
    timings = {}
    steps = [log.timed_step("render", timings), log.timed_step("start-daemon", timings)]
    with steps[0]:
        pass
    with pytest.raises(RuntimeError):
        with steps[1]:
            raise RuntimeError("boom")
    log.get_logger().info("after the steps")   # the steps, still referenced, unbound theirs
    events = [json.loads(line) for line in path.read_text().splitlines()]
    assert "step" not in events[-1] and events[-1]["event"] == "after the steps"  # unbound
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
from imexctl.base import log
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
from imexctl.base import log
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


def _lines(path):
    return [json.loads(line)["event"] for line in path.read_text().splitlines()]


def test_full_log_is_rotated_once_and_the_new_event_lands_in_a_fresh_file(tmp_path):
    path = tmp_path / "imexctl.log"
    path.write_text(json.dumps({"event": "old"}) + "\n" + "x" * 600 + "\n")
    log.setup_logging(path, node="n", stderr=None, max_bytes=500)
    log.get_logger().info("new")
    assert _lines(path) == ["new"]
    old = (tmp_path / "imexctl.log.1").read_text()
    assert old.startswith('{"event": "old"}') and "new" not in old
    assert path.stat().st_size < 500
    log.setup_logging(path, node="n", stderr=None, max_bytes=500)  # small again: appended
    log.get_logger().info("next")
    assert _lines(path) == ["new", "next"]


def test_rotation_replaces_a_planted_symlink_instead_of_following_it(tmp_path):
    path = tmp_path / "imexctl.log"
    victim = tmp_path / "victim"
    victim.write_text("keep me\n")
    (tmp_path / "imexctl.log.1").symlink_to(victim)
    path.write_text("y" * 500 + "\n")
    log.setup_logging(path, node="n", stderr=None, max_bytes=100)
    log.get_logger().info("after")
    assert victim.read_text() == "keep me\n"
    assert not (tmp_path / "imexctl.log.1").is_symlink()
    assert (tmp_path / "imexctl.log.1").read_text().startswith("y")


def test_a_hook_that_lost_the_race_does_not_rotate_the_fresh_file_again(tmp_path):
    """Two hooks saw the full file; the first renamed it. The second holds the old inode,
    so it must reopen the new file, not rename it over the kept generation."""
    path = tmp_path / "imexctl.log"
    path.write_text("z" * 500 + "\n")
    fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    try:
        os.replace(path, tmp_path / "imexctl.log.1")  # the winner's rename
        path.write_text(json.dumps({"event": "winner"}) + "\n")
        assert log._rotate(fd, path, 100) is True
    finally:
        os.close(fd)
    assert _lines(path) == ["winner"]
    assert (tmp_path / "imexctl.log.1").read_text().startswith("z")


def test_max_bytes_zero_never_rotates(tmp_path):
    path = tmp_path / "imexctl.log"
    path.write_text("w" * 500 + "\n")
    log.setup_logging(path, node="n", stderr=None, max_bytes=0)
    log.get_logger().info("appended")
    assert path.read_text().startswith("w") and not (tmp_path / "imexctl.log.1").exists()


def test_a_rotation_that_cannot_rename_keeps_logging_to_the_file(tmp_path):
    path = tmp_path / "imexctl.log"
    path.write_text("v" * 600 + "\n")
    (tmp_path / "imexctl.log.1").mkdir()          # os.replace onto a directory fails
    log.setup_logging(path, node="n", stderr=None, max_bytes=100)
    log.get_logger().info("still here")
    assert _lines_tail(path) == "still here"


def _lines_tail(path):
    return json.loads(path.read_text().splitlines()[-1])["event"]


def test_timestamps_are_iso_utc_with_microseconds():
    from datetime import datetime, timezone

    from imexctl.base.log import utc_timestamp

    for now in (0.0, 1795440600.5, 1795440600.000001, 1795440600.9999996):
        text = utc_timestamp(now)
        assert text.endswith("Z") and len(text) == len("2026-11-23T15:30:00.123456Z")
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
        assert abs(parsed.timestamp() - now) < 2e-6 and parsed.tzinfo == timezone.utc
