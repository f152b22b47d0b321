"""scripts/count-seams (a phase of scripts/static): what it counts, what it leaves to the
wrappers of foreign objects, and that it fails above its limits."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "count-seams"


def count(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args, str(root)],
                          capture_output=True, text=True, timeout=60)


def limits() -> tuple[int, int]:
    text = SCRIPT.read_text()
    return (int(re.search(r"^MAX_GETATTR_DEFAULT = (\d+)$", text, re.M).group(1)),
            int(re.search(r"^MAX_BARE_ANY = (\d+)$", text, re.M).group(1)))


def test_each_getattr_default_and_bare_any_is_counted_and_named(tmp_path):
    pkg = tmp_path / "imexctl" / "tray"
    pkg.mkdir(parents=True)
    (pkg / "x.py").write_text(
        "from typing import Any\n"
        "def f(cfg: Any, job: 'Any | None', rows: dict[str, Any], *a: Any) -> Any:\n"
        "    value: Any = getattr(cfg, 'node', '')\n"
        "    return getattr(job, 'name')\n")
    (pkg / "nvml.py").write_text("def g(pynvml: Any) -> Any:\n"
                                 "    return getattr(pynvml, 'nvmlInit', None)\n")
    res = count(tmp_path, "-v")      # over the limits or not: the next test checks those
    assert "getattr with a default: 1 " in res.stdout
    assert "imexctl/tray/x.py:3: getattr(cfg, 'node', '')" in res.stdout
    assert "bare Any annotations: 5 " in res.stdout      # not dict[str, Any]
    for what in ("f(cfg: Any)", "f(job: Any)", "f(a: Any)", "f() -> Any", "value: Any"):
        assert what in res.stdout
    assert "nvml.py" not in res.stdout                  # the pynvml wrapper's own


def test_it_fails_above_its_limits_naming_each_one(tmp_path):
    max_getattr, max_any = limits()
    pkg = tmp_path / "imexctl" / "rules"
    pkg.mkdir(parents=True)
    (pkg / "y.py").write_text(
        "".join(f"def f{i}(x: Any) -> None: ...\n" for i in range(max_any + 1))
        + "def g(x: object) -> None:\n"
        + "".join("    getattr(x, 'a', None)\n" for _ in range(max_getattr + 1)))
    res = count(tmp_path)
    assert res.returncode == 1
    assert "count-seams: 1 more getattr with a default than allowed" in res.stderr
    assert "count-seams: 1 more bare Any annotations than allowed" in res.stderr
    assert f"imexctl/rules/y.py:{max_any + 3}: getattr(x, 'a', None)" in res.stdout
    assert "imexctl/rules/y.py:1: f0(x: Any)" in res.stdout
    (pkg / "y.py").write_text("def g(x: object) -> None: ...\n")
    assert count(tmp_path).returncode == 0


def test_the_tree_is_within_the_limits():
    res = count(REPO)
    assert res.returncode == 0, res.stdout + res.stderr
