"""Job fields a job's own text must not turn into a tray drain (audit 2026-11b F3-3, F3-22,
F3-19): array elements and het components are confirmed through squeue's ``%A``; a record
that cannot be confirmed is the job's fault (JobRecordError), never SlurmError; the stale
owner check asks squeue before it takes an unreadable record's job as alive; OverSubscribe=
and HetJobId= are read, and a forged copy is never believed.

squeue output shapes as measured on Debian's 22.05.8 (harness, 2026-11-26):
``squeue -h -j 7 -t all -o '%A|%i|...'`` of array 7 (elements 7 and 8) prints
``7|7_2|...`` and ``8|7_1|...``; of het job 9 (components 9, 10) ``9|9+0|...`` and
``10|9+1|...``.
"""

from __future__ import annotations

import pytest

from imexctl.errors import SlurmError
from imexctl.tray.ownership import owner_alive
from imexctl.slurm import scontrol as sc
from imexctl.slurm.records import JobRecord, JobRecordError
from imexctl.slurm.cli_backend import CliBackend
from imexctl.tray.ownership import DomainRecord
from tests.support.slurm_world import make_backend
from tests.support.fakeslurm import JOB_DEFAULT

FORGED = "x UserId=root(0)"   # the name of the audit's reproduction


def array_of_two(world, name=FORGED):
    """Array 7 with elements 7 (task 2, tray[03-04]) and 8 (task 1, tray[01-02]), as 22.05
    numbered them."""
    world.edit(lambda s: s["jobs"].update({
        "7": {**JOB_DEFAULT, "JobName": name, "NodeList": "tray[03-04]",
              "ArrayJobId": 7, "ArrayTaskId": 2},
        "8": {**JOB_DEFAULT, "JobName": name, "NodeList": "tray[01-02]",
              "ArrayJobId": 7, "ArrayTaskId": 1}}))


def het_of_two(world, name=FORGED):
    world.edit(lambda s: s["jobs"].update({
        "9": {**JOB_DEFAULT, "JobName": name, "NodeList": "tray01", "HetJobId": 9,
              "HetJobOffset": 0, "HetJobIdSet": "9-10"},
        "10": {**JOB_DEFAULT, "JobName": name, "NodeList": "tray02", "HetJobId": 9,
               "HetJobOffset": 1, "HetJobIdSet": "9-10"}}))


def record_of(job_id: int) -> DomainRecord:
    return DomainRecord(job_id=job_id, uid=65534, user="nobody", nodes=["tray01"],
                        addresses=["10.0.0.1"], node_id=0, digest="d", server_port=1,
                        cmd_port=2, channel=None, channel_rule="job-id", job_dir="/x")


# ------------------------------------------------------------------ F3-3: confirmation
@pytest.mark.parametrize("job_id,nodes", [(7, ("tray03", "tray04")), (8, ("tray01", "tray02"))])
def test_array_element_with_forged_user_is_confirmed(world, job_id, nodes):
    array_of_two(world)
    job = CliBackend(world.config()).job(job_id)
    assert job.user_id == 65534 and job.nodes == nodes and job.het_job_id is None
    assert ["squeue", "-h", "-j", str(job_id), "-t", "all", "-o", "%A|%i|%T|%U|%P|%N"] \
        in world.calls()


@pytest.mark.parametrize("job_id,nodes", [(9, ("tray01",)), (10, ("tray02",))])
def test_het_component_with_forged_user_is_confirmed(world, job_id, nodes):
    het_of_two(world)
    job = CliBackend(world.config()).job(job_id)
    assert job.user_id == 65534 and job.nodes == nodes and job.het_job_id == 9


def test_unconfirmable_record_is_a_job_fault_not_a_slurm_error(world):
    world.set_job(7, JobName=FORGED)
    world.fault("squeue", "stdout", stdout="8|8|RUNNING|65534|trays|tray01\n")  # not job 7
    with pytest.raises(JobRecordError, match="squeue did not confirm it"):
        CliBackend(world.config()).job(7)


def test_squeue_failure_stays_a_slurm_error(world):
    world.set_job(7, JobName=FORGED)
    world.fault("squeue", "error")
    with pytest.raises(SlurmError) as caught:
        CliBackend(world.config()).job(7)
    assert not isinstance(caught.value, JobRecordError)


def test_unparseable_forged_user_is_confirmed_not_refused(world):
    """``UserId=x`` before the real UserId used to fail parsing before squeue was asked
    (JobRecordError, and for a stale owner "alive" until slurmctld purged the job)."""
    world.set_job(7, JobName="a UserId=x")
    job = CliBackend(world.config()).job(7)
    assert job.user_id == 65534 and job.nodes == ("tray01", "tray02", "tray03", "tray04")


def test_active_jobs_keeps_forged_array_elements_and_het_components(world):
    array_of_two(world)
    het_of_two(world)
    jobs = {j.job_id: j for j in CliBackend(world.config()).active_jobs()}
    assert {7, 8, 9, 10} <= set(jobs)
    assert jobs[8].nodes == ("tray01", "tray02") and jobs[8].user_id == 65534
    assert jobs[10].het_job_id == 9 and jobs[10].nodes == ("tray02",)


def test_squeue_lines_are_picked_by_plain_job_id():
    text = "7|7_2|RUNNING|65534|trays|tray[03-04]\n8|7_1|RUNNING|65534|trays|tray[01-02]\n"
    assert sc.parse_squeue_job(text, 8)["nodes"] == ("tray01", "tray02")
    assert sc.parse_squeue_job(text, 7)["nodes"] == ("tray03", "tray04")
    het = "9|9+0|RUNNING|65534|trays|tray01\n10|9+1|RUNNING|65534|trays|tray02\n"
    assert sc.parse_squeue_job(het, 10)["het_job_id"] == 9
    assert sc.parse_squeue_job("7|7|RUNNING|x|trays|tray01\n", 7) is None   # uid not a number
    assert sc.parse_squeue_job("٧|٧|RUNNING|1|trays|tray01\n", 7) is None   # not ASCII digits


# ------------------------------------------------------------------ F3-22: stale owner
def test_ended_owner_with_unparseable_name_is_not_alive(world):
    world.set_job(7, JobName="a UserId=x", JobState="COMPLETED")
    assert owner_alive(CliBackend(world.config()), record_of(7), "tray01") is False


class _Unreadable:
    """A backend whose job record is always unreadable; squeue says ``found``."""

    def __init__(self, found):
        self.found = found

    def job(self, job_id):
        raise JobRecordError(f"job {job_id}: unreadable")

    def job_state(self, job_id):
        return self.found


@pytest.mark.parametrize("found,alive", [
    (("COMPLETED", ("tray01",)), False),
    (None, False),                         # Slurm no longer knows it
    (("RUNNING", ("tray02",)), False),     # live, but not on this tray
    (("RUNNING", ("tray01",)), True),
    (("COMPLETING", ("tray01",)), True),
])
def test_unreadable_owner_is_judged_by_squeue(found, alive):
    assert owner_alive(_Unreadable(found), record_of(7), "tray01") is alive


def test_cli_job_state_reads_squeue(world):
    world.set_job(7, JobState="COMPLETED")
    be = CliBackend(world.config())
    assert be.job_state(7) == ("COMPLETED", ("tray01", "tray02", "tray03", "tray04"))
    assert be.job_state(99) is None


# ------------------------------------------------------------------ F3-19: record fields
@pytest.mark.parametrize("value", ["NO", "OK", "YES", "USER", "MCS"])
def test_oversubscribe_is_read_by_both_backends(backend, world, value):
    world.set_job(7, OverSubscribe=value)
    assert backend.job(7).oversubscribe == value


@pytest.mark.parametrize("field,text", [
    ("JobName", "x OverSubscribe=NO"),
    ("Comment", "x OverSubscribe=NO"),
    ("WorkDir", "/tmp/x OverSubscribe=NO"),
])
def test_forged_oversubscribe_is_unknown(world, field, text):
    world.set_job(7, **{field: text, "OverSubscribe": "OK"})
    job = CliBackend(world.config()).job(7)
    assert job.oversubscribe is None
    world.set_job(7, OverSubscribe="NO")   # a forged copy of the real value: still unknown
    assert CliBackend(world.config()).job(7).oversubscribe is None


def test_het_job_id_is_read_by_both_backends(backend, world):
    het_of_two(world, name="plain")
    assert backend.job(10).het_job_id == 9 and backend.job(9).het_job_id == 9
    assert backend.job(7).het_job_id is None


def test_real_het_record_needs_no_squeue(world):
    het_of_two(world, name="plain")
    world.clear_calls()
    assert CliBackend(world.config()).job(10).het_job_id == 9
    assert not world.calls("squeue")


def test_forged_het_job_id_in_a_plain_job_is_confirmed(world):
    world.set_job(7, JobName="x HetJobId=5")
    world.clear_calls()
    job = CliBackend(world.config()).job(7)
    assert job.het_job_id is None and world.calls("squeue")


def test_forged_het_job_id_beside_a_real_one_is_confirmed(world):
    het_of_two(world, name="x HetJobId=5")
    assert CliBackend(world.config()).job(10).het_job_id == 9


def test_record_parse_of_measured_2205_het_component():
    line = ("JobId=10 HetJobId=9 HetJobOffset=1 JobName=wrap HetJobIdSet=9-10 "
            "UserId=nobody(65534) GroupId=nogroup(65534) JobState=RUNNING Partition=trays "
            "NodeList=tray02 BatchFlag=1 Features=(null) DelayBoot=00:00:00 OverSubscribe=NO "
            "Contiguous=0 WorkDir=/tmp StdErr=/dev/null")
    parsed = sc.parse_job_line(line)
    assert parsed.ambiguous == set()
    fields = sc.job_fields(parsed)
    assert fields["het_job_id"] == 9 and fields["oversubscribe"] == "NO"


def test_job_record_defaults_keep_older_callers_working():
    job = JobRecord(job_id=1, state="RUNNING", user_id=0, nodes=(), partition=None,
                    features="", admin_comment="", comment="", batch=True)
    assert job.oversubscribe is None and job.het_job_id is None


def test_pyslurm_without_the_attributes_gives_unknown(world, fake_pyslurm):
    be = make_backend("pyslurm", world)
    real_load = fake_pyslurm.Job.load

    def load(job_id):
        obj = real_load(job_id)
        del obj.resource_sharing, obj.hetjob_id
        return obj
    fake_pyslurm.Job.load = load
    be.isolate = False
    job = be.job(7)
    assert job.oversubscribe is None and job.het_job_id is None
