"""Configurations sites run (issue 26, audit 2026-11b): a wrapper script as
``paths.imex_binary`` that ``exec``s the daemon (F3-20: every prolog drained and left
a root daemon untracked), and a directory-service user name such as winbind's
``CORP\\jdoe`` (F3-4: every prolog and epilog exited 2, draining the trays)."""

from __future__ import annotations

import re
import subprocess
import time

import pytest

from tests.cluster import imexctl_config
from tests.support.harness import wait_running_domain

pytestmark = pytest.mark.integration


@pytest.fixture
def wrapped(imex):
    """imexctl.toml with paths.imex_binary a site's wrapper: some set-up, then exec of
    the (simulated) daemon with the same arguments."""
    c = imex
    toml = c.state_dir / "etc" / "imexctl.toml"
    original = toml.read_text()
    daemon = re.search(r'^imex_binary = "([^"]+)"$', original, re.M).group(1)
    wrapper = c.state_dir / "etc" / "imex-wrapper"
    imexctl_config.atomic_write(wrapper, "#!/bin/sh\n# a site's wrapper: set-up, then exec\n"
                                f"export IMEX_SITE_WRAPPED=1\nsleep 0.3\nexec {daemon} \"$@\"\n",
                                0o755)
    imexctl_config.atomic_write(toml, original.replace(
        f'imex_binary = "{daemon}"', f'imex_binary = "{wrapper}"'))
    try:
        yield c, str(wrapper), daemon
    finally:
        imexctl_config.atomic_write(toml, original)
        wrapper.unlink(missing_ok=True)


def sim_daemons(c) -> list[str]:
    """Command lines of simulated daemons of this harness still running."""
    out = subprocess.run(["ps", "-eo", "args="], capture_output=True, text=True, check=True)
    return [ln for ln in out.stdout.splitlines()
            if "imexctl-sim-imex " in ln and str(c.state_dir) in ln]


def test_a_wrapper_launcher_runs_jobs_and_leaves_nothing(wrapped):
    c, wrapper, daemon = wrapped
    trays = ["tray01", "tray02"]
    job = c.submit(["-N", "2", "-w", ",".join(trays), "--wrap", "sleep 5; echo ran"])
    sts = wait_running_domain(c, job, trays)
    for tray, st in sts.items():
        dom = st["domain"]
        assert dom["daemon"]["alive"] and dom["domain_state"] == "UP", (tray, st)
    info = c.wait_job_state(job, ("COMPLETED", "FAILED", "CANCELLED"), timeout=90)
    assert info["JobState"] == "COMPLETED", info
    c.wait_quiet(timeout=60)
    for tray in trays:
        node = c.node_info(tray)
        assert "DRAIN" not in node["state"], node
    deadline = time.monotonic() + 10
    while sim_daemons(c) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert sim_daemons(c) == []
    for tray in trays:
        st = c.imexctl_status(tray)
        assert st.get("domain") is None and st["problems"] == [], (tray, st)


USER, UID = "CORP\\jdoe", 5151


@pytest.fixture
def directory_user():
    """A winbind-style user name (no useradd default allows a backslash: --badname)."""
    subprocess.run(["useradd", "--badname", "-M", "-s", "/bin/sh", "-u", str(UID), USER],
                   check=True, capture_output=True)
    try:
        yield USER
    finally:
        subprocess.run(["userdel", USER], check=False, capture_output=True)


@pytest.mark.host_slurm_only("needs a user only the host's passwd has (useradd --badname); "
                             "the hook environment imexctl reads is the same on every Slurm")
def test_a_directory_service_user_runs_a_job(imex, directory_user):
    c = imex
    trays = ["tray03", "tray04"]
    job = c.submit(["-N", "2", "-w", ",".join(trays), "--wrap", "sleep 5; echo ran"],
                   user=directory_user)
    sts = wait_running_domain(c, job, trays)
    dom = sts["tray03"]["domain"]
    assert dom["user"] == USER and dom["uid"] == UID and dom["domain_state"] == "UP", sts
    channel = (c.state_dir / "trays" / "tray03" / "dev" / "nvidia-caps-imex-channels" /
               f"channel{dom['channel']}")
    assert channel.stat().st_uid == UID
    info = c.wait_job_state(job, ("COMPLETED", "FAILED", "CANCELLED"), timeout=90)
    assert info["JobState"] == "COMPLETED", info
    c.wait_quiet(timeout=60)
    for tray in trays:
        node = c.node_info(tray)
        assert "DRAIN" not in node["state"], node
    assert "ran" in c.job_output(job)
