"""The Debian package (scripts/package) installed, upgraded and removed in a throw-away root.

The package is built once per source content (tests/cluster/package.py caches the .deb and
tarball in /var/cache/imexctl-package/<sha256 of every file scripts/package stages>/; CI's
"package" phase builds it first and prints the time). The root is this machine's own /
under an overlay whose writable layer is a tmpfs in a private mount namespace: postinst
builds the venv there on the host's python3 (Debian 12, Python 3.11) from the shipped
wheels, and nothing of the install reaches the host. Maintainer scripts run for real
(dpkg in the chroot); systemd does not run there, so `systemctl enable` only makes the
links, which is what "enabled" means on disk.

Runs on the host Slurm only: no Slurm is involved. The trixie (Python 3.13) and sid (3.14)
harness roots install the same .deb (tests/cluster/rootfs.py), and tests/integration/
test_package_harness.py upgrades and removes it under a running cluster there.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.cluster import package
from tests.cluster.harness import install_packages
from tests.support.harness import harness_unavailable, skip_or_fail

pytestmark = [pytest.mark.integration,
              pytest.mark.host_slurm_only("the package is built for the host's Python")]

ROOT = Path(__file__).resolve().parents[2]
VERSION = package.version()
HOOKS = ("prolog", "epilog", "prolog-slurmctld", "epilog-slurmctld", "task-prolog",
         "healthcheck")
CONFFILE = "/etc/imexctl/imexctl.toml"


@pytest.fixture(scope="module")
def built(request) -> dict[str, Path]:
    """The .deb and tarball of this tree (tests/cluster/package.py: cached per content)."""
    def say(text: str) -> None:      # past pytest's capture: the CI log shows the time
        capture = request.config.pluginmanager.get_plugin("capturemanager")
        with capture.global_and_fixture_disabled():
            request.config.pluginmanager.get_plugin("terminalreporter").write_line(text)
    reason = harness_unavailable()
    if reason:
        skip_or_fail(reason)
    try:
        got = package.ensure_built()
    except package.PackageError as exc:
        pytest.fail(str(exc))
    say(f"test_package: {package.describe(got)}")
    return {"deb": got.deb, "tarball": got.tarball}


class Root:
    """A copy-on-write view of / (overlay, tmpfs upper layer) in a private mount namespace
    held by one sleeping process; commands run chrooted into it through nsenter."""

    def __init__(self, tmp: Path):
        self.top = tmp / "root"
        self.top.mkdir()
        t = self.top
        setup = (f"set -e; mount -t tmpfs -o size=512m tmpfs {t}; mkdir {t}/up {t}/work {t}/m; "
                 f"mount -t overlay overlay -o lowerdir=/,upperdir={t}/up,workdir={t}/work {t}/m; "
                 f"mount -t proc proc {t}/m/proc; mount --rbind /dev {t}/m/dev; "
                 f"mount -t tmpfs tmpfs {t}/m/run; mount -t tmpfs tmpfs {t}/m/tmp; "
                 "echo ready; exec sleep infinity")
        self.proc = subprocess.Popen(["unshare", "--mount", "--propagation", "private",
                                      "sh", "-c", setup], stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline().strip()
        if line != "ready":
            self.close()
            pytest.fail(f"throw-away root not made (overlay of / on tmpfs): {line!r}")
        self.m = t / "m"

    def host(self, *cmd: str) -> subprocess.CompletedProcess:
        """A command in the namespace, outside the chroot (host paths and the root's)."""
        return subprocess.run(["nsenter", "-t", str(self.proc.pid), "-m", "--", *cmd],
                              capture_output=True, text=True, timeout=300)

    def run(self, *cmd: str, env: dict | None = None) -> subprocess.CompletedProcess:
        base = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C.UTF-8",
                "DEBIAN_FRONTEND": "noninteractive"}
        return subprocess.run(["nsenter", "-t", str(self.proc.pid), "-m", "--",
                               "chroot", str(self.m), *cmd], capture_output=True, text=True,
                              timeout=300, env=env if env is not None else base)

    def ok(self, *cmd: str) -> str:
        res = self.run(*cmd)
        assert res.returncode == 0, f"{cmd}: rc {res.returncode}\n{res.stdout}\n{res.stderr}"
        return res.stdout

    def read(self, path: str) -> str:
        return self.ok("cat", path)

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()


@pytest.fixture
def root(tmp_path):
    if not shutil.which("logrotate", path="/usr/sbin:/usr/bin:/sbin:/bin"):
        install_packages(("logrotate",))    # the package Recommends it (before the overlay)
    r = Root(tmp_path)
    yield r
    r.close()


def enabled_links(root: Root) -> list[str]:
    """Every link under /etc/systemd/system that names an imexctl unit."""
    out = root.ok("find", "/etc/systemd/system", "-name", "imexctl*")
    return sorted(out.split())


def test_install_upgrade_remove(built, root, tmp_path):
    root.host("cp", str(built["deb"]), f"{root.m}/tmp/")
    deb = f"/tmp/{built['deb'].name}"

    # install
    root.ok("dpkg", "-i", deb)
    for path in ("/usr/lib/systemd/system/imexctl-recover.service",
                 "/usr/lib/systemd/system/imexctl-imex@.service",
                 "/usr/lib/systemd/system/imexctl-imex-persistent.service",
                 "/usr/lib/tmpfiles.d/imexctl.conf", "/usr/lib/tmpfiles.d/imexctl-controller.conf",
                 "/etc/logrotate.d/imexctl", CONFFILE, "/usr/share/man/man8/imexctl.8.gz",
                 "/usr/share/doc/imexctl/copyright", "/opt/imexctl/hooks/imexctl-hook.sh"):
        root.ok("test", "-f", path)
    assert "ExecStart=/usr/bin/imexctl recover" in root.read(
        "/usr/lib/systemd/system/imexctl-recover.service")
    assert CONFFILE in root.ok("dpkg-query", "-W", "-f", "${Conffiles}", "imexctl")
    for hook in HOOKS:
        st = root.ok("stat", "-c", "%u %a", f"/opt/imexctl/hooks/{hook}").split()
        assert st[0] == "0" and int(st[1], 8) & 0o111 and not int(st[1], 8) & 0o022, (hook, st)
    assert enabled_links(root) == [], "the package enabled a unit"

    # postinst built the venv from the shipped wheels (no index: the chroot has no pip
    # configuration pointing anywhere) in a directory of its own, /opt/imexctl/.venv links
    # to it, and the fast executable was written in it
    first = root.ok("readlink", "/opt/imexctl/.venv").strip()
    assert re.fullmatch(r"venvs/python3\.\d+\.\w+", first), first
    head = root.read("/opt/imexctl/.venv/bin/imexctl").splitlines()[:2]
    assert head[0] == f"#!/opt/imexctl/{first}/bin/python -IS", head
    assert head[1].startswith("# imexctl executable"), head
    assert root.run("test", "-e", "/opt/imexctl/.venv/bin/pip").returncode != 0, "pip stayed in the venv"
    version = root.ok("imexctl", "--version").splitlines()
    assert version[0] == f"imexctl {VERSION}", version
    assert f"(/opt/imexctl/{first}/bin/python" in version[1], version
    assert any(line.startswith("structlog ") and "not installed" not in line for line in version)
    assert not root.run("find", "/opt/imexctl", "-path", "*/build/package/*").stdout
    # no simulator on a site's tray: it is a distribution of its own (sim/pyproject.toml)
    assert not root.run("find", "/opt/imexctl", "-name", "imexctl_sim*", "-o", "-name", "imexctl-sim*",
                        "-o", "-path", "*/imexctl/sim").stdout

    # the shipped conffile: every key commented out, and config check accepts it
    conf = root.read(CONFFILE)
    assert conf.strip() and all(not line or line.startswith("#") for line in conf.splitlines())
    check = root.run("imexctl", "config", "check")
    assert check.returncode == 0 and f"{CONFFILE}: OK" in check.stdout, check

    # a hook runs the packaged imexctl (the wrapper trusts /opt/imexctl/.venv): without
    # Slurm's environment the prolog exits 2 naming what is missing
    hook = root.run("/usr/bin/env", "-i", "/opt/imexctl/hooks/prolog")
    assert hook.returncode == 2, hook
    assert "no usable imexctl" not in hook.stderr and "ignoring" not in hook.stderr, hook.stderr

    # the packaged logrotate keeps the node log as imexctl makes it, root's 0640: no job's
    # channel is readable by another user after a rotation (audit F4-10)
    root.ok("sh", "-c", "umask 027; mkdir -p /var/log/imexctl; echo '{}' > /var/log/imexctl/imexctl.log")
    root.ok("logrotate", "-f", "-s", "/tmp/logrotate.state", "/etc/logrotate.d/imexctl")
    assert root.ok("stat", "-c", "%a %U %G", "/var/log/imexctl/imexctl.log",
                   "/var/log/imexctl/imexctl.log.1").split("\n")[:2] == ["640 root root"] * 2
    other = root.run("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "cat",
                     "/var/log/imexctl/imexctl.log")
    assert other.returncode != 0 and "Permission denied" in other.stderr, other

    # upgrade to a newer build whose default conffile changed: the site's edit is kept
    root.ok("sh", "-c", f"printf '\\n[log]\\nlevel = \"debug\"\\n' >> {CONFFILE}")
    edited = root.read(CONFFILE)
    newer = package.repack(built["deb"], tmp_path, f"{VERSION}+test1", "# a newer default\n")
    root.host("cp", str(newer), f"{root.m}/tmp/")
    root.ok("dpkg", "-i", "--force-confold", f"/tmp/{newer.name}")
    assert root.ok("dpkg-query", "-W", "-f", "${Version}", "imexctl") == f"{VERSION}+test1"
    assert root.read(CONFFILE) == edited
    assert "# a newer default" in root.read(CONFFILE + ".dpkg-dist")
    shown = root.ok("imexctl", "config", "show")
    assert any(line.startswith("log.level") and '"debug"' in line for line in shown.splitlines())
    assert root.read("/opt/imexctl/.venv/bin/imexctl").splitlines()[1].startswith(
        "# imexctl executable"), "postinst did not write the executable on upgrade"
    # a new venv for the new build; the one before stays (a hook that started before the
    # switch may still import from it)
    second = root.ok("readlink", "/opt/imexctl/.venv").strip()
    assert second != first
    assert sorted(root.ok("ls", "/opt/imexctl/venvs").split()) == sorted(
        p.removeprefix("venvs/") for p in (first, second))

    # python3 moved to another minor version under the venv (here: its lib/python3.X is
    # renamed away): the dpkg trigger on /usr/bin/python3 rebuilds it
    root.ok("sh", "-c", f"cd /opt/imexctl/{second}/lib && mv python3.* python3.0")
    assert root.run("imexctl", "--version").returncode != 0
    root.ok("dpkg-trigger", "--no-await", "/usr/bin/python3")
    root.ok("dpkg", "--triggers-only", "imexctl")
    third = root.ok("readlink", "/opt/imexctl/.venv").strip()
    assert third != second
    assert root.ok("imexctl", "--version").splitlines()[0] == f"imexctl {VERSION}"

    # an admin enables the boot-time unit; removing the package leaves nothing enabled
    root.ok("systemctl", "enable", "imexctl-recover.service")
    assert enabled_links(root), "systemctl enable made no link"
    root.ok("dpkg", "-r", "imexctl")
    assert enabled_links(root) == []
    assert root.run("test", "-e", "/opt/imexctl").returncode != 0, root.ok("find", "/opt/imexctl")
    assert root.run("test", "-e", "/usr/bin/imexctl").returncode != 0
    assert root.read(CONFFILE) == edited               # remove keeps the configuration
    root.ok("dpkg", "-P", "imexctl")
    assert root.run("test", "-e", CONFFILE).returncode != 0


def test_release_tarball(built, tmp_path):
    """The tarball unpacks to imexctl-<version>/ with the source, LICENSE, constraints.txt
    and what the build made from it (wheel, man page, default configuration)."""
    subprocess.run(["tar", "-xzf", str(built["tarball"]), "-C", str(tmp_path)], check=True)
    top = tmp_path / f"imexctl-{VERSION}"
    for rel in ("LICENSE", "constraints.txt", "pyproject.toml", "debian/control",
                "scripts/package", "hooks/prolog", "imexctl/cli/__init__.py",
                f"dist/imexctl-{VERSION}-py3-none-any.whl", "dist/imexctl.8",
                "dist/imexctl.toml"):
        assert (top / rel).is_file(), rel
    assert not (top / ".venv").exists() and not (top / "build").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"imexctl-{VERSION}"]
