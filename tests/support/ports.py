"""A per-job port nothing on this host uses."""

from __future__ import annotations

import random
import socket

import pytest

from imexctl.config import Imex
from imexctl.imex.render import job_ports

DEFAULT = Imex()


def free_job_port() -> int:
    """A default-range cmd port of some job that nothing on this host uses right now."""
    for _ in range(50):
        port = job_ports(random.randrange(1, 1 << 31), DEFAULT.server_port_base,
                         DEFAULT.cmd_port_base, DEFAULT.port_span).cmd
        probe = socket.socket()
        try:
            probe.bind(("127.0.0.1", port))
            return port
        except OSError:
            continue
        finally:
            probe.close()
    pytest.skip("no free job port on this host")
