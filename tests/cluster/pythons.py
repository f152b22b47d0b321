"""The unit and simulator suite (tests/ without tests/integration) on each Python minor the
package claims besides the checkout's own (.venv, Debian 12's 3.11):

- 3.13 and 3.14 inside the harness's trixie and sid roots (tests/cluster/rootfs.py), in this
  checkout's simulator venv there (imexctl editable with [test], and sim/): a private mount
  namespace with the root bind-mounted onto itself, /proc, /dev and /sys, a fresh tmpfs on
  /tmp and /run, the checkout at its own path with the root's venv over its .venv, then
  `chroot`; so the root's own Python, libraries and tools (munge, iproute2...) are tested.
- 3.12 on the host from a CPython 3.12 found on the machine (IMEXCTL_PYTHON312, else
  `python3.12` on PATH, else pyenv's newest 3.12.x; no registry this project reaches has
  one: docs/harness.md), copied once into a cache any user can reach (IMEXCTL_PYTHON_CACHE,
  default /var/cache/imexctl-python/<version>-<hash>: the suite runs `.venv/bin/imexctl` as
  nobody, and pyenv's /root is 0700) with its RUNPATH moved by patchelf; a venv of the
  checkout on it in .cache/venv-<minor> is mounted over .venv (as root) so that tests running
  `.venv/bin/...` run that Python too.

Run: `python -m tests.cluster.pythons 3.13 [PYTEST ARGS]` (default args: the whole suite).
Prints which interpreter runs; exits with pytest's code (when no 3.12 is found: 2 under
CI=true, else 0 after saying so).
"""

from __future__ import annotations

import fcntl
import glob
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from tests.cluster import rootfs

REPO = rootfs.REPO
ROOT_FOR = {"3.13": "trixie", "3.14": "sid"}
SUITE = ["tests", "--ignore=tests/integration"]
HARNESS_LOCK = "/tmp/imexctl-harness.lock"
# Tools the suite runs that a root's recipe does not carry (command: Debian package); added
# to the root on first use, from its own apt sources.
ROOT_TOOLS = {"git": "git", "man": "man-db"}
# Environment names that describe the host's own interpreter: never passed to another one.
_HOST_ONLY = re.compile(r"^(PATH|VIRTUAL_ENV|PYTHON\w*|PYENV\w*|PIP_\w*|LD_LIBRARY_PATH)$")


class PythonNotFound(RuntimeError):
    """No interpreter of the asked minor on this machine; the message says where we looked."""


def _env(extra: dict | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if not _HOST_ONLY.match(k)}
    env.update(PATH=rootfs.STD_PATH, LANG=env.get("LANG", "C.UTF-8"))
    env.update(extra or {})
    return env


# ---- 3.13, 3.14: in a harness root -------------------------------------------------------

def root_command(root: rootfs.Root, pytest_args: list[str]) -> list[str]:
    """argv that runs pytest with `pytest_args` in the checkout, chrooted into `root` (as root)."""
    r = shlex.quote(str(root.path))
    repo = shlex.quote(str(REPO))
    venv_in = f"{r}{shlex.quote(str(root.venv))}"
    mounts = [f"mount --bind {r} {r}", f"mount -t proc proc {r}/proc", f"mount --rbind /dev {r}/dev",
              f"mount --rbind /sys {r}/sys", f"mount -t tmpfs -o mode=1777 tmpfs {r}/tmp",
              f"mount -t tmpfs -o mode=755 tmpfs {r}/run",
              f"mkdir -p {r}{repo}", f"mount --bind {repo} {r}{repo}",
              f"mount --bind {venv_in} {r}{repo}/.venv"]
    git = _git_outside()
    if git is not None:   # a `git worktree` checkout: its repository is elsewhere
        g = shlex.quote(str(git))
        mounts += [f"mkdir -p {r}{g}", f"mount --bind {g} {r}{g}"]
    inner = f"cd {repo} && exec .venv/bin/python -m pytest \"$@\""
    script = " && ".join(mounts) + f" && exec chroot {r} /bin/sh -c {shlex.quote(inner)} sh \"$@\""
    return ["unshare", "--mount", "--propagation", "private", "--", "/bin/sh", "-c", script, "sh", *pytest_args]


def in_root(suite: str, pytest_args: list[str]) -> int:
    if os.geteuid() != 0:
        print(f"pythons: the {suite} root's Python runs the suite under chroot, which needs root",
              file=sys.stderr, flush=True)
        return 1
    with open(HARNESS_LOCK, "a") as lock:
        # Installing this tree's package into a root changes the hooks a running harness of
        # another checkout uses (scripts/test's roots phase takes the same lock).
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            root = rootfs.ensure(suite, log=lambda m: print(m, flush=True))
            _ensure_tools(root.path)
        except rootfs.RootfsError as exc:
            print(f"pythons: the {suite} root: {exc}", file=sys.stderr, flush=True)
            return 1
    print(f"pythons: Python {root.stamp.get('python')} of the {suite} root {root.path} "
          f"(venv {root.venv})", flush=True)
    return subprocess.run(root_command(root, pytest_args), env=_env({"HOME": "/root"})).returncode


def _ensure_tools(path: Path) -> None:
    missing = [pkg for cmd, pkg in ROOT_TOOLS.items()
               if subprocess.run(["chroot", str(path), "/bin/sh", "-c", f"command -v {cmd}"],
                                 capture_output=True, env=_env()).returncode]
    if not missing:
        return
    print(f"pythons: installing {' '.join(missing)} in {path}", flush=True)
    apt = ["apt-get", "install", "-y", "-q", *missing]
    try:
        rootfs.run_in(path, apt, "apt-get install (the suite's tools)", timeout=900)
    except rootfs.RootfsError:  # the root's package lists are as old as the root
        rootfs.run_in(path, ["apt-get", "update", "-q"], "apt-get update", timeout=900)
        rootfs.run_in(path, apt, "apt-get install (the suite's tools)", timeout=900)


def _git_outside() -> Path | None:
    """The repository of a `git worktree` checkout (.git is a file naming it) when it lies
    outside the checkout; None for a plain clone."""
    if not (REPO / ".git").is_file():
        return None
    res = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--path-format=absolute", "--git-common-dir"],
                         capture_output=True, text=True, env=_env())
    common = Path(res.stdout.strip()) if res.returncode == 0 and res.stdout.strip() else None
    return common if common is not None and REPO not in common.parents else None


# ---- 3.12: an interpreter of the machine's, made reachable ------------------------------

def find_python(minor: str) -> Path:
    """A CPython `minor` interpreter on this machine, or PythonNotFound naming where we looked."""
    named = os.environ.get(f"IMEXCTL_PYTHON{minor.replace('.', '')}")
    candidates = [named] if named else []
    candidates += [shutil.which(f"python{minor}", path=os.environ.get("PATH", "") + os.pathsep + rootfs.STD_PATH)]
    pyenv = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv")
    versions = sorted(glob.glob(str(pyenv / "versions" / f"{minor}.*" / "bin" / f"python{minor}")),
                      key=lambda p: [int(x) for x in re.findall(r"\d+", Path(p).parents[1].name)])
    candidates += reversed(versions)
    for c in candidates:
        if c and Path(c).is_file() and os.access(c, os.X_OK):
            # the interpreter itself, not a launcher (a pyenv shim, a venv's link)
            res = subprocess.run([c, "-c", "import os, sys; print('%d.%d' % sys.version_info[:2], "
                                  "os.path.realpath(sys.executable))"], capture_output=True, text=True,
                                 env=_env())
            version, _, real = res.stdout.strip().partition(" ")
            if res.returncode == 0 and version == minor and Path(real).is_file():
                return Path(real)
    raise PythonNotFound(
        f"no Python {minor} on this machine: looked at IMEXCTL_PYTHON{minor.replace('.', '')}, "
        f"python{minor} on PATH and {pyenv}/versions/{minor}.*; Debian 12 has none (nor does any "
        "Debian suite now): install one and name it in IMEXCTL_PYTHON"
        f"{minor.replace('.', '')} (docs/harness.md, 'The unit and simulator tests on every Python')")


def _version(python: Path) -> str:
    res = subprocess.run([str(python), "-c", "import sys; print('%d.%d.%d' % sys.version_info[:3])"],
                         capture_output=True, text=True, env=_env())
    return res.stdout.strip()


def cache_dir() -> Path:
    return Path(os.environ.get("IMEXCTL_PYTHON_CACHE", "/var/cache/imexctl-python"))


def reachable_python(python: Path) -> Path:
    """`python` itself when every user can run it, else a copy of its installation in the
    cache (once per interpreter), with its RUNPATHs moved there."""
    if _others_can_run(python):
        return python
    prefix = python.resolve().parents[1]
    version = _version(python)
    key = hashlib.sha256(str(prefix).encode()).hexdigest()[:8]
    dest = cache_dir() / f"{version}-{key}"
    stamp = dest / ".imexctl-python.json"
    want = {"source": str(prefix), "version": version}
    exe = dest / "bin" / python.name
    try:
        if json.loads(stamp.read_text()) == want:
            return exe
    except (OSError, ValueError):
        pass
    print(f"pythons: copying {prefix} (Python {version}) to {dest}, where every user can run it",
          flush=True)
    tmp = dest.with_name(dest.name + ".new")
    shutil.rmtree(tmp, ignore_errors=True)
    # CPython's own test suite (lib/pythonX.Y/test, a third of the tree) is not needed
    shutil.copytree(prefix, tmp, symlinks=True,
                    ignore=lambda d, names: ["test"] if Path(d).parent.name == "lib" else [])
    _move_runpaths(tmp, prefix, dest)
    for d in [tmp, *(p for p in tmp.rglob("*") if p.is_dir() and not p.is_symlink())]:
        d.chmod(d.stat().st_mode | 0o555)
    for f in (p for p in tmp.rglob("*") if p.is_file() and not p.is_symlink()):
        f.chmod(f.stat().st_mode | 0o444)
    cache_dir().chmod(0o755)
    stamp_tmp = tmp / stamp.name
    stamp_tmp.write_text(json.dumps(want) + "\n")
    shutil.rmtree(dest, ignore_errors=True)
    os.replace(tmp, dest)
    return exe


def _others_can_run(python: Path) -> bool:
    res = subprocess.run(["runuser", "-u", "nobody", "--", str(python), "-c", "pass"],
                         capture_output=True, env=_env()) if os.geteuid() == 0 else None
    return res is None or res.returncode == 0


def _move_runpaths(tree: Path, prefix: Path, dest: Path) -> None:
    """pyenv builds with RUNPATH=<prefix>/lib in the executable and every extension module:
    point each at `dest`/lib, where `tree` is renamed to (patchelf, from the machine's apt
    sources). Absolute, not $ORIGIN: tests copy the interpreter elsewhere and run it."""
    if not shutil.which("patchelf", path=rootfs.STD_PATH):
        print("pythons: installing patchelf with apt-get", flush=True)
        apt = ["apt-get", "install", "-y", "-q", "--no-install-recommends", "patchelf"]
        env = {"PATH": rootfs.STD_PATH, "DEBIAN_FRONTEND": "noninteractive"}
        try:
            rootfs._run(apt, "apt-get patchelf", env=env)
        except rootfs.RootfsError:  # a fresh machine's package lists may be missing or old
            rootfs._run(["apt-get", "update", "-q"], "apt-get update", env=env)
            rootfs._run(apt, "apt-get patchelf", env=env)
    lib = str(prefix / "lib")
    for f in (p for p in tree.rglob("*") if p.is_file() and not p.is_symlink()):
        with open(f, "rb") as fh:
            if fh.read(4) != b"\x7fELF":
                continue
        res = subprocess.run(["patchelf", "--print-rpath", str(f)], capture_output=True, text=True,
                             env=_env())
        paths = res.stdout.strip().split(":") if res.returncode == 0 and res.stdout.strip() else []
        if lib not in paths:
            continue
        new = ":".join(str(dest / "lib") if p == lib else p for p in paths)
        rootfs._run(["patchelf", "--set-rpath", new, str(f)], f"patchelf {f.name}")


def host_venv(python: Path, minor: str) -> Path:
    """The checkout's venv on `python` (.cache/venv-<minor>): imexctl editable with [test]
    and the simulator, as scripts/bootstrap installs .venv; redone when pyproject changes."""
    venv = REPO / ".cache" / f"venv-{minor}"
    want = json.dumps({"python": str(python), "version": _version(python),
                       **{p: hashlib.sha256((REPO / p).read_bytes()).hexdigest()
                          for p in ("pyproject.toml", "sim/pyproject.toml", "imexctl/__init__.py",
                                    "imexctl/base/executable.py")}})
    marker = venv / ".imexctl-installed"
    if marker.is_file() and marker.read_text() == want:
        return venv
    print(f"pythons: installing {REPO} into {venv} on {python}", flush=True)
    shutil.rmtree(venv, ignore_errors=True)
    rootfs._run([str(python), "-m", "venv", str(venv)], f"venv on {python}")
    rootfs._run([str(venv / "bin/python"), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                 "-e", f"{REPO}[test]", "-e", f"{REPO}/sim"], "pip install imexctl and its simulator",
                timeout=900, env=_env({"HOME": os.environ.get("HOME", "/root")}))
    rootfs._run([str(venv / "bin/python"), "-m", "imexctl.cli.executable"], "imexctl executable",
                env=_env())
    marker.write_text(want)
    return venv


def on_host(minor: str, pytest_args: list[str]) -> int:
    try:
        python = find_python(minor)
    except PythonNotFound as exc:
        # CI must run it; a developer's machine without one is told and goes on
        ci = os.environ.get("CI") == "true"
        print(f"pythons: {exc}{'' if ci else '; skipped (it fails under CI=true)'}", file=sys.stderr,
              flush=True)
        return 2 if ci else 0
    python = reachable_python(python)
    venv = host_venv(python, minor)
    print(f"pythons: Python {_version(python)} at {python} (venv {venv})", flush=True)
    argv = [str(venv / "bin/python"), "-m", "pytest", *pytest_args]
    if os.geteuid() == 0:
        # .venv/bin/imexctl and the simulator's scripts, which tests run, are this Python's too
        mount = f"mount --bind {shlex.quote(str(venv))} {shlex.quote(str(REPO / '.venv'))}"
        argv = ["unshare", "--mount", "--propagation", "private", "--", "/bin/sh", "-c",
                f'{mount} && exec "$@"', "sh", *argv]
    return subprocess.run(argv, cwd=REPO, env=_env()).returncode


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or not re.fullmatch(r"3\.\d+", args[0]):
        print("usage: python -m tests.cluster.pythons 3.12|3.13|3.14 [PYTEST ARGS]", file=sys.stderr)
        return 2
    minor, pytest_args = args[0], args[1:] or ["-q", "-p", "no:cacheprovider", *SUITE]
    if minor in ROOT_FOR:
        return in_root(ROOT_FOR[minor], pytest_args)
    return on_host(minor, pytest_args)


if __name__ == "__main__":
    raise SystemExit(main())
