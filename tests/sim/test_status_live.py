"""`imexctl status` against real simulated daemons: the live view names trays, `!M!` and
`!V!` links and who is missing, from the ctl tool's real output."""

from __future__ import annotations

import psutil

from imexctl.config import parse_config
from imexctl.tray.ownership import DaemonIdentity, DomainRecord, StateStore
from imexctl.cli.display import status_table as render_table
from imexctl.ops.status import collect
from tests.support.sim import PY, poll


def status_of(tray, dom, tmp_path, nodes):
    """A status config whose ctl talks to `tray`, and a record naming its daemon."""
    ctl = tmp_path / "ctl"
    ctl.write_text(f"#!/bin/sh\nIMEXCTL_SIM_LOCAL_IP={tray.addr} IMEXCTL_SIM_TIME_SCALE="
                   f"{dom.time_scale} exec {PY} -m imexctl_sim.ctl \"$@\"\n")
    ctl.chmod(0o755)
    cfg = parse_config({"paths": {"state_dir": f"{tmp_path}/state", "run_dir": f"{tmp_path}/run",
                                  "channel_dir": f"{tmp_path}/ch",
                                  "imex_ctl_binary": str(ctl)}}, None, nodes[tray.idx])
    ps = psutil.Process(tray.proc.pid)
    StateStore(cfg.paths.state_dir).save(DomainRecord(
        job_id=5, uid=65534, user="nobody", nodes=nodes, addresses=dom.addresses,
        node_id=tray.idx, digest="d", server_port=dom.port, cmd_port=dom.cmd_port, channel=None,
        channel_rule="slurm switch/nvidia_imex", job_dir=str(tray.dir), phase="ready",
        daemon=DaemonIdentity(pid=ps.pid, create_time=ps.create_time(), exe=ps.exe())))
    return cfg


def test_status_names_node_map_mismatch(sim, tmp_path):
    dom = sim(2)
    t0, t1 = dom.trays
    t1.write_config(nodes=dom.addresses + ["127.0.0.250"])   # tray02 rendered another domain
    dom.start_all()
    def both_ways():  # each side learns of the mismatch on its own dial: wait for both
        conns = t0.domain_json()["nodes"]
        return (conns["0"]["connections"]["1"]["status"],
                conns["1"]["connections"]["0"]["status"]) == ("NODE_MAP_MISMATCH",) * 2
    poll(both_ways, 10, what="!M! both ways")
    cfg = status_of(t0, dom, tmp_path, ["tray01", "tray02"])
    st = collect(cfg)
    dom_view = st["domain"]
    assert dom_view["domain_state"] == "DEGRADED" and dom_view["local_state"] == "READY"
    assert sorted((m["from"], m["to"], m["marker"]) for m in dom_view["mismatches"]) == [
        ("tray01", "tray02", "!M!"), ("tray02", "tray01", "!M!")]
    assert st["state"] == "degraded" and st["decision"]["source"] == "slurm"
    assert any(p.startswith("!M! node map mismatch tray01->tray02") for p in st["problems"])
    assert "links: tray02 NODE_MAP_MISMATCH" in render_table(st)


def test_status_names_missing_tray(sim, tmp_path):
    dom = sim(3)
    dom.start_all()
    dom.wait_up()
    dom.trays[2].signal(9)
    dom.trays[2].wait_exit()
    cfg = status_of(dom.trays[0], dom, tmp_path, ["tray01", "tray02", "tray03"])

    def missing():
        st = collect(cfg)
        return st if st["domain"]["missing"] else None
    st = poll(missing, 15, what="tray03 missing")
    (gone,) = st["domain"]["missing"]
    assert gone["node"] == "tray03" and gone["host"] == dom.addresses[2]
    assert gone["status"] != "READY" and gone["since"] is not None
    assert [m["status"] for m in st["domain"]["members"][:2]] == ["READY", "READY"]
    assert any(p.startswith(f"tray03 ({dom.addresses[2]}) ") for p in st["problems"])


def test_status_names_version_mismatch(sim, tmp_path):
    dom = sim(2)
    dom.set_faults({"nodes": {"1": {"version": "570.172"}}})
    dom.start_all()
    t0 = dom.trays[0]
    poll(lambda: t0.domain_json()["nodes"]["0"]["connections"]["1"]["status"]
         == "VERSION_MISMATCH", 10, what="!V!")
    st = collect(status_of(t0, dom, tmp_path, ["tray01", "tray02"]))
    assert ("tray01", "tray02", "!V!") in [(m["from"], m["to"], m["marker"])
                                         for m in st["domain"]["mismatches"]]
    assert any(p.startswith("!V! version mismatch tray01->tray02") for p in st["problems"])
