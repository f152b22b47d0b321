"""Job-record fields on a real Slurm (audit 2026-11b): array elements and het components
whose name forges a key never make a prolog exit 5 (F3-3), and on a Slurm that tells the
prolog nothing about sharing (22.05, 23.02) the job record's OverSubscribe= keeps a
non-exclusive IMEX job off (F3-19)."""

from __future__ import annotations

import json

import pytest

from tests.cluster.harness import _poll
from tests.support.harness import sim_daemons

pytestmark = pytest.mark.integration
ENDED = ("COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL", "BOOT_FAIL", "OUT_OF_MEMORY")


def _log(c, tray) -> list[dict]:
    path = c.state_dir / "trays" / tray / "log" / "imexctl.log"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def _drained(c) -> dict[str, str]:
    return {t: n["reason"] for t in c.trays if "DRAIN" in (n := c.node_info(t))["state"]}


def _elements(c, array_id: int) -> dict[int, str]:
    """Element job id -> state. ``scontrol show job <array id>`` prints every element, so
    the harness's job_info cannot tell them apart; squeue's %A can."""
    out = c.client(["squeue", "-h", "-r", "-t", "all", "-j", str(array_id), "-o", "%A|%T"]).stdout
    return {int(j): st for j, _, st in (line.partition("|") for line in out.split())}


def _admin_comment(c, job: int) -> str:
    for line in c.client(["scontrol", "-o", "show", "job", str(job)]).stdout.splitlines():
        if line.startswith(f"JobId={job} "):
            return line.partition(" AdminComment=")[2]
    return ""


def test_array_with_forged_user_in_its_name_never_drains(imex):
    """``sbatch --array=1-2 -N2 -J 'x UserId=root(0)'``: before the fix squeue's ``%i``
    (``3_2``) never confirmed the ambiguous record, every tray's prolog exited 5 and Slurm
    drained them all ``Prolog error``. Now every element runs (or is refused), nothing drains."""
    c = imex
    before = {t: len(_log(c, t)) for t in c.trays}
    array = c.submit(["--array=1-2", "-N", "2", "-J", "x UserId=root(0)", "--wrap", "echo ran"])
    states: dict[int, str] = {}

    def elements_ended():
        nonlocal states
        states = _elements(c, array)
        return len(states) == 2 and all(st in ENDED for st in states.values())
    _poll(elements_ended, 120, "both array elements ended")
    c.wait_quiet(timeout=90)
    jobs = sorted(states)
    for job, state in states.items():
        assert state in ("COMPLETED", "CANCELLED"), (job, state)
        if state == "CANCELLED":   # refused by imexctl, never for its record: squeue confirmed it
            comment = _admin_comment(c, job)
            assert comment.startswith("imexctl: "), (job, comment)
            assert not comment.startswith("imexctl: job record unreadable"), (job, comment)
    assert _drained(c) == {}
    new = [x for t in c.trays for x in _log(c, t)[before[t]:] if x.get("job_id") in jobs]
    assert not [x for x in new if x.get("event") == "Slurm unreachable"], new
    # the forged name kept no element from its domain (on 24.11.5 one element of an array is
    # at times refused "no controller decision for this job attempt", plain names too)
    assert any(x.get("event") == "IMEX domain ready" for x in new), new


def _plain_sbatch(c, *args: str) -> int:
    """sbatch as nobody without the harness's default --exclusive."""
    out = c.client(["sbatch", "--parsable", f"--output={c.state_dir}/jobs/%j.out", *args],
                   user="nobody").stdout
    return int(out.strip().split(";")[0])


def test_non_exclusive_imex_job_is_refused_and_an_exclusive_one_runs(imex):
    """A default job (22.05.8 prints ``OverSubscribe=OK`` for it; the hook gets no sharing
    variable there) may share its trays with another user's job: refused before any
    daemon starts, nothing drained. With ``--exclusive`` (``OverSubscribe=NO``) it runs."""
    c = imex
    before = {t: len(_log(c, t)) for t in c.trays}
    job = _plain_sbatch(c, "-N", "2", "-w", "tray01,tray02", "--wrap", "echo ran")
    info = c.wait_job_state(job, ENDED, timeout=90)
    assert info["JobState"] in ("CANCELLED", "FAILED"), info
    comment = info.get("AdminComment", "")
    if c.slurm_version < (23, 11):   # no SLURM_JOB_OVERSUBSCRIBE before 24.11 (23.02 not measured)
        assert info["OverSubscribe"] == "OK", info
        assert comment.startswith("imexctl: job may share its trays with other jobs "
                                  "(job record OverSubscribe=OK)"), comment
    else:
        assert comment.startswith("imexctl: job may share its trays with other jobs"), comment
    assert not (c.state_dir / "jobs" / f"{job}.out").exists()
    c.wait_quiet(timeout=90)
    assert _drained(c) == {}
    for tray in ("tray01", "tray02"):
        events = [x.get("event") for x in _log(c, tray)[before[tray]:] if x.get("job_id") == job]
        assert "IMEX domain ready" not in events, events
        assert not [e for e in events if e and "daemon" in e and "start" in e], events
        assert sim_daemons(c, tray) == []
        assert c.imexctl_status(tray)["state"] == "idle"

    ok = c.submit(["-N", "2", "-w", "tray01,tray02", "--exclusive", "--wrap", "echo ran"])
    info = c.wait_job_state(ok, ENDED, timeout=90)
    assert info["JobState"] == "COMPLETED", info
    if c.slurm_version < (23, 11):
        assert info["OverSubscribe"] == "NO", info
    assert c.job_output(ok).strip() == "ran"
    c.wait_quiet(timeout=90)
    assert _drained(c) == {}
