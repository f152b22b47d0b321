"""``imexctl maintain`` on the harness (issue 37): on one persistent clique (tray01-03,
brought up once for the module by ``imexctl recover``), the command refuses a lifetime
switch under a live job, naming it and draining nothing, and applies a membership change
end to end: tray04 joins the clique, the command drains the clique's trays, each tray's
HealthCheckProgram (``imexctl recover`` on the added one) restarts its daemon on the new
nodes_config and publishes the new digest, and the command resumes the trays once every
tray publishes it."""

from __future__ import annotations

import json
import time

import pytest

from tests.support.harness import daemons_of, persistent_clique

ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}


def tags(c, tray) -> dict:
    return json.loads(c.node_info(tray)["extra"])["imex"]


def maintain(c, *args):
    """``imexctl maintain ARGS`` on the controller, as an admin runs it: (rc, output)."""
    res = c.exec_on(c.ctl_name, [str(c.imexctl_bin), "maintain", *args], env=ENV, timeout=120)
    return res.returncode, res.stdout + res.stderr


@pytest.fixture(scope="module")
def clique(cluster):
    """tray01-03 run the clique's persistent domain, UP; tray04 stays on lifetime job
    (outside the persistent domain, by a config of its own) until a test adds it."""
    c = cluster
    c.set_hooks("imexctl")
    job_toml = c.state_dir / "etc" / "imexctl-job.toml"
    job_toml.write_text((c.state_dir / "etc" / "imexctl.toml").read_text())
    job_toml.chmod(0o644)
    try:
        with persistent_clique(c, c.trays[:3]) as q:
            c.imexctl(c.trays[3], "--config", str(job_toml), "identity", "publish")
            yield c, q
    finally:
        job_toml.unlink(missing_ok=True)


def test_a_lifetime_switch_under_a_live_job_is_refused_naming_it(clique):
    c, q = clique
    trays = q.trays
    job = c.submit(["-N", "3", "-w", ",".join(trays), "--wrap", "sleep 300"])
    try:
        c.wait_job_state(job, "RUNNING", timeout=90)
        rc, out = maintain(c, "--node", trays[1], "--lifetime", "job")
        assert rc == 9, out
        assert f"REFUSED: job {job} (tray[01-03]) still running on clique " in out, out
        assert "Nothing was drained" in out, out
        assert [t for t in c.trays if "DRAIN" in c.node_info(t)["state"]] == []
        assert c.wait_job_state(job, "RUNNING", timeout=5)["JobState"] == "RUNNING"
    finally:
        c.cancel_until_quiet(job)


def test_a_tray_added_to_the_clique_restarts_every_daemon_on_the_new_members(clique):
    c, q = clique
    trays = q.trays
    added = c.trays[3]
    members = [*trays, added]
    tray_dir = {t: c.state_dir / "trays" / t for t in members}
    began = time.monotonic()
    # the new tray boots into the clique: its recover starts its daemon on all 4 trays
    assert "imex.lifetime persistent" in c.imexctl(added, "identity", "publish")
    assert "4 trays tray[01-04]" in c.imexctl(added, "recover")
    before = {t: daemons_of(tray_dir[t]) for t in members}
    old = tags(c, trays[0])["domain"]
    assert old and tags(c, added)["domain"] not in ("", old)
    # the old trays only report the change: restarting one alone breaks the clique's jobs
    assert "imexctl maintain --membership" in c.imexctl(trays[0], "recover")
    rc, out = maintain(c, "--node", trays[0], "--membership", "--no-wait")
    assert rc == 8, out
    assert "drained tray[01-04]" in out and "NOT DONE (--no-wait; waiting for trays" in out, out
    for tray in members:
        info = c.node_info(tray)
        assert "DRAIN" in info["state"], info
        assert info["reason"].startswith("imexctl: maintain/membership: clique "), info
    # each tray's own HealthCheckProgram restarts its daemon for the maintenance (the
    # tray added: by its recover, as a tray whose health does not run yet)
    for tray in trays:
        res = c.run_healthcheck(tray)
        assert "restarted the persistent IMEX domain (for maintenance " in res.stdout, res
    out = c.imexctl(added, "recover")
    assert "restarted the persistent IMEX domain (for maintenance " in out, out
    rc, out = maintain(c, "--node", trays[0], "--membership", "--deadline", "60s",
                       "--poll", "1")
    assert rc == 0, out
    assert "done: clique " in out and "resumed tray[01-04]" in out, out
    resumed_after = time.monotonic() - began
    files = {t: (tray_dir[t] / "run" / "persistent" / "nodes_config.cfg").read_text()
             for t in members}
    assert len(set(files.values())) == 1
    assert files[trays[0]].split() == [c.tray_addrs()[t] for t in members]
    new = {tags(c, t)["domain"] for t in members}
    assert len(new) == 1 and new != {old}
    for tray in members:
        assert daemons_of(tray_dir[tray]) and daemons_of(tray_dir[tray]) != before[tray]
        assert "DRAIN" not in c.node_info(tray)["state"]
    q.trays = members
    for tray in members:        # slurmd's health runs nudge the restarted daemons
        q.health(tray)
    up = q.wait_up()
    print(f"membership change: trays resumed {resumed_after:.1f}s after the tray was added, "
          f"UP {up:.1f}s after that (health run on each tray)")


def test_the_clique_switches_to_lifetime_job_end_to_end(clique):
    """After the membership change (tray01-04 persistent): ``--lifetime job`` drains the
    clique with ``maintain/lifetime``, the admin deploys ``lifetime = "job"`` while it is
    drained, each tray's health removes its persistent daemon and publishes the lifetime,
    the command resumes the trays, and the next job gets a daemon of its own."""
    c, q = clique
    members = q.trays
    assert len(members) == 4, "runs after the membership test (module order)"
    job_toml = c.state_dir / "etc" / "imexctl-job.toml"
    toml = c.state_dir / "etc" / "imexctl.toml"
    rc, out = maintain(c, "--node", members[0], "--lifetime", "job", "--no-wait")
    assert rc == 8, out
    for tray in members:
        info = c.node_info(tray)
        assert "DRAIN" in info["state"], info
        assert info["reason"].startswith("imexctl: maintain/lifetime: clique "), info
        assert "switches to imex.lifetime = job (maintenance " in info["reason"], info
    toml.write_text(job_toml.read_text())          # config management, while drained
    for tray in members:
        res = c.run_healthcheck(tray)
        assert "Traceback" not in res.stderr, res.stderr
        assert "removed the persistent IMEX domain" in res.stdout, res.stdout
    rc, out = maintain(c, "--node", members[0], "--lifetime", "job", "--deadline", "60s",
                       "--poll", "1")
    assert rc == 0, out
    assert "resumed tray[01-04]" in out, out
    for tray in members:
        assert tags(c, tray)["lifetime"] == "job"
        assert daemons_of(q.dirs[tray]) == []
        assert not (q.dirs[tray] / "run" / "persistent").exists()
        assert "DRAIN" not in c.node_info(tray)["state"]
    job = c.submit(["-N", "2", "-w", ",".join(members[:2]), "--wrap", "true"])
    info = c.wait_job_state(job, ("COMPLETED", "FAILED", "CANCELLED"), timeout=90)
    assert info["JobState"] == "COMPLETED", (info, c.job_output(job))
