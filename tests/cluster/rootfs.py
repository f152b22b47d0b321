"""Debian root filesystems that carry another Slurm for the harness (trixie: 24.11, sid: 26.05).

A root is built once per machine with `debootstrap --variant=minbase` from the host's own
Debian mirror, plus Slurm, munge, Python and (trixie) a pyslurm wheel built against that
root's libslurm. It lives outside the repository (IMEXCTL_HARNESS_ROOT_CACHE, default
/var/cache/imexctl-harness) so every checkout and CI run on the machine reuses it. A root is
built in `<suite>.new` and renamed into place only after its stamp is written: a root with a
missing or different stamp (half-built, older recipe) is deleted and rebuilt, never used.

imexctl is installed into each root from this checkout's Debian package (scripts/package,
built once per source content by tests/cluster/package.py): `dpkg -i` in the root, so its
postinst builds /opt/imexctl/.venv on the root's own Python (trixie 3.13, sid 3.14) and the
hooks slurmd runs there are /opt/imexctl/hooks, the real install path on that Slurm. The
pyslurm wheel the root built goes into that venv as a site wheel
(/usr/local/lib/imexctl/wheels, docs/install.md). A root whose installed .deb is not this
checkout's (its SHA-256 is kept in PACKAGE_MARKER) gets this one installed over it, an
upgrade as dpkg sees it (seconds, not a root rebuild). The simulator (sim/, and the tests'
own dependencies) stays in a per-checkout venv on the root's Python (an editable install,
offline from the root's wheelhouse), mounted over the checkout's .venv in the root.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from tests.cluster import package

REPO = Path(__file__).resolve().parents[2]
STD_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
SUITES = ("trixie", "sid")
# Change RECIPE when the build below changes: every cached root is then rebuilt.
RECIPE = "4"
PACKAGES = ("slurmctld", "slurmd", "slurm-client", "munge", "libslurm-dev", "python3", "python3-venv",
            "ca-certificates", "iproute2", "procps")
PYSLURM_BUILD = ("python3-dev", "build-essential", "pkg-config")
STAMP = ".imexctl-root.json"
WHEELS = "/opt/imexctl/wheels"
# In a root: the .deb's SHA-256 installed last, and where the checkouts' simulator venvs are
# (outside /opt/imexctl, which the package's maintainer scripts manage).
PACKAGE_MARKER = "var/lib/imexctl-harness/package.json"
SIM_VENVS = Path("/opt/imexctl-harness/venvs")
SITE_WHEELS = "/usr/local/lib/imexctl/wheels"
# imex.auth's dependencies (pyproject's `auth` extra: cryptography, cffi, pycparser) for the
# package's venv, as a site adds them (docs/install.md): downloaded once into the root.
AUTH_WHEELS = "/opt/imexctl-harness/wheels-auth"
# The workplace's shared folder beside the checkout; scripts/lib/reachable.sh names it in
# IMEXCTL_SHARED_DIR when it runs the suite from a copy elsewhere.
SHARED = Path(os.environ.get("IMEXCTL_SHARED_DIR") or REPO.parent / "shared")
PYSLURM_SRC = Path(os.environ.get("IMEXCTL_HARNESS_PYSLURM_SRC",
                                  SHARED / "vendor" / "pyslurm-24.11.0-2adb2da.tar.gz"))
# Suites whose Slurm a vendored pyslurm matches (pyslurm 24.11 <-> Slurm 24.11).
PYSLURM_FOR = {"trixie": PYSLURM_SRC}


class RootfsError(RuntimeError):
    """A root could not be built or prepared; the message names the step and its output."""


@dataclass(frozen=True)
class Root:
    """A ready root: where it is, what it runs, and the checkout's venv inside it."""

    suite: str
    path: Path
    stamp: dict
    venv: Path  # path inside the root, e.g. /opt/imexctl/venvs/<hash>

    @property
    def slurm_version(self) -> str:
        return self.stamp["packages"].get("slurmd", "")

    @property
    def has_pyslurm(self) -> bool:
        return bool(self.stamp.get("pyslurm"))


def cache_dir() -> Path:
    return Path(os.environ.get("IMEXCTL_HARNESS_ROOT_CACHE", "/var/cache/imexctl-harness"))


def mirror(etc_apt: Path = Path("/etc/apt")) -> str:
    """The host's Debian mirror URL from /etc/apt/sources.list{,.d/*} (deb822 or one-line):
    only what the machine's apt sources name, never a public host of our choosing."""
    override = os.environ.get("IMEXCTL_HARNESS_MIRROR")
    if override:
        return override
    listed = etc_apt / "sources.list.d"
    files = sorted(listed.glob("*.sources")) + [etc_apt / "sources.list"]
    files += sorted(listed.glob("*.list"))
    for f in files:
        try:
            text = f.read_text()
        except OSError:
            continue
        for m in re.finditer(r"^\s*(?:URIs:\s*|deb\s+(?:\[[^]]*\]\s+)?)(\S+)", text, re.M):
            url = m.group(1)
            if "security" not in url and "/debian" in url:
                return url
    raise RootfsError(
        f"no Debian archive in this machine's apt sources ({etc_apt}/sources.list, "
        f"{listed}/*.sources, *.list): add the site's Debian mirror there (e.g. a "
        "'deb <mirror>/debian bookworm main' line), or set IMEXCTL_HARNESS_MIRROR to its URL")


def recipe_id(suite: str) -> str:
    """What a root of `suite` is built from; a cached root with another id is rebuilt."""
    pyslurm = PYSLURM_FOR.get(suite)
    if pyslurm and not pyslurm.is_file():
        # Stop here rather than build a root whose pyslurm backend tests would all fail.
        raise RootfsError(
            f"the {suite} root needs pyslurm's source {pyslurm}, which is not there: keep the "
            "checkout beside the workplace's shared/ folder, or set IMEXCTL_SHARED_DIR to that "
            "folder (or IMEXCTL_HARNESS_PYSLURM_SRC to the tarball)")
    pys = hashlib.sha256(pyslurm.read_bytes()).hexdigest()[:16] if pyslurm else ""
    return f"{RECIPE}:{suite}:{','.join(PACKAGES)}:{pys}"


def read_stamp(path: Path) -> dict | None:
    try:
        return json.loads((path / STAMP).read_text())
    except (OSError, ValueError):
        return None


def ensure(suite: str, log=print) -> Root:
    """The ready root for `suite`, building it first when missing, half-built or stale."""
    if suite not in SUITES:
        raise RootfsError(f"unknown suite {suite!r}; one of {SUITES}")
    cache = cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / f".lock-{suite}", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        path = cache / suite
        stamp = read_stamp(path)
        if not stamp or stamp.get("recipe") != recipe_id(suite):
            stamp = _build(suite, path, log)
        install_package(path, stamp, log)
        venv = _ensure_venv(path, stamp, log)
    return Root(suite, path, stamp, venv)


def _build(suite: str, path: Path, log) -> dict:
    tmp = path.with_name(path.name + ".new")
    for old in (tmp, path):
        if old.exists():
            _unmount_under(old)
            shutil.rmtree(old)
    url = mirror()
    t0 = time.monotonic()
    if not shutil.which("debootstrap", path=STD_PATH):
        log("rootfs: installing debootstrap with apt-get")
        _run(["apt-get", "install", "-y", "-q", "--no-install-recommends", "debootstrap"], "apt-get debootstrap",
             env={"PATH": STD_PATH, "DEBIAN_FRONTEND": "noninteractive"})
    log(f"rootfs: debootstrap {suite} from {url} into {tmp} (about 2 minutes)")
    _run(["debootstrap", "--variant=minbase", "--components=main", f"--include={','.join(PACKAGES)}",
          suite, str(tmp), url], "debootstrap", timeout=1800)
    (tmp / "etc" / "hosts").write_text("127.0.0.1 localhost\n")
    # sid's Release may be past its Valid-Until on a snapshot mirror.
    (tmp / "etc/apt/apt.conf.d/99imexctl-harness").write_text(
        'Acquire::Check-Valid-Until "false";\nAPT::Install-Recommends "false";\n')
    shutil.copyfile("/etc/resolv.conf", tmp / "etc" / "resolv.conf")
    # The host's CA bundle (which may hold a proxy's CA) for pip inside the root.
    (tmp / "opt" / "imexctl").mkdir(parents=True, exist_ok=True)
    shutil.copyfile("/etc/ssl/certs/ca-certificates.crt", tmp / "opt/imexctl/host-ca.crt")
    log(f"rootfs: {suite} debootstrap done in {time.monotonic() - t0:.0f}s; building the wheelhouse")
    deps = _project_deps()
    _chroot(tmp, ["python3", "-m", "venv", "/opt/imexctl/build"], "venv")
    _chroot(tmp, ["/opt/imexctl/build/bin/pip", "download", "-q", "-d", WHEELS, "setuptools>=61", "wheel",
                  *deps], "pip download", timeout=900)
    pyslurm = PYSLURM_FOR.get(suite)
    built_pyslurm = ""
    if pyslurm and pyslurm.is_file():
        t1 = time.monotonic()
        log(f"rootfs: building pyslurm from {pyslurm.name} against {suite}'s libslurm (several minutes)")
        _chroot(tmp, ["apt-get", "install", "-y", "-q", *PYSLURM_BUILD], "apt-get pyslurm build deps", timeout=1200)
        shutil.copyfile(pyslurm, tmp / "opt/imexctl" / pyslurm.name)
        _chroot(tmp, ["/opt/imexctl/build/bin/pip", "install", "-q", "cython>=3", "setuptools>=61", "wheel"],
                "pip cython", timeout=600)
        _chroot(tmp, ["/opt/imexctl/build/bin/pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w",
                      WHEELS, f"/opt/imexctl/{pyslurm.name}"], "pyslurm build", timeout=2400,
                env={"SLURM_INCLUDE_DIR": "/usr/include", "SLURM_LIB_DIR": "/usr/lib/x86_64-linux-gnu"})
        built_pyslurm = next((w.name for w in (tmp / WHEELS.lstrip("/")).glob("pyslurm-*.whl")), "")
        if not built_pyslurm:
            raise RootfsError("pyslurm build produced no wheel")
        log(f"rootfs: pyslurm built in {time.monotonic() - t1:.0f}s: {built_pyslurm}")
    shutil.rmtree(tmp / "opt/imexctl/build")
    _chroot(tmp, ["apt-get", "clean"], "apt-get clean")
    stamp = {"recipe": recipe_id(suite), "suite": suite, "mirror": url, "built": time.strftime("%FT%TZ", time.gmtime()),
             "packages": _package_versions(tmp, ("slurmd", "slurmctld", "slurm-client", "munge", "python3")),
             "python": _chroot(tmp, ["python3", "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                               "python version").strip(),
             "pyslurm": built_pyslurm}
    (tmp / STAMP).write_text(json.dumps(stamp, indent=1) + "\n")
    os.replace(tmp, path)
    log(f"rootfs: {suite} ready in {time.monotonic() - t0:.0f}s: Slurm {stamp['packages'].get('slurmd')}")
    return stamp


def installed_package(path: Path) -> dict:
    """What the root's dpkg says of imexctl, and the .deb the harness installed last."""
    res = subprocess.run(["chroot", str(path), "dpkg-query", "-W", "-f", "${Status}|${Version}", "imexctl"],
                         capture_output=True, text=True, env={"PATH": STD_PATH, "LANG": "C.UTF-8"})
    status, _, version = res.stdout.partition("|")
    try:
        marker = json.loads((path / PACKAGE_MARKER).read_text())
    except (OSError, ValueError):
        marker = {}
    return {"status": status, "version": version, **marker}


def install_package(path: Path, stamp: dict, log, deb: Path | None = None) -> dict:
    """This checkout's .deb (or `deb`) installed in the root with dpkg, its Depends from the
    root's own apt sources when missing; a no-op when that very .deb is installed already."""
    if deb is None:
        built = package.ensure_built()
        if built.seconds is not None:
            log(package.describe(built))
        deb = built.deb
    sha = hashlib.sha256(deb.read_bytes()).hexdigest()
    auth = _auth_wheels(path)
    want = {"deb": sha, "root": stamp.get("built"), "auth_wheels": auth}
    have = installed_package(path)
    if have.get("status") == "install ok installed" and {k: have.get(k) for k in want} == want:
        return have
    t0 = time.monotonic()
    # pyslurm (built for this root's Slurm) goes into the package's venv as a site wheel
    built_pyslurm = stamp.get("pyslurm")
    site = path / SITE_WHEELS.lstrip("/")
    if built_pyslurm:
        site.mkdir(parents=True, exist_ok=True, mode=0o755)
        shutil.copyfile(path / WHEELS.lstrip("/") / built_pyslurm, site / built_pyslurm)
        (site / built_pyslurm).chmod(0o644)
    for name in auth:
        site.mkdir(parents=True, exist_ok=True, mode=0o755)
        shutil.copyfile(path / AUTH_WHEELS.lstrip("/") / name, site / name)
        (site / name).chmod(0o644)
    inbox = path / "var/cache/imexctl-harness-deb"
    shutil.rmtree(inbox, ignore_errors=True)
    inbox.mkdir(parents=True)
    shutil.copyfile(deb, inbox / deb.name)
    inside = f"/var/cache/imexctl-harness-deb/{deb.name}"
    try:
        _chroot(path, ["dpkg", "-i", "--force-confold", inside], "dpkg -i imexctl", timeout=600)
    except RootfsError:
        # missing Depends: apt from the root's own sources completes the install
        _chroot(path, ["apt-get", "-f", "install", "-y", "-q"], "apt-get -f install (imexctl's Depends)",
                timeout=900)
    shutil.rmtree(inbox, ignore_errors=True)
    marker = path / PACKAGE_MARKER
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.write_text(json.dumps(want) + "\n")
    have = installed_package(path)
    if have.get("status") != "install ok installed":
        raise RootfsError(f"imexctl from {deb} is not installed in {path}: dpkg says {have.get('status')!r}")
    log(f"rootfs: {stamp['suite']}: installed {deb.name} ({have['version']}) in {time.monotonic() - t0:.0f}s")
    return have


def _ensure_venv(path: Path, stamp: dict, log) -> Path:
    """This checkout's simulator venv inside the root: the simulator (sim/) and the tests'
    dependencies, with an editable imexctl beside them (sim/ depends on it), offline from
    the wheelhouse. The hooks do not use it: they run the installed package."""
    key = hashlib.sha256(str(REPO).encode()).hexdigest()[:12]
    venv = SIM_VENVS / key
    inside = path / str(venv).lstrip("/")
    want = json.dumps({"repo": str(REPO), "pyproject": hashlib.sha256((REPO / "pyproject.toml").read_bytes())
                       .hexdigest(), "root": stamp.get("built"),
                       "sim": hashlib.sha256((REPO / "sim" / "pyproject.toml").read_bytes()).hexdigest(),
                       "executable": hashlib.sha256((REPO / "imexctl" / "base" / "executable.py")
                                                    .read_bytes()).hexdigest()})
    marker = inside / ".imexctl-installed"
    if marker.is_file() and marker.read_text() == want:
        return venv
    log(f"rootfs: installing {REPO} into {stamp['suite']} venv {venv}")
    if inside.exists():
        shutil.rmtree(inside)
    extras = "[test,pyslurm]" if stamp.get("pyslurm") else "[test]"
    (path / str(REPO).lstrip("/")).mkdir(parents=True, exist_ok=True)
    _chroot(path, ["python3", "-m", "venv", str(venv)], "venv")
    # pyproject may have changed since the root was built (a new dependency): top the
    # wheelhouse up (a no-op download when everything is there).
    _chroot(path, [f"{venv}/bin/pip", "download", "-q", "-d", WHEELS, *_project_deps()],
            "pip download (wheelhouse top-up)", timeout=900)
    # the simulator is a distribution of its own (sim/pyproject.toml): the product's wheel has none
    _chroot(path, [f"{venv}/bin/pip", "install", "-q", "--no-index", "--find-links", WHEELS, "-e",
                   f"{REPO}{extras}", "-e", f"{REPO}/sim"], "pip install imexctl and its simulator",
            timeout=600, repo=True)
    # What docs/install.md has sites do after pip: the hooks' imexctl runs without site.
    _chroot(path, [f"{venv}/bin/python", "-m", "imexctl.cli.executable"], "imexctl executable",
            repo=True)
    marker.write_text(want)
    return venv


def _auth_wheels(path: Path) -> list[str]:
    """The auth extra's wheels for the root's Python (fetched into AUTH_WHEELS the first
    time), as site wheels of the package's venv: the harness's imex.auth tests need them."""
    import tomllib
    house = path / AUTH_WHEELS.lstrip("/")
    if not any(house.glob("cryptography-*.whl")):
        extra = tomllib.loads((REPO / "pyproject.toml").read_text())["project"][
            "optional-dependencies"]["auth"]
        build = "/opt/imexctl-harness/auth-build"
        _chroot(path, ["python3", "-m", "venv", build], "venv (auth extra)")
        try:
            _chroot(path, [f"{build}/bin/pip", "download", "-q", "--only-binary", ":all:",
                           "-d", AUTH_WHEELS, *extra], "pip download (auth extra)", timeout=900)
        finally:
            shutil.rmtree(path / build.lstrip("/"), ignore_errors=True)
    return sorted(p.name for p in house.glob("*.whl"))


def _project_deps() -> list[str]:
    """Run-time and test dependencies of the checkout (pyproject.toml), for the wheelhouse."""
    import tomllib
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    return [*project["dependencies"], *project.get("optional-dependencies", {}).get("test", [])]


def _package_versions(root: Path, names) -> dict:
    out = _chroot(root, ["dpkg-query", "-W", "-f", "${Package} ${Version}\\n", *names], "dpkg-query")
    return dict(line.split(" ", 1) for line in out.splitlines() if " " in line)


# Mounts that make a root usable from a private mount namespace; "$R" is the root.
def mount_script(root: Path, venv: Path | None, extra: list[tuple[str, str]] = (), daemon: bool = True) -> str:
    """Shell commands (for sh -c, arguments quoted here) that mount what a daemon or client
    needs inside the root, in a private mount namespace: the root as a mount point of its own,
    /proc, /dev, /sys (daemons), the host's /tmp (state dir, test files), the checkout at its
    own path with the root's venv over its .venv, and `extra` (source, target-in-root) binds."""
    import shlex
    r = shlex.quote(str(root))
    lines = [f"mount --bind {r} {r}", f"mount -t proc proc {r}/proc", f"mount --rbind /dev {r}/dev",
             *([f"mount --rbind /sys {r}/sys"] if daemon else []), f"mount --rbind /tmp {r}/tmp",
             f"mount --bind {shlex.quote(str(REPO))} {r}{shlex.quote(str(REPO))}"]
    if venv is not None:
        lines.append(f"mount --bind {r}{shlex.quote(str(venv))} {r}{shlex.quote(str(REPO / '.venv'))}")
    lines += [f"mount --bind {shlex.quote(src)} {r}{shlex.quote(dst)}" for src, dst in extra]
    return " && ".join(lines)


def run_in(root: Path, argv: list[str], step: str, timeout: float = 300) -> str:
    """argv as root in the root (a private mount namespace with /proc and /dev, none of a
    cluster's mounts): stdout, or RootfsError naming `step` with the output."""
    return _chroot(root, argv, step, timeout=timeout)


def _chroot(root: Path, argv: list[str], step: str, timeout: float = 300, env: dict | None = None,
            repo: bool = False) -> str:
    """Run argv chrooted into root in a private mount namespace with /proc, /dev and, if asked,
    the checkout mounted; returns stdout or raises RootfsError naming the step."""
    import shlex
    r = shlex.quote(str(root))
    mounts = [f"mount -t proc proc {r}/proc", f"mount --rbind /dev {r}/dev"]
    if repo:
        mounts.append(f"mount --bind {shlex.quote(str(REPO))} {r}{shlex.quote(str(REPO))}")
    script = " && ".join(mounts) + f' && exec chroot {r} "$@"'
    full_env = {"PATH": STD_PATH, "DEBIAN_FRONTEND": "noninteractive", "LANG": "C.UTF-8",
                "PIP_CERT": "/opt/imexctl/host-ca.crt", "PIP_DISABLE_PIP_VERSION_CHECK": "1",
                "PIP_DEFAULT_TIMEOUT": "120", **(env or {})}
    return _run(["unshare", "--mount", "--propagation", "private", "--", "/bin/sh", "-c", script, "sh", *argv],
                step, timeout=timeout, env=full_env)


def _run(argv: list[str], step: str, timeout: float = 300, env: dict | None = None) -> str:
    try:
        res = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                             env=env or {"PATH": STD_PATH, "LANG": "C.UTF-8"})
    except subprocess.TimeoutExpired as exc:
        raise RootfsError(f"{step}: timed out after {timeout}s") from exc
    if res.returncode:
        raise RootfsError(f"{step} failed (rc {res.returncode}): {(res.stdout + res.stderr).strip()[-1500:]}")
    return res.stdout


def _unmount_under(path: Path) -> None:
    """Leftover mounts under a root (a killed build) would make rmtree walk the host."""
    mounts = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
    for m in sorted((m for m in mounts if m == str(path) or m.startswith(f"{path}/")), reverse=True):
        subprocess.run(["umount", "-l", m], capture_output=True, env={"PATH": STD_PATH})


def main(argv: list[str] | None = None) -> int:
    """`python -m tests.cluster.rootfs SUITE...`: build (or confirm) roots and print their stamps."""
    import sys
    for suite in (argv if argv is not None else sys.argv[1:]) or SUITES:
        root = ensure(suite)
        print(json.dumps({"path": str(root.path), "venv": str(root.venv), **root.stamp}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
