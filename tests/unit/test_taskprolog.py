"""TaskProlog: the job's tasks are told their IMEX domain through export lines."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from imexctl.config import parse_config
from imexctl.lifecycle.taskprolog import facts_path, job_facts, task_lines, write_job_facts

REPO = Path(__file__).resolve().parents[2]
CLIQUE = "5b1b3a1e-1c1a-4d0e-9a5e-000000000002.32766"


def make_cfg(tmp_path):
    for d in ("run", "state"):
        (tmp_path / d).mkdir(mode=0o755, exist_ok=True)
        os.chmod(tmp_path / d, 0o755)
    return parse_config({"paths": {"run_dir": f"{tmp_path}/run", "state_dir": f"{tmp_path}/state",
                                   "channel_dir": f"{tmp_path}/dev/ch"}}, None, "tray06")


def write_facts(cfg, job_id=42, uid=65534, **kw):
    """As the prolog does: the job directory root's (0700, the job's user may pass
    through), the facts root's 0600 but for the job's user (audit S3-2)."""
    from imexctl.base.fsutil import ensure_secure_dir
    jdir = cfg.paths.run_dir / f"job-{job_id}"
    ensure_secure_dir(jdir, 0o700, search_uid=uid)
    args = dict(channel=9, channel_dir=cfg.paths.channel_dir,
                members=["tray05", "tray06", "tray07", "tray08"], clique=CLIQUE, state="UP")
    args.update(kw)
    return write_job_facts(cfg.paths.run_dir, job_id, job_facts(job_id, "tray06", **args),
                           uid=uid)


def test_exports_from_the_per_job_file(tmp_path):
    cfg = make_cfg(tmp_path)
    path = write_facts(cfg)
    assert path.stat().st_mode & 0o007 == 0 and path.stat().st_uid == os.geteuid()
    facts = json.loads(path.read_text())
    assert facts["node_id"] == 1 and facts["member_count"] == 4
    assert task_lines(cfg, {"SLURM_JOB_ID": "42"}) == [
        "export IMEX_CHANNEL=9",
        f"export IMEX_CHANNEL_DEVICE={cfg.paths.channel_dir}/channel9",
        "export IMEX_DOMAIN_NODES=tray[05-08]",
        f"export IMEX_CLIQUE={CLIQUE}",
        "export IMEX_DOMAIN_STATE=UP",
        f"export IMEX_DOMAIN_INFO={facts_path(cfg.paths.run_dir, 42)}",
    ]


def test_slurm_owned_channel_and_no_domain(tmp_path):
    cfg = make_cfg(tmp_path)
    write_facts(cfg, channel=None, channel_mode="slurm")
    lines = task_lines(cfg, {"SLURM_JOB_ID": "42"})
    assert "unset IMEX_CHANNEL" in lines and "export IMEX_DOMAIN_NODES=tray[05-08]" in lines
    write_facts(cfg, job_id=43, channel=None, members=[], clique=None, state="NONE",
                reason="warning: allocation spans 2 NVLink cliques")
    assert "export IMEX_DOMAIN_STATE=NONE" in task_lines(cfg, {"SLURM_JOB_ID": "43"})
    # no file and no record for this job: NONE, and nothing stale is inherited
    lines = task_lines(cfg, {"SLURM_JOB_ID": "44"})
    assert lines[0] == "unset IMEX_CHANNEL" and "export IMEX_DOMAIN_STATE=NONE" in lines


def test_falls_back_to_the_ownership_record(tmp_path):
    cfg = make_cfg(tmp_path)
    (cfg.paths.state_dir / "domain.json").write_text(json.dumps(
        {"job_id": 42, "nodes": ["tray05", "tray06"], "channel": 3, "phase": "ready"}))
    lines = task_lines(cfg, {"SLURM_JOB_ID": "42"})
    assert "export IMEX_CHANNEL=3" in lines and "export IMEX_DOMAIN_NODES=tray[05-06]" in lines
    assert "export IMEX_DOMAIN_STATE=UP" in lines and "unset IMEX_CLIQUE" in lines
    assert "export IMEX_CHANNEL=3" not in task_lines(cfg, {"SLURM_JOB_ID": "41"})


@pytest.mark.parametrize("content", ["{", "[]", '{"job_id": 42, "channel": "9\\nexport X=1"}',
                                     '{"job_id": 42, "members": "a b", "state": "UP"}'])
def test_bad_facts_never_produce_bad_lines(tmp_path, content):
    cfg = make_cfg(tmp_path)
    jdir = cfg.paths.run_dir / "job-42"
    jdir.mkdir()
    (jdir / "imex-job.json").write_text(content)
    for line in task_lines(cfg, {"SLURM_JOB_ID": "42"}):
        assert "\n" not in line and " " not in line.split(" ", 1)[1]
        assert line.split(" ", 1)[0] in ("export", "unset")
    assert task_lines(cfg, {"SLURM_JOB_ID": "42; rm -rf /"}) == []


def test_fifo_instead_of_facts_does_not_block(tmp_path):
    cfg = make_cfg(tmp_path)
    (cfg.paths.run_dir / "job-42").mkdir()
    os.mkfifo(cfg.paths.run_dir / "job-42" / "imex-job.json")
    assert "export IMEX_DOMAIN_STATE=NONE" in task_lines(cfg, {"SLURM_JOB_ID": "42"})


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("runuser"),
                    reason="needs root to run the hook as another user")
def test_hook_as_the_job_user_reads_a_root_written_file():
    import tempfile
    with tempfile.TemporaryDirectory(dir="/tmp") as tmp:  # pytest's tmp is root-only
        os.chmod(tmp, 0o755)
        hook_as_nobody(Path(tmp))


def hook_as_nobody(tmp_path):
    cfg = make_cfg(tmp_path)
    write_facts(cfg)
    toml = tmp_path / "imexctl.toml"
    toml.write_text(f'[paths]\nrun_dir = "{tmp_path}/run"\nstate_dir = "{tmp_path}/state"\n'
                    f'channel_dir = "{tmp_path}/dev/ch"\n')
    os.chmod(toml, 0o644)
    env = {"SLURM_JOB_ID": "42", "SLURMD_NODENAME": "tray06"}
    nobody = [shutil.which("runuser"), "-u", "nobody", "--"]
    hook = [*nobody, str(REPO / "hooks" / "task-prolog")]
    # (slurm.conf's TaskProlog takes no arguments: a site's file is found on the default
    # search path; here the config is named to the same command the hook runs)
    imexctl = [*nobody, str(REPO / ".venv" / "bin" / "imexctl"), "--config", str(toml)]
    proc = subprocess.run([*imexctl, "task-prolog"], env=env, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "export IMEX_CHANNEL=9" in proc.stdout.splitlines()
    assert "export IMEX_DOMAIN_STATE=UP" in proc.stdout.splitlines()
    # the task's environment is the job user's: a config it names is not read (here it
    # would have given the same facts; without it the defaults find none)
    proc = subprocess.run(hook, env={**env, "IMEXCTL_CONFIG": str(toml)}, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "export IMEX_CHANNEL=9" not in proc.stdout.splitlines(), proc.stdout
    # a broken config still lets the task start, and says so on stderr only
    proc = subprocess.run([str(REPO / ".venv" / "bin" / "imexctl"), "--config", str(tmp_path),
                           "task-prolog"], capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0 and proc.stdout == "export IMEX_DOMAIN_STATE=UNKNOWN\n"
    assert "imexctl: task-prolog:" in proc.stderr


def test_a_het_task_finds_its_components_facts(tmp_path):
    """A het job's task carries the leader's id in SLURM_JOB_ID; on a tray of another
    component the facts are filed under that component's id (SLURM_JOB_ID_HET_GROUP_n)."""
    cfg = make_cfg(tmp_path)
    write_facts(cfg, job_id=51)
    env = {"SLURM_JOB_ID": "50", "SLURM_JOB_ID_HET_GROUP_0": "50",
           "SLURM_JOB_ID_HET_GROUP_1": "51"}
    lines = task_lines(cfg, env)
    assert "export IMEX_DOMAIN_STATE=UP" in lines and "export IMEX_CHANNEL=9" in lines
    assert f"export IMEX_DOMAIN_INFO={facts_path(cfg.paths.run_dir, 51)}" in lines
    # without the het variables the same task is told nothing of job 51's domain
    assert "export IMEX_DOMAIN_STATE=NONE" in task_lines(cfg, {"SLURM_JOB_ID": "50"})
    bad = {"SLURM_JOB_ID": "50", "SLURM_JOB_ID_HET_GROUP_1": "51;x"}
    assert "export IMEX_DOMAIN_STATE=NONE" in task_lines(cfg, bad)
