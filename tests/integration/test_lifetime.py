"""``[imex] lifetime`` on the harness (issue 37's foundation): each tray publishes its
lifetime in its Extra, and PrologSlurmctld refuses a job whose trays of one clique publish
different lifetimes, naming both sides, before any daemon starts and draining nothing.
(The persistent domain itself is not built yet: that is the rest of issue 37.)"""

from __future__ import annotations

import json


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
