"""The Debian package of this checkout (scripts/package), built once per source content.

The .deb and the release tarball are cached in /var/cache/imexctl-package/<sha256 of every
file scripts/package stages>/ (IMEXCTL_PACKAGE_CACHE), so the CI phase "package", the
package test and the trixie and sid harness roots (tests/cluster/rootfs.py installs this
.deb into them) share one build per tree. One .deb serves every root: its virtual
environment is built at install time on the installed machine's python3.

`python -c 'from tests.cluster.package import main; main()'` builds (or finds) it and prints where it is and how long
the build took (CI's "package" phase; lintian runs as part of scripts/package).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CONFFILE = "/etc/imexctl/imexctl.toml"


class PackageError(RuntimeError):
    """scripts/package failed; the message has the end of its output."""


@dataclass(frozen=True)
class Built:
    deb: Path
    tarball: Path
    digest: str
    seconds: float | None   # None: taken from the cache


def cache_dir() -> Path:
    return Path(os.environ.get("IMEXCTL_PACKAGE_CACHE", "/var/cache/imexctl-package"))


def version() -> str:
    return next(line.split('"')[1] for line in (REPO / "imexctl/__init__.py").read_text()
                .splitlines() if line.startswith("__version__ = "))


# Tracked files that reach the release tarball but not the .deb: an edit there (the usual
# loop of someone writing integration tests) reuses the cached build, whose tarball then
# carries the tests as they were at that build.
NOT_IN_DEB = (b"tests/", b"bench/")


def source_digest() -> str:
    """SHA-256 over what scripts/package stages (every tracked file as it is on disk) but
    NOT_IN_DEB."""
    names = subprocess.run(["git", "-C", str(REPO), "ls-files", "-z", "--cached"],
                           capture_output=True, check=True).stdout.split(b"\0")
    h = hashlib.sha256()
    for name in sorted(n for n in names if n and not n.startswith(NOT_IN_DEB)):
        path = REPO / os.fsdecode(name)
        if path.is_symlink():
            data = os.readlink(path).encode()
        elif path.is_file():
            data = path.read_bytes()
        else:
            continue
        h.update(name + b"\0" + hashlib.sha256(data).digest())
    return h.hexdigest()


def ensure_built() -> Built:
    """This tree's .deb and tarball: from the cache, or built now (scripts/package, lintian
    included; about 20-30 s on the 2-core CI machine). The cache keeps one tree's build."""
    cache_dir().mkdir(parents=True, exist_ok=True)
    # one build at a time on the machine: scripts/package stages in the checkout's build/
    with open(cache_dir().with_name(cache_dir().name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _ensure_built_locked()


def _ensure_built_locked() -> Built:
    digest = source_digest()
    cached = cache_dir() / digest
    v = version()
    deb, tarball = cached / f"imexctl_{v}_all.deb", cached / f"imexctl-{v}.tar.gz"
    if deb.is_file() and tarball.is_file():
        return Built(deb, tarball, digest, None)
    start = time.monotonic()
    res = subprocess.run([str(REPO / "scripts/package")], capture_output=True, text=True,
                         cwd=REPO, timeout=900)
    took = time.monotonic() - start
    if res.returncode:
        raise PackageError(f"scripts/package failed (rc {res.returncode}): "
                           f"{(res.stdout + res.stderr).strip()[-3000:]}")
    for old in cache_dir().glob("*") if cache_dir().is_dir() else ():
        shutil.rmtree(old, ignore_errors=True)
    tmp = cached.with_name(cached.name + ".new")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    shutil.copy2(REPO / "dist" / deb.name, tmp / deb.name)
    shutil.copy2(REPO / "dist" / tarball.name, tmp / tarball.name)
    os.replace(tmp, cached)
    return Built(deb, tarball, digest, took)


def describe(built: Built) -> str:
    how = (f"built by scripts/package in {built.seconds:.1f} s (lintian included)"
           if built.seconds is not None else "this tree's build, from the cache")
    return f"package: {built.deb} ({how})"


def repack(deb: Path, out: Path, version: str, conffile_extra: str) -> Path:
    """``deb`` as ``version`` with one line added to the shipped conffile: a newer build as
    dpkg sees it (same maintainer scripts and payload)."""
    tree = out / "tree"
    subprocess.run(["dpkg-deb", "-R", str(deb), str(tree)], check=True)
    control = tree / "DEBIAN/control"
    control.write_text("".join(f"Version: {version}\n" if line.startswith("Version:") else line
                               for line in control.read_text().splitlines(keepends=True)))
    conf = tree / CONFFILE.lstrip("/")
    conf.write_text(conf.read_text() + conffile_extra)
    sums = tree / "DEBIAN/md5sums"
    digest = hashlib.md5(conf.read_bytes()).hexdigest()
    sums.write_text("".join(f"{digest}  {CONFFILE.lstrip('/')}\n"
                            if line.endswith(f"  {CONFFILE.lstrip('/')}\n") else line
                            for line in sums.read_text().splitlines(keepends=True)))
    new = out / f"imexctl_{version}_all.deb"
    subprocess.run(["dpkg-deb", "--root-owner-group", "-b", str(tree), str(new)], check=True,
                   capture_output=True)
    return new


def main() -> int:
    try:
        built = ensure_built()
    except PackageError as exc:
        print(exc, file=sys.stderr)
        return 1
    print(describe(built))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
