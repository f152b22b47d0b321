"""Port probe and port ranges, with real sockets and the running kernel's settings.

Measured here (and on the harness, issue 9): an outgoing connection whose local port is a
job port does not listen, so it must not count as "in use"; per-job ports must lie outside
the kernel's ephemeral range, because connect() hands those ports out.
"""

from __future__ import annotations

import os
import random
import socket
import subprocess
import sys

import pytest

from imexctl.config import Imex
from imexctl.imex.render import job_ports
from imexctl.tray.ports import (describe, diag_listeners, ephemeral_conflicts, ephemeral_range,
                           listeners, proc_listeners,
                           listening_sockets, reserved_ports)
from tests.support.ports import free_job_port

DEFAULT = Imex()
DEFAULT_RANGES = [(DEFAULT.server_port_base, DEFAULT.server_port_base + DEFAULT.port_span),
                  (DEFAULT.cmd_port_base, DEFAULT.cmd_port_base + DEFAULT.port_span)]


@pytest.fixture
def server():
    """A listener on a kernel-chosen port, to connect to."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    yield sock
    sock.close()


def test_outgoing_connection_on_a_job_port_is_not_in_use(server):
    port = free_job_port()
    client = socket.socket()
    client.bind(("127.0.0.1", port))
    client.connect(server.getsockname())
    accepted, _ = server.accept()
    try:
        assert client.getsockname()[1] == port  # the connection really holds the port
        assert listeners([port]) == {}
        assert listeners([port], pid=os.getpid()) == {}
    finally:
        accepted.close()
        client.close()


def test_listener_is_in_use_and_names_its_pid():
    port = free_job_port()
    sock = socket.socket()
    sock.bind(("127.0.0.1", port))
    sock.listen()
    try:
        assert listeners([port, port + 1]) == {port: os.getpid()}
        assert listeners([port], pid=os.getpid()) == {port: os.getpid()}
        assert describe(listeners([port])) == f"{port} (pid {os.getpid()})"
    finally:
        sock.close()
    assert listeners([port]) == {}


def test_pid_filter_counts_only_that_process():
    port = free_job_port()
    sock = socket.socket()
    sock.bind(("127.0.0.1", port))
    sock.listen()
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert listeners([port], pid=other.pid) == {}
    finally:
        other.kill()
        other.wait()
        sock.close()


def test_address_filter_sees_only_conflicting_binds():
    """Simulated trays on loopback share a namespace: 127.0.0.2:P does not block
    127.0.0.3:P, a wildcard listener blocks every address."""
    port = free_job_port()
    sock = socket.socket()
    sock.bind(("127.0.0.2", port))
    sock.listen()
    try:
        assert listeners([port], addresses=["127.0.0.3"]) == {}
        assert listeners([port], addresses=["127.0.0.2"]) == {port: os.getpid()}
    finally:
        sock.close()
    wild = socket.socket()
    wild.bind(("0.0.0.0", port))
    wild.listen()
    try:
        assert listeners([port], addresses=["127.0.0.3"]) == {port: os.getpid()}
        assert [s.address for s in listening_sockets([port])] == ["0.0.0.0"]
    finally:
        wild.close()


@pytest.mark.skipif(not os.path.exists("/proc/net/tcp6"), reason="IPv6 disabled here")
def test_ipv6_listener_is_seen():
    port = free_job_port()
    sock = socket.socket(socket.AF_INET6)
    try:
        sock.bind(("::1", port))
    except OSError as exc:
        sock.close()
        pytest.skip(f"cannot bind ::1: {exc}")
    sock.listen()
    try:
        assert [s.address for s in listening_sockets([port])] == ["::1"]
        assert listeners([port]) == {port: os.getpid()}
        assert listeners([port], addresses=["127.0.0.1"]) == {}
    finally:
        sock.close()


def test_default_ranges_are_outside_the_running_kernels_ephemeral_range():
    lo, hi = ephemeral_range()
    assert ephemeral_conflicts(DEFAULT_RANGES) == [], (
        f"default per-job ports {DEFAULT_RANGES} meet this kernel's ip_local_port_range "
        f"{lo}-{hi}")


@pytest.mark.parametrize("parity", [0, 1])
def test_every_job_id_maps_inside_its_range_and_outside_the_ephemeral_range(parity):
    lo, hi = ephemeral_range()
    ids = list(range(parity, 2 * DEFAULT.port_span + 4, 2)) + [
        random.randrange(0, 2**31) * 2 + parity for _ in range(500)] + [2**32 - 2 + parity]
    for job_id in ids:
        p = job_ports(job_id, DEFAULT.server_port_base, DEFAULT.cmd_port_base, DEFAULT.port_span)
        (s_lo, s_hi), (c_lo, c_hi) = DEFAULT_RANGES
        assert s_lo <= p.server < s_hi and c_lo <= p.cmd < c_hi, job_id
        assert not lo <= p.server <= hi and not lo <= p.cmd <= hi, job_id


def test_connect_never_hands_out_a_default_job_port(server):
    """What went wrong on the harness: connect() picks local ports from the ephemeral
    range, which held the old per-job ports. 300 real outgoing connections here."""
    clients, accepted = [], []
    try:
        for _ in range(300):
            client = socket.socket()
            client.connect(server.getsockname())
            clients.append(client)
            accepted.append(server.accept()[0])
        local = {c.getsockname()[1] for c in clients}
    finally:
        for sock in clients + accepted:
            sock.close()
    assert not {p for p in local for lo, hi in DEFAULT_RANGES if lo <= p < hi}
    lo, hi = ephemeral_range()
    assert all(lo <= p <= hi for p in local)


def test_consecutive_jobs_never_share_a_port():
    ports = [job_ports(j, DEFAULT.server_port_base, DEFAULT.cmd_port_base, DEFAULT.port_span)
             for j in range(1000, 1000 + DEFAULT.port_span)]
    used = [p.server for p in ports] + [p.cmd for p in ports]
    assert len(set(used)) == len(used)


def fake_proc(tmp_path, port_range: str, reserved: str):
    ipv4 = tmp_path / "sys/net/ipv4"
    ipv4.mkdir(parents=True)
    (ipv4 / "ip_local_port_range").write_text(port_range + "\n")
    (ipv4 / "ip_local_reserved_ports").write_text(reserved + "\n")
    return tmp_path


def test_reserved_ports_take_a_range_out_of_the_ephemeral_pool(tmp_path):
    proc = fake_proc(tmp_path, "32768\t60999", "33792-33799,50176")
    assert reserved_ports(proc) == set(range(33792, 33800)) | {50176}
    assert ephemeral_conflicts([(33792, 33800)], proc) == []
    assert ephemeral_conflicts([(33790, 33802)], proc) == [(33790, 33791), (33800, 33801)]
    assert ephemeral_conflicts([(50176, 50180)], proc) == [(50177, 50179)]
    assert ephemeral_conflicts([(18432, 20480)], proc) == []


def test_a_widened_ephemeral_range_is_reported(tmp_path):
    proc = fake_proc(tmp_path, "1024 65535", "")
    assert ephemeral_conflicts(DEFAULT_RANGES, proc) == [(18432, 20479), (20480, 22527)]


def test_fake_tcp_tables_are_parsed(tmp_path):
    """The /proc/net/tcp{,6} formats: host-order hex words, state 0A = LISTEN."""
    net = tmp_path / "net"
    net.mkdir()
    head = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
    little = sys.byteorder == "little"
    v4 = "0100007F" if little else "7F000001"
    (net / "tcp").write_text(
        head
        + f"   0: {v4}:4800 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 111 1\n"
        + f"   1: {v4}:4801 0100007F:D86A 01 00000000:00000000 00:00000000 00000000     0        0 112 1\n")
    v6 = "00000000000000000000000001000000" if little else "00000000000000000000000000000001"
    (net / "tcp6").write_text(
        head + f"   0: {v6}:4802 {'0' * 32}:0000 0A 00000000:00000000 00:00000000 00000000     0        0 113 1\n")
    found = listening_sockets([0x4800, 0x4801, 0x4802], tmp_path)
    assert [(s.port, s.address, s.inode) for s in found] == [
        (0x4800, "127.0.0.1", 111), (0x4802, "::1", 113)]


# ---------------------------------------------------------------- netlink against /proc

def _key(listeners_):
    return sorted((s.port, s.address, s.inode) for s in listeners_)


def test_netlink_answer_equals_the_proc_tables_with_v4_v6_and_wildcard_listeners():
    """sock_diag is the fast path; /proc/net/tcp{,6} is the oracle (and the fallback)."""
    port = free_job_port()
    socks = []
    for family, addr in ((socket.AF_INET, "127.0.0.1"), (socket.AF_INET, "0.0.0.0"),
                         (socket.AF_INET6, "::1")):
        s = socket.socket(family)
        try:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((addr, port + len(socks) + 1))
        except OSError:
            s.close()
            continue
        s.listen()
        socks.append(s)
    try:
        mine = {port + i + 1 for i in range(len(socks))}
        diag = [s for s in diag_listeners() if s.port in mine]
        assert len(diag) == len(socks) >= 2
        assert _key(diag) == _key(s for s in proc_listeners()
                                  if s.port in mine)
        inodes = {os.fstat(s.fileno()).st_ino for s in socks}
        assert {s.inode for s in diag} == inodes
    finally:
        for s in socks:
            s.close()


def test_without_netlink_the_proc_tables_answer(mocker):
    """A kernel without inet_diag: the probe still finds the listener (and its pid)."""
    from imexctl.tray import ports as mod
    mocker.patch.object(mod, "_diag_request", side_effect=OSError(2, "no inet_diag"))
    port = free_job_port()
    sock = socket.socket()
    sock.bind(("127.0.0.1", port))
    sock.listen()
    try:
        assert listeners([port]) == {port: os.getpid()}
        assert mod._diag_request.called
    finally:
        sock.close()


def test_a_truncated_netlink_answer_is_an_oserror(mocker):
    from imexctl.tray import ports as mod
    import struct
    mocker.patch.object(mod, "_diag_request", side_effect=struct.error("unpack requires 72"))
    with pytest.raises(OSError, match="malformed"):
        mod._diag_dump(socket.AF_INET)
