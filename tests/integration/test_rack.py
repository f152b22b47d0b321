"""A full NVL72 rack: 18 trays on their own harness cluster, in one NVLink clique.

One job across all 18 trays gets one domain; nine concurrent 2-tray jobs get nine distinct
channels on every tray (issue 10), and a controller-side crash leaks none of them. With
every tray its own clique, one job across 18 cliques gets its whole sealed record and one
domain per clique (issue 35).
"""

from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from imexctl.rules import decision as dec
from tests.cluster import Cluster
from tests.cluster.harness import hooks_dir
from tests.support.harness import (age_reconciliation, assert_clean, channels, harness_seal, job_auth,
                                   release_file, wait_running_domain, wait_up)

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
STATE = "/tmp/imexctl-harness-rack"
# Controller hooks go through a wrapper: a job listed in CRASH_DIR has its controller
# hooks crash (prolog: decides, then dies by SIGKILL; epilog: dies before running).
CRASH_DIR = Path(STATE + "-crash")
_WRAPPER = """#!/bin/sh
# imexctl test wrapper: crash the controller hook of jobs named in {crash}
if [ -e '{crash}/{hook}-'"$SLURM_JOB_ID" ]; then
  {before}
  kill -KILL $$
fi
exec '{target}'
"""


def _wrappers() -> dict[str, Path]:
    CRASH_DIR.mkdir(mode=0o755, exist_ok=True)
    out = {}
    for hook in ("prolog-slurmctld", "epilog-slurmctld"):
        target = hooks_dir(os.environ.get("IMEXCTL_SLURM") or "host") / hook
        before = f"'{target}'" if hook == "prolog-slurmctld" else ":"
        path = CRASH_DIR / f"wrap-{hook}"
        path.write_text(_WRAPPER.format(crash=CRASH_DIR, hook=hook, target=target, before=before))
        path.chmod(0o755)
        out[hook] = path
    return out


@pytest.fixture(scope="module")
def rack(cluster):
    """18 trays beside the session cluster (own state dir, subnet and link prefix), shared
    by this module's tests (bringing it up is most of their cost)."""
    c = Cluster(STATE, 18, net_prefix="imxr", subnet="10.213.79", cluster_name="imxr",
                hooks="imexctl", hook_targets=_wrappers())
    try:
        c.up(timeout=120)
        for tray in c.trays:
            c.imexctl(tray, "identity", "publish")
        yield c
    finally:
        c.down(purge=True)
        for p in CRASH_DIR.iterdir():
            p.unlink()
        CRASH_DIR.rmdir()


def table(c) -> dict:
    """The controller's channel table (jobs -> {clique: channel})."""
    path = c.state_dir / "trays" / c.ctl_name / "state" / "slurmctld" / "channels.json"
    return json.loads(path.read_text())["jobs"] if path.exists() else {}


def test_eighteen_tray_job_gets_one_domain(rack):
    """With imex.auth = "job" (issue 29), on every Slurm: the 18 daemons derive one job CA
    and come UP over mutual TLS (the nine concurrent jobs below run without auth)."""
    c = rack
    release, wait = release_file(c, "eighteen-done")   # the job runs until the checks are done
    with job_auth(c):
        job = c.submit(["-N", "18", "--wrap", f"srun hostname; {wait}"])
        try:
            sts = wait_running_domain(c, job, c.trays, timeout=90)
        finally:
            release.touch()
        assert len({s["domain"]["digest"] for s in sts.values()}) == 1
        dom = sts["tray18"]["domain"]
        assert dom["domain_state"] == "UP" and dom["node_id"] == 17
        assert [m["status"] for m in dom["members"]] == ["READY"] * 18
        assert all(s["auth"]["mode"] == "job" and len(s["auth"]["certificates"]) == 1
                   and s["problems"] == [] for s in sts.values()), sts["tray01"]["auth"]
        info = c.wait_job_state(job, ("COMPLETED", "FAILED", "CANCELLED"), timeout=90)
        assert info["JobState"] == "COMPLETED"
        assert sorted(c.job_output(job).split()) == c.trays
        c.wait_quiet(timeout=90)
        assert_clean(c, c.trays)
        assert table(c) == {}


def test_nine_concurrent_jobs_get_distinct_channels_on_every_tray_and_a_crash_leaks_none(rack):
    c = rack
    # A controller crash first: job `crashed` is decided (channel in the table), then its
    # PrologSlurmctld dies by SIGKILL and its EpilogSlurmctld never runs: a leaked entry.
    crashed = c.submit(["-N", "2", "-w", "tray01,tray02", "--no-requeue", "--hold",
                        "--wrap", "sleep 30"])
    for hook in ("prolog-slurmctld", "epilog-slurmctld"):
        (CRASH_DIR / f"{hook}-{crashed}").touch()
    c.scontrol("release", str(crashed))
    info = c.wait_job_state(crashed, ("FAILED", "CANCELLED", "NODE_FAIL", "COMPLETED"),
                            timeout=60)
    assert dec.decode(info["AdminComment"]) is not None, info  # it had decided
    c.wait_quiet(timeout=90)
    assert list(table(c)) == [str(crashed)]  # nothing released it
    age_reconciliation(c)   # [channels] reconcile_every_s (60 s) has passed since
    out = c.state_dir / "jobs" / f"{crashed}.out"
    assert not out.exists() or out.read_text() == "", out.read_text()  # it never ran

    pairs = [f"tray{2 * i + 1:02d},tray{2 * i + 2:02d}" for i in range(9)]
    jobs = [c.submit(["-N", "2", "-w", nodes, "--wrap", "sleep 60"]) for nodes in pairs]
    sts = {}
    for job, nodes in zip(jobs, pairs):
        sts.update(wait_running_domain(c, job, nodes.split(","), timeout=120))
    chosen = {}
    for job, nodes in zip(jobs, pairs):
        group = dec.decode(c.job_info(job)["AdminComment"]).groups[0]
        assert list(group.members) == nodes.split(",")
        for tray in group.members:
            # the device nodes on the tray: exactly its job's channel, owner-only
            present = channels(c, tray)
            assert list(present) == [f"channel{group.channel}"], (tray, present)
            assert present[f"channel{group.channel}"].st_mode & 0o777 == 0o600
            assert sts[tray]["domain"]["channel"] == group.channel
            assert sts[tray]["decision"]["source"] == "controller"
        chosen[job] = group.channel
    assert len(set(chosen.values())) == 9, chosen
    assert all(1 <= ch < 2048 for ch in chosen.values())
    # the first allocation after the crash (and the interval) reconciled the dead job away
    assert {int(j): next(iter(v["channels"].values())) for j, v in table(c).items()} == chosen

    for job in jobs:
        c.client(["scancel", str(job)])
    c.wait_quiet(timeout=90)
    assert table(c) == {}
    for tray in c.trays:
        assert channels(c, tray) == {}, tray


def publish(c, fabric: dict[str, dict]) -> None:
    """Set each tray's fabric (``c.set_fabric`` keywords) and publish its identity, six at once."""
    def one(tray):
        c.set_fabric(tray, **fabric[tray])
        return c.imexctl(tray, "identity", "publish")
    with ThreadPoolExecutor(6) as pool:
        outs = dict(zip(fabric, pool.map(one, fabric)))
    assert all("published clique" in out for out in outs.values()), outs


def test_a_job_over_eighteen_cliques_gets_one_domain_per_clique(rack):
    """Issue 35 (F3-25): every tray its own clique (its own cluster UUID). The job's sealed
    record names 18 groups, over 1,000 characters (the CLI backend cut it there, the seal
    was lost and every tray refused the job); it is written whole, every tray opens it,
    and 18 one-tray domains come UP."""
    c = rack
    uuids = {t: f"5b1b3a1e-1c1a-4d0e-9a5e-{i:012d}" for i, t in enumerate(c.trays, 1)}
    release, wait = release_file(c, "cliques-done")
    try:
        publish(c, {t: {"cluster_uuid": u, "clique_id": 32766} for t, u in uuids.items()})
        job = c.submit(["-N", "18", "--wrap", wait])
        try:
            try:
                wait_running_domain(c, job, c.trays, timeout=90)
            except AssertionError:    # refused: the job's state and reason say why
                info = c.job_info(job)
                raise AssertionError(f"job {job} {info['JobState']}: {info.get('AdminComment')}") from None
            sts = wait_up(c, job, c.trays)
            text = c.job_info(job)["AdminComment"]
        finally:
            release.touch()
        assert len(text) > 1000 and text.startswith(dec.TAG), text
        found = dec.find(text, harness_seal(c), job, 0, c.trays, cluster=c.cluster_name,
                         submit_time=0)
        assert found.decision is not None, found.why
        assert [(g.key, g.members) for g in found.decision.groups] == [
            (f"{uuids[t]}.32766", (t,)) for t in c.trays]
        assert len({s["domain"]["digest"] for s in sts.values()}) == 18
        assert all(s["domain"]["nodes"] == [t] and s["decision"]["source"] == "controller"
                   for t, s in sts.items()), sts["tray01"]
        info = c.wait_job_state(job, ("COMPLETED", "FAILED", "CANCELLED"), timeout=90)
        assert info["JobState"] == "COMPLETED", info
        c.wait_quiet(timeout=90)
        assert table(c) == {}
    finally:
        publish(c, {t: {} for t in c.trays})
