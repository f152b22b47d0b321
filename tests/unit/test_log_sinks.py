"""Logs that reach the site's pipeline: syslog and journald sinks, checked by reading
the datagrams a real unix socket receives (what rsyslog or journald would get)."""

from __future__ import annotations

import json
import socket

import pytest

from imexctl import __version__
from imexctl.base import log
from imexctl.config import parse_config
from imexctl.errors import ConfigError


def listener(path):
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(path))
    sock.settimeout(2)
    return sock


def journal_fields(data: bytes) -> dict[str, str]:
    """Parse journald's native protocol (both field forms)."""
    out, i = {}, 0
    while i < len(data):
        nl = data.index(b"\n", i)
        line = data[i:nl]
        if b"=" in line:
            name, _, value = line.partition(b"=")
            out[name.decode()] = value.decode()
            i = nl + 1
        else:
            size = int.from_bytes(data[nl + 1:nl + 9], "little")
            out[line.decode()] = data[nl + 9:nl + 9 + size].decode()
            i = nl + 9 + size + 1
    return out


def test_syslog_sink_sends_daemon_facility_json(tmp_path):
    sock = listener(tmp_path / "log.sock")
    log.setup_logging(tmp_path / "imexctl.log", "info", "tray01", stderr=None,
                      sink="syslog", socket_path=tmp_path / "log.sock")
    log.bind(job_id=42, hook="prolog", restart_count=1)
    log.get_logger().warning("IMEX domain DEGRADED", step="wait-ready")
    data = sock.recv(65536).decode()
    head, _, body = data.partition(": ")
    assert head.startswith("<28>imexctl[")           # daemon (3) * 8 + warning (4)
    event = json.loads(body)
    assert (event["event"], event["job_id"], event["step"], event["version"]) == \
        ("IMEX domain DEGRADED", 42, "wait-ready", __version__)
    assert not (tmp_path / "imexctl.log").read_text()   # the socket took it


def test_journal_sink_one_field_per_key_and_multiline_values(tmp_path):
    sock = listener(tmp_path / "journal.sock")
    log.setup_logging(tmp_path / "imexctl.log", "info", "tray01", stderr=None,
                      sink="journal", socket_path=tmp_path / "journal.sock")
    log.bind(job_id=7, hook="epilog")
    log.get_logger().error("teardown failed", detail="line one\nline two")
    fields = journal_fields(sock.recv(65536))
    assert fields["SYSLOG_IDENTIFIER"] == "imexctl" and fields["PRIORITY"] == "3"
    assert fields["IMEXCTL_JOB_ID"] == "7" and fields["IMEXCTL_HOOK"] == "epilog"
    assert fields["IMEXCTL_DETAIL"] == "line one\nline two"
    assert fields["IMEXCTL_VERSION"] == __version__
    assert "teardown failed" in fields["MESSAGE"]


def test_a_missing_socket_loses_nothing_the_file_takes_it(tmp_path):
    log.setup_logging(tmp_path / "imexctl.log", "info", "tray01", stderr=None,
                      sink="journal", socket_path=tmp_path / "no-journald")
    log.get_logger().info("decision recorded")
    line = json.loads((tmp_path / "imexctl.log").read_text())
    assert line["event"] == "decision recorded"


def test_the_sink_is_a_checked_config_key():
    cfg = parse_config({"log": {"sink": "journal"}}, None, "tray01")
    assert cfg.log.sink == "journal" and cfg.log.socket is None
    with pytest.raises(ConfigError, match="log.sink"):
        parse_config({"log": {"sink": "kafka"}}, None, "tray01")
