"""Fixtures: a fake Slurm world (state file + fake executables + fake pyslurm, or the same
world held by the in-memory backend) and a backend on it.

``backend_kind`` runs a test on every backend (cli, pyslurm, memory): the contract.
``transport_kind`` runs it on the backends that talk to a Slurm process (cli, pyslurm):
retries, timeouts and refused updates, which the in-memory backend has no way to meet.
"""

from __future__ import annotations

import sys

import pytest

from tests.support import fakeslurm
from tests.support.slurm_world import World, make_backend, new_world

BACKENDS = ["cli", "pyslurm", "memory"]
TRANSPORTS = ["cli", "pyslurm"]


def _kind(request) -> str:
    for name in ("backend_kind", "transport_kind"):
        if name in request.fixturenames:
            return request.getfixturevalue(name)
    return "cli"


@pytest.fixture
def world(tmp_path, request, monkeypatch) -> World:
    kind = _kind(request)
    made = new_world(kind, tmp_path)
    if kind == "pyslurm":
        monkeypatch.setitem(sys.modules, "pyslurm", fakeslurm.pyslurm_module(made.state_path))
    return made


@pytest.fixture
def fake_pyslurm(world, monkeypatch):
    mod = fakeslurm.pyslurm_module(world.state_path)
    monkeypatch.setitem(sys.modules, "pyslurm", mod)
    return mod


@pytest.fixture(params=BACKENDS)
def backend_kind(request):
    return request.param


@pytest.fixture(params=TRANSPORTS)
def transport_kind(request):
    return request.param


@pytest.fixture
def backend(backend_kind, world):
    return make_backend(backend_kind, world)
