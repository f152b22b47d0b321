"""Lazy imports keep modules that only some paths need off every hook's start-up."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from imexctl.lazy import lazy_import


def run(code: str, env=None) -> list:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, env=env)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.splitlines()[-1])


def test_lazy_module_loads_on_first_use():
    loaded_before, pid_ok, loaded_after = run("""
import json, os, sys
from imexctl.lazy import lazy_import
ps = lazy_import("psutil")
before = "psutil._pslinux" in sys.modules
ok = ps.Process(os.getpid()).pid == os.getpid()
import psutil
print(json.dumps([before, ok and psutil is ps, "psutil._pslinux" in sys.modules]))
""")
    assert (loaded_before, pid_ok, loaded_after) == (False, True, True)


def test_missing_module_fails_at_once():
    with pytest.raises(ImportError, match="no_such_module_xyz"):
        lazy_import("no_such_module_xyz")


def test_status_on_an_idle_tray_does_not_load_psutil(tmp_path):
    cfg = tmp_path / "imexctl.toml"
    cfg.write_text(f'[paths]\nstate_dir = "{tmp_path}/state"\nrun_dir = "{tmp_path}/run"\n'
                   f'log_file = "{tmp_path}/log/imexctl.log"\nchannel_dir = "{tmp_path}/ch"\n')
    rc, loaded = run(f"""
import contextlib, io, json, sys
from imexctl.cli import main
with contextlib.redirect_stdout(io.StringIO()):
    rc = main(["--config", {str(cfg)!r}, "status", "--json"])
print(json.dumps([rc, sorted(m for m in ("psutil._pslinux", "asyncio", "tenacity")
                             if m in sys.modules)]))
""")
    assert (rc, loaded) == (0, [])
