"""Real multi-process domains of simulated trays on loopback."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time

from imexctl_sim import protocol
from imexctl_sim.view import LEGEND

from tests.support.sim import PY, poll

TS = re.compile(r"^\d{1,2}/\d{1,2}/\d{4} \d{2}:\d{2}:\d{2}\.\d{3}$")


def assert_all_up(view: dict, n: int) -> None:
    assert view["status"] == "UP"
    assert sorted(view["nodes"], key=int) == [str(i) for i in range(n)]
    for node in view["nodes"].values():
        assert node["status"] == "READY"
        assert sorted(node["connections"], key=int) == [str(i) for i in range(n)]
        assert all(c["status"] == "CONNECTED" for c in node["connections"].values())


def test_four_trays_up_with_real_output_shapes(sim):
    dom = sim(4)
    dom.start_all()
    view = dom.wait_up()
    assert_all_up(view, 4)
    # -N -j: key order as real (status last, DCGM relies on rfind), timestamp format.
    assert list(view) == ["nodes", "timestamp", "status"]
    assert TS.match(view["timestamp"])
    node0 = view["nodes"]["0"]
    assert list(node0) == ["status", "host", "hostName", "connections", "changed", "version"]
    assert node0["host"] == dom.addresses[0] and node0["hostName"] == ""
    assert node0["version"] == "580.95.05"
    assert node0["connections"]["3"] == {"host": dom.addresses[3], "status": "CONNECTED",
                                         "changed": True}
    # every tray agrees
    for tray in dom.trays[1:]:
        assert tray.domain_json()["status"] == "UP"
    # -q: exactly "READY\n", exit 0
    q = dom.trays[2].ctl("-q")
    assert (q.returncode, q.stdout) == (0, "READY\n")
    # -N text, line by line
    text = dom.trays[0].ctl("-N")
    assert text.returncode == 0
    lines = text.stdout.split("\n")
    legend = LEGEND.rstrip("\n").split("\n")
    assert lines[:len(legend)] == legend
    rest = lines[len(legend):]
    assert rest[0] == "" and TS.match(rest[1]) and rest[2] == "Nodes:"
    a = dom.addresses
    assert rest[3:7] == [f"Node #{i}   - {a[i]:<15} - READY                - Version: 580.95.05"
                         for i in range(4)]
    assert rest[7:13] == ["", " Nodes From\\To  0   1   2   3",
                          "       0        C   C   C   C", "       1        C   C   C   C",
                          "       2        C   C   C   C", "       3        C   C   C   C"]
    assert rest[13:] == ["", "Domain State: UP", ""]
    # -H: host names in JSON
    hv = dom.trays[0].ctl("-N", "-j", "-H")
    assert '"hostName": "tray01"' in hv.stdout
    # the log resembles the real daemon's
    log = dom.trays[1].log_text()
    assert log.startswith("IMEX Log initializing at: ")
    assert re.search(r"\[\w{3} \d{2} \d{4} [\d:]{8}\] \[INFO\] \[tid \d+\] IMEX version "
                     r"580\.95\.05 is running with the following configuration options", log)
    assert f"Identified this node as ID 1, using bind IP of '{a[1]}'" in log
    assert "Creating gRPC channels to all peers (nPeers = 4)." in log


def test_eighteen_trays_up(sim):
    dom = sim(18)
    dom.start_all()
    view = dom.wait_up(timeout=30)
    assert_all_up(view, 18)
    text = dom.trays[17].ctl("-N").stdout
    assert "Node #17  - " in text and text.endswith("Domain State: UP\n")
    assert "      17        C   C" in text


def test_node_map_mismatch_shows_M(sim):
    dom = sim(2)
    t0, t1 = dom.trays
    t1.write_config(nodes=dom.addresses + ["127.0.0.250"])   # different node list
    dom.start_all()

    def mismatch():
        view = t0.domain_json()
        return view if view["nodes"]["0"]["connections"]["1"]["status"] == \
            "NODE_MAP_MISMATCH" else None
    view = poll(mismatch, 10, what="!M!")
    assert view["status"] == "DEGRADED"
    text = t0.ctl("-N").stdout
    assert "       0        C   !M!" in text
    assert "Domain State: DEGRADED" in text
    assert "Node map mismatch with node 1" in t0.log_text()


def test_node_map_mismatch_fault_shows_M_both_ways_with_identical_configs(sim):
    """The fault the harness's fault matrix uses: configs are byte-identical, yet the
    faulty tray's daemon announces another node map, so both sides show !M!."""
    dom = sim(2)
    dom.set_faults({"nodes": {"1": {"node_map_mismatch": True}}})
    dom.start_all()

    def mismatch():
        views = [t.domain_json() for t in dom.trays]
        return views if (views[0]["nodes"]["0"]["connections"]["1"]["status"],
                         views[1]["nodes"]["1"]["connections"]["0"]["status"]) == \
            ("NODE_MAP_MISMATCH", "NODE_MAP_MISMATCH") else None
    views = poll(mismatch, 10, what="!M! both ways")
    assert all(v["status"] != "UP" for v in views)
    assert "Node map mismatch with node 0" in dom.trays[1].log_text()


def test_version_fault_shows_V(sim):
    dom = sim(3)
    dom.set_faults({"nodes": {"2": {"version": "570.172"}}})
    dom.start_all()

    def mismatch():
        view = dom.trays[0].domain_json()
        conns = view["nodes"]["0"]["connections"]
        return view if (conns["2"]["status"], conns["1"]["status"]) == (
            "VERSION_MISMATCH", "CONNECTED") else None
    view = poll(mismatch, 10, what="!V!")
    assert view["nodes"]["2"]["version"] == "570.172"
    assert view["nodes"]["0"]["connections"]["1"]["status"] == "CONNECTED"
    text = dom.trays[0].ctl("-N").stdout
    assert "       0        C   C   !V!" in text
    assert "Domain State: DEGRADED" in text


def test_sigterm_peer_recovering_then_reconnect(sim):
    dom = sim(3)
    dom.start_all()
    dom.wait_up()
    t0, _, t2 = dom.trays
    t2.signal(signal.SIGTERM)
    assert t2.wait_exit(5) == 0
    view = poll(lambda: (v := t0.domain_json())["nodes"]["1"]["connections"]["2"]["status"]
                == "RECOVERING" and v, 5, what="RECOVERING")
    assert view["status"] == "DEGRADED"
    assert view["nodes"]["0"]["connections"]["2"]["status"] == "RECOVERING"
    assert view["nodes"]["1"]["connections"]["2"]["status"] == "RECOVERING"
    assert view["nodes"]["2"]["status"] == "UNAVAILABLE"
    assert "Received signal SIGTERM, shutting down." in t2.log_text()
    # back-off schedule 15, 31, 62 s x time scale 0.01
    poll(lambda: "in 0.62 s (attempt 3)" in t0.log_text(), 10, what="back-off")
    log = t0.log_text()
    assert "Connection to node 2 (%s) shut down; recovering." % dom.addresses[2] in log
    assert "in 0.15 s (attempt 1)" in log and "in 0.31 s (attempt 2)" in log
    # a clean stop leaves persist.dat with the key only: the restart is READY at once
    assert json.loads((t2.run_dir / "persist.dat").read_text())["importers"] == {}
    t2.start()
    dom.wait_up()
    assert "persist.dat lists no previous importers." in t2.log_text().split(
        "IMEX Log initializing")[-1]


def test_grace_time_turns_recovering_into_disconnected(sim):
    dom = sim(2)
    dom.trays[0].write_config(IMEX_NODE_DISCONNECTED_GRACE_TIME=10)   # x0.01 = 0.1 s
    dom.start_all()
    dom.wait_up()
    dom.trays[1].signal(signal.SIGTERM)
    dom.trays[1].wait_exit(5)
    poll(lambda: dom.trays[0].domain_json()["nodes"]["0"]["connections"]["1"]["status"]
         == "DISCONNECTED", 5, what="DISCONNECTED")
    assert "       0        C   D" in dom.trays[0].ctl("-N").stdout


def test_sigkill_restart_waits_for_recovery(sim):
    dom = sim(2)
    t0, t1 = dom.trays
    dom.start_all()
    dom.wait_up()
    dom.kill_all()
    # one persist.dat per host, naming the peer that connected (a possible importer)
    for t, peer in ((t0, t1), (t1, t0)):
        data = json.loads((t.run_dir / "persist.dat").read_text())
        assert data["importers"] == {str(peer.idx): peer.addr}
    t0.start()
    poll(lambda: t0.query() == "WAITING_FOR_RECOVERY", 10, what="WAITING_FOR_RECOVERY")
    time.sleep(0.3)
    assert t0.query() == "WAITING_FOR_RECOVERY"
    assert "not shut down cleanly" in t0.log_text()
    t1.start()
    dom.wait_up()
    assert t0.query() == "READY"
    # a clean stop leaves no outstanding importers
    for t in dom.trays:
        t.signal(signal.SIGTERM)
        assert t.wait_exit(5) == 0
        assert json.loads((t.run_dir / "persist.dat").read_text())["importers"] == {}


def test_sigkill_restart_with_quorum_none_is_ready(sim):
    dom = sim(2)
    dom.trays[0].write_config(IMEX_WAIT_FOR_QUORUM="NONE")
    dom.start_all()
    dom.wait_up()
    dom.trays[0].signal(signal.SIGKILL)
    dom.trays[1].signal(signal.SIGKILL)
    dom.trays[0].wait_exit(5)
    dom.trays[0].start()
    poll(lambda: dom.trays[0].query() == "READY", 10, what="READY")


def test_sigkill_restart_with_other_node_list_discards_persist(sim):
    dom = sim(2)
    dom.start_all()
    dom.wait_up()
    dom.kill_all()
    dom.trays[0].write_config(nodes=dom.addresses[:1])   # new job: a one-node domain
    dom.trays[0].start()
    poll(lambda: dom.trays[0].query() == "READY", 10, what="READY")


def test_unreadable_node_config_exit_255(sim):
    dom = sim(1)
    t = dom.trays[0]
    t.nodes_cfg.unlink()
    for args in (("-N",), ("-N", "-j")):
        proc = t.ctl(*args)
        assert proc.returncode == 255
        assert proc.stdout == f"Failed to read node configuration file {t.nodes_cfg}.\n"


def test_daemon_without_matching_address_fails(sim):
    dom = sim(2)
    t = dom.trays[0]
    proc = subprocess.run([PY, "-m", "imexctl_sim.daemon", "-c", str(t.cfg)],
                          capture_output=True, text=True, timeout=10,
                          env=t.env({"IMEXCTL_SIM_LOCAL_IP": "127.0.0.254"}))
    msg = ("No matching network interface found for any IP addresses in the node "
           f"configuration file {t.nodes_cfg}.")
    assert proc.returncode != 0
    assert msg in proc.stderr
    assert f"[ERROR] [tid " in t.log_text() and msg in t.log_text()


def test_ctl_when_daemon_not_running(sim):
    dom = sim(2)
    t = dom.trays[0]
    q = t.ctl("-q")
    assert q.returncode != 0 and q.stdout == ""
    assert "Query Status returned error code: 14" in q.stderr
    view = t.domain_json()
    assert view["status"] == "DOWN"
    assert {n["status"] for n in view["nodes"].values()} == {"UNAVAILABLE"}
    assert t.ctl("-N").stdout.endswith("Domain State: DOWN\n")


def test_daemonize_forks_and_parent_exits_zero(sim):
    dom = sim(1)
    t = dom.trays[0]
    t.write_config(DAEMONIZE=1)
    started = time.monotonic()
    parent = t.start()
    assert parent.wait(10) == 0
    assert time.monotonic() - started < 10
    poll(lambda: t.query() == "READY", 10, what="READY")
    status = protocol.request(t.addr, dom.cmd_port, {"cmd": "status"})
    dom.extra_pids.append(status["pid"])
    assert status["pid"] != parent.pid
    import psutil
    child = psutil.Process(status["pid"])
    assert child.ppid() != parent.pid
    child.terminate()
    child.wait(5)
    assert t.query() == "UNAVAILABLE"


def test_versions_and_port_flag(sim):
    out = subprocess.run([PY, "-m", "imexctl_sim.daemon", "--version"], capture_output=True,
                         text=True, timeout=10)
    assert out.stdout == "IMEX version is: 580.95.05\n"
    dom = sim(1)
    t = dom.trays[0]
    t.write_config()
    t.proc = subprocess.Popen([PY, "-m", "imexctl_sim.daemon", "-c", str(t.cfg), "--nogpu"],
                              env=t.env(), stdin=subprocess.DEVNULL,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True)
    dom.procs.append(t.proc)
    view = poll(lambda: (v := t.domain_json())["status"] == "UP" and v, 10, what="UP")
    assert view["nodes"]["0"]["version"] == "NO_GPU"


def test_interface_addresses_without_forced_local_ip(sim):
    """Netns-style: the node is found among the interface addresses (psutil), and the
    ctl finds the command service the same way, with the launcher's minimal env."""
    dom = sim(1)
    t = dom.trays[0]
    t.write_config(nodes=["127.0.0.3", "127.0.0.1"])   # 127.0.0.3 is no interface address
    env = {"IMEXCTL_SIM_LOCAL_IP": ""}
    t.start(env)
    poll(lambda: t.ctl("-q", env=env).stdout == "READY\n", 10, what="READY")
    view = json.loads(t.ctl("-N", "-j", env=env).stdout)
    assert view["nodes"]["1"]["status"] == "READY"
    assert view["nodes"]["0"]["status"] == "UNAVAILABLE"
    assert view["status"] == "DEGRADED"
    assert "Identified this node as ID 1, using bind IP of '127.0.0.1'" in t.log_text()
