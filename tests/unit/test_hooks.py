"""hooks/: each runs its imexctl subcommand with a PATH; a checkout's .venv is used only
when root alone can change it (audit S-09)."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
HOOKS = {"prolog": "prolog", "epilog": "epilog", "prolog-slurmctld": "prolog-slurmctld",
         "epilog-slurmctld": "epilog-slurmctld", "healthcheck": "health",
         "task-prolog": "task-prolog"}
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="ownership checks need root")


def checkout(tmp_path):
    root = tmp_path / "imexctl-checkout"
    shutil.copytree(REPO / "hooks", root / "hooks")
    (root / "imexctl").mkdir()
    (root / ".venv/lib").mkdir(parents=True)
    (root / ".venv/pyvenv.cfg").write_text("home = /usr/bin\n")
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


def system_imexctl(root, *paths):
    """The checkout's hooks with these paths as the system installs (instead of
    /usr/local/bin/imexctl and /usr/bin/imexctl): the script's one list, rewritten."""
    lib = root / "hooks" / "imexctl-hook.sh"
    text = lib.read_text()
    line = 'SYSTEM_IMEXCTL="/usr/local/bin/imexctl /usr/bin/imexctl"'
    assert line in text
    lib.write_text(text.replace(line, f'SYSTEM_IMEXCTL="{" ".join(map(str, paths))}"'))


@pytest.mark.parametrize("spoil", ["checkout-world-writable", "venv-owned-by-user",
                                   "package-group-writable", "hooks-dir-owned-by-user"])
def test_hook_ignores_venv_others_can_change(tmp_path, spoil):
    root = checkout(tmp_path)
    system_imexctl(root, tmp_path / "no-such-imexctl")
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


@pytest.mark.parametrize("hook", ["prolog", "task-prolog"])
def test_system_link_into_a_refused_checkout_is_refused_too(tmp_path, hook):
    """docs/install.md's `ln -s /opt/imexctl/.venv/bin/imexctl /usr/local/bin/imexctl`:
    when the checkout's venv is refused, the system link to it must not run it anyway."""
    root = checkout(tmp_path)
    os.chmod(root, 0o777)
    link = tmp_path / "usr-local-bin" / "imexctl"
    link.parent.mkdir()
    link.symlink_to(root / ".venv/bin/imexctl")
    system_imexctl(root, link)
    res = run(root / "hooks" / hook)
    assert "venv-imexctl" not in res.stdout
    assert res.returncode == 127
    assert res.stderr.count("not root-only") == 2, res.stderr
    assert f"ignoring {link}:" in res.stderr


@pytest.mark.parametrize("spoil", ["none", "venv-lib-group-writable", "package-world-writable",
                                   "target-owned-by-user"])
def test_system_link_to_another_venv_is_checked_like_the_checkouts(tmp_path, spoil):
    """The hooks' own checkout has no venv; the system imexctl is a link into another
    installation's venv: it runs only when it, the venv's lib/ and a checkout's imexctl/
    beside the venv are root-only."""
    root = checkout(tmp_path)
    (root / ".venv/bin/imexctl").unlink()
    other = checkout(tmp_path / "opt")
    os.chmod(tmp_path / "opt", 0o755)
    (other / ".venv/bin/imexctl").write_text('#!/bin/sh\necho "other-imexctl $*"\n')
    link = tmp_path / "imexctl-link"
    link.symlink_to(other / ".venv/bin/imexctl")
    system_imexctl(root, link)
    if spoil == "venv-lib-group-writable":
        os.chmod(other / ".venv/lib", 0o775)
    elif spoil == "package-world-writable":
        os.chmod(other / "imexctl", 0o777)
    elif spoil == "target-owned-by-user":
        os.chown(other / ".venv/bin/imexctl", 65534, 65534)
    res = run(root / "hooks/epilog")
    if spoil == "none":
        assert res.returncode == 0, res.stderr
        assert res.stdout.strip() == "other-imexctl epilog --flag"
    else:
        assert "other-imexctl" not in res.stdout and res.returncode == 127
        assert f"ignoring {link}: it, its target or what it runs from is not root-only" \
            in res.stderr


def test_plain_system_executable_is_used(tmp_path):
    root = checkout(tmp_path)
    (root / ".venv/bin/imexctl").unlink()
    exe = tmp_path / "bin" / "imexctl"
    exe.parent.mkdir()
    exe.write_text('#!/bin/sh\necho "system-imexctl $*"\n')
    exe.chmod(0o755)
    system_imexctl(root, tmp_path / "absent", exe)
    res = run(root / "hooks/healthcheck")
    assert res.returncode == 0 and res.stdout.strip() == "system-imexctl health --flag", res


def test_no_imexctl_anywhere(tmp_path):
    root = checkout(tmp_path)
    system_imexctl(root, tmp_path / "absent")
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
