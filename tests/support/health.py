"""Health-check helpers shared by the health, recover and wrapper-launcher tests."""

from __future__ import annotations

import os

import pytest

from imexctl.slurm.records import merged_extra
from tests.support.memory_slurm import FakeSlurm

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="mknod of a channel device needs root")


def mkchannel(cfg, number):
    from imexctl.tray.channels import create_channel
    return create_channel(cfg.paths.channel_dir, number, 234, 65534, 0o600)


class StrictExtraSlurm(FakeSlurm):
    """The real adapters' Extra rule: a non-JSON Extra is refused, never overwritten."""

    def extra_merge(self, node, key, value):
        self.calls.append(("extra_merge", node, key))
        text = merged_extra(node, self.nodes_[node].extra, key, value)
        if text is not None:
            self.nodes_[node].extra = text
