"""Per-job TCP ports on this tray: who listens on them, and whether the kernel may hand
them out as ephemeral ports.

Only a LISTEN socket can stop ``nvidia-imex`` from binding its port. An outgoing
connection whose local port happens to equal a job port does not, and must not drain a
tray (Linux gives ``connect()`` even ports out of ``ip_local_port_range``). So the probe
asks the kernel for this network namespace's LISTEN sockets only, and maps a socket to
its process only when something is listening (rare, and then worth naming).

The kernel is asked through netlink ``sock_diag`` (what ``ss -ltn`` uses): it returns the
listening table alone. ``/proc/net/tcp{,6}`` is the fallback (a kernel without
``inet_diag``): reading it walks every bucket of the connection hash whatever the load,
and every prolog and epilog asks. No psutil: every prolog pays this module's import time.
"""

from __future__ import annotations

import os
import struct
import sys
from pathlib import Path

import _socket

from imexctl.base.dataclass import dataclass
from imexctl.errors import JobFault, NodeFault

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Iterable, Mapping

PROC = Path("/proc")
TCP_LISTEN = "0A"  # include/net/tcp_states.h: TCP_LISTEN = 10
LINUX_DEFAULT_EPHEMERAL = (32768, 60999)

# include/uapi/linux/{netlink,sock_diag,inet_diag}.h
_NETLINK_SOCK_DIAG = 4
_SOCK_DIAG_BY_FAMILY = 20
_NLM_F_REQUEST, _NLM_F_DUMP = 0x1, 0x300
_NLMSG_ERROR, _NLMSG_DONE = 2, 3
_NLMSG = struct.Struct("=IHHII")              # len, type, flags, seq, pid
_REQ_V2 = struct.Struct("=BBBxI48x")          # family, protocol, ext, states; sockid zeroed
_DIAG_MSG = struct.Struct("=BBBB2s2s16s16sI8sIIIII")  # inet_diag_msg
_IPPROTO_TCP = 6


@dataclass(frozen=True)
class Listener:
    port: int
    address: str  # the bound address; "0.0.0.0" / "::" for a wildcard
    inode: int
    uid: int | None = None  # the socket's owner (who created it), as the kernel reports


@dataclass(frozen=True)
class Holder:
    """Who listens on a port: the process (None when none could be found, e.g. another
    pid namespace) and its user. ``uid`` is 0 when root had a hand in it (a root-created
    socket, or a process with any root uid), None when unknown."""
    pid: int | None
    uid: int | None

    @property
    def non_root(self) -> bool:
        """Held by a known process of a known non-root user: that user's doing."""
        return self.pid is not None and self.uid is not None and self.uid != 0


def _hex_address(text: str) -> str:
    """/proc/net/tcp prints addresses as host-order 32-bit words in hex."""
    raw = bytes.fromhex(text)
    if sys.byteorder == "little":
        raw = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
    return _socket.inet_ntop(_socket.AF_INET if len(raw) == 4 else _socket.AF_INET6, raw)


def listening_sockets(ports: Iterable[int], proc: Path = PROC) -> list[Listener]:
    """LISTEN sockets of this network namespace on any of ``ports`` (IPv4 and IPv6)."""
    wanted = set(ports)
    if proc == PROC:
        try:
            return [s for s in diag_listeners() if s.port in wanted]
        except OSError:
            pass  # no inet_diag in this kernel: read the tables
    return [s for s in proc_listeners(proc) if s.port in wanted]


def proc_listeners(proc: Path = PROC) -> list[Listener]:
    """Every LISTEN socket of ``/proc/net/tcp`` and ``tcp6``, in table order."""
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
            found.append(Listener(int(port_hex, 16), _hex_address(addr), int(cols[9]),
                                  int(cols[7])))
    return found


def diag_listeners() -> list[Listener]:
    """Every LISTEN socket of this network namespace, from netlink ``sock_diag`` (IPv4,
    then IPv6). OSError when the kernel cannot answer (then read /proc)."""
    found: list[Listener] = []
    for family in (_socket.AF_INET, _socket.AF_INET6):
        found.extend(_diag_dump(family))
    return found


def _diag_dump(family: int) -> list[Listener]:
    try:
        return _diag_request(family)
    except struct.error as exc:   # a truncated message: not an answer to trust
        raise OSError(f"sock_diag: malformed answer: {exc}") from None


def _diag_request(family: int) -> list[Listener]:
    sock = _socket.socket(_socket.AF_NETLINK, _socket.SOCK_DGRAM | _socket.SOCK_CLOEXEC,
                          _NETLINK_SOCK_DIAG)
    try:
        body = _REQ_V2.pack(family, _IPPROTO_TCP, 0, 1 << 10)   # TCPF_LISTEN only
        sock.sendto(_NLMSG.pack(_NLMSG.size + len(body), _SOCK_DIAG_BY_FAMILY,
                                _NLM_F_REQUEST | _NLM_F_DUMP, 1, 0) + body, (0, 0))
        width = 4 if family == _socket.AF_INET else 16
        found: list[Listener] = []
        while True:
            data = sock.recv(65536)
            if not data:
                raise OSError("sock_diag: empty answer")
            at = 0
            while at + _NLMSG.size <= len(data):
                length, kind, _, _, _ = _NLMSG.unpack_from(data, at)
                if length < _NLMSG.size:
                    raise OSError("sock_diag: malformed answer")
                if kind == _NLMSG_DONE:
                    return found
                if kind == _NLMSG_ERROR:
                    errno = -struct.unpack_from("=i", data, at + _NLMSG.size)[0]
                    if family == _socket.AF_INET6 and errno in (97, 2):  # no IPv6 here
                        return found
                    raise OSError(errno, f"sock_diag: {os.strerror(errno)}")
                if kind == _SOCK_DIAG_BY_FAMILY:
                    (_, state, _, _, sport, _, src, _, _, _, _, _, _, uid, inode
                     ) = _DIAG_MSG.unpack_from(data, at + _NLMSG.size)
                    if state == 10:
                        found.append(Listener(int.from_bytes(sport, "big"),
                                              _socket.inet_ntop(family, src[:width]), inode,
                                              uid))
                at += (length + 3) & ~3
    finally:
        sock.close()


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


def _packed(address: str) -> bytes:
    """An address as the kernel stores it (4 or 16 bytes); ValueError when it is none."""
    for family in (_socket.AF_INET, _socket.AF_INET6):
        try:
            return _socket.inet_pton(family, address)
        except OSError:
            continue
    raise ValueError(f"not an IP address: {address!r}")


def _conflicts(bound: str, addresses: set[bytes] | None) -> bool:
    """Would a listener on ``bound`` stop a bind to one of ``addresses`` (packed)?"""
    if addresses is None:
        return True
    ip = _packed(bound)
    if not any(ip):   # 0.0.0.0 or ::
        return True
    if len(ip) == 16 and ip[:12] == b"\0" * 10 + b"\xff\xff":   # ::ffff:a.b.c.d
        ip = ip[12:]
    return ip in addresses


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
    wanted = None if addresses is None else {_packed(a) for a in addresses}
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


def holders(ports: Iterable[int], *, addresses: Iterable[str] | None = None,
            proc: Path = PROC) -> dict[int, Holder]:
    """:func:`listeners` with who holds each port: the prolog drains the tray only for a
    root or unknown holder; a non-root user's listener is that user's doing (audit F3-6).
    A port with several listeners counts as root's if any of them is."""
    wanted = None if addresses is None else {_packed(a) for a in addresses}
    found = [s for s in listening_sockets(ports, proc) if _conflicts(s.address, wanted)]
    if not found:
        return {}
    owners = _owners({s.inode for s in found}, proc)
    held: dict[int, Holder] = {}
    for s in found:
        pid = owners.get(s.inode)
        holder = Holder(pid, _holder_uid(s.uid, pid, proc))
        old = held.get(s.port)
        if old is None or (old.non_root and not holder.non_root):
            held[s.port] = holder
    return held


def _holder_uid(socket_uid: int | None, pid: int | None, proc: Path) -> int | None:
    """The user behind a listener: 0 when the socket or any of the process's uids is
    root's (a daemon that bound its port as root, then dropped privileges, is still the
    system's); the process's real uid otherwise; None when either cannot be read."""
    if socket_uid is None or pid is None:
        return None
    uids = process_uids(pid, proc)
    if not uids:
        return None
    return 0 if socket_uid == 0 or 0 in uids else uids[0]


def process_uids(pid: int, proc: Path = PROC) -> tuple[int, ...]:
    """Real, effective, saved and filesystem uid of ``pid`` (``/proc/PID/status``); empty
    when the process is gone or the line unreadable."""
    try:
        fd = os.open(proc / str(pid) / "status", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return ()
    try:
        text = os.read(fd, 1 << 16).decode("ascii", "replace")
    except OSError:
        return ()
    finally:
        os.close(fd)
    for line in text.splitlines():
        if line.startswith("Uid:"):
            words = line.split()[1:]
            if len(words) == 4 and all(w.isdigit() for w in words):
                return tuple(int(w) for w in words)
    return ()


def describe(busy: Mapping[int, int | None]) -> str:
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


__all__ = ["Listener", "Holder", "listening_sockets", "diag_listeners", "proc_listeners", "listeners",
           "holders", "process_uids", "describe", "ephemeral_range",
           "reserved_ports", "ephemeral_conflicts"]


def check_ports_free(ports: list[int], bind_ip: str) -> None:
    """Only a listener that would stop the daemon binding on this tray's address counts
    (an outgoing connection on the same number does not). Ports held only by processes of
    non-root users are those users' doing (a co-tenant on a shared tray, audit F3-6): the
    job is refused and the tray stays in service. A root or unknown holder drains it."""
    busy = holders(ports, addresses=[bind_ip])
    if busy and all(h.non_root for h in busy.values()):
        held = ", ".join(f"{port} (pid {h.pid}, uid {h.uid})" for port, h in sorted(busy.items()))
        raise JobFault(f"per-job port held by a non-root process: {held}; the tray is "
                       "left in service")
    if busy:
        raise NodeFault(f"port {describe({p: h.pid for p, h in busy.items()})} already in use")
