"""hooks/: each runs its imexctl subcommand with a PATH; a checkout's .venv is used only
when root alone can change it (audit S-09)."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
HOOKS = {"prolog": "prolog", "epilog": "epilog", "prolog-slurmctld": "prolog-slurmctld",
         "epilog-slurmctld": "epilog-slurmctld", "healthcheck": "health"}
SYSTEM = [p for p in ("/usr/local/bin/imexctl", "/usr/bin/imexctl") if os.path.exists(p)]
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="ownership checks need root")


def checkout(tmp_path):
    root = tmp_path / "imexctl-checkout"
    shutil.copytree(REPO / "hooks", root / "hooks")
    (root / "imexctl").mkdir()
    (root / ".venv/lib").mkdir(parents=True)
    exe = root / ".venv/bin/imexctl"
    exe.parent.mkdir()
    exe.write_text('#!/bin/sh\necho "venv-imexctl $* PATH=$PATH"\n')
    exe.chmod(0o755)
    os.chmod(tmp_path, 0o755)
    return root


def run(hook, env=None):
    return subprocess.run([str(hook), "--flag"], capture_output=True, text=True, timeout=30,
                          env=env or {"SLURM_JOB_ID": "7"})


@pytest.mark.parametrize("hook", sorted(HOOKS))
def test_hook_runs_root_owned_checkout_venv(tmp_path, hook):
    root = checkout(tmp_path)
    res = run(root / "hooks" / hook)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == f"venv-imexctl {HOOKS[hook]} --flag " \
                                 "PATH=/usr/sbin:/usr/bin:/sbin:/bin"


@pytest.mark.parametrize("spoil", ["checkout-world-writable", "venv-owned-by-user",
                                   "package-group-writable", "hooks-dir-owned-by-user"])
def test_hook_ignores_venv_others_can_change(tmp_path, spoil):
    if SYSTEM:
        pytest.skip(f"a system imexctl ({SYSTEM[0]}) would be run instead")
    root = checkout(tmp_path)
    if spoil == "checkout-world-writable":
        os.chmod(root, 0o777)
    elif spoil == "venv-owned-by-user":
        os.chown(root / ".venv/bin/imexctl", 65534, 65534)
    elif spoil == "package-group-writable":
        os.chmod(root / "imexctl", 0o775)
    else:
        os.chown(root / "hooks", 65534, 65534)
    res = run(root / "hooks/prolog")
    assert "venv-imexctl" not in res.stdout
    assert res.returncode == 127
    assert "ignoring" in res.stderr and "not root-only" in res.stderr


@pytest.mark.parametrize("how", ["link-to-file", "link-to-directory", "relative"])
def test_hook_reached_through_a_link_finds_its_checkout(tmp_path, how):
    """slurm.conf may name a symlink (or a directory link) to the hook: the checkout is
    found from the hook's real directory, as readlink -f found it."""
    root = checkout(tmp_path)
    elsewhere = tmp_path / "etc-slurm"
    elsewhere.mkdir()
    if how == "link-to-file":
        (elsewhere / "imexctl-prolog").symlink_to(root / "hooks/prolog")
        res = run(elsewhere / "imexctl-prolog")
    elif how == "link-to-directory":
        (elsewhere / "hooks").symlink_to(root / "hooks")
        res = run(elsewhere / "hooks/prolog")
    else:
        res = subprocess.run(["hooks/prolog", "--flag"], capture_output=True, text=True,
                             timeout=30, env={"SLURM_JOB_ID": "7"}, cwd=root)
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("venv-imexctl prolog --flag")


def test_sticky_tmp_parent_is_fine(tmp_path):
    root = checkout(tmp_path)
    assert os.stat("/tmp").st_mode & 0o1000   # tmp_path lives under sticky /tmp
    assert run(root / "hooks/epilog").stdout.startswith("venv-imexctl epilog")


def test_no_imexctl_anywhere(tmp_path):
    if SYSTEM:
        pytest.skip("a system imexctl is installed")
    root = checkout(tmp_path)
    (root / ".venv/bin/imexctl").unlink()
    res = run(root / "hooks/healthcheck")
    assert res.returncode == 127 and "no usable imexctl executable" in res.stderr


@pytest.mark.parametrize("hook", ["prolog", "task-prolog"])
def test_hook_runs_imexctl_in_the_callers_directory(tmp_path, hook):
    """The hooks find their directory with `cd -P` (no subshell) and go back: imexctl
    starts in the directory Slurm started the hook in."""
    root = checkout(tmp_path)
    (root / ".venv/bin/imexctl").write_text('#!/bin/sh\necho "cwd=$(pwd -P)"\n')
    start = tmp_path / "job-cwd"
    start.mkdir()
    res = subprocess.run([str(root / "hooks" / hook)], capture_output=True, text=True,
                         timeout=30, env={"SLURM_JOB_ID": "7"}, cwd=start)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == f"cwd={start}"
