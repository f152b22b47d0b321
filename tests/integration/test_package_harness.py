"""The installed Debian package under a running harness cluster: an upgrade while a job's
IMEX domain is up, and a removal.

The trixie root (Slurm 24.11, Python 3.13) runs the package this checkout builds
(tests/cluster/rootfs.py installs it; slurm.conf's hooks are /opt/imexctl/hooks there), so
dpkg here acts on what slurmd runs. One Slurm proves the maintainer scripts; the sid root
installs the same .deb and runs its whole suite on it. The newer build is this build with
a newer Debian version and a changed default conffile (package.repack: the payload a
`scripts/package --version-suffix` build of the same tree has, without a second 20 s
build); its postinst builds a new venv and switches /opt/imexctl/.venv like any upgrade.
Each test puts this checkout's package back at its end.
"""

from __future__ import annotations

import os
import subprocess

import pytest

from tests.cluster import package, procs, rootfs
from tests.support.harness import assert_clean, sim_daemons, wait_running_domain

pytestmark = [pytest.mark.integration,
              pytest.mark.slurm_only("trixie", "dpkg's upgrade and removal of the installed package: "
                                     "one Slurm root proves them")]

CONF = "etc/imexctl/imexctl.toml"
DONE = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT")


def _quiet(_text: str) -> None:
    pass


def _links(root) -> list[str]:
    """Every link under the root's /etc/systemd/system naming an imexctl unit."""
    return sorted(str(p.relative_to(root)) for p in (root / "etc/systemd/system").rglob("imexctl*"))


def test_upgrade_under_a_running_domain_keeps_domain_record_and_config(imex, tmp_path):
    c = imex
    root, stamp = c.root.path, c.root.stamp
    conf = root / CONF
    original = conf.read_text()
    edited = original + '\n# edited by the site\n[log]\nlevel = "debug"\n'
    conf.write_text(edited)
    venv_before = os.readlink(root / "opt/imexctl/.venv")
    built = package.ensure_built()
    newer = package.repack(built.deb, tmp_path, f"{package.version()}+t1", "# a newer default\n")
    trays = c.trays[:2]
    # the job runs until the test lets it end (however long the upgrade takes)
    release = c.state_dir / "jobs" / "upgrade-done"
    release.unlink(missing_ok=True)
    job = c.submit(["-N", "2", "-w", ",".join(trays), "--wrap",
                    f"srun sh -c 'while [ ! -e {release} ]; do sleep 0.2; done'"])
    try:
        sts = wait_running_domain(c, job, trays)
        record = {t: (c.state_dir / "trays" / t / "state" / "domain.json").read_bytes() for t in trays}
        pids = {t: sts[t]["domain"]["daemon"]["pid"] for t in trays}

        have = rootfs.install_package(root, stamp, _quiet, deb=newer)
        assert have["version"] == f"{package.version()}+t1", have

        # a new venv is current, the one before is kept; imexctl runs from the new one
        venv_after = os.readlink(root / "opt/imexctl/.venv")
        assert venv_after != venv_before and (root / "opt/imexctl" / venv_before).is_dir()
        # the domain, its daemon and the ownership record are as they were
        for tray in trays:
            dom = c.imexctl_status(tray)["domain"]
            assert dom["job_id"] == job and dom["domain_state"] == "UP", (tray, dom)
            assert dom["daemon"]["pid"] == pids[tray] and dom["daemon"]["alive"], (tray, dom)
            assert (c.state_dir / "trays" / tray / "state" / "domain.json").read_bytes() == record[tray]
        # the site's edit stays; the new default is beside it
        assert conf.read_text() == edited
        assert "# a newer default" in (root / (CONF + ".dpkg-dist")).read_text()

        # the job completes; the upgraded package's epilog tears the domain down
        release.touch()
        info = c.wait_job_state(job, DONE, timeout=90)
        assert info["JobState"] == "COMPLETED", info
        c.wait_quiet()
        assert_clean(c, c.trays)
    finally:
        c.cancel_all()
        conf.write_text(original)
        (root / (CONF + ".dpkg-dist")).unlink(missing_ok=True)
        rootfs.install_package(root, stamp, _quiet, deb=built.deb)


def test_removal_leaves_no_unit_enabled_and_no_daemon_running(imex):
    c = imex        # jobs ran on it before (the fixture leaves it quiet and clean)
    root, stamp = c.root.path, c.root.stamp
    # an admin enabled the boot-time unit
    rootfs.run_in(root, ["systemctl", "enable", "imexctl-recover.service"], "systemctl enable")
    assert _links(root), "systemctl enable made no link"
    try:
        said = rootfs.run_in(root, ["dpkg", "--remove", "imexctl"], "dpkg --remove")
        assert "imexctl removed; kept: /etc/imexctl" in said, said
        assert _links(root) == []
        for gone in ("opt/imexctl/.venv", "opt/imexctl/hooks", "usr/bin/imexctl"):
            assert not os.path.lexists(root / gone), gone
        assert not list((root / "opt/imexctl").glob("venvs/python*"))
        assert (root / CONF).is_file()                  # remove keeps the configuration
        # nothing of imexctl runs on any tray or on the controller
        for node in (*c.trays, c.ctl_name):
            assert sim_daemons(c, node) == [], node
            running = [p for p in procs.pids_in_netns(c._netns_of(node))
                       if any("imexctl" in a and "harness" not in a for a in procs.cmdline(p))]
            assert running == [], (node, [procs.cmdline(p) for p in running])
        rootfs.run_in(root, ["dpkg", "--purge", "imexctl"], "dpkg --purge")
        assert not (root / CONF).exists()
        assert subprocess.run(["chroot", str(root), "dpkg-query", "-W", "imexctl"],
                              capture_output=True).returncode != 0
    finally:
        rootfs.install_package(root, stamp, _quiet)
        c.rebind_package_config()
    # reinstalled, the trays' hooks read the harness's configuration again (its fabric file)
    assert "published clique" in c.imexctl(c.trays[0], "identity", "publish")
