"""Wire format of the simulator: one JSON object per line over TCP.

Peer port (SERVER_PORT), dialer -> listener::

    {"type": "hello", "node": 1, "host": "127.0.1.2", "digest": "...", "version": "...",
     "instance": "uuid"}
    <- {"type": "welcome", ...same fields...}   or   {"type": "reject", "reason": "refused"}
    then either side may send {"type": "bye"} (clean shutdown) before closing.

Command port (IMEX_CMD_PORT): the ctl sends {"cmd": "status"} and gets the daemon's
state, identity and per-peer connection view, then the connection is closed.
"""

from __future__ import annotations

import json
import socket

MAX_LINE = 1 << 20
MAX_INBOUND_LINE = 16 << 10
"""What a daemon buffers from a connection it accepted before the line ends: hellos and
ctl requests are a few hundred bytes (a peer that never sends a newline is cut off
here, not at MAX_LINE: audit S3-4)."""


class ProtocolError(Exception):
    pass


def send(sock: socket.socket, msg: dict) -> None:
    sock.sendall(encode(msg))


class LineBuffer:
    """Incremental decoder for non-blocking sockets: ``feed(bytes)`` -> whole messages."""

    def __init__(self, max_line: int = MAX_LINE) -> None:
        self.buf = b""
        self.max_line = max_line

    def feed(self, data: bytes) -> list[dict]:
        self.buf += data
        if len(self.buf) > self.max_line and b"\n" not in self.buf:
            raise ProtocolError("message too long")
        out = []
        while b"\n" in self.buf:
            line, _, self.buf = self.buf.partition(b"\n")
            try:
                msg = json.loads(line)
            except ValueError as exc:
                raise ProtocolError(f"bad message: {exc}") from None
            if not isinstance(msg, dict):
                raise ProtocolError("bad message: not an object")
            out.append(msg)
        return out


def encode(msg: dict) -> bytes:
    return json.dumps(msg, separators=(",", ":")).encode() + b"\n"


def source_for(dest: str, local: str | None) -> str | None:
    """The address to connect from: this tray's own (so the other side sees who asks), where
    the kernel allows it: same family, and not from a real address to 127.0.0.1."""
    if not local or (":" in dest) != (":" in local):
        return None
    if dest in ("127.0.0.1", "::1") and not local.startswith("127."):
        return None
    return local


def family(host: str) -> int:
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def connect(host: str, port: int, timeout: float) -> socket.socket:
    sock = socket.socket(family(host), socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        sock.connect((host, port))
    except OSError:
        sock.close()
        raise
    return sock


def listen(host: str, port: int, backlog: int = 512) -> socket.socket:
    sock = socket.socket(family(host), socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(backlog)
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(False)
    return sock


def request(host: str, port: int, msg: dict, timeout: float = 2.0) -> dict:
    """One request/response on the command port. Raises OSError / ProtocolError."""
    sock = connect(host, port, timeout)
    buf = LineBuffer()
    try:
        send(sock, msg)
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                raise ProtocolError("connection closed without a reply")
            msgs = buf.feed(chunk)
            if msgs:
                return msgs[0]
    finally:
        sock.close()
