"""The harness sizes the kernel's one IPv4 neighbour table for all its namespaces: at 72
trays the default limit (1024 entries for every namespace together) made the kernel drop
packets between trays ("neighbor table overflow!") and no IMEX domain came UP."""

from __future__ import annotations

from tests.cluster.harness import KERNEL_NEIGH_DEFAULTS as DEFAULTS
from tests.cluster.harness import neighbour_limits


def test_default_limits_suffice_up_to_a_rack():
    assert neighbour_limits(4, DEFAULTS) == {}
    assert neighbour_limits(18, DEFAULTS) == {}     # 400 entries, well under 1024


def test_four_racks_get_room_for_every_pair_of_namespaces():
    raised = neighbour_limits(72, DEFAULTS)
    assert raised == {"gc_thresh1": 74 ** 2, "gc_thresh2": 2 * 74 ** 2, "gc_thresh3": 4 * 74 ** 2}
    assert raised["gc_thresh3"] > 73 * 74       # every namespace resolving every other


def test_limits_are_never_lowered():
    site = {"gc_thresh1": 8192, "gc_thresh2": 4096, "gc_thresh3": 8192}
    assert neighbour_limits(72, site) == {"gc_thresh2": 2 * 74 ** 2, "gc_thresh3": 4 * 74 ** 2}
    assert neighbour_limits(72, {**site, "gc_thresh3": 65536}) == {}
