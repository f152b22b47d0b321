"""bench/lifecycle.py prints issue 12's targets from a run's medians: the verdicts and the
epilog's CPU budget per tray must follow the figures, not be written in."""

from __future__ import annotations

import importlib.util
from pathlib import Path

# Loaded from its file, not through sys.path: bench/ holds modules whose names
# (topology, chanalloc) must not shadow anything else a test imports.
_SPEC = importlib.util.spec_from_file_location(
    "bench_lifecycle", Path(__file__).resolve().parents[2] / "bench" / "lifecycle.py")
lifecycle = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(lifecycle)


def imx(**kw):
    return {"alloc_up": 414, "early": 0, "jobs": 6, "pslurmctld_wall": 37, "epilog_wall": 95,
            **kw}


def base(**kw):
    return {"alloc_up": 15_107, "early": 6, "jobs": 6, "pslurmctld_wall": 2, "epilog_wall": 13,
            **kw}


def test_every_target_met_at_four_trays():
    lines = lifecycle.targets(4, {"imexctl": imx(), "baseline": base(),
                                  "python": {"epilog_wall": 31}}, 2)
    assert lines[0] == "targets at 4 trays:"
    assert all(line.count("(met)") == 1 for line in lines[1:]), lines
    assert "the target leaves 125.0 ms of CPU per tray" in lines[3]
    assert "no Python epilog" not in "\n".join(lines)


def test_misses_are_named_and_the_machine_bound_only_where_the_floor_exceeds_it():
    slow_up = lifecycle.targets(18, {"imexctl": imx(alloc_up=1_000, early=1),
                                     "baseline": base(alloc_up=850)}, 2)
    assert "(NOT met)" in slow_up[1] and "1 of 6 jobs early" in slow_up[1]

    at18 = lifecycle.targets(18, {"imexctl": imx(epilog_wall=391, pslurmctld_wall=51),
                                  "python": {"epilog_wall": 104}}, 2)
    assert "51 ms (NOT met)" in at18[1]
    assert "391 ms (NOT met)" in at18[2] and "27.8 ms of CPU per tray" in at18[2]
    assert "no Python epilog" not in at18[2]

    at72 = lifecycle.targets(72, {"imexctl": imx(epilog_wall=1_648),
                                  "python": {"epilog_wall": 387}}, 2)
    assert "6.9 ms of CPU per tray" in at72[2]
    assert at72[2].endswith("(no Python epilog meets the target at this size on this machine)")


def test_nothing_to_judge_without_imexctl():
    assert lifecycle.targets(4, {"baseline": base()}, 2) == []


def test_a_tray_never_gets_more_than_one_core():
    lines = lifecycle.targets(4, {"imexctl": imx(), "python": {"epilog_wall": 31}}, 16)
    assert "4 epilogs at once on 16 CPUs: the target leaves 250.0 ms of CPU per tray" in lines[2]
