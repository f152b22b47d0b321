"""imexctl.imex.ctl against stub nvidia-imex-ctl executables (the system boundary).

Audit F-04: every malformed answer is domain UNKNOWN (or local UNAVAILABLE), never an
exception. Audit F-23: on timeout the ctl's whole process group is killed.
"""

from __future__ import annotations

import json
import os
import stat
import time
from pathlib import Path

import pytest

from imexctl.imex.ctl import CtlClient, query_domain, query_local

GOOD = {"nodes": {"0": {"status": "READY", "host": "10.0.0.1", "hostName": "",
                        "connections": {"0": {"host": "10.0.0.1", "status": "CONNECTED"},
                                        "1": {"host": "10.0.0.2", "status": "CONNECTED"}},
                        "changed": True, "version": "580.95.05"},
                  "1": {"status": "READY", "host": "10.0.0.2", "hostName": "",
                        "connections": {"0": {"host": "10.0.0.1", "status": "CONNECTED"},
                                        "1": {"host": "10.0.0.2", "status": "CONNECTED"}},
                        "changed": True, "version": "580.95.05"}},
        "timestamp": "9/4/2026 00:37:39.905", "status": "UP"}


def stub(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "nvidia-imex-ctl"
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def printing(tmp_path: Path, data: bytes, rc: int = 0) -> Path:
    out = tmp_path / "out.bin"
    out.write_bytes(data)
    return stub(tmp_path, f"cat '{out}'\nexit {rc}\n")


def test_good_answer_is_up(tmp_path):
    view = query_domain(printing(tmp_path, json.dumps(GOOD).encode()), tmp_path / "c")
    assert view.status == "UP" and view.up and view.error == ""
    assert view.members[1]["status"] == "READY" and 9 not in view.members
    assert view.problems() == []
    assert view.members[1] == {"status": "READY", "host": "10.0.0.2", "hostName": "",
                               "version": "580.95.05",
                               "connections": {0: {"host": "10.0.0.1", "status": "CONNECTED"},
                                               1: {"host": "10.0.0.2", "status": "CONNECTED"}}}


def test_degraded_answer_names_problems(tmp_path):
    data = json.loads(json.dumps(GOOD))
    data["status"] = "DEGRADED"
    data["nodes"]["1"]["status"] = "UNAVAILABLE"
    data["nodes"]["0"]["connections"]["1"]["status"] = "NEVER_CONNECTED"
    view = query_domain(printing(tmp_path, json.dumps(data).encode()), tmp_path / "c")
    assert not view.up
    assert view.problems() == ["10.0.0.1->10.0.0.2 NEVER_CONNECTED", "10.0.0.2 UNAVAILABLE"]


def _mutate(fn):
    data = json.loads(json.dumps(GOOD))
    fn(data)
    return json.dumps(data).encode()


MALFORMED = {
    "member not an object": _mutate(lambda d: d["nodes"].__setitem__("1", "READY")),
    "connection key not an int": _mutate(
        lambda d: d["nodes"]["0"]["connections"].__setitem__("x", {"status": "CONNECTED"})),
    "connection not an object": _mutate(
        lambda d: d["nodes"]["0"]["connections"].__setitem__("1", "CONNECTED")),
    "connections a list": _mutate(lambda d: d["nodes"]["0"].__setitem__("connections", [])),
    "member key not an int": _mutate(lambda d: d["nodes"].__setitem__("two", GOOD["nodes"]["1"])),
    "status not a string": _mutate(lambda d: d["nodes"]["0"].__setitem__("status", 5)),
    "unknown domain status": _mutate(lambda d: d.__setitem__("status", "SIDEWAYS")),
    "nodes a list": _mutate(lambda d: d.__setitem__("nodes", [1, 2])),
    "top level a list": b"[1, 2]",
    "non-UTF-8": json.dumps(GOOD).encode().replace(b"READY", b"READ\xff", 1),
    "not JSON": b"Domain State: UP\n",
    "deep nesting": b"[" * 100000 + b"]" * 100000,
}


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_malformed_domain_answer_is_unknown(tmp_path, name):
    view = query_domain(printing(tmp_path, MALFORMED[name]), tmp_path / "c")
    assert view.status == "UNKNOWN"
    assert view.error.startswith("unexpected nvidia-imex-ctl -N -j output: ")
    assert not view.up and view.problems() == []


def test_nonzero_exit_is_unknown_with_text(tmp_path):
    ctl = stub(tmp_path, "echo 'Failed to read node configuration file /x.'\nexit 255\n")
    view = query_domain(ctl, tmp_path / "c")
    assert (view.status, view.error) == ("UNKNOWN", "Failed to read node configuration file /x.")


def test_local_state_words(tmp_path):
    assert query_local(printing(tmp_path, b"READY\n"), tmp_path / "c") == "READY"
    assert query_local(printing(tmp_path, b"READY\n", rc=1), tmp_path / "c") == "UNAVAILABLE"
    assert query_local(printing(tmp_path, b"\xffREADY\n"), tmp_path / "c") == \
        "UNAVAILABLE (-q output is not UTF-8)"
    assert query_local(printing(tmp_path, b""), tmp_path / "c") == "UNAVAILABLE"
    assert query_local(tmp_path / "missing-ctl", tmp_path / "c").startswith("UNAVAILABLE (cannot run")


def test_args_and_env_reach_the_ctl(tmp_path):
    seen = tmp_path / "seen"
    ctl = stub(tmp_path, f'echo "$@ PATH=$PATH SIM=$IMEXCTL_SIM_FAULTS" > "{seen}"\necho READY\n')
    client = CtlClient(ctl, tmp_path / "cfg", {"IMEXCTL_SIM_FAULTS": "/f.json"})
    assert client.local() == "READY"
    assert seen.read_text().split() == ["-c", str(tmp_path / "cfg"), "-q",
                                        "PATH=/usr/sbin:/usr/bin:/sbin:/bin", "SIM=/f.json"]


def test_timeout_kills_the_whole_process_group(tmp_path):
    pidfile = tmp_path / "child.pid"
    ctl = stub(tmp_path, f'sleep 300 &\necho $! > "{pidfile}"\nwait\n')
    started = time.monotonic()
    view = CtlClient(ctl, tmp_path / "c", timeout_s=0.5).domain()
    assert time.monotonic() - started < 5
    assert view.status == "UNKNOWN" and "timed out after 0.5s" in view.error
    child = int(pidfile.read_text())
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        with open(f"/proc/{child}/stat") as f:     # a zombie child of init counts as gone
            if f.read().split(") ", 1)[1].startswith("Z"):
                break
        time.sleep(0.05)
    else:
        pytest.fail(f"the ctl's child {child} outlived the timeout")
    assert CtlClient(ctl, tmp_path / "c", timeout_s=0.3).local() == "UNAVAILABLE"
