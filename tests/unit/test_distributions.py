"""What each distribution of this repository ships, as setuptools discovers it from
pyproject.toml (its egg_info: the packages, modules and console scripts a wheel built
from it holds). The product (./pyproject.toml, the wheel and Debian package a site
installs) carries no simulator and no tests; the simulator (sim/pyproject.toml, which the
harness, the demo and the benchmarks install) carries only itself.
tests/integration/test_package.py checks the built Debian package too."""

from __future__ import annotations

import configparser
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def egg_info(project: Path, tmp_path: Path) -> dict:
    """setuptools' metadata for ``project`` written to ``tmp_path`` (nothing in the tree)."""
    subprocess.run([sys.executable, "-c", "from setuptools import setup; setup()", "-q",
                    "egg_info", "--egg-base", str(tmp_path)], cwd=project, check=True,
                   capture_output=True, text=True)
    info = next(tmp_path.glob("*.egg-info"))
    scripts = configparser.ConfigParser()
    scripts.read(info / "entry_points.txt")
    return {"top_level": (info / "top_level.txt").read_text().split(),
            "scripts": dict(scripts["console_scripts"]) if "console_scripts" in scripts else {},
            "modules": sorted({line.removeprefix("./") for line in
                               (info / "SOURCES.txt").read_text().splitlines()
                               if line.endswith(".py")})}


@pytest.fixture(scope="module")
def product(tmp_path_factory):
    return egg_info(ROOT, tmp_path_factory.mktemp("product"))


@pytest.fixture(scope="module")
def simulator(tmp_path_factory):
    return egg_info(ROOT / "sim", tmp_path_factory.mktemp("simulator"))


def test_the_product_ships_imexctl_only(product):
    assert product["top_level"] == ["imexctl"]
    assert product["scripts"] == {"imexctl": "imexctl.cli:entry"}
    assert "imexctl/lifecycle/prolog.py" in product["modules"]
    outside = [m for m in product["modules"] if not m.startswith("imexctl/")]
    assert outside == []


def test_the_product_carries_no_simulator_and_no_tests(product):
    assert not [m for m in product["modules"]
                if "sim/" in m or "imexctl_sim" in m or "tests/" in m or "/test_" in m]
    assert not [s for s in product["scripts"] if "sim" in s]


def test_the_simulator_is_its_own_distribution(simulator):
    assert simulator["top_level"] == ["imexctl_sim"]
    assert simulator["scripts"] == {"imexctl-sim-imex": "imexctl_sim.daemon:entry",
                                    "imexctl-sim-imex-ctl": "imexctl_sim.ctl:entry"}
    assert "imexctl_sim/daemon.py" in simulator["modules"]
    assert all(m.startswith("imexctl_sim/") for m in simulator["modules"])


def test_every_simulator_module_is_in_the_simulator(simulator):
    on_disk = sorted(str(p.relative_to(ROOT / "sim")) for p in (ROOT / "sim/imexctl_sim").glob("*.py"))
    assert simulator["modules"] == on_disk
    assert not (ROOT / "imexctl" / "sim").exists()
