"""bench/decision.py on small jobs (18 and 72 trays, two runs): the figures it prints come
from running both record versions and both node prologs. Structure only, no timings."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
from pathlib import Path

import pytest

# Loaded from its file, not through sys.path: bench/ holds modules whose names
# (decision, topology, chanalloc) must not shadow anything else a test imports.
_ROOT = Path(__file__).resolve().parents[2]
_SPEC = importlib.util.spec_from_file_location("bench_decision", _ROOT / "bench" / "decision.py")
bench = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(bench)

SIZES = [18, 72]


def _has_v1() -> bool:
    if shutil.which("git") is None:
        return False
    return subprocess.run(["git", "-C", str(_ROOT), "cat-file", "-e",
                           f"{bench.V1_COMMIT}^{{commit}}"], capture_output=True).returncode == 0


@pytest.fixture(scope="module")
def v2(tmp_path_factory):
    slurm = bench.build_world(72, SIZES)
    tmp = tmp_path_factory.mktemp("bench-decision")
    return {t: bench.v2_size(slurm, t, 2, bench.fake_seal(), "fakemunge", tmp / str(t))
            for t in SIZES}


def test_v2_record_for_72_trays_is_sealed_and_holds_one_group_per_clique(v2):
    r = v2[72]
    assert r["code"] == "v2" and r["seal"] == "fakemunge"
    assert r["sealed"] and r["found"]
    assert r["cliques"] == 4 and r["decoded_groups"] == 4
    assert r["fits"] and r["chars"] > r["body_chars"]       # the credential is part of it
    assert r["controller"]["wrote"] == "domains" and not r["notes"]


@pytest.mark.parametrize("trays", SIZES)
def test_v2_node_prolog_asks_its_job_record_only(v2, trays):
    for tray in v2[trays]["prolog"]:
        assert tray["rc"] == 0 and tray["same_every_run"]
        assert tray["queries"]["job"] == 1 and tray["queries"]["nodes"] == 0
        assert tray["queries"]["node_records"] == 0 and tray["queries"]["other"] == {}
        assert tray["source"] == "controller" and tray["action"] == "domains"
    first, last = v2[trays]["prolog"]
    assert first["node"] == "gb0001" and last["node"] == bench.tray(trays)
    assert first["group"] == bench.key_of(0)
    assert last["group"] == bench.key_of((trays - 1) // bench.CLIQUE_TRAYS)


@pytest.mark.skipif(not _has_v1(), reason=f"commit {bench.V1_COMMIT} not in this checkout")
def test_v1_figures_come_from_the_old_code(v2):
    v1 = bench.run_v1(SIZES, 2, 72)
    assert [r["trays"] for r in v1] == SIZES
    for r in v1:
        assert r["code"] == "v1" and r["cap"] == 1000 and r["fits"]
        assert r["encode_outcome"] == "ok" and r["decoded_groups"] == r["cliques"]
        assert r["controller"]["wrote"] == "domains"
        for key in ("chars", "encode_ms", "decode_ms", "find_ms"):
            assert r[key] > 0
        tray = r["prolog"][0]
        assert tray["source"] == "controller" and tray["queries"]["job"] == 1
    text = bench.table(v1 + [v2[18], v2[72]], markdown=True)
    assert text.count("\n") == 5 and "v1 (5d3a1d2)" in text and "v2, fakemunge" in text


def test_decode_section_reads_hostile_fields_in_bounded_memory():
    """bench/decision.py --decode (audit F4-4): 1 and 10 KB of hostile job fields, read by
    today's code as the prolog, a rebuild and status do, in a process each: no reader
    grows by more than a few MB (the baseline grew by 1.28 GB per KB)."""
    rows = bench.decode_section([1, 10], baseline=None, timeout_s=60)
    assert {(r["kb"], r["consumer"]) for r in rows} == {
        (kb, c) for kb in (1, 10) for c in ("prolog", "rebuild", "status")}
    for r in rows:
        assert "over" not in r and r["code"] == "today", r
        assert r["growth_mb"] < 32 and r["chars"] > r["kb"] * 900, r
