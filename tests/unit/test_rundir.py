"""Job directories under run_dir: exact names, checked run_dir, removal by that name."""

import os

import pytest

from imexctl.fsutil import UnsafePathError
from imexctl.rundir import job_dir, remove_job_dir

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="chown needs root")


UNSAFE = ["symlink", "world-writable", "foreign-owner"]


def plant_unsafe_dir(victim, where, how):
    """Make ``where`` an unsafe directory holding ``victim``'s entries (root planted it)."""
    if how == "symlink":
        where.symlink_to(victim)
    else:
        victim.rename(where)
        if how == "world-writable":
            os.chmod(where, 0o777)
        else:
            os.chown(where, 65534, 65534)
    return where


def make_run_dir(tmp_path, names):
    run = tmp_path / "run"
    run.mkdir(mode=0o755)
    for name in names:
        (run / name).mkdir()
        (run / name / "config.cfg").write_text("x")
    return run


def test_only_exact_job_names_are_removed_and_by_that_name(tmp_path):
    """F-18: job-04242 used to alias the live job-4242; job-abc, job-٤٢ and friends too."""
    others = ["job-04242", "job-abc", "job-\u0664\u0662", "job-7\n", "job-0", "other"]
    run = make_run_dir(tmp_path, ["job-4242"] + others)
    assert job_dir(run, 4242) == run / "job-4242"
    for name in others:
        with pytest.raises(ValueError):
            remove_job_dir(run, name)
    assert remove_job_dir(run, "job-4242") is True
    assert remove_job_dir(run, "job-4242") is False
    assert sorted(os.listdir(run)) == sorted(others)


def test_missing_run_dir_is_empty(tmp_path):
    assert remove_job_dir(tmp_path / "none", "job-1") is False


@root_only
@pytest.mark.parametrize("plant", UNSAFE)
def test_unsafe_run_dir_is_refused_not_followed(tmp_path, plant):
    """F-16: the epilog deleted job-4242 in a symlinked run_dir's target."""
    run = plant_unsafe_dir(make_run_dir(tmp_path, ["job-4242"]), tmp_path / "planted", plant)
    with pytest.raises(UnsafePathError):
        remove_job_dir(run, "job-4242")
    assert os.listdir(run) == ["job-4242"]
