"""scripts/gpu-smoke's channel half, run here on a simulated major (no driver).

The real run needs an NVIDIA driver (docs/gpu-smoke.md); this keeps the script in step
with imexctl.tray.channels so a signature change cannot break it unnoticed on the GPU machine.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def load_smoke():
    loader = importlib.machinery.SourceFileLoader("gpu_smoke", str(REPO / "scripts/gpu-smoke"))
    spec = importlib.util.spec_from_loader("gpu_smoke", loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


@pytest.mark.skipif(os.geteuid() != 0, reason="creating a device node needs root")
def test_channel_half_creates_isolates_and_removes(tmp_path):
    smoke = load_smoke()
    devices = tmp_path / "devices"
    devices.write_text("Character devices:\n195 nvidia\n234 nvidia-caps-imex-channels\n")
    params = tmp_path / "params"
    params.write_text("ImexChannelCount: 16\n")
    rep = smoke.Report()
    smoke.check_channel(rep, devices, params)
    lines = {name: (status, text) for status, name, text in rep.lines}
    assert lines["channel create"][0] == "PASS" and "char 234:15" in lines["channel create"][1]
    assert lines["channel open as other uid"] == ("PASS", "uid 61002: Permission denied")
    assert lines["channel remove"][0] == "PASS"
    # No driver serves major 234 here: the owner passes the permission check and the
    # open fails in the (absent) driver, never with EACCES.
    assert "Permission denied" not in lines.get("channel open as owner", ("", ""))[1]


def test_channel_half_skips_without_the_imex_major(tmp_path):
    smoke = load_smoke()
    devices = tmp_path / "devices"
    devices.write_text("Character devices:\n195 nvidia\n")
    rep = smoke.Report()
    smoke.check_channel(rep, devices, tmp_path / "absent")
    assert [(s, n) for s, n, _ in rep.lines] == [("SKIP", "channel")] and not rep.failed
