"""The simulated daemon against forged peers (audit F3-5, S3-4) and the command-port faults
of fidelity N2 (cmd_drop, ctl_hang)."""

from __future__ import annotations

import json
import socket
import subprocess
import time

from imexctl_sim import daemon as simdaemon

from tests.support.sim import poll


def _connect(addr: str, port: int, src: str = "127.0.0.1") -> socket.socket:
    s = socket.create_connection((addr, port), timeout=2, source_address=(src, 0))
    s.settimeout(2)
    return s


def _hello(host: str) -> bytes:
    return (json.dumps({"type": "hello", "node": 1, "host": host, "digest": "x",
                        "version": "580.95.05", "instance": "forged"}) + "\n").encode()


def _reply(s: socket.socket) -> bytes:
    try:
        return s.recv(65536)
    except (TimeoutError, OSError):
        return b"<no reply>"


def test_forged_hellos_are_rejected_and_capped_per_source(sim):
    dom = sim(2)
    t0, t1 = dom.trays
    dom.start_all()
    dom.wait_up()
    # a hello naming a host that is no member, and one naming a member from another
    # address, are rejected (before: both welcomed and held forever)
    s = _connect(t0.addr, dom.port)
    s.sendall(_hello("10.66.0.1"))
    assert b'"reject"' in _reply(s)
    s = _connect(t0.addr, dom.port)
    s.sendall(_hello(t1.addr))
    assert b'"reject"' in _reply(s)
    assert "not a member of this domain at that address" in t0.log_text()
    # 80 connections from one source: at most PER_SOURCE_CAP are held, the rest closed
    held = [_connect(t0.addr, dom.port) for _ in range(80)]
    time.sleep(0.5)
    open_ = 0
    for s in held:
        s.setblocking(False)
        try:
            open_ += s.recv(1) != b""
        except BlockingIOError:
            open_ += 1
        except OSError:
            pass
    assert open_ <= simdaemon.PER_SOURCE_CAP
    assert "holds 8 connections on the peer port already" in t0.log_text()
    # the domain stays UP for the ctl meanwhile, and the real peer kept its session
    assert t0.domain_json()["status"] == "UP"


def test_unauthenticated_peer_is_dropped_at_its_deadline_and_line_is_bounded(sim):
    dom = sim(1)
    t0 = dom.trays[0]
    t0.start()
    poll(lambda: t0.query() == "READY", 10)
    idle = _connect(t0.addr, dom.port)
    big = _connect(t0.addr, dom.port)
    # S3-4: 64 KiB without a newline is cut off at MAX_INBOUND_LINE (16 KiB) at once, long
    # before the 5 s deadline (before: buffered, up to 1 MiB per connection)
    started = time.monotonic()
    try:
        big.sendall(b"x" * (64 << 10))
        closed = big.recv(1) == b""
    except ConnectionResetError:
        closed = True
    except TimeoutError:
        closed = False
    assert closed and time.monotonic() - started < 2
    idle.settimeout(simdaemon.HANDSHAKE_TIMEOUT + 3)
    started = time.monotonic()
    assert idle.recv(1) == b""          # closed by the daemon at its deadline
    assert time.monotonic() - started < simdaemon.HANDSHAKE_TIMEOUT + 2


def test_cmd_drop_makes_peers_wait_and_read_unavailable(sim):
    dom = sim(2)
    dom.set_faults({"nodes": {"1": {"cmd_drop": True}}})
    dom.start_all()
    t0, t1 = dom.trays
    poll(lambda: t1.query() == "READY", 10)     # its own queries are answered
    started = time.monotonic()
    view = t0.domain_json()
    took = time.monotonic() - started
    assert view["status"] == "DEGRADED" and view["nodes"]["1"]["status"] == "UNAVAILABLE"
    assert took >= 1.9          # waited out its deadline: a DROP, not a refusal


def test_ctl_hang_hangs_N_while_q_answers(sim):
    dom = sim(1)
    dom.set_faults({"ctl_hang": True})
    t0 = dom.trays[0]
    t0.start()
    poll(lambda: t0.query() == "READY", 10)
    proc = subprocess.Popen([dom.ctl_bin, "-c", str(t0.cfg), "-N", "-j"], env=t0.env(),
                            stdout=subprocess.PIPE)
    try:
        proc.wait(3)
        raise AssertionError("-N returned")
    except subprocess.TimeoutExpired:
        pass
    finally:
        proc.kill()
        proc.wait()
