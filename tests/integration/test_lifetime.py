"""``[imex] lifetime`` on the harness (issue 37's foundation): each tray publishes its
lifetime in its Extra, and PrologSlurmctld refuses a job whose trays of one clique publish
different lifetimes, naming both sides, before any daemon starts and draining nothing.
``imexctl recover`` on persistent trays brings up the clique's persistent domain: one
daemon per tray, the same node list on each, UP. A job there gets its channel on the
persistent domain and starts no daemon. (Its health and maintenance are the rest of
issue 37.)"""

from __future__ import annotations

import json
import os
import time

from tests.support.harness import (PersistentClique, channels, daemons_of, drop_persistent,
                                   persistent_toml)


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
        # UP once the daemons started first reconnect to the later ones: IMEX's own
        # back-off retries 15 s after a failed connect (UP 15.3 s after the last recover),
        # a health run nudges each daemon whose links are down (SIGUSR1) at once
        recovered = time.monotonic()
        for tray in trays:
            c.imexctl(tray, "--config", str(toml), "health")
        PersistentClique(c, trays).wait_up()
        print(f"persistent domain UP {time.monotonic() - recovered:.1f}s after the last "
              "recover (health nudged)")
        # a second recover keeps each daemon; the job-lifetime tray gets none
        assert "started" not in c.imexctl(trays[0], "--config", str(toml), "recover")
        assert json.loads((tray_dir[trays[0]] / "state" / "persistent.json").read_text()
                          )["daemon"]["pid"] == records[trays[0]]["daemon"]["pid"]
        c.imexctl(job_tray, "recover")
        assert not (tray_dir[job_tray] / "run" / "persistent").exists()
    finally:
        for tray in trays:
            drop_persistent(c, tray)
            c.imexctl(tray, "identity", "publish")      # back to the cluster's lifetime
        toml.unlink(missing_ok=True)


def test_jobs_on_a_persistent_clique_get_channels_and_start_no_daemon(imex):
    """Issue 37: on a clique whose trays run the persistent domain, a job's prolog starts
    no daemon: each tray's task sees the job's channel (owned by the job's user, 0600) and
    the persistent daemons keep their pids across the job; the epilog removes the channel."""
    c = imex
    trays = c.trays[:3]
    toml = c.state_dir / "etc" / "imexctl.toml"
    base = toml.read_text()
    tray_dir = {t: c.state_dir / "trays" / t for t in c.trays}
    script = c.state_dir / "jobs" / "persistent.sh"
    script.write_text("#!/bin/sh\nsrun -l sh -c 'echo $(hostname) IMEX_DOMAIN_STATE="
                      "$IMEX_DOMAIN_STATE IMEX_CHANNEL=$IMEX_CHANNEL "
                      "DEVICE=$(stat -c %u:%a \"$IMEX_CHANNEL_DEVICE\") UID=$(id -u)'\n")
    script.chmod(0o755)
    try:
        toml.write_text(persistent_toml(c))
        for tray in trays:
            assert "imex.lifetime persistent" in c.imexctl(tray, "identity", "publish")
        for tray in trays:
            assert "started the persistent IMEX domain" in c.imexctl(tray, "recover")
        pids = {t: daemons_of(tray_dir[t]) for t in trays}
        assert all(len(p) == 1 for p in pids.values()), pids
        for tray in trays:
            record = json.loads((tray_dir[tray] / "state" / "persistent.json").read_text())
            assert pids[tray] == [record["daemon"]["pid"]]
        job = c.submit(["-N", "3", "-w", ",".join(trays), "--exclusive", str(script)])
        info = c.wait_job_state(job, ("COMPLETED", "CANCELLED", "FAILED"), timeout=120)
        out = c.job_output(job)
        assert info["JobState"] == "COMPLETED", (info, out)
        channel = int(out.split("IMEX_CHANNEL=")[1].split()[0])
        uid = out.split("UID=")[1].split()[0]
        assert channel > 0
        for tray in trays:
            assert f"{tray} IMEX_DOMAIN_STATE=UP IMEX_CHANNEL={channel} " \
                   f"DEVICE={uid}:600 UID={uid}" in out, out
        c.wait_quiet(timeout=90)
        for tray in trays:
            assert daemons_of(tray_dir[tray]) == pids[tray]     # the same daemon, no other
            assert channels(c, tray) == {}
            assert not (tray_dir[tray] / "state" / "domain.json").exists()
            assert not (tray_dir[tray] / "run" / f"job-{job}").exists()
            steps = {(e.get("hook"), e.get("step")) for e in map(
                json.loads, (tray_dir[tray] / "log" / "imexctl.log").read_text().splitlines())
                if e.get("job_id") == job and e.get("event") == "step done"}
            assert ("prolog", "persistent-ready") in steps, steps
            assert not steps & {("prolog", "start"), ("epilog", "stop-daemon")}, steps
        assert [t for t in c.trays if "DRAIN" in c.node_info(t)["state"]] == []
    finally:
        c.cancel_all()
        toml.write_text(base)
        for tray in trays:
            drop_persistent(c, tray)
            c.imexctl(tray, "identity", "publish")      # back to the cluster's lifetime
