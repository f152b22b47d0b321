"""Fixtures: a fake Slurm world (state file + fake executables + fake pyslurm)."""

from __future__ import annotations

import sys

import pytest

from tests.support.slurm_world import World, make_backend
from tests.support import fakeslurm


@pytest.fixture
def world(tmp_path) -> World:
    return World(tmp_path)


@pytest.fixture
def fake_pyslurm(world, monkeypatch):
    mod = fakeslurm.pyslurm_module(world.state_path)
    monkeypatch.setitem(sys.modules, "pyslurm", mod)
    return mod


@pytest.fixture(params=["cli", "pyslurm"])
def backend_kind(request, world, monkeypatch):
    if request.param == "pyslurm":
        monkeypatch.setitem(sys.modules, "pyslurm", fakeslurm.pyslurm_module(world.state_path))
    return request.param


@pytest.fixture
def backend(backend_kind, world):
    return make_backend(backend_kind, world)
