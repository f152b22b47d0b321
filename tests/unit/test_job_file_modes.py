"""Job files readable only by whom needs them (audit 2026-11b S3-2): the ownership record,
the last outcome, the expected-state file and a job's rendered configs are root's (0600);
a job's directory is root's 0700 with a POSIX ACL that lets the job's user pass through,
and its facts file (the TaskProlog's, run as that user) is readable by root and that user
only. Checked by reading as uid 65534 (the job's user) and 4242 (another user) in forked
children, so the kernel, not a mode calculation, decides."""

from __future__ import annotations

import errno
import json
import os
import shutil
import stat
import struct
import tempfile
from pathlib import Path

import pytest

from imexctl.config import parse_config
from imexctl.base.fsutil import atomic_write, ensure_secure_dir
from imexctl.tray.ownership import DomainRecord, RecordUnreadable, StateStore
from imexctl.lifecycle.taskprolog import facts_path, job_facts, task_lines, write_job_facts

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="reads as other users need root")
JOB_USER, OTHER = 65534, 4242
CLIQUE = "5b1b3a1e-1c1a-4d0e-9a5e-000000000002.32766"


@pytest.fixture
def base():
    """A directory every user may pass through (pytest's tmp_path is root-only)."""
    path = Path(tempfile.mkdtemp(dir="/tmp", prefix="imexctl-modes-"))
    os.chmod(path, 0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def as_user(uid: int, fn):
    """``fn()`` in a forked child running as ``uid`` (no groups); its JSON-able result."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            out = json.dumps({"ok": fn()})
        except BaseException as exc:  # noqa: BLE001 - reported to the parent
            out = json.dumps({"error": f"{type(exc).__name__}: {exc}"})
        finally:
            try:
                os.write(w, out.encode())
            finally:
                os._exit(0)
    os.close(w)
    chunks = []
    while chunk := os.read(r, 65536):
        chunks.append(chunk)
    os.close(r)
    os.waitpid(pid, 0)
    got = json.loads(b"".join(chunks))
    if "error" in got:
        raise AssertionError(f"child as uid {uid}: {got['error']}")
    return got["ok"]


def read_as(uid: int, path: Path) -> str:
    """"read", "denied" or "missing" for ``uid`` opening ``path``."""
    def attempt():
        try:
            with open(path, "rb") as handle:
                handle.read(1)
            return "read"
        except PermissionError:
            return "denied"
        except FileNotFoundError:
            return "missing"
    return as_user(uid, attempt)


def acl_users(path: Path) -> dict[int, int]:
    """uid -> permission bits of the named-user entries of ``path``'s access ACL."""
    try:
        raw = os.getxattr(path, "system.posix_acl_access", follow_symlinks=False)
    except OSError as exc:
        if exc.errno == errno.ENODATA:
            return {}
        raise
    entries = [struct.unpack_from("<HHI", raw, 4 + 8 * i) for i in range((len(raw) - 4) // 8)]
    return {ident: perm for tag, perm, ident in entries if tag == 0x02}


def config(base: Path):
    for d in ("run", "state"):
        (base / d).mkdir(mode=0o755, exist_ok=True)
    return parse_config({"paths": {"run_dir": f"{base}/run", "state_dir": f"{base}/state",
                                   "channel_dir": f"{base}/dev/ch"}}, None, "tray06")


def facts_for(cfg, job_id: int, uid: int) -> Path:
    jdir = cfg.paths.run_dir / f"job-{job_id}"
    ensure_secure_dir(jdir, 0o700, search_uid=uid)
    atomic_write(jdir / "config.cfg", "SERVER_PORT=20480\n", 0o600, durable=False)
    return write_job_facts(cfg.paths.run_dir, job_id, job_facts(
        job_id, "tray06", channel=9, channel_dir=cfg.paths.channel_dir,
        members=["tray05", "tray06"], clique=CLIQUE, state="UP"), uid=uid)


def record(job_id: int) -> DomainRecord:
    return DomainRecord(job_id=job_id, uid=JOB_USER, user="nobody", nodes=["tray06"],
                        addresses=["127.0.0.1"], node_id=0, digest="d", server_port=20480,
                        cmd_port=24576, channel=9, channel_rule="controller", job_dir="/x",
                        phase="ready")


# ------------------------------------------------------------------ state and expected
def test_ownership_record_and_last_outcome_are_roots(base):
    store = StateStore(base / "state")
    store.save(record(42))
    store.save_outcome({"job_id": 42, "hook": "prolog", "result": "ok"})
    for name in ("domain.json", "last-outcome.json"):
        st = os.stat(base / "state" / name)
        assert (stat.S_IMODE(st.st_mode), st.st_uid) == (0o600, 0), name
        assert read_as(JOB_USER, base / "state" / name) == "denied", name


def test_a_plain_user_is_told_it_needs_root(base):
    StateStore(base / "state").save(record(42))

    def load():
        try:
            StateStore(base / "state").load()
        except RecordUnreadable as exc:
            return str(exc)
        return "loaded"
    said = as_user(JOB_USER, load)
    assert "readable by root only" in said and "run imexctl as root" in said, said


def test_expected_state_file_is_roots(base):
    from imexctl.tray import expected
    cfg = config(base)
    assert expected.write(cfg, expected.STARTING, job_id=42) is not None
    path = expected.path_for(cfg)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert read_as(JOB_USER, path) == "denied"


# ------------------------------------------------------------------ the job directory
def test_job_directory_lets_only_the_jobs_user_through(base):
    cfg = config(base)
    path = facts_for(cfg, 42, JOB_USER)
    jdir = path.parent
    st = os.stat(jdir)
    assert st.st_uid == 0 and stat.S_IMODE(st.st_mode) & 0o007 == 0
    assert acl_users(jdir) == {JOB_USER: 0o1}                     # search, no listing
    assert as_user(JOB_USER, lambda: _listing(jdir)) == "denied"
    fst = os.stat(path)
    assert fst.st_uid == 0 and stat.S_IMODE(fst.st_mode) & 0o007 == 0
    assert acl_users(path) == {JOB_USER: 0o4}
    assert read_as(JOB_USER, path) == "read"
    assert read_as(JOB_USER, jdir / "config.cfg") == "denied"      # root's 0600
    assert read_as(OTHER, path) == "denied"                        # cannot even pass through
    assert read_as(OTHER, jdir / "config.cfg") == "denied"


def _listing(path: Path) -> str:
    try:
        os.listdir(path)
        return "listed"
    except PermissionError:
        return "denied"


def test_taskprolog_as_the_jobs_user_still_reads_its_facts(base):
    cfg = config(base)
    facts_for(cfg, 42, JOB_USER)
    lines = as_user(JOB_USER, lambda: task_lines(cfg, {"SLURM_JOB_ID": "42"}))
    assert "export IMEX_CHANNEL=9" in lines and "export IMEX_DOMAIN_STATE=UP" in lines
    assert f"export IMEX_DOMAIN_INFO={facts_path(cfg.paths.run_dir, 42)}" in lines
    # another user running a task prolog for that job id learns nothing
    lines = as_user(OTHER, lambda: task_lines(cfg, {"SLURM_JOB_ID": "42"}))
    assert "unset IMEX_CHANNEL" in lines


def test_taskprolog_without_facts_and_a_root_only_record_says_unknown(base):
    cfg = config(base)
    StateStore(cfg.paths.state_dir).save(record(43))
    lines = as_user(JOB_USER, lambda: task_lines(cfg, {"SLURM_JOB_ID": "43"}))
    assert "export IMEX_DOMAIN_STATE=UNKNOWN" in lines and "unset IMEX_CHANNEL" in lines
    os.unlink(cfg.paths.state_dir / "domain.json")      # no record at all: no domain
    assert "export IMEX_DOMAIN_STATE=NONE" in as_user(
        JOB_USER, lambda: task_lines(cfg, {"SLURM_JOB_ID": "43"}))


def test_existing_directory_is_made_private_again(base):
    cfg = config(base)
    jdir = cfg.paths.run_dir / "job-44"
    jdir.mkdir(mode=0o755)
    os.chmod(jdir, 0o755)
    ensure_secure_dir(jdir, 0o700, search_uid=JOB_USER)
    assert stat.S_IMODE(os.stat(jdir).st_mode) & 0o007 == 0


def test_without_acls_the_file_is_given_to_the_jobs_user(base, monkeypatch):
    """A filesystem without POSIX ACLs: anyone may pass through the directory (0711), the
    facts file is the job user's, 0400; still nobody else reads it."""
    def no_acls(*args, **kwargs):
        raise OSError(errno.EOPNOTSUPP, "Operation not supported")
    monkeypatch.setattr(os, "setxattr", no_acls)
    cfg = config(base)
    path = facts_for(cfg, 45, JOB_USER)
    assert stat.S_IMODE(os.stat(path.parent).st_mode) == 0o711
    st = os.stat(path)
    assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (JOB_USER, 0o400)
    assert read_as(JOB_USER, path) == "read"
    assert read_as(OTHER, path) == "denied"
    assert read_as(OTHER, path.parent / "config.cfg") == "denied"


def test_root_job_needs_no_grant(base):
    cfg = config(base)
    path = facts_for(cfg, 46, 0)
    assert acl_users(path) == {} and stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(path.parent).st_mode) == 0o700


# ------------------------------------------------------------------ the node prolog
def test_prolog_leaves_every_job_file_private(base):
    """A whole prolog (MemorySlurm, simulated daemon): what it wrote, as the job's user sees
    it; then the epilog."""
    from imexctl.lifecycle.epilog import run_epilog
    from imexctl.lifecycle.prolog import run_prolog
    from tests.support.memory_slurm import job_record, MemorySlurm
    from tests.support.lifecycle import ctx_for, published
    from tests.support.sim_daemon import sim_cfg, sim_processes

    job_id = 515151
    cfg = sim_cfg(base, policy="all")
    slurm = MemorySlurm()
    slurm.add_nodes({"tray01": "127.0.0.1", "tray02": "127.0.0.2"})
    for n in ("tray01", "tray02"):
        slurm.publish(n, published())
    slurm.jobs[job_id] = job_record(job_id, ("tray01",))
    slurm.set_job(job_id, oversubscribe="NO")   # node-exclusive (F3-19's gate)
    ctx = ctx_for(job_id, nodes="tray01")
    try:
        assert run_prolog(cfg, slurm, ctx) == 0, StateStore(cfg.paths.state_dir).last_outcome()
        jdir = cfg.paths.run_dir / f"job-{job_id}"
        private = [jdir / "config.cfg", jdir / "nodes_config.cfg",
                   cfg.paths.state_dir / "domain.json", cfg.paths.run_dir / "expected.json"]
        for path in private:
            st = os.stat(path)
            assert (stat.S_IMODE(st.st_mode), st.st_uid) == (0o600, 0), path
            assert read_as(JOB_USER, path) == "denied", path
        assert acl_users(jdir) == {JOB_USER: 0o1}
        assert stat.S_IMODE(os.stat(jdir).st_mode) & 0o007 == 0
        assert read_as(OTHER, jdir / "imex-job.json") == "denied"
        lines = as_user(JOB_USER, lambda: task_lines(cfg, {"SLURM_JOB_ID": str(job_id)}))
        assert "export IMEX_DOMAIN_STATE=UP" in lines and any(
            line.startswith("export IMEX_CHANNEL=") for line in lines), lines
        assert run_epilog(cfg, slurm, ctx) == 0
        assert not jdir.exists()
    finally:
        for p in sim_processes(base):
            p.kill()



# ------------------------------------------------------------ files that name jobs' channels
def test_channel_table_epilog_ledger_metrics_state_and_status_memory_are_private(base):
    """Every other file that maps jobs to channels or outcomes is its writer's only:
    the controller's channel table (SlurmUser's), the epilog ledger, the metrics state
    and status's memory of when each problem was first seen."""
    import time

    from imexctl.lifecycle import epilog
    from imexctl.ops import metrics
    from tests.support.lifecycle import ctx_for
    from imexctl.ops import status
    from imexctl.controller.channel_table import ChannelTable

    cfg = config(base)
    table = ChannelTable(base / "ctld", count=8)
    table.allocate(42, ["u.1"])
    epilog._remember_done(StateStore(base / "state"), ctx_for(42))
    metrics.count(cfg, "stale_domains_found")
    status._first_seen(cfg, 42, ["channel9 missing"], time.time())
    for path in (table.path, base / "state" / epilog.DONE,
                 base / "state" / metrics.STATE_SUBDIR / metrics.STATE_FILE,
                 base / "state" / status.SEEN):
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600, path
        assert read_as(JOB_USER, path) == "denied", path
    assert stat.S_IMODE(os.stat(base / "ctld").st_mode) == 0o700


def test_status_as_a_plain_user_refuses_up_front(base):
    """A non-root `imexctl status` says it needs root and how to ask Slurm's view,
    instead of a table of "record-unreadable"."""
    import subprocess
    import sys

    cfg_file = base / "imexctl.toml"
    cfg_file.write_text(f'[paths]\nrun_dir = "{base}/run"\nstate_dir = "{base}/state"\n'
                        f'log_file = "{base}/imexctl.log"\n')
    os.chmod(cfg_file, 0o644)
    config(base)
    StateStore(base / "state").save(record(42))
    repo = str(Path(__file__).resolve().parents[2])

    def status():
        res = subprocess.run([sys.executable, "-m", "imexctl", "--config", str(cfg_file),
                              "status", "--local"], capture_output=True, text=True, cwd="/",
                             timeout=60, env={"PYTHONPATH": repo, "PATH": "/usr/bin:/bin"})
        return [res.returncode, res.stdout, res.stderr]
    rc, out, err = as_user(JOB_USER, status)
    assert rc == 2 and out == "", (rc, out, err)
    assert "readable by root only" in err and "imexctl status --nodes" in err, err
    assert "Traceback" not in err
