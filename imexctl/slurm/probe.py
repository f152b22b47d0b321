"""Whether pyslurm can be used here, asked in a child process and remembered.

Importing pyslurm with no readable slurm.conf makes libslurm kill the process, and a
pyslurm built for another Slurm release cannot talk to this one: so a child process
imports it and makes one RPC, and the answer is kept in the per-user cache directory.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from pathlib import Path

# Child-process probe: import, one RPC, and the versions of pyslurm and of slurmctld.
_PROBE = (
    "import sys\n"
    "import pyslurm\n"
    "node = sys.argv[1]\n"
    "config = getattr(getattr(pyslurm, 'slurmctld', None), 'Config', None)\n"
    "if config is not None:\n"
    "    slurm = config.load().version\n"
    "else:\n"
    "    n = pyslurm.Node.load(node) if node else None\n"
    "    slurm = getattr(n, 'slurm_version', '') or ''\n"
    "print('imexctl-pyslurm-ok', pyslurm.__version__, slurm)\n"
)
_probe_cache: dict[tuple, str | None] = {}
_RELEASE = r"(\d+)\.(\d+)"


def pyslurm_installed() -> bool:
    return _pyslurm_origin() is not None


def _pyslurm_origin() -> str | None:
    """Where ``import pyslurm`` would load it from; None when it is not installed."""
    try:
        import importlib.util   # not at import: only the pyslurm backend asks
        spec = importlib.util.find_spec("pyslurm")
    except (ImportError, ValueError):
        return None
    return None if spec is None else (spec.origin or "namespace package")


def _release(version: str) -> tuple[int, int] | None:
    m = re.search(_RELEASE, version or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


def pyslurm_unavailable(node: str = "", timeout_s: float = 10.0,
                        slurm_client: Path | None = None) -> str | None:
    """None when pyslurm imports, answers an RPC and is built for the running Slurm release
    (pyslurm X.Y talks only to Slurm X.Y); otherwise why not, in words for `status`.

    Tried in a child process: a failing ``import pyslurm`` may call libslurm's fatal() and
    end the process, and libslurm retries a missing config for 60 s. The answer is cached
    per process, and a "usable" answer also on disk (:func:`_remembered`) for
    ``PROBE_KEEP_S``: the probe imports pyslurm and loads Slurm's configuration from
    slurmctld, which every hook on every tray would otherwise pay at every job start.
    ``slurm_client``: a file every Slurm upgrade replaces (``scontrol``); without it
    nothing is kept on disk.
    """
    key = (node, os.environ.get("SLURM_CONF"))
    if key in _probe_cache:
        return _probe_cache[key]
    origin = _pyslurm_origin()
    identity = _probe_identity(node, origin, slurm_client) if origin else None
    if origin is None:
        reason: str | None = "pyslurm is not installed"
    elif identity is not None and _remembered(identity):
        reason = None
    else:
        reason = _probe(node, timeout_s)
        if reason is None and identity is not None:
            _remember(identity)
    _probe_cache[key] = reason
    return reason


PROBE_KEEP_S = 600.0          # how long a "pyslurm is usable" answer is kept on disk
PROBE_FILE = "pyslurm.probe"  # in the configuration cache's directory (configcache)


def _probe_identity(node: str, origin: str, slurm_client: Path | None) -> str | None:
    """What a kept answer holds for: the node, SLURM_CONF, and the exact files of pyslurm
    and of the Slurm client (a Slurm upgrade replaces it, with libslurm). None when a file
    cannot be seen: then nothing is kept."""
    if slurm_client is None:
        return None
    parts = [node, os.environ.get("SLURM_CONF", "")]
    for path in (origin, str(slurm_client)):
        try:
            st = os.stat(path)
        except OSError:
            return None
        parts.append(f"{path}:{st.st_dev}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}")
    return "\n".join(parts)


def _remembered(identity: str) -> bool:
    """Whether a probe of exactly these files found pyslurm usable less than
    ``PROBE_KEEP_S`` ago. The file is trusted like the configuration cache (this user's
    directory, not writable by others, no symlink); anything else means "probe again"."""
    import time

    from imexctl.base.cache import cache_dir
    from imexctl.base.fsutil import check_secure_dir, read_bytes

    try:
        check_secure_dir(cache_dir())
        text = read_bytes(cache_dir() / PROBE_FILE)
        kept = json.loads(text) if text is not None else None
        return (isinstance(kept, dict) and kept.get("identity") == identity
                and 0 <= time.time() - float(kept.get("at", -1)) < PROBE_KEEP_S)
    except (OSError, TypeError, ValueError):
        return False


def _remember(identity: str) -> None:
    """Keep a "usable" answer (best effort). A failed probe is never kept: slurmctld may
    only have been down, and the next hook asks again."""
    import time

    from imexctl.base.cache import cache_dir
    from imexctl.base.fsutil import atomic_write, ensure_secure_dir

    try:
        ensure_secure_dir(cache_dir(), 0o700)
        atomic_write(cache_dir() / PROBE_FILE,
                     json.dumps({"identity": identity, "at": time.time()}), 0o600,
                     durable=False)
    except (OSError, ValueError):
        pass


def _probe(node: str, timeout_s: float) -> str | None:
    from imexctl.base.subproc import Bounded, run_text

    proc = run_text([sys.executable, "-c", _PROBE, node], timeout_s, os.environ)
    if isinstance(proc, Bounded):
        return (f"pyslurm did not answer within {timeout_s:g}s" if proc.timed_out
                else f"pyslurm probe could not run: {proc.error}")
    words = next((line.split() for line in proc.stdout.splitlines()
                  if line.startswith("imexctl-pyslurm-ok")), None)
    if proc.returncode != 0 or words is None:
        last = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
        return f"pyslurm did not answer: {last[:200]}"
    ours, theirs = (words + ["", ""])[1:3]
    if _release(ours) and _release(theirs) and _release(ours) != _release(theirs):
        return f"pyslurm {ours} does not match Slurm {theirs}"
    return None


def probe_pyslurm(node: str = "", timeout_s: float = 10.0) -> bool:
    """True when pyslurm is usable here (see :func:`pyslurm_unavailable`)."""
    return pyslurm_unavailable(node, timeout_s) is None


