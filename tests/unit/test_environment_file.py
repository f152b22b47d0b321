"""imex.environment_file: the generic way to give nvidia-imex and nvidia-imex-ctl an
environment (the simulator's knobs travel this way; a production tray sets nothing)."""

import sys
import time

import pytest

from imexctl.config import ConfigError, parse_config
from imexctl.errors import NodeFault
from imexctl.imex import launcher
from imexctl.imex.ctl import CtlClient


def test_unset_adds_nothing():
    assert launcher.environment_file(None) == {}
    assert parse_config({}, None, "tray01").imex.environment_file is None


def test_key_value_lines_with_comments_and_blank_lines(tmp_path):
    f = tmp_path / "imex.env"
    f.write_text("# the simulator's knobs\n\nIMEXCTL_SIM_FAULTS=/t/faults.json\n"
                 "  LD_LIBRARY_PATH=/opt/x/lib  \nEMPTY=\nSPACED=a b=c\n")
    assert launcher.environment_file(f) == {
        "IMEXCTL_SIM_FAULTS": "/t/faults.json", "LD_LIBRARY_PATH": "/opt/x/lib",
        "EMPTY": "", "SPACED": "a b=c"}


@pytest.mark.parametrize("line", ["export FOO=1", "FOO", "=1", "1FOO=2", "FOO-BAR=1"])
def test_a_line_that_is_not_key_value_is_a_node_fault_naming_file_and_line(tmp_path, line):
    f = tmp_path / "imex.env"
    f.write_text(f"# ok\n{line}\n")
    with pytest.raises(NodeFault) as err:
        launcher.environment_file(f)
    assert err.value.cause == (f"imex.environment_file {f} line 2: not KEY=VALUE "
                               "(KEY: letters, digits, _)")


def test_a_missing_file_is_a_node_fault(tmp_path):
    with pytest.raises(NodeFault) as err:
        launcher.environment_file(tmp_path / "gone.env")
    assert err.value.cause == (f"imex.environment_file {tmp_path}/gone.env: cannot read: "
                               "No such file or directory")


def test_config_key_is_a_path_with_node_expanded(tmp_path):
    cfg = parse_config({"imex": {"environment_file": "/etc/imexctl/{node}.env"}}, None, "tray07")
    assert str(cfg.imex.environment_file) == "/etc/imexctl/tray07.env"
    with pytest.raises(ConfigError):
        parse_config({"imex": {"environment_file": "relative.env"}}, None, "tray07")


def test_the_sim_section_is_gone_from_the_product():
    with pytest.raises(ConfigError, match=r"unknown section \[sim\]"):
        parse_config({"sim": {"time_scale": 0.5}}, None, "tray01")


def test_the_lines_reach_the_ctl(tmp_path):
    f = tmp_path / "imex.env"
    f.write_text("IMEXCTL_SIM_FAULTS=/f.json\n")
    seen = tmp_path / "seen"
    ctl = tmp_path / "ctl"
    ctl.write_text(f'#!/bin/sh\necho "PATH=$PATH SIM=$IMEXCTL_SIM_FAULTS" > "{seen}"\necho READY\n')
    ctl.chmod(0o755)
    assert CtlClient(ctl, tmp_path / "cfg", launcher.environment_file(f)).local() == "READY"
    assert seen.read_text().split() == ["PATH=/usr/sbin:/usr/bin:/sbin:/bin", "SIM=/f.json"]


def test_the_lines_reach_the_directly_launched_daemon(tmp_path):
    f = tmp_path / "imex.env"
    f.write_text("IMEX_SITE_KNOB=42\n")
    seen = tmp_path / "seen"
    daemon = tmp_path / "fake-imex"
    daemon.write_text(f"#!{sys.executable}\nimport os, time\n"
                      f"open({str(seen)!r}, 'w').write(os.environ.get('IMEX_SITE_KNOB', '-'))\n"
                      "time.sleep(60)\n")
    daemon.chmod(0o755)
    ident = launcher.start_direct(daemon, tmp_path / "config.cfg", tmp_path / "stdio",
                                  launcher.environment_file(f))
    try:
        deadline = time.monotonic() + 10
        while not (seen.exists() and seen.read_text()) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert seen.read_text() == "42"
    finally:
        assert launcher.stop_direct(ident, 2.0).ok
