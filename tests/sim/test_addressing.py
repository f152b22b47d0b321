"""Where the simulated ctl connects, version-gated behaviour, persist.dat per host, and
the ctl's start-up cost (no heavy imports)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

from tests.support.sim import poll

REPO = Path(__file__).resolve().parents[2]


def test_empty_cmd_bind_ip_targets_ipv6_any_and_fails_on_ipv6_less_tray(sim):
    dom = sim(2)
    dom.set_faults({"no_ipv6": True})
    t0 = dom.trays[0]
    dom.start_all()
    poll(lambda: t0.ctl("-q", env={"IMEXCTL_SIM_FAULTS": ""}).stdout == "READY\n", 10)
    q = t0.ctl("-q")
    assert q.returncode == 1 and q.stdout == ""
    assert q.stderr == ("Query Status returned error code: 14 - failed to connect to all "
                        "addresses; last error: UNKNOWN: ipv6:%5B::%5D:"
                        f"{dom.cmd_port}: Address family not supported by protocol\n")
    view = t0.domain_json()
    assert view["status"] == "DOWN"
    assert {n["status"] for n in view["nodes"].values()} == {"UNAVAILABLE"}
    # the tray's own address in IMEX_CMD_BIND_INTERFACE_IP: -q and -N work on that tray
    for t in dom.trays:
        t.write_config(IMEX_CMD_BIND_INTERFACE_IP=t.addr)
    assert t0.ctl("-q").stdout == "READY\n"
    dom.wait_up()


def test_cmd_bind_ip_is_where_the_ctl_connects(sim):
    dom = sim(1)
    t = dom.trays[0]
    t.start()
    poll(lambda: t.query() == "READY", 10)
    t.write_config(IMEX_CMD_BIND_INTERFACE_IP="127.0.0.1")   # nothing listens there
    q = t.ctl("-q")
    assert q.returncode == 1
    assert f"ipv4:127.0.0.1:{dom.cmd_port}: Connection refused" in q.stderr


def test_i_flag_refused_from_580(sim):
    dom = sim(1)
    t = dom.trays[0]
    t.start()
    poll(lambda: t.query() == "READY", 10)
    args = ["-i", t.addr, str(dom.cmd_port), "-q"]
    new = subprocess.run([dom.ctl_bin, *args], capture_output=True, text=True, env=t.env())
    assert new.returncode == 2 and "invalid option '-i'" in new.stderr and new.stdout == ""
    old = subprocess.run([dom.ctl_bin, *args], capture_output=True, text=True,
                         env=t.env({"IMEXCTL_SIM_VERSION": "570.172"}))
    assert (old.returncode, old.stdout) == (0, "READY\n")


def _hostname_tray(sim, version: str):
    dom = sim(1)
    t = dom.trays[0]
    t.write_config(nodes=["localhost"])
    env = {"IMEXCTL_SIM_LOCAL_IP": "127.0.0.1", "IMEXCTL_SIM_VERSION": version}
    return dom, t, env


def test_host_names_refused_below_570_158_01(sim):
    dom, t, env = _hostname_tray(sim, "570.148.08")
    proc = t.start(env)
    assert proc.wait(10) == 1
    assert ("Invalid IP address 'localhost' in node configuration file "
            f"{t.nodes_cfg}: host names need IMEX 570.158.01 or newer") in t.log_text()


def test_host_names_accepted_from_570_158_01(sim):
    dom, t, env = _hostname_tray(sim, "570.158.01")
    t.start(env)
    poll(lambda: t.ctl("-q", env=env).stdout == "READY\n", 10)
    assert "Treating node config entry 'localhost' as a host name." in t.log_text()
    view = json.loads(t.ctl("-N", "-j", env=env).stdout)
    # the entry as written, as the real ctl prints it (a real 595 -N: fidelity N1)
    assert view["status"] == "UP" and view["nodes"]["0"]["host"] == "localhost"
    assert view["nodes"]["0"]["connections"]["0"]["host"] == "localhost"
    assert "Node #0   - localhost       - READY" in t.ctl("-N", env=env).stdout


def test_cmd_unreachable_tray_reads_unavailable_while_peers_connect(sim):
    dom = sim(3)
    dom.set_faults({"nodes": {"2": {"cmd_unreachable": True}}})
    dom.start_all()
    t0, _, t2 = dom.trays

    def connected():
        view = t0.domain_json()
        return view if all(view["nodes"][i]["connections"]["2"]["status"] == "CONNECTED"
                           for i in ("0", "1")) else None
    view = poll(connected, 10, what="peers connected to tray 2")
    assert view["status"] == "DEGRADED"
    assert view["nodes"]["2"]["status"] == "UNAVAILABLE" and view["nodes"]["2"]["version"] == ""
    assert {c["status"] for c in view["nodes"]["2"]["connections"].values()} == {"INVALID"}
    assert t2.query() == "READY"        # its own ctl still reaches it
    assert "       2        I   I   I" in t0.ctl("-N").stdout


def test_one_persist_dat_per_host(sim):
    """SIGKILL, then an intermediate job with another node list on the same host: its
    start discards the old file, so the original list later starts without a recovery
    wait (the sim used to keep one file per node list and would wait)."""
    dom = sim(2)
    t0, t1 = dom.trays
    dom.start_all()
    dom.wait_up()
    dom.kill_all()
    t0.write_config(nodes=[t0.addr])
    t0.start()
    poll(lambda: t0.query() == "READY", 10)
    assert "was written for another node configuration; discarding it." in t0.log_text()
    t0.signal(signal.SIGTERM)
    assert t0.wait_exit(5) == 0
    assert sorted(p.name for p in t0.run_dir.iterdir()) == ["persist.dat"]
    t0.write_config()
    t0.start()
    poll(lambda: t0.query() == "READY", 10, what="READY without waiting for tray 1")
    assert "not shut down cleanly" not in t0.log_text()


def test_ctl_imports_nothing_heavy():
    code = ("import sys; sys.path.insert(0, %r); import imexctl_sim.ctl, json; "
            "print(json.dumps(sorted(sys.modules)))" % str(REPO / "sim"))
    out = subprocess.run([sys.executable, "-IS", "-c", code], capture_output=True, text=True,
                         check=True).stdout
    loaded = set(json.loads(out))
    heavy = {"argparse", "dataclasses", "pathlib", "concurrent.futures", "psutil", "threading",
             "ipaddress", "hashlib", "tempfile", "uuid", "logging", "asyncio"}
    assert loaded & heavy == set()


def test_launcher_runs_the_ctl(tmp_path):
    from imexctl_sim.launchers import write_launchers

    daemon, ctl = write_launchers(str(tmp_path / "bin"))
    out = subprocess.run([ctl, "--version"], capture_output=True, text=True, env={})
    assert (out.returncode, out.stdout) == (0, "IMEX version is: 580.95.05\n")
    assert Path(daemon).read_text().startswith(f"#!{sys.executable} -IS\n")


def test_simulated_tools_exit_without_teardown_and_lose_nothing(sim, tmp_path):
    """Both tools leave through os._exit after main (imexctl_sim.run_and_exit): a pipe
    still gets all of the ctl's answer, usage errors keep their exit code, and the daemon
    stopped by SIGTERM still says goodbye, writes persist.dat and exits 0. An atexit
    handler is how the test sees that no interpreter teardown ran."""
    from imexctl_sim.launchers import write_launchers

    _, ctl = write_launchers(str(tmp_path / "bin"))
    probe = tmp_path / "sitecustomize.py"    # an atexit handler in every run of the tool
    probe.write_text("import atexit, os\n"
                     "atexit.register(lambda: open(os.environ['MARK'], 'a').write('x'))\n")
    mark = tmp_path / "mark"
    env = {"PYTHONPATH": str(tmp_path), "MARK": str(mark)}
    for argv in ([str(REPO / ".venv/bin/imexctl-sim-imex-ctl")],
                 [sys.executable, "-S", ctl]):          # -IS ignores PYTHONPATH
        bad = subprocess.run([*argv, "-x"], capture_output=True, text=True, env=env)
        assert bad.returncode == 2 and "usage" in bad.stderr.lower()
    assert not mark.exists()
    dom = sim(2)
    dom.start_all()
    dom.wait_up()
    view = subprocess.run([dom.ctl_bin, "-c", str(dom.trays[0].cfg), "-N", "-j"],
                          stdout=subprocess.PIPE, env=dom.trays[0].env(), check=True).stdout
    assert set(json.loads(view)["nodes"]) == {"0", "1"}      # complete JSON through a pipe
    t1 = dom.trays[1]
    t1.signal(signal.SIGTERM)
    assert t1.wait_exit(10) == 0
    assert "IMEX daemon shut down cleanly." in t1.log_text()
    poll(lambda: "Connection to node 1" in dom.trays[0].log_text()
         and "shut down; recovering" in dom.trays[0].log_text(), 10)   # its bye arrived
