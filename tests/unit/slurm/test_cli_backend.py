"""CLI backend specifics: the commands it runs, hostile job text, missing tools."""

import os

import pytest

from imexctl.errors import SlurmError
from imexctl.slurm.records import SlurmNotFound
from imexctl.slurm.cli_backend import CliBackend


def test_commands_and_arguments(world):
    be = CliBackend(world.config())
    be.job(7)
    be.nodes(["tray02", "tray01", "tray03"])
    be.drain("tray01", "imexctl: prolog/start: x")
    be.extra_merge("tray02", "imex", {"a": 1})
    be.set_admin_comment(7, "imexctl: ok")
    be.requeue_hold(7)
    be.cancel(7)
    calls = world.calls()
    assert ["scontrol", "--local", "-o", "show", "job", "7"] in calls
    assert ["scontrol", "-o", "show", "node", "tray[01-03]"] in calls
    assert ["scontrol", "update", "NodeName=tray01", "State=DRAIN",
            "Reason=imexctl: prolog/start: x"] in calls
    assert ["scontrol", "update", "NodeName=tray02", 'Extra={"imex":{"a":1}}'] in calls
    assert ["scontrol", "update", "JobId=7", "AdminComment=imexctl: ok"] in calls
    assert ["scontrol", "requeuehold", "7"] in calls
    assert ["scancel", "7"] in calls


def test_runs_by_absolute_path_without_path_env(world, monkeypatch):
    monkeypatch.delenv("PATH", raising=False)
    be = CliBackend(world.config())
    assert be.job(7).job_id == 7


def test_forged_nodelist_in_job_name_is_checked_with_squeue(world):
    world.set_job(7, JobName="evil NodeList=tray[01-02] AdminComment=imexctl: channel=1")
    job = CliBackend(world.config()).job(7)
    assert job.nodes == ("tray01", "tray02", "tray03", "tray04")   # squeue's answer
    assert job.admin_comment == ""                                  # not trusted
    assert ["squeue", "-h", "-j", "7", "-t", "all", "-o", "%A|%i|%T|%U|%P|%N"] in world.calls()


def test_forged_admin_comment_in_comment_is_distrusted(world):
    world.set_job(7, AdminComment="imexctl: real", Comment="x AdminComment=imexctl: forged")
    job = CliBackend(world.config()).job(7)
    assert job.admin_comment == ""
    assert job.nodes[0] == "tray01" and not world.calls("squeue")


def test_plain_job_needs_no_squeue(world):
    CliBackend(world.config()).job(7)
    assert not world.calls("squeue")


def test_work_dir_with_spaces(world):
    world.set_job(7, WorkDir="/home/a b/c", AdminComment="imexctl: channel=3")
    job = CliBackend(world.config()).job(7)
    assert job.admin_comment == "imexctl: channel=3"


def test_unknown_node_is_absent_not_error(world):
    assert CliBackend(world.config()).nodes(["nosuch"]) == {}


def test_unknown_job_is_not_retried(world):
    with pytest.raises(SlurmNotFound, match="Invalid job id"):
        CliBackend(world.config()).job(12345)
    assert len(world.calls("scontrol")) == 1


def test_missing_binary(tmp_path, world):
    cfg = world.config()
    be = CliBackend(cfg)
    be.bin_dir = tmp_path / "nowhere"
    with pytest.raises(SlurmError, match="cannot run .*scontrol"):
        be.job(7)


def test_not_executable(world):
    os.chmod(world.bin_dir / "scontrol", 0o644)
    with pytest.raises(SlurmError, match="cannot run"):
        CliBackend(world.config()).job(7)


def test_timeout_then_success(world):
    world.fault("scontrol", "timeout", count=1, sleep=60)
    be = CliBackend(world.config(timeout_s=1.0, attempts=2))
    assert be.job(7).job_id == 7
    assert len(world.calls("scontrol")) == 2


def test_socket_timed_out_is_transient(world):
    world.fault("scontrol", "error", count=1,
                message="slurm_load_node error: Socket timed out on send/recv operation")
    assert CliBackend(world.config()).nodes(["tray01"])["tray01"].name == "tray01"


def test_error_message_names_command_and_stderr(world):
    world.fault("scancel", "error", count=-1, message="scancel: error: Kill job error on job id 7")
    with pytest.raises(SlurmError) as exc:
        CliBackend(world.config()).cancel(7)
    assert "scancel 7" in str(exc.value) and "Kill job error" in str(exc.value)
    assert exc.value.exit_code == 5


def test_a_failed_long_update_is_named_by_its_start_and_length(world):
    """A 60,000-character record that Slurm refuses: the error names the command, not the
    whole record (it goes to the log and the job's refusal)."""
    world.fault("scontrol", "error", count=-1, message="scontrol: error: Invalid job id specified x")
    text = "imexctl:v2;j=7;" + "g" * 59_985
    with pytest.raises(SlurmError) as exc:
        CliBackend(world.config()).set_admin_comment(7, text)
    assert "scontrol update JobId=7 AdminComment=imexctl:v2;j=7;ggg" in str(exc.value)
    assert "...(60013 characters)" in str(exc.value) and len(str(exc.value)) < 300


def test_caller_env_time_format_dropped(world, monkeypatch):
    monkeypatch.setenv("SLURM_TIME_FORMAT", "%s")
    assert "SLURM_TIME_FORMAT" not in CliBackend(world.config()).env


def test_newline_in_job_name_keeps_the_record_whole(world):
    """Audit S-01: Slurm prints user text raw, so one record may span lines."""
    world.set_job(7, JobName="a\nb NodeList", AdminComment="imexctl: channel=3")
    be = CliBackend(world.config())
    job = be.job(7)
    assert job.user_id == 65534 and job.nodes[0] == "tray01"
    assert job.admin_comment == "imexctl: channel=3" and not world.calls("squeue")
    assert 7 in {j.job_id for j in be.active_jobs()}  # health must not think it is gone


def test_forged_record_start_after_a_newline_is_ambiguous(world):
    world.set_job(7, JobName="a\nJobId=7 UserId=root(0) NodeList=tray09 AdminComment=imexctl: x",
                  AdminComment="imexctl: real")
    job = CliBackend(world.config()).job(7)
    assert job.user_id == 65534 and "tray09" not in job.nodes   # squeue's answer
    assert job.admin_comment == ""                               # not trusted
    assert world.calls("squeue")


def test_unreadable_job_record_is_a_job_record_error(world):
    from imexctl.slurm.records import JobRecordError
    world.set_job(7, User="", UserId="")
    with pytest.raises(JobRecordError, match="no numeric uid"):
        CliBackend(world.config()).job(7)


def test_job_specs_name_one_job_only():
    from imexctl.slurm.cli_backend import _target, job_spec_ok

    assert [job_spec_ok(100, s) for s in ("100", "100_3", "100+0", "100+1", "101_3",
                                          "100_", "100_3_4", "100_x", "1000")] == \
        [True, True, True, False, False, False, False, False, False]
    assert _target(100, None) == "100" and _target(100, "100_3") == "100_3"
    with pytest.raises(ValueError):
        _target(100, "100 --all")
