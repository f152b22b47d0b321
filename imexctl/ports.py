"""Per-job TCP ports on this tray: who listens on them, and whether the kernel may hand
them out as ephemeral ports.

Only a LISTEN socket can stop ``nvidia-imex`` from binding its port. An outgoing
connection whose local port happens to equal a job port does not, and must not drain a
tray (Linux gives ``connect()`` even ports out of ``ip_local_port_range``). So the probe
reads ``/proc/net/tcp{,6}`` of this network namespace, keeps LISTEN rows only, and maps
a socket to its process only when something is listening (rare, and then worth naming).
No psutil: every prolog pays this module's import time.
"""

from __future__ import annotations

import ipaddress
import os
import sys
from pathlib import Path
from typing import Iterable

from imexctl.record import dataclass

PROC = Path("/proc")
TCP_LISTEN = "0A"  # include/net/tcp_states.h: TCP_LISTEN = 10
LINUX_DEFAULT_EPHEMERAL = (32768, 60999)


@dataclass(frozen=True)
class Listener:
    port: int
    address: str  # the bound address; "0.0.0.0" / "::" for a wildcard
    inode: int


def _hex_address(text: str) -> str:
    """/proc/net/tcp prints addresses as host-order 32-bit words in hex."""
    raw = bytes.fromhex(text)
    if sys.byteorder == "little":
        raw = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
    return str(ipaddress.ip_address(raw))


def listening_sockets(ports: Iterable[int], proc: Path = PROC) -> list[Listener]:
    """LISTEN sockets of this network namespace on any of ``ports`` (IPv4 and IPv6)."""
    wanted = set(ports)
    found: list[Listener] = []
    for table in ("tcp", "tcp6"):
        try:
            lines = (proc / "net" / table).read_text(encoding="ascii").splitlines()[1:]
        except FileNotFoundError:  # IPv6 disabled: no tcp6 table
            continue
        for line in lines:
            cols = line.split()
            if len(cols) < 10 or cols[3] != TCP_LISTEN:
                continue
            addr, _, port_hex = cols[1].partition(":")
            port = int(port_hex, 16)
            if port in wanted:
                found.append(Listener(port, _hex_address(addr), int(cols[9])))
    return found


def _socket_inodes(pid_dir: Path) -> set[int]:
    """Inodes of the sockets a process holds open (empty when it is gone or not ours)."""
    inodes: set[int] = set()
    try:
        fds = os.listdir(pid_dir / "fd")
    except OSError:
        return inodes
    for fd in fds:
        try:
            target = os.readlink(pid_dir / "fd" / fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(int(target[8:-1]))
    return inodes


def _owners(inodes: set[int], proc: Path) -> dict[int, int]:
    """socket inode -> pid, by walking /proc/<pid>/fd (root sees every process)."""
    owners: dict[int, int] = {}
    for entry in os.listdir(proc):
        if not entry.isdigit():
            continue
        for inode in _socket_inodes(proc / entry) & inodes:
            owners.setdefault(inode, int(entry))
        if len(owners) == len(inodes):
            break
    return owners


def _conflicts(bound: str, addresses: set[str] | None) -> bool:
    """Would a listener on ``bound`` stop a bind to one of ``addresses``?"""
    if addresses is None:
        return True
    ip = ipaddress.ip_address(bound)
    if ip.is_unspecified:
        return True
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return str(ip) in addresses


def listeners(ports: Iterable[int], *, pid: int | None = None,
              addresses: Iterable[str] | None = None,
              proc: Path = PROC) -> dict[int, int | None]:
    """Ports of ``ports`` that have a LISTEN socket here -> the listening pid (None when
    it cannot be told, e.g. not root). Established or closing sockets never count.

    ``pid``: count only that process's listeners (the epilog asks whether the recorded
    daemon still holds its ports). ``addresses``: count only listeners that would block a
    bind to one of these addresses (the wildcard blocks all), which matters where several
    simulated trays share one network namespace on loopback addresses.
    """
    wanted = None if addresses is None else {
        str(ipaddress.ip_address(a)) for a in addresses}
    found = [s for s in listening_sockets(ports, proc) if _conflicts(s.address, wanted)]
    if not found:
        return {}
    if pid is not None:
        mine = _socket_inodes(proc / str(pid))
        return {s.port: pid for s in found if s.inode in mine}
    owners = _owners({s.inode for s in found}, proc)
    busy: dict[int, int | None] = {}
    for s in found:
        if busy.get(s.port) is None:
            busy[s.port] = owners.get(s.inode)
    return busy


def describe(busy: dict[int, int | None]) -> str:
    """``20500 (pid 123), 22548 (pid ?)`` for a fault reason."""
    return ", ".join(f"{port} (pid {'?' if pid is None else pid})"
                     for port, pid in sorted(busy.items()))


# ---------------------------------------------------------------- kernel port ranges

def ephemeral_range(proc: Path = PROC) -> tuple[int, int]:
    """The kernel's ``net.ipv4.ip_local_port_range`` (also used for IPv6)."""
    try:
        lo, hi = (proc / "sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(lo), int(hi)
    except (OSError, ValueError):
        return LINUX_DEFAULT_EPHEMERAL


def reserved_ports(proc: Path = PROC) -> set[int]:
    """``net.ipv4.ip_local_reserved_ports``: ports the kernel never hands out itself."""
    try:
        text = (proc / "sys/net/ipv4/ip_local_reserved_ports").read_text().strip()
    except OSError:
        return set()
    reserved: set[int] = set()
    for part in filter(None, text.split(",")):
        lo, _, hi = part.partition("-")
        try:
            reserved.update(range(int(lo), int(hi or lo) + 1))
        except ValueError:
            return set()
    return reserved


def ephemeral_conflicts(ranges: Iterable[tuple[int, int]],
                        proc: Path = PROC) -> list[tuple[int, int]]:
    """Sub-ranges ``(first, last)`` of the half-open ``ranges`` [lo, hi) that the kernel
    may give to an outgoing connection: inside ``ip_local_port_range`` and not reserved."""
    e_lo, e_hi = ephemeral_range(proc)
    reserved = reserved_ports(proc)
    out: list[tuple[int, int]] = []
    for lo, hi in ranges:
        start = None
        for port in range(max(lo, e_lo), min(hi - 1, e_hi) + 1):
            if port in reserved:
                if start is not None:
                    out.append((start, port - 1))
                    start = None
            elif start is None:
                start = port
        if start is not None:
            out.append((start, min(hi - 1, e_hi)))
    return out


__all__ = ["Listener", "listening_sockets", "listeners", "describe", "ephemeral_range",
           "reserved_ports", "ephemeral_conflicts"]
