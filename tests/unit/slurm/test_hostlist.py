"""Hostlist expressions: Slurm's order, padding, several bracket groups, clear errors."""

import pytest

from imexctl.slurm.hostlist import compress, expand


@pytest.mark.parametrize("expr, names", [
    ("tray01", ["tray01"]),
    ("tray[01-03,7],gpu5", ["tray01", "tray02", "tray03", "tray7", "gpu5"]),
    ("tray[1-3]", ["tray1", "tray2", "tray3"]),
    ("tray[08-11]", ["tray08", "tray09", "tray10", "tray11"]),
    ("tray[9-11]", ["tray9", "tray10", "tray11"]),
    ("n[001-002]", ["n001", "n002"]),
    ("a[1-2]b[3-4]", ["a1b3", "a1b4", "a2b3", "a2b4"]),
    ("rack[1-2]-tray[01-02]", ["rack1-tray01", "rack1-tray02", "rack2-tray01", "rack2-tray02"]),
    ("tray[3,1,2]", ["tray3", "tray1", "tray2"]),          # order as written
    ("tray[1-2],tray1", ["tray1", "tray2", "tray1"]),       # duplicates kept
    ("[1-2]x", ["1x", "2x"]),
    ("node-a.b_c", ["node-a.b_c"]),
    ("tray[5]", ["tray5"]),
    ("", []),
    ("  tray1  ", ["tray1"]),
])
def test_expand(expr, names):
    assert expand(expr) == names


@pytest.mark.parametrize("expr, words", [
    ("tray[", "never closed"),
    ("tray]", "without '['"),
    ("tray[3-1]", "backwards"),
    ("tray[]", "empty brackets"),
    ("tray1,,tray2", "empty name"),
    ("tray1,", "empty name"),
    ("tray[1-2", "never closed"),
    ("tray[[1]]", "nested"),
    ("tray[a-b]", "bad range"),
    ("tray[1-]", "bad range"),
    ("tray[1:3]", "bad range"),
    ("tray1 tray2", "whitespace"),
    ("tray1;rm", "invalid characters"),
    ("tray$(x)", "invalid characters"),
    ("-tray1", "must start"),
    ("tray[0-99999999]", "too many names"),
    ("a[0-999]b[0-999]c[0-999]", "too many"),
    ("tray[0-599999,0-599999]", "too many names"),          # parts of one bracket add up
    ("a[0-999]b[0-999],c", "too many names"),                # words add up
    ("tray[1-1234567890123456789]", "more than 18 digits"),
    ("tray[\u0663]", "bad range"),                          # Arabic-Indic digit
])
def test_expand_errors(expr, words):
    with pytest.raises(ValueError) as exc:
        expand(expr)
    assert words in str(exc.value)
    assert repr(expr.strip()) in str(exc.value) or expr.strip() in str(exc.value)


def test_huge_expression_is_refused_before_any_name_is_built():
    """F-09: 7000 maximal parts in one bracket (63 005 characters, under Slurm's node-list
    limit) used to build ~7e9 strings before failing; now it is counted first."""
    import tracemalloc

    expr = "tray[" + ",".join(["0-999999"] * 7000) + "]"
    tracemalloc.start()
    try:
        with pytest.raises(ValueError, match="too many names") as exc:
            expand(expr)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 * 2**20, f"peak {peak} bytes while refusing"
    assert len(str(exc.value)) < 200  # the message does not repeat 63 KB of input


def test_expand_rejects_non_string():
    with pytest.raises(ValueError):
        expand(None)  # type: ignore[arg-type]


@pytest.mark.parametrize("names, expr", [
    (["tray01", "tray02", "tray03", "tray7", "gpu5"], "tray[01-03,7],gpu5"),
    (["tray1"], "tray1"),
    (["tray9", "tray10"], "tray[9-10]"),
    (["tray09", "tray10"], "tray[09-10]"),
    (["a", "b1", "b2"], "a,b[1-2]"),
    (["tray3", "tray1"], "tray[3,1]"),
    ([], ""),
])
def test_compress(names, expr):
    assert compress(names) == expr
    assert expand(compress(names)) == names


@pytest.mark.parametrize("names", [
    ["tray01", "tray1", "tray001"],
    ["x9", "x10", "x010", "x11"],
    ["a1b3", "a1b4", "a2b3"],
    ["n1", "m1", "n2"],
    ["tray1", "tray1"],
])
def test_compress_round_trip(names):
    assert expand(compress(names)) == names


def test_compress_rejects_bad_names():
    with pytest.raises(ValueError):
        compress(["ok1", "bad name"])
