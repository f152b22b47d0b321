"""Multi-process fixtures: simulated IMEX trays on 127.x.y.z loopback addresses."""

from __future__ import annotations

import pytest

from imexctl_sim.loopback import SimDomain


@pytest.fixture
def sim(tmp_path):
    made: list[SimDomain] = []

    def make(n: int, **kw) -> SimDomain:
        dom = SimDomain(tmp_path / f"domain{len(made)}", n, **kw)
        made.append(dom)
        return dom

    yield make
    for dom in made:
        dom.cleanup()
