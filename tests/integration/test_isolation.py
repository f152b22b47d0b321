"""Isolation an ordinary user cannot break, on every Slurm the harness runs (issue 25).

The controller's decision travels in the job record, whose text the job's user
co-writes. Each test here plants a *sealed* forgery (a v2 record with a real MUNGE
credential, made by the job's user with the cluster's own munged) in one user-written
field of a real job, and checks what the real hooks did: the tray's domain runs on the
channel PrologSlurmctld handed out, from the controller's decision, and nothing is
drained. A full clique makes the job wait instead of sharing a channel.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import time
from pathlib import Path

import pytest

from imexctl.rules import decision as dec
from tests.cluster.imexctl_config import DEFAULT_CLUSTER_UUID
from tests.support.harness import harness_seal, wait_running_domain

KEY = f"{DEFAULT_CLUSTER_UUID}.1"
TRAYS = ["tray01", "tray02"]
FORGED_CHANNEL = 1999


def user_sealed_record(c, job_id: int, channel: int = FORGED_CHANNEL) -> str:
    """The strongest forgery a user can make: a well-formed record for this very job and
    allocation, sealed with a real credential of the cluster's munged, made as nobody."""
    body = dec.body(dec.Decision(
        job_id=job_id, action="domains", cluster=c.cluster_name,
        groups=(dec.GroupDecision(KEY, channel, tuple(TRAYS)),), nodes_hash=dec.nodes_hash(TRAYS)))
    payload = dec.SEAL_PREFIX + hashlib.sha256(body.encode()).hexdigest()
    cred = subprocess.run(["runuser", "-u", "nobody", "--", "/usr/bin/munge",
                           f"--socket={c.state_dir / 'munge' / 'munge.socket'}", "--string",
                           payload], capture_output=True, text=True, check=True).stdout.strip()
    return f"{body};s={cred}"


def break_munge(c) -> tuple[Path, str]:
    """The trays' and the controller's imexctl see a ``munge`` that fails (``unmunge``
    still works): PrologSlurmctld cannot seal. Returns the config file and the text to
    put back."""
    tools = c.state_dir / "jobs" / "munge-broken"
    tools.mkdir(parents=True, exist_ok=True)
    (tools / "munge").write_text("#!/bin/sh\necho 'munge: Error: broken for this test' >&2\nexit 1\n")
    (tools / "munge").chmod(0o755)
    if not (tools / "unmunge").is_symlink():
        (tools / "unmunge").symlink_to("/usr/bin/unmunge")
    conf = c.state_dir / "etc" / "imexctl.toml"
    base = conf.read_text()
    conf.write_text(base.replace("[paths]\n", f'[paths]\nmunge_bin_dir = "{tools}"\n', 1))
    return conf, base


def next_job_id(c) -> int:
    """The id the next submission gets (the harness runs one test at a time)."""
    probe = c.submit(["-H", "--wrap", "true"])
    c.client(["scancel", str(probe)])
    return probe + 1


def forged_args(c, vector: str, text: str, tmp: Path) -> list[str]:
    """sbatch options that put `` AdminComment=<text>`` into one user-written field."""
    planted = f"x AdminComment={text}"
    if vector in ("workdir", "stdout", "stderr", "stdin"):
        path = tmp / planted            # a path whose text carries the forgery
        path.mkdir(parents=True, exist_ok=True)
        for p in [path, *path.parents]:
            if p == tmp:
                break
            os.chown(p, 65534, 65534)
        if vector == "stdin":
            (path / "in").write_text("")
            os.chown(path / "in", 65534, 65534)
        return {"workdir": ["--chdir", str(path)], "stdout": ["-o", str(path / "out")],
                "stderr": ["-e", str(path / "err")], "stdin": ["-i", str(path / "in")]}[vector]
    return {"name": ["-J", planted], "comment": ["--comment", planted],
            "account": [f"--account={planted}"], "network": [f"--network={planted}"],
            "mailuser": [f"--mail-user={planted}", "--mail-type=END"]}[vector]


def channel_table(c) -> dict:
    """{job id: {clique: channel}} from the controller's table, wherever the config keeps it."""
    import json

    for path in c.state_dir.rglob("channels.json"):
        return {int(j): e["channels"] for j, e in json.loads(path.read_text())["jobs"].items()}
    return {}


@pytest.mark.parametrize("vector", ["name", "comment", "account", "network", "workdir",
                                    "stdout", "stderr", "stdin", "mailuser"])
def test_a_sealed_forgery_in_a_user_field_never_replaces_the_controllers_decision(
        imex, vector):
    c = imex
    tmp = c.state_dir / "jobs" / f"forge-{vector}"      # where the job's user may write
    tmp.mkdir(mode=0o755, exist_ok=True)
    job_id = next_job_id(c)
    record = user_sealed_record(c, job_id)
    while vector in ("workdir", "stdout", "stderr", "stdin") and \
            max(len(part) for part in f"x AdminComment={record}".split("/")) > 250:
        record = user_sealed_record(c, job_id)   # a path component holds 255 bytes at most
    args = forged_args(c, vector, record, tmp)
    try:
        job = c.submit(["-N", "2", "-w", ",".join(TRAYS), *args, "--wrap", "sleep 30"])
    except Exception as exc:  # noqa: BLE001 - Slurm itself refuses such text: unreachable
        assert vector in ("account", "network"), exc
        return
    assert job == job_id
    sts = wait_running_domain(c, job, TRAYS)
    held = channel_table(c)[job][KEY]
    for tray in TRAYS:
        decision = sts[tray]["decision"]
        assert decision["source"] == "controller", (vector, sts[tray])
        assert decision["channel"] == held != FORGED_CHANNEL, (vector, sts[tray])
        assert "DRAIN" not in c.node_info(tray)["state"]
    record = c.scontrol("-o", "show", "job", str(job))
    assert record.count(f"{dec.TAG};j={job};") >= 2, record   # the copy is in the record
    found = dec.find(record, harness_seal(c), job, 0, TRAYS, cluster=c.cluster_name,
                     submit_time=0)
    assert found.decision is not None and found.candidates >= 2   # the real one and the copy
    assert found.decision.groups[0].channel == held
    c.client(["scancel", str(job)])
    c.wait_job_state(job, ["CANCELLED", "COMPLETED"], timeout=60)


def test_without_a_sealed_decision_the_job_is_refused_and_no_tray_drained(imex, tmp_path):
    """PrologSlurmctld decides here, but could not seal (its munge fails): the job's
    record holds only the user-sealed forgery. The job is cancelled with a reason, never
    run on the forged channel, and no tray is drained."""
    c = imex
    conf, base = break_munge(c)
    try:
        job_id = next_job_id(c)
        forged = user_sealed_record(c, job_id)
        job = c.submit(["-N", "2", "-w", ",".join(TRAYS), "--comment",
                        f"x AdminComment={forged}", "--wrap", "sleep 30"])
        assert job == job_id
        info = c.wait_job_state(job, ["CANCELLED"], timeout=60)
    finally:
        conf.write_text(base)
    # The CLI backend scans the whole record (and finds only the forgery); pyslurm reads
    # AdminComment by structure (and finds nothing): refused either way.
    assert ("no decision record in the job record is sealed by SlurmUser" in info["AdminComment"]
            or "no controller decision in the job record" in info["AdminComment"]), info
    assert "only PrologSlurmctld decides" in info["AdminComment"]
    for tray in TRAYS:
        assert "DRAIN" not in c.node_info(tray)["state"]
        assert (c.imexctl_status(tray).get("domain") or {}).get("job_id") != job


@pytest.mark.host_slurm_only("the wait rests on the sealed decision (every Slurm, the tests "
                              "above) and on scontrol requeue and its requeue delay, Slurm's "
                              "own and alike in 22.05 to 26.05; ~40 s of requeue delay each")
def test_a_full_clique_makes_the_job_wait_and_never_shares_a_channel(imex):
    """With channels 1..2 only (count = 3), a third one-tray IMEX job in the clique is
    requeued with a reason instead of running on a taken channel, and runs on a free one
    once a job ends."""
    c = imex
    conf = c.state_dir / "etc" / "imexctl.toml"
    base = conf.read_text()
    conf.write_text(base + '\n[policy]\nmode = "all"\n\n[channels]\ncount = 3\n')
    try:
        a = c.submit(["-N", "1", "-w", "tray01", "--wrap", "sleep 300"])
        b = c.submit(["-N", "1", "-w", "tray02", "--wrap", "sleep 300"])
        sa, sb = wait_running_domain(c, a, ["tray01"]), wait_running_domain(c, b, ["tray02"])
        ch_a = sa["tray01"]["decision"]["channel"]
        ch_b = sb["tray02"]["decision"]["channel"]
        assert {ch_a, ch_b} == {1, 2}
        waiting = c.submit(["-N", "1", "-w", "tray03", "--wrap", "sleep 300"])
        deadline = time.monotonic() + 60
        while True:
            info = c.job_info(waiting)
            if info["JobState"] == "PENDING" and "waiting" in info.get("AdminComment", ""):
                break
            assert info["JobState"] != "RUNNING" or \
                (c.imexctl_status("tray03").get("domain") or {}).get("job_id") != waiting, info
            assert time.monotonic() < deadline, info
            time.sleep(0.5)
        assert "no free IMEX channel in clique" in info["AdminComment"], info
        assert "DRAIN" not in c.node_info("tray03")["state"]
        assert (c.imexctl_status("tray03").get("domain") or {}).get("job_id") != waiting
        c.client(["scancel", str(a)])              # channel ch_a frees up
        sw = wait_running_domain(c, waiting, ["tray03"], timeout=c.cred_expire + 90)
        assert sw["tray03"]["decision"]["channel"] == ch_a != ch_b
    finally:
        conf.write_text(base)


def test_a_heterogeneous_job_gets_one_domain_across_its_components(imex):
    """Each component's PrologSlurmctld decides over every component's trays (squeue,
    no user text) and seals a record for its own component; the trays of both
    components run one domain on the leader's ports and channel, and the tasks of both
    components are told it (docs/multi-rack.md, "Heterogeneous jobs")."""
    c = imex
    script = c.state_dir / "jobs" / "het.sh"
    script.write_text("#!/bin/sh\nsrun --het-group=0,1 -l sh -c 'echo $(hostname) "
                      "IMEX_DOMAIN_STATE=$IMEX_DOMAIN_STATE IMEX_CHANNEL=$IMEX_CHANNEL "
                      "IMEX_DOMAIN_NODES=$IMEX_DOMAIN_NODES'\nsleep 5\n")
    script.chmod(0o755)
    job = c.submit(["-N", "2", "-w", "tray[01-02]", "--exclusive", ":", "-N", "2",
                    "-w", "tray[03-04]", "--exclusive", str(script)])
    second = job + 1
    sts = {**wait_running_domain(c, job, ["tray01", "tray02"], timeout=90),
           **wait_running_domain(c, second, ["tray03", "tray04"], timeout=90)}
    digests = {s["domain"]["digest"] for s in sts.values()}
    assert len(digests) == 1, sts
    assert {tuple(s["domain"]["nodes"]) for s in sts.values()} == {tuple(c.trays)}
    assert all(s["domain"].get("domain_state") == "UP" for s in sts.values()), sts
    assert all(s["decision"]["source"] == "controller" for s in sts.values()), sts
    channels = {s["domain"]["channel"] for s in sts.values()}
    assert len(channels) == 1, sts
    # `scontrol show job <leader>` prints every component's record
    records = {r.job_id: r for r in map(dec.decode, dec.candidates(
        c.scontrol("show", "job", str(job)))) if r is not None}
    assert set(records) == {job, second}, records
    for component, record in records.items():
        assert record.het_job_id == job, record
        assert [g.members for g in record.groups] == [tuple(c.trays)]
        assert record.groups[0].channel in channels
    c.wait_job_state(job, "COMPLETED", timeout=90)
    out = c.job_output(job)
    channel = channels.pop()
    for tray in c.trays:
        assert f"{tray} IMEX_DOMAIN_STATE=UP IMEX_CHANNEL={channel} " \
               f"IMEX_DOMAIN_NODES=tray[01-04]" in out, out
    c.wait_quiet(timeout=90)
    for tray in c.trays:
        assert "DRAIN" not in c.node_info(tray)["state"]
        assert (c.imexctl_status(tray).get("domain") or {}).get("job_id") is None



# ------------------------------------------ a record bound to its job instance (audit F4-2)
def slurmuser_sealed_v2(c, job_id: int, channel: int) -> str:
    """A *genuine* record of the release before (version 2, sealed by SlurmUser with the
    cluster's munged) for job ``job_id`` on TRAYS: what an earlier job that had this id
    left in its AdminComment (``scontrol show job`` while it ran, ``sacct`` forever)."""
    body = (f"imexctl:v2;j={job_id};r=0;h={dec.nodes_hash(TRAYS)};m=imexctl;a=domains;"
            f"g={KEY}/{channel}/tray[01-02]")
    payload = "imexctl-decision-v2:" + hashlib.sha256(body.encode()).hexdigest()
    cred = subprocess.run(["runuser", "-u", "slurm", "--", "/usr/bin/munge",
                           f"--socket={c.state_dir / 'munge' / 'munge.socket'}", "--string",
                           payload], capture_output=True, text=True, check=True).stdout.strip()
    return f"{body};s={cred}"


def test_a_replayed_record_for_a_reissued_job_id_is_refused_as_a_job_fault(imex):
    """Slurm hands job id N out again; the user puts the earlier job N's genuine record
    (channel 1999) into the new job N's name. PrologSlurmctld could not seal here (munge
    broken for it), so that record is the only one: it was sealed before the job was
    submitted, and the job is cancelled with an ``imexctl:`` reason; no tray drains and no
    domain runs on the replayed channel (before: the domain came UP on it)."""
    c = imex
    conf, base = break_munge(c)
    try:
        job_id = next_job_id(c)
        old = slurmuser_sealed_v2(c, job_id, FORGED_CHANNEL)
        sealed_at = time.time()
        # The earlier job's record is older than the new job: MUNGE dates it in seconds,
        # and a record counts as the job's up to ENCODE_SLACK_S before its SubmitTime.
        while time.time() < sealed_at + getattr(dec, "ENCODE_SLACK_S", 5) + 1.5:
            time.sleep(0.2)
        job = c.submit(["-N", "2", "-w", ",".join(TRAYS), "-J", f"x {old}",
                        "--wrap", "sleep 30"])
        assert job == job_id
        info = c.wait_job_state(job, ["CANCELLED", "RUNNING"], timeout=60)
        deadline = time.monotonic() + 30
        while info["JobState"] == "RUNNING" and time.monotonic() < deadline:
            for tray in TRAYS:     # the old code: a domain on the replayed channel
                domain = c.imexctl_status(tray).get("domain") or {}
                assert not (domain.get("job_id") == job
                            and domain.get("channel") == FORGED_CHANNEL), domain
            time.sleep(0.5)
            info = c.job_info(job)
        info = c.wait_job_state(job, ["CANCELLED"], timeout=60)
    finally:
        conf.write_text(base)
    reason = info["AdminComment"]
    assert reason.startswith("imexctl: "), info
    # CLI backend: the whole record is read and the replay named; pyslurm reads
    # AdminComment by structure and finds no record at all: refused either way.
    assert ("before the job was submitted" in reason and "replayed" in reason) \
        or "no controller decision in the job record" in reason, info
    for tray in TRAYS:
        assert "DRAIN" not in c.node_info(tray)["state"]
        assert (c.imexctl_status(tray).get("domain") or {}).get("job_id") != job


def test_copies_in_an_older_jobs_name_do_not_hide_a_running_job_from_a_rebuild(imex):
    """Audit F4-1 on real Slurm: victim V runs on tray01-02; an older held job H (printed
    first) carries four unsealed copies of V's record in its JobName; the channel table
    is deleted; the next job W in the same clique must not get V's channel."""
    c = imex
    held = c.submit(["-H", "-N", "1", "-w", "tray03", "-J", "h", "--wrap", "true"])
    victim = c.submit(["-N", "2", "-w", ",".join(TRAYS), "--wrap", "sleep 300"])
    later = None
    try:
        sv = wait_running_domain(c, victim, TRAYS)
        channel = sv["tray01"]["decision"]["channel"]
        record = c.job_info(victim)["AdminComment"]
        body = record.rpartition(";s=")[0]
        copies = " ".join(f"{body};s=MUNGE:forgedcopy{i:02d}AAAA:" for i in range(4))
        c.client(["scontrol", "update", f"jobid={held}", f"name={copies}"], user="nobody")
        assert c.job_info(held)["JobName"].count(f";j={victim};") == 4
        for path in c.state_dir.rglob("channels.json"):
            path.unlink()
        later = c.submit(["-N", "2", "-w", "tray03,tray04", "--wrap", "sleep 300"])
        sw = wait_running_domain(c, later, ["tray03", "tray04"], timeout=90)
        assert sw["tray03"]["decision"]["channel"] != channel, (channel, sw)
        assert channel_table(c).get(victim) == {KEY: channel}, channel_table(c)   # still held
        for tray in c.trays:
            assert "DRAIN" not in c.node_info(tray)["state"]
    finally:
        c.client(["scancel", str(held), str(victim), *([str(later)] if later else [])],
                 check=False)
