"""Health-check helpers shared by the health, recover and wrapper-launcher tests."""

from __future__ import annotations

import os

import pytest

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="mknod of a channel device needs root")


def mkchannel(cfg, number):
    from imexctl.tray.channels import create_channel
    return create_channel(cfg.paths.channel_dir, number, 234, 65534, 0o600)

