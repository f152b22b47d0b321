"""``[imex] lifetime`` on the harness (issue 37's foundation): each tray publishes its
lifetime in its Extra, and PrologSlurmctld refuses a job whose trays of one clique publish
different lifetimes, naming both sides, before any daemon starts and draining nothing.
``imexctl recover`` on persistent trays brings up the clique's persistent domain: one
daemon per tray, the same node list on each, UP. (Per-job channels on it, its health and
maintenance are the rest of issue 37.)"""

from __future__ import annotations

import json
import os
import shutil
import signal
import time


def test_a_clique_of_job_and_persistent_trays_refuses_the_job(imex):
    c = imex
    trays = ["tray01", "tray02", "tray03"]
    toml = c.state_dir / "etc" / "imexctl.toml"
    persistent = c.state_dir / "etc" / "imexctl-persistent.toml"
    base = toml.read_text()
    assert "\n[imex]\n" in base
    persistent.write_text(base.replace("\n[imex]\n", '\n[imex]\nlifetime = "persistent"\n', 1))
    persistent.chmod(0o644)
    try:
        for tray in trays[:2]:
            assert "imex.lifetime job" in c.imexctl(tray, "identity", "publish")
        out = c.imexctl("tray03", "--config", str(persistent), "identity", "publish")
        assert "imex.lifetime persistent" in out, out
        published = {t: json.loads(c.node_info(t)["extra"])["imex"]["lifetime"] for t in trays}
        assert published == {"tray01": "job", "tray02": "job", "tray03": "persistent"}
        clique = json.loads(c.node_info("tray03")["extra"])["imex"]
        key = f"{clique['cluster_uuid']}.{clique['clique_id']}"
        job = c.submit(["-N", "3", "-w", ",".join(trays), "--wrap", "true"])
        info = c.wait_job_state(job, ("CANCELLED", "COMPLETED", "FAILED"), timeout=60)
        assert info["JobState"] == "CANCELLED", info
        assert info["AdminComment"] == (f"imexctl: imex.lifetime differs within clique {key}: "
                                        "tray[01-02] job; tray03 persistent (set imex.lifetime "
                                        "alike on every tray of the clique)"), info
        for tray in trays:
            assert not (c.state_dir / "trays" / tray / "run" / f"job-{job}").exists()
        assert [t for t in c.trays if "DRAIN" in c.node_info(t)["state"]] == []
    finally:
        c.cancel_all()
        c.imexctl("tray03", "identity", "publish")      # back to the cluster's lifetime
        persistent.unlink(missing_ok=True)
    assert json.loads(c.node_info("tray03")["extra"])["imex"]["lifetime"] == "job"


def test_recover_brings_up_the_persistent_domain_of_the_clique(imex):
    c = imex
    trays, job_tray = c.trays[:3], c.trays[3]
    toml = c.state_dir / "etc" / "imexctl-persistent.toml"
    toml.write_text(persistent_toml(c))
    toml.chmod(0o644)
    tray_dir = {t: c.state_dir / "trays" / t for t in c.trays}
    try:
        for tray in trays:
            assert "imex.lifetime persistent" in c.imexctl(tray, "--config", str(toml),
                                                           "identity", "publish")
        for tray in trays:
            out = c.imexctl(tray, "--config", str(toml), "recover")
            assert "repaired: started the persistent IMEX domain (clique " in out, out
            assert f"3 trays {trays[0][:-2]}[01-03]" in out, out
        files = {t: (tray_dir[t] / "run" / "persistent" / "nodes_config.cfg").read_bytes()
                 for t in trays}
        assert len(set(files.values())) == 1           # byte-identical on every tray
        assert files[trays[0]].decode().split() == [c.tray_addrs()[t] for t in trays]
        records = {t: json.loads((tray_dir[t] / "state" / "persistent.json").read_text())
                   for t in trays}
        assert {r["lifetime"] for r in records.values()} == {"persistent"}
        assert {r["phase"] for r in records.values()} == {"ready"}
        assert len({r["digest"] for r in records.values()}) == 1
        for tray in trays:
            os.kill(records[tray]["daemon"]["pid"], 0)    # alive
        # UP once the daemons started first reconnect to the later ones (IMEX's own
        # back-off: its first retry comes 15 s after a failed connect; nothing nudges yet)
        config = str(tray_dir[trays[0]] / "run" / "persistent" / "config.cfg")
        deadline, view = time.monotonic() + 60, None
        while time.monotonic() < deadline:
            view = c.exec_on(trays[0], [str(c.sim_ctl), "-c", config, "-N", "-j"])
            if view.returncode == 0 and json.loads(view.stdout)["status"] == "UP":
                break
            time.sleep(1)
        assert view is not None and view.returncode == 0, view
        assert json.loads(view.stdout)["status"] == "UP", view.stdout
        print(f"persistent domain UP {60 - (deadline - time.monotonic()):.1f}s after recover")
        # a second recover keeps each daemon; the job-lifetime tray gets none
        assert "started" not in c.imexctl(trays[0], "--config", str(toml), "recover")
        assert json.loads((tray_dir[trays[0]] / "state" / "persistent.json").read_text()
                          )["daemon"]["pid"] == records[trays[0]]["daemon"]["pid"]
        c.imexctl(job_tray, "recover")
        assert not (tray_dir[job_tray] / "run" / "persistent").exists()
    finally:
        for tray in trays:
            record = tray_dir[tray] / "state" / "persistent.json"
            if record.exists():
                try:
                    os.kill(json.loads(record.read_text())["daemon"]["pid"], signal.SIGKILL)
                except (ProcessLookupError, TypeError, KeyError):
                    pass
                record.unlink()
            shutil.rmtree(tray_dir[tray] / "run" / "persistent", ignore_errors=True)
            c.imexctl(tray, "identity", "publish")      # back to the cluster's lifetime
        toml.unlink(missing_ok=True)


def persistent_toml(c) -> str:
    base = (c.state_dir / "etc" / "imexctl.toml").read_text()
    assert "\n[imex]\n" in base
    return base.replace("\n[imex]\n", '\n[imex]\nlifetime = "persistent"\n', 1)
