"""``python -m imexctl_sim.probe --connect HOST:PORT [...]``: try to join a simulated IMEX
daemon as a peer, the way a forged or misconfigured peer would, and say whether it was
accepted.

Connects to the daemon's ``SERVER_PORT`` (from ``--source`` when given), does the client
side of the TLS handshake unless ``--plain`` (presenting ``--cert``/``--key`` when given,
checking the server against ``--ca`` and ``--target`` when ``--ca`` is given, otherwise
not checking it: a forger does not care who answers), then sends a peer hello claiming to
be ``--as`` (default: the address it connects from) and waits for the daemon's answer.

Prints one line and exits:

- 0 ``accepted: welcomed by node N (HOST), version V``
- 1 ``refused: TLS: <reason>`` (handshake failed or the daemon's TLS alert) or
  ``refused: hello rejected: <reason>`` or ``refused: closed without an answer``
- 2 ``error: <reason>`` (bad arguments, unreadable files, nothing listening, timeout)

A refused attempt is logged by the daemon (``Refusing connection from ADDR: TLS
authentication failed: ...``). Stdlib only, like the daemon; docs/simulator.md.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import ssl
import sys
import time

from imexctl_sim import config as simcfg
from imexctl_sim import protocol
from imexctl_sim.tls import reason

ACCEPTED, REFUSED, ERROR = 0, 1, 2


class Outcome(Exception):
    def __init__(self, code: int, text: str):
        super().__init__(text)
        self.code = code
        self.text = text


def _endpoint(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise Outcome(ERROR, f"error: --connect wants HOST:PORT, got {text!r}")
    return host, int(port)


def _context(args: argparse.Namespace) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    if args.ca:
        ctx.check_hostname = True
        ctx.hostname_checks_common_name = True
        try:
            ctx.load_verify_locations(args.ca)
        except (OSError, ssl.SSLError) as exc:
            raise Outcome(ERROR, f"error: cannot load --ca {args.ca}: {exc}") from None
    else:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    if args.cert:
        try:
            ctx.load_cert_chain(args.cert, args.key or None, password=lambda: b"")
        except (OSError, ssl.SSLError) as exc:
            raise Outcome(ERROR, f"error: cannot load --cert {args.cert} / --key "
                          f"{args.key}: {exc}") from None
    return ctx


def _failure(exc: OSError, awaited: str, args: argparse.Namespace) -> Outcome:
    """A TLS error or alert: refused at TLS; a timeout: an error; anything else: refused."""
    if isinstance(exc, ssl.SSLError):
        return Outcome(REFUSED, f"refused: TLS: {reason(exc)}")
    if isinstance(exc, TimeoutError):
        return Outcome(ERROR, f"error: no {awaited} from {args.connect} in {args.timeout:g} s")
    if awaited == "answer" and isinstance(exc, (ConnectionResetError, BrokenPipeError)):
        # the daemon closed with our hello unread (its refusal of a plaintext hello): the
        # kernel resets instead of closing; the same verdict as a plain close
        return Outcome(REFUSED, f"refused: closed without an answer ({exc.strerror})")
    return Outcome(REFUSED, f"refused: {'TLS: ' if awaited == 'TLS handshake' else ''}"
                   f"{exc.strerror or exc}")


def probe(args: argparse.Namespace) -> Outcome:
    host, port = _endpoint(args.connect)
    if (args.key or args.ca or args.cert) and args.plain:
        raise Outcome(ERROR, "error: --plain takes no --cert, --key or --ca")
    if args.key and not args.cert:
        raise Outcome(ERROR, "error: --key needs --cert")
    ctx = None if args.plain else _context(args)
    deadline = time.monotonic() + args.timeout
    try:
        sock = socket.create_connection(
            (host, port), timeout=args.timeout,
            source_address=(args.source, 0) if args.source else None)
    except OSError as exc:
        raise Outcome(ERROR, f"error: cannot connect to {host}:{port}: "
                      f"{exc.strerror or exc}") from None
    try:
        if ctx is not None:
            try:
                sock = ctx.wrap_socket(sock, server_hostname=args.target or host)
            except OSError as exc:
                raise _failure(exc, "TLS handshake", args) from None
        claim = args.claim or sock.getsockname()[0]
        hello = {"type": "hello", "node": -1, "host": claim, "digest": "probe",
                 "version": simcfg.version(), "instance": os.urandom(16).hex()}
        buf = protocol.LineBuffer()
        try:
            try:
                sock.sendall(protocol.encode(hello))
            except ssl.SSLError:
                raise
            except OSError:     # hung up already: its alert, if any, is still to be read
                pass
            while True:
                sock.settimeout(max(0.01, deadline - time.monotonic()))
                data = sock.recv(65536)
                if not data:
                    raise Outcome(REFUSED, "refused: closed without an answer")
                msgs = buf.feed(data)
                if msgs:
                    break
        except OSError as exc:  # TLS 1.3: an alert is the server's verdict on our certificate
            raise _failure(exc, "answer", args) from None
        except protocol.ProtocolError as exc:
            raise Outcome(REFUSED, f"refused: {exc}") from None
        reply = msgs[0]
        if reply.get("type") != "welcome":
            raise Outcome(REFUSED, f"refused: hello rejected: {reply.get('reason', reply)}")
        try:
            sock.sendall(protocol.encode({"type": "bye", "node": -1}))
        except OSError:
            pass
        return Outcome(ACCEPTED, f"accepted: welcomed by node {reply.get('node')} "
                       f"({reply.get('host')}), version {reply.get('version')}")
    finally:
        sock.close()


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m imexctl_sim.probe",
        description="Try to join a simulated IMEX daemon as a peer; exit 0 accepted, "
                    "1 refused, 2 error.")
    p.add_argument("--connect", required=True, metavar="HOST:PORT",
                   help="the daemon's address and SERVER_PORT")
    p.add_argument("--cert", help="PEM certificate to present (none: no client certificate)")
    p.add_argument("--key", help="PEM private key of --cert (default: inside --cert)")
    p.add_argument("--ca", help="PEM CA to check the daemon's certificate against "
                                "(default: not checked)")
    p.add_argument("--target", help="name to check the daemon's certificate against "
                                    "(default: HOST)")
    p.add_argument("--plain", action="store_true",
                   help="no TLS: the hello of a daemon with authentication off")
    p.add_argument("--source", help="local address to connect from")
    p.add_argument("--as", dest="claim", metavar="ADDR",
                   help="member address the hello claims (default: the source address)")
    p.add_argument("--timeout", type=float, default=5.0, help="seconds (default 5)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        outcome = probe(args)
    except Outcome as exc:
        outcome = exc
    print(outcome.text)
    return outcome.code


if __name__ == "__main__":
    sys.exit(main())
