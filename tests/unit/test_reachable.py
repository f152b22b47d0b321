"""scripts/lib/reachable.sh: a clone the job's user cannot reach runs from a copy they can,
which still finds the shared folder beside the clone (the vendored pyslurm source)."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TOP = Path("/var/tmp/imexctl-checkout")


@pytest.mark.skipif(os.geteuid() != 0, reason="runs as root, checks what nobody can reach")
def test_a_root_only_clone_runs_from_a_reachable_copy_that_knows_the_shared_folder(tmp_path):
    home = tmp_path / "home"                  # like /root: mode 0700
    clone, shared = home / "clone", home / "shared"
    (clone / "scripts" / "lib").mkdir(parents=True)
    (shared / "vendor").mkdir(parents=True)
    shutil.copy(REPO / "scripts" / "lib" / "reachable.sh", clone / "scripts" / "lib")
    (clone / "pyproject.toml").write_text("[project]\nname = 'probe'\n")
    probe = clone / "scripts" / "probe"
    probe.write_text('#!/bin/bash\necho "ran in $(pwd -P) shared=${IMEXCTL_SHARED_DIR:-}"\n')
    probe.chmod(0o755)
    home.chmod(0o700)
    tmp_path.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != "IMEXCTL_SHARED_DIR"}  # CI's own copy sets it
    ran = subprocess.run(["bash", "-c", ". scripts/lib/reachable.sh; run_where_reachable probe; "
                                        "echo not-relocated"], cwd=clone, capture_output=True,
                         text=True, timeout=60, env=env)
    try:
        assert ran.returncode == 0, ran.stderr
        where, _, shared_seen = ran.stdout.strip().partition(" shared=")
        copy = Path(where.removeprefix("ran in "))
        assert copy.parent == TOP and (copy / "scripts" / "probe").is_file()
        assert Path(shared_seen) == shared.resolve()
        assert "not reachable by unprivileged users" in ran.stderr
        assert subprocess.run(["runuser", "-u", "nobody", "--", "test", "-r",
                               str(copy / "pyproject.toml")]).returncode == 0
    finally:
        for line in ran.stdout.splitlines():
            if line.startswith("ran in /var/tmp/imexctl-checkout/"):
                shutil.rmtree(line.split()[2], ignore_errors=True)


def test_a_root_that_needs_pyslurm_stops_naming_the_missing_source(tmp_path, monkeypatch):
    """Without the vendored source the trixie root is not built without pyslurm (its
    pyslurm backend tests would all fail): the roots phase stops and says what to set."""
    from tests.cluster import rootfs

    monkeypatch.setitem(rootfs.PYSLURM_FOR, "trixie", tmp_path / "pyslurm-missing.tar.gz")
    with pytest.raises(rootfs.RootfsError, match="IMEXCTL_SHARED_DIR") as exc:
        rootfs.recipe_id("trixie")
    assert str(tmp_path / "pyslurm-missing.tar.gz") in str(exc.value)
    assert rootfs.recipe_id("sid").startswith(f"{rootfs.RECIPE}:sid:")   # needs none
