"""A backup slurmctld and a lost channel table on the real harness (audit F3-12).

Before: each controller host kept its own channel table, so after a failover the backup
handed out channels that running jobs held (job 10 on the primary and job 11 on the
backup both got controller/ch1 in one clique), and a deleted table was silently an
empty one. Here a cluster with two SlurmctldHost lines (each its own namespace,
address, hostname and imexctl state_dir, one StateSaveLocation) runs the real hooks:
job A's domain is up on the primary's decision, then either the primary's slurmctld is
killed and the backup takes over, or the table file is deleted; job B in the same
clique must get another channel while A runs.
"""

from __future__ import annotations

import contextlib
import json
import time

import pytest

from tests.support.harness import wait_running_domain

pytestmark = [pytest.mark.integration,
              pytest.mark.host_slurm_only(
                  "imexctl's side (table on the StateSaveLocation, host stamp, rebuild) is "
                  "the same on every Slurm; each case restarts the cluster with a backup "
                  "controller (passed on 24.11 and 26.05 when written, 2026-11-26)")]

A_TRAYS, B_TRAYS = ["tray01", "tray02"], ["tray03", "tray04"]


@pytest.fixture
def ha(cluster):
    """Four trays of one clique, a primary and a backup controller, the real hooks; a new
    cluster per test (a test leaves the backup in control), gone afterwards."""
    c = cluster.sibling("/tmp/imexctl-harness-failover", 4, index=5, hooks="imexctl",
                        backup_ctl=True)
    try:
        c.up(timeout=90)
        for tray in c.trays:
            out = c.imexctl(tray, "identity", "publish")
            assert "published clique" in out, out
        yield c
    finally:
        with contextlib.suppress(Exception):
            c.cancel_all()
        c.down(purge=True)


def start(c, trays) -> tuple[int, int]:
    """Submit a job on ``trays``; wait for its domain: (job id, channel)."""
    job = c.submit(["-N", str(len(trays)), "-w", ",".join(trays), "--wrap", "sleep 300"])
    sts = wait_running_domain(c, job, trays, timeout=90)
    decisions = [sts[t]["decision"] for t in trays]
    assert all(d["source"] == "controller" for d in decisions), decisions
    channels = {d["channel"] for d in decisions}
    assert len(channels) == 1, decisions
    return job, channels.pop()


def table(c) -> dict:
    return json.loads((c.table_dir / "channels.json").read_text())


def host_local_tables(c) -> list[str]:
    return [str(p) for ctl in c.controllers
            for p in (c.state_dir / "trays" / ctl / "state").rglob("channels.json")]


def imexctl_log(c, ctl) -> str:
    path = c.state_dir / "trays" / ctl / "log" / "imexctl.log"
    return path.read_text(errors="replace") if path.exists() else ""


def rebuilds(c, ctl) -> list[dict]:
    events = [json.loads(line) for line in imexctl_log(c, ctl).splitlines() if line.startswith("{")]
    return [e for e in events if e.get("event", "").startswith("channel table rebuilt")]


def wait_state_saved(c, since: float, timeout: float = 20.0) -> None:
    """slurmctld writes job_state a few seconds after a change: a primary killed before
    that would lose the running job, which is not what is tested here."""
    path = c.state_dir / "ctld" / "job_state"
    deadline = time.monotonic() + timeout
    while not (path.exists() and path.stat().st_mtime > since):
        assert time.monotonic() < deadline, f"{path} not written since the job started"
        time.sleep(0.5)


def decided_by(c, ctl, job) -> bool:
    """Whether PrologSlurmctld on controller host ``ctl`` recorded ``job``'s decision."""
    return any(e.get("event") == "decision recorded" and e.get("job_id") == job
               for e in (json.loads(line) for line in imexctl_log(c, ctl).splitlines()
                         if line.startswith("{")))


def test_backup_controller_does_not_hand_out_a_running_jobs_channel(ha):
    c = ha
    a, channel_a = start(c, A_TRAYS)
    wait_state_saved(c, since=time.time())
    c.kill_controller(c.ctl_name)
    c.wait_in_control(c.backup_name, timeout=60)
    b, channel_b = start(c, B_TRAYS)
    assert channel_b != channel_a, (a, channel_a, b, channel_b)
    assert c.job_info(a)["JobState"] == "RUNNING"
    assert decided_by(c, c.ctl_name, a) and decided_by(c, c.backup_name, b)
    # One table, on the StateSaveLocation, written last by the backup; no host-local one.
    assert host_local_tables(c) == []
    assert table(c)["host"] == c.backup_name
    assert {str(a), str(b)} <= set(table(c)["jobs"])
    # The backup found the primary's table and rebuilt it before handing out a channel.
    events = rebuilds(c, c.backup_name)
    assert events and events[0]["why"].startswith(f"written by {c.ctl_name}, not {c.backup_name}"), \
        imexctl_log(c, c.backup_name)[-2000:]
    assert a in events[0]["jobs"], events


def test_a_deleted_table_is_rebuilt_from_the_running_jobs_record(ha):
    c = ha
    a, channel_a = start(c, A_TRAYS)
    found = list(c.state_dir.rglob("channels.json"))
    assert len(found) == 1, found
    found[0].unlink()                    # an admin's rm, a disk swap
    b, channel_b = start(c, B_TRAYS)
    assert channel_b != channel_a, (a, channel_a, b, channel_b)
    assert c.job_info(a)["JobState"] == "RUNNING"
    assert found[0] == c.table_dir / "channels.json"
    events = rebuilds(c, c.ctl_name)     # A's start made none: nothing else ran
    assert [(e["why"], e["jobs"]) for e in events] == [("missing", [a])], events
    assert set(table(c)["jobs"]) == {str(a), str(b)}
