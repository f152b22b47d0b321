"""Pure functions: config parsing, fault specs, rendering, back-off."""

from __future__ import annotations

import json

import pytest

from imexctl_sim import config as simcfg
from imexctl_sim import faults as simfaults
from imexctl_sim import view as simview
from imexctl_sim.daemon import backoff


def test_config_keys(tmp_path):
    text = """# comment
SERVER_PORT=40123
IMEX_NODE_CONFIG_FILE=/x/nodes.cfg
BIND_INTERFACE_IP=
IMEX_CMD_ENABLED=1
IMEX_CMD_PORT=40124
IMEX_CMD_BIND_INTERFACE_IP=10.0.0.1
IMEX_WAIT_FOR_QUORUM=NONE
IMEX_NODE_DISCONNECTED_GRACE_TIME=0
DAEMONIZE=0
LOG_FILE_NAME=/tmp/x.log
LOG_LEVEL=3
IMEX_ENABLE_AUTH_ENCRYPTION=0
IMEX_AUTH_SOURCE=FILE
"""
    cfg = simcfg.DaemonConfig.parse(tmp_path / "c", text)
    assert (cfg.server_port, cfg.cmd_port, cfg.cmd_enabled) == (40123, 40124, True)
    assert cfg.node_config_file == "/x/nodes.cfg"
    assert (cfg.cmd_bind_ip, cfg.wait_for_quorum, cfg.grace_time) == ("10.0.0.1", "NONE", 0)
    assert (cfg.daemonize, cfg.log_file, cfg.log_level) == (False, "/tmp/x.log", 3)
    defaults = simcfg.DaemonConfig.parse(tmp_path / "c", "")
    assert (defaults.server_port, defaults.daemonize, defaults.cmd_enabled) == (50000, True, False)
    with pytest.raises(simcfg.SimConfigError):
        simcfg.DaemonConfig.parse(tmp_path / "c", "SERVER_PORT=abc\n")


def test_node_list_identify(tmp_path, monkeypatch):
    p = tmp_path / "nodes"
    p.write_text("# header\n127.0.9.2\n\n127.0.9.3\n127.0.9.4\n")
    nodes = simcfg.read_node_list(p)
    assert nodes.entries == ("127.0.9.2", "127.0.9.3", "127.0.9.4")
    monkeypatch.setenv("IMEXCTL_SIM_LOCAL_IP", "127.0.9.3")
    assert simcfg.identify(nodes) == (1, "127.0.9.3")
    assert simcfg.identify(nodes, bind_ip="127.0.9.4") == (2, "127.0.9.4")
    monkeypatch.setenv("IMEXCTL_SIM_LOCAL_IP", "10.9.9.9")
    assert simcfg.identify(nodes) is None
    other = tmp_path / "other"
    other.write_text("127.0.9.3\n127.0.9.2\n127.0.9.4\n")
    assert simcfg.read_node_list(other).digest != nodes.digest


def test_fault_sources_merge(tmp_path):
    f = tmp_path / "faults.json"
    f.write_text(json.dumps({"slow_start": 1, "faults": {"never_ready": True},
                             "nodes": {"2": {"version": "1.0"}, "127.0.0.5": {"crash_after": 3},
                                       "1": {"fail_start": True}}}))
    env = {"IMEXCTL_SIM_FAULTS": str(f), "IMEXCTL_SIM_FAULT": "refuse_peer=3,hang_on_sigterm"}
    got = simfaults.load(2, ["127.0.0.5"], env)
    assert got.active() == {"never_ready": True, "hang_on_sigterm": True, "crash_after": 3.0,
                            "slow_start": 1.0, "version": "1.0", "refuse_peer": ["3"]}
    assert got.refuses(3, "x") and not got.refuses(1, "y")
    assert simfaults.load(0, [], {"IMEXCTL_SIM_FAULTS": str(tmp_path / "none")}).active() == {}
    with pytest.raises(simfaults.FaultError):
        simfaults.load(0, [], {"IMEXCTL_SIM_FAULT": "explode"})
    f.write_text("{not json")
    with pytest.raises(simfaults.FaultError):
        simfaults.load(0, [], {"IMEXCTL_SIM_FAULTS": str(f)})


def test_backoff_schedule():
    assert [backoff(i) for i in range(6)] == [15, 31, 62, 125, 250, 300]


def test_text_rendering_matches_reference_sample():
    """Lines from the real 570.172 18-node output (reference imex.md §2.3)."""
    hosts = {0: "172.31.48.81", 1: "172.31.48.98", 17: "172.31.56.47"}
    nodes = [simview.NodeView(i, hosts.get(i, f"172.31.50.{i}"), "READY", "570.172", "",
                              {j: "CONNECTED" for j in range(18)}) for i in range(18)]
    out = simview.render_text(simview.DomainView(nodes, "5/12/2025 06:08:10.580"))
    lines = out.splitlines()
    for expected in [
        "Connectivity Table Legend:",
        "D - Disconnected - Connection was lost, and clean up has been triggreed.",
        "5/12/2025 06:08:10.580",
        "Nodes:",
        "Node #0   - 172.31.48.81    - READY                - Version: 570.172",
        "Node #1   - 172.31.48.98    - READY                - Version: 570.172",
        "Node #17  - 172.31.56.47    - READY                - Version: 570.172",
        "       0        C   C   C   C   C   C   C   C   C   C   C   C   C   C   C   C   C   C",
        "      17        C   C   C   C   C   C   C   C   C   C   C   C   C   C   C   C   C   C",
        "Domain State: UP",
    ]:
        assert expected in lines
    assert any(line.startswith(" Nodes From\\To  0   1   2   ") and line.endswith("16  17")
               for line in lines)
    assert lines[-1] == "Domain State: UP" and lines[-2] == ""


def test_json_shape_and_domain_states():
    nodes = [simview.NodeView(0, "10.0.0.1", "READY", "580.95.05", "gpu-node-1",
                              {0: "CONNECTED", 1: "RECOVERING"}),
             simview.NodeView(1, "10.0.0.2", "UNAVAILABLE", "", "",
                              {0: "INVALID", 1: "INVALID"})]
    view = simview.DomainView(nodes, "9/4/2026 00:37:39.905")
    obj = simview.to_json_obj(view, with_hostname=True)
    assert obj["status"] == "DEGRADED" and list(obj)[-1] == "status"
    assert obj["nodes"]["0"]["hostName"] == "gpu-node-1"
    assert obj["nodes"]["1"]["hostName"] == "N/A"
    assert obj["nodes"]["0"]["connections"]["1"] == {"host": "10.0.0.2", "status": "RECOVERING",
                                                     "changed": True}
    assert simview.to_json_obj(view)["nodes"]["0"]["hostName"] == ""
    assert simview.DomainView(nodes, "", local_up=False).status == "DOWN"
    text = simview.render_text(view)
    assert "       0        C   R" in text and "       1        I   I" in text
