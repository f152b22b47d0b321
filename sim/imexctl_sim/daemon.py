"""Simulated ``nvidia-imex -c CFG [-p PORT] [--nogpu] [--version]``.

One daemon per tray: identifies itself in the node config, dials every other member on
SERVER_PORT (hello with node-map digest and version; ``!M!`` / ``!V!`` on mismatch),
serves its state on IMEX_CMD_PORT for ``nvidia-imex-ctl``, says goodbye to its peers on
SIGTERM/SIGINT/SIGQUIT (they show RECOVERING), and after an unclean stop waits in
WAITING_FOR_RECOVERY for its former importers.

Timing is the real daemon's: a peer that could not be reached is retried after 15, 31,
62, 125 s (x ``IMEXCTL_SIM_TIME_SCALE``), and nothing shortens that except SIGUSR1
("restart all outgoing client connections", processed at most once per 5 s x scale) or,
only when a test asks for it, the ``wake_on_hello`` setting.

With ``IMEX_ENABLE_AUTH_ENCRYPTION=1`` (SSL_TLS, :mod:`imexctl_sim.tls`) both the peer
connections it accepts and those it dials are mutual TLS before any hello: a peer that does
not authenticate is refused and named in the log, and stays NEVER_CONNECTED; SIGUSR1 then
also reloads the key, certificate and CA files.

One thread and one selector loop: a peer costs two sockets and two small objects, so a
72-tray domain (5,112 links) runs on two cores.
"""

from __future__ import annotations

import argparse
import errno
import os
import selectors
import signal
import socket
import sys
import time

from imexctl_sim import config as simcfg
from imexctl_sim import faults as simfaults
from imexctl_sim import protocol
from imexctl_sim.imexlog import ImexLog
from imexctl_sim.persist import PersistFile

# Reconnect back-off observed on real daemons (seconds, before time scaling); doubling
# after the last entry, capped.
BACKOFF = (15.0, 31.0, 62.0, 125.0)
BACKOFF_CAP = 300.0
USR1_WINDOW = 5.0          # seconds (x time scale) between two honoured SIGUSR1
HANDSHAKE_TIMEOUT = 5.0    # wall-clock bound on connect + hello/welcome
TLS_LINGER = 1.0           # a peer refused at TLS: how long its close is awaited
PER_SOURCE_CAP = 8         # connections one source address may hold on each port
MAX_WAIT = 1.0             # the loop wakes at least this often


def backoff(attempt: int) -> float:
    if attempt < len(BACKOFF):
        return BACKOFF[attempt]
    return min(BACKOFF_CAP, BACKOFF[-1] * 2 ** (attempt - len(BACKOFF) + 1))


class Link:
    """This daemon's outgoing channel to one peer and its connection word."""
    __slots__ = ("idx", "host", "status", "since", "sock", "phase", "due", "deadline",
                 "failures", "buf", "instance")

    def __init__(self, idx: int, host: str):
        self.idx = idx
        self.host = host
        self.status = "NEVER_CONNECTED"
        self.since = time.monotonic()
        self.sock: socket.socket | None = None
        self.phase = "idle"    # idle | connecting | tls | hello | session | refused
        self.due: float | None = None  # when to dial next (idle)
        self.deadline: float | None = None
        self.failures = 0
        self.buf = protocol.LineBuffer()
        self.instance: str | None = None

    def set(self, status: str) -> bool:
        if status == self.status:
            return False
        self.status = status
        self.since = time.monotonic()
        return True


class Conn:
    """An accepted connection: a peer's channel to us, or one ctl request.

    Until a member's hello is accepted it is unauthenticated: it keeps a deadline, buffers
    at most a short line, and counts against its source's cap (audit F3-5, S3-4)."""
    __slots__ = ("sock", "kind", "buf", "deadline", "addr", "idx", "handshaking")

    def __init__(self, sock: socket.socket, kind: str, addr: str, deadline: float):
        self.sock = sock
        self.kind = kind    # peer | cmd | drop (fault cmd_drop; a peer refused at TLS)
        self.buf = protocol.LineBuffer(protocol.MAX_INBOUND_LINE)
        self.deadline: float | None = deadline
        self.addr = addr
        self.idx: int | None = None    # the member whose hello was accepted
        self.handshaking = False       # a peer connection in its TLS handshake


class Daemon:
    def __init__(self, cfg: simcfg.DaemonConfig, nodes: simcfg.NodeList, node_id: int,
                 addr: str, faults: simfaults.Faults, log: ImexLog, version: str,
                 tls=None):
        self.cfg = cfg
        # imexctl_sim.tls.Credentials when IMEX_ENABLE_AUTH_ENCRYPTION=1 (SSL_TLS), else None
        self.tls = tls
        self.nodes = nodes
        self.node_id = node_id
        self.addr = addr
        self.faults = faults
        self.log = log
        self.version = version
        self.instance = os.urandom(16).hex()
        self.scale = simcfg.time_scale()
        self.state = "INITIALIZING"
        self.stopping = False
        self.usr1 = False
        # node_map_mismatch: this tray behaves as if its nodes_config differed from its
        # peers' (rendered from a stale source), so every hello shows !M! both ways
        self.digest = (nodes.digest if not faults.node_map_mismatch
                       else f"{nodes.digest}-mismatch")
        self.links = {i: Link(i, nodes.address(i)) for i in range(len(nodes.entries))
                      if i != node_id}
        self.conns: set[Conn] = set()
        self.persist = PersistFile(simcfg.run_dir(), self.digest, node_id)
        self.recovery: dict[int, str] = {}
        self.started = time.monotonic()
        self.server_sock: socket.socket | None = None
        self.cmd_sock: socket.socket | None = None
        self.last_usr1 = -1e9
        self.hostname = os.environ.get("IMEXCTL_SIM_HOSTNAME") or socket.gethostname()
        self.sel = selectors.DefaultSelector()

    # ------------------------------------------------------------------ start-up
    def bind(self) -> None:
        host = self.cfg.bind_ip or self.addr
        self.server_sock = protocol.listen(host, self.cfg.server_port)
        if self.cfg.cmd_enabled:
            # Empty IMEX_CMD_BIND_INTERFACE_IP: the real daemon binds all interfaces; the
            # sim binds the node's own address so trays can share one loopback namespace.
            cmd_host = self.cfg.cmd_bind_ip or self.addr
            self.cmd_sock = protocol.listen(cmd_host, self.cfg.cmd_port)
            self.log.info(f"IMEX command service listening on {cmd_host}:{self.cfg.cmd_port}")

    def run(self) -> int:
        self._signals()
        self._recovery_check()
        self.log.info("NvGpu Library version matched with GPU Driver version")
        for lsock, kind in ((self.server_sock, "peer"), (self.cmd_sock, "cmd")):
            if lsock is not None:
                lsock.setblocking(False)
                self.sel.register(lsock, selectors.EVENT_READ, (self._on_accept, kind))
        self.log.info("Started processing of incoming messages.")
        self.log.info(f"Creating gRPC channels to all peers (nPeers = {len(self.nodes.entries)}).")
        if self.cfg.wait_for_quorum != "FULL":
            self.log.info("IMEX_WAIT_FOR_QUORUM != FULL, continuing initialization without "
                          "waiting for connections to all nodes.")
        now = time.monotonic()
        for link in self.links.values():
            if self.faults.refuses(link.idx, link.host) or self.faults.refuses(
                    None, self.nodes.entries[link.idx]):
                self.log.warning(f"Not connecting to node {link.idx} ({link.host}): "
                                 "peer refused (simulated fault refuse_peer)")
                link.phase = "refused"
                continue
            link.due = now
        while not self.stopping:
            now = time.monotonic()
            self._timers(now)
            if self.stopping:
                break
            for key, mask in self.sel.select(self._next_wake(now)):
                handler, arg = key.data
                handler(key.fileobj, mask, arg)
            if self.usr1:
                self.usr1 = False
                self._restart_links()
        return self._shutdown()

    def _signals(self) -> None:
        rfd, wfd = socket.socketpair()
        rfd.setblocking(False)
        wfd.setblocking(False)
        self._wakeup = (rfd, wfd)
        signal.set_wakeup_fd(wfd.fileno(), warn_on_full_buffer=False)
        self.sel.register(rfd, selectors.EVENT_READ, (self._drain_wakeup, None))
        stop = self._ignored if self.faults.hang_on_sigterm else self._on_stop
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT):
            signal.signal(sig, stop)
        signal.signal(signal.SIGHUP, self._on_hup)
        signal.signal(signal.SIGUSR1, self._on_usr1)

    def _drain_wakeup(self, sock, _mask, _arg) -> None:
        try:
            while sock.recv(512):
                pass
        except OSError:
            pass

    def _on_stop(self, signum, _frame) -> None:
        self.log.info(f"Received signal {signal.Signals(signum).name}, shutting down.")
        self.state = "SHUTTING_DOWN"
        self.stopping = True

    def _ignored(self, signum, _frame) -> None:
        self.log.warning(f"Received signal {signal.Signals(signum).name}; ignored "
                         "(simulated fault hang_on_sigterm)")

    def _on_hup(self, _signum, _frame) -> None:
        self.log.info("SIGHUP received: dumping in-memory log buffer (no config reload).")

    def _on_usr1(self, _signum, _frame) -> None:
        self.usr1 = True

    def _restart_links(self) -> None:
        now = time.monotonic()
        if now - self.last_usr1 < USR1_WINDOW * self.scale:
            self.log.info("SIGUSR1 ignored: processed less than 5 s ago.")
            return
        self.last_usr1 = now
        if self.tls is not None:
            self._reload_credentials()
        self.log.info("SIGUSR1 received: restarting all outgoing client connections.")
        for link in self.links.values():
            if link.phase in ("refused", "connecting", "tls", "hello"):
                continue
            if link.phase == "session":
                self._close_link(link)
            link.failures = 0
            link.due = now

    def _reload_credentials(self) -> None:
        """SIGUSR1 with SSL_TLS: read the key, certificate and CA files again (guide,
        "signals"). New connections, both ways, use them; sessions already up keep theirs
        until the outgoing ones are restarted. Files that no longer load keep the previous
        credentials (what the real daemon does then is not documented)."""
        assert self.tls is not None
        self.log.info("SIGUSR1 received: reloading SSL credentials.")
        fresh, why = self.tls.reloaded(self.cfg.raw)
        if fresh is None:
            self.log.error(f"Reloading SSL credentials failed: {why} Keeping the previous "
                           "credentials.")
            return
        self.tls = fresh
        self.log.info(f"SSL credentials loaded: {self.tls.summary}.")

    def _recovery_check(self) -> None:
        found, prev = self.persist.read_previous()
        path = self.persist.path
        if found == "missing":
            self.log.info(f"nvidia-imex persistence file {path} does not exist."
                          "  Assuming no previous importers.")
        elif found == "other-key":
            self.log.info(f"nvidia-imex persistence file {path} was written for another node "
                          "configuration; discarding it.")
        elif not prev:
            self.log.info(f"nvidia-imex persistence file {path} lists no previous importers.")
        elif self.cfg.wait_for_quorum == "NONE":
            self.log.info(f"nvidia-imex persistence file {path} lists {len(prev)} previous "
                          "importers; IMEX_WAIT_FOR_QUORUM=NONE, not waiting for recovery.")
        else:
            self.recovery = {i: h for i, h in prev.items() if i in self.links}
            self.persist.importers = dict(self.recovery)
            nodes = ", ".join(f"Node {i}: {h}" for i, h in sorted(self.recovery.items()))
            self.log.warning("IMEX was not shut down cleanly; waiting for previous importers "
                             f"to reconnect before becoming ready ({nodes}).")
        self.persist.write()

    # ------------------------------------------------------------------ time
    def _timers(self, now: float) -> None:
        elapsed = now - self.started
        if self.faults.crash_after is not None and elapsed >= self.faults.crash_after:
            self.log.critical("Simulated crash (fault crash_after): aborting.")
            os._exit(134)
        self._advance(elapsed)
        grace = self.cfg.grace_time * self.scale
        for link in self.links.values():
            if link.phase == "idle" and link.due is not None and now >= link.due:
                self._dial(link, now)
            elif link.deadline is not None and now >= link.deadline:
                self._failed(link, "timed out", now)
            if (self.cfg.grace_time >= 0 and link.status == "RECOVERING"
                    and now - link.since >= grace):
                link.set("DISCONNECTED")
                self.log.info(f"Node {link.idx} ({link.host}) disconnected for longer than "
                              "the grace time; cleaning up its imports and exports.")
        for conn in [c for c in self.conns if c.deadline is not None and now >= c.deadline]:
            self._close_conn(conn)

    def _next_wake(self, now: float) -> float:
        wake = now + MAX_WAIT
        if self.state == "INITIALIZING" and not self.faults.never_ready:
            wake = min(wake, self.started + self.faults.slow_start)
        if self.faults.crash_after is not None:
            wake = min(wake, self.started + self.faults.crash_after)
        for link in self.links.values():
            if link.phase == "idle" and link.due is not None:
                wake = min(wake, link.due)
            elif link.deadline is not None:
                wake = min(wake, link.deadline)
            if self.cfg.grace_time >= 0 and link.status == "RECOVERING":
                wake = min(wake, link.since + self.cfg.grace_time * self.scale)
        return max(0.0, wake - now)

    def _advance(self, elapsed: float) -> None:
        if self.state in ("READY", "SHUTTING_DOWN") or self.faults.never_ready:
            return
        if self.state == "INITIALIZING":
            if elapsed < self.faults.slow_start:
                return
            self.log.info("GPU event successfully subscribed")
            if self.recovery:
                self._set_state("WAITING_FOR_RECOVERY")
            elif self.cfg.wait_for_quorum == "FULL":
                self._set_state("WAITING_FOR_PEERS")
            else:
                self._set_state("READY")
        if self.state == "WAITING_FOR_RECOVERY":
            if all(self.links[i].status == "CONNECTED" for i in self.recovery):
                self.log.info("All previous importers reconnected; recovery complete.")
                self.recovery = {}
                self._set_state("READY")
        elif self.state == "WAITING_FOR_PEERS":
            if all(link.status == "CONNECTED" for link in self.links.values()):
                self._set_state("READY")

    def _set_state(self, state: str) -> None:
        if state != self.state:
            self.log.info(f"IMEX daemon state changed from {self.state} to {state}.")
            self.state = state

    # ------------------------------------------------------------------ outgoing
    def _hello(self, kind: str) -> dict:
        return {"type": kind, "node": self.node_id, "host": self.addr, "digest": self.digest,
                "version": self.version, "instance": self.instance}

    def _dial(self, link: Link, now: float) -> None:
        link.due = None
        sock = socket.socket(protocol.family(link.host), socket.SOCK_STREAM)
        sock.setblocking(False)
        try:
            src = protocol.source_for(link.host, self.addr)
            if src:     # from this tray's address: the peer checks who says hello
                sock.bind((src, 0))
        except OSError:
            pass
        err = sock.connect_ex((link.host, self.cfg.server_port))
        if err not in (0, errno.EINPROGRESS, errno.EAGAIN):
            sock.close()
            self._failed(link, os.strerror(err), now)
            return
        link.sock = sock
        link.phase = "connecting"
        link.deadline = now + HANDSHAKE_TIMEOUT
        link.buf = protocol.LineBuffer()
        self.sel.register(sock, selectors.EVENT_WRITE, (self._on_link, link))

    def _on_link(self, sock: socket.socket, mask, link: Link) -> None:
        if sock is not link.sock:
            return
        if link.phase == "connecting":
            err = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if err:
                self._failed(link, os.strerror(err), time.monotonic())
                return
            if self.tls is not None:
                self._start_tls(link)
                return
            self._send_hello(link)
            return
        if link.phase == "tls":
            self._tls_step(link)
            return
        if self.tls is not None:
            data, alert = self.tls.recv(sock)
        else:
            data, alert = _recv(sock), None
        if data is None:
            return
        if not data:
            if alert is not None and link.phase == "hello":
                # TLS 1.3: the server checks our certificate after our side of the
                # handshake is done; its refusal arrives as an alert instead of a welcome
                self._tls_refused(link, alert)
            elif link.phase == "hello":
                self._failed(link, "closed", time.monotonic())
            else:
                self._session_ended(link, said_bye=False)
            return
        try:
            msgs = link.buf.feed(data)
        except protocol.ProtocolError as exc:
            self._failed(link, str(exc), time.monotonic())
            return
        for msg in msgs:
            if link.phase == "hello":
                self._on_welcome(link, msg)
            elif link.phase == "session" and msg.get("type") == "bye":
                self._session_ended(link, said_bye=True)
            if link.phase not in ("hello", "session"):
                return

    def _send_hello(self, link: Link) -> None:
        sock = link.sock
        assert sock is not None
        try:
            sock.send(protocol.encode(self._hello("hello")))
        except OSError as exc:      # ssl.SSLWantWriteError too: a hello fits any buffer
            alert = self.tls.recv(sock)[1] if self.tls is not None else None
            if alert is not None:   # the server refused our certificate and hung up
                self._tls_refused(link, alert)
            else:
                self._failed(link, str(exc), time.monotonic())
            return
        link.phase = "hello"
        self.sel.modify(sock, selectors.EVENT_READ, (self._on_link, link))

    def _start_tls(self, link: Link) -> None:
        """The TCP connection is up: wrap it and start the client side of the handshake,
        checking the server's certificate against IMEX_CLIENT_CERT_AUTH and the target name
        (IMEX_SECURITY_TARGET_OVERRIDE, else the node's entry as written)."""
        assert self.tls is not None and link.sock is not None
        raw = link.sock
        self.sel.unregister(raw)
        try:
            link.sock = self.tls.client.wrap_socket(
                raw, server_hostname=self.tls.target or self.nodes.entries[link.idx],
                do_handshake_on_connect=False)
        except (OSError, ValueError) as exc:
            _close(raw)
            link.sock = None
            self._failed(link, f"TLS: {exc}", time.monotonic())
            return
        link.phase = "tls"
        self.sel.register(link.sock, selectors.EVENT_WRITE, (self._on_link, link))
        self._tls_step(link)

    def _tls_step(self, link: Link) -> None:
        assert self.tls is not None and link.sock is not None
        try:
            wait = self.tls.handshake(link.sock)
        except OSError as exc:
            self._tls_refused(link, exc)
            return
        if wait is not None:
            self.sel.modify(link.sock, wait, (self._on_link, link))
            return
        self._send_hello(link)

    def _tls_refused(self, link: Link, exc: BaseException) -> None:
        assert self.tls is not None
        why = self.tls.reason(exc)
        self.log.warning(f"TLS authentication with node {link.idx} ({link.host}) failed: "
                         f"{why}.")
        self._failed(link, f"TLS: {why}", time.monotonic())

    def _on_welcome(self, link: Link, reply: dict) -> None:
        now = time.monotonic()
        if reply.get("type") != "welcome":
            self.log.warning(f"Node {link.idx} ({link.host}) rejected the connection "
                             f"({reply.get('reason', 'closed')}).")
            self._failed(link, "rejected", now)
            return
        if reply.get("digest") != self.digest:
            if link.set("NODE_MAP_MISMATCH"):
                self.log.error(f"Node map mismatch with node {link.idx} ({link.host}): "
                               "nodes_config differs; communication disabled.")
            self._failed(link, "node map mismatch", now)
            return
        if reply.get("version") != self.version:
            if link.set("VERSION_MISMATCH"):
                self.log.error(f"Version mismatch with node {link.idx} ({link.host}): "
                               f"local {self.version}, remote {reply.get('version')}; "
                               "communication disabled.")
            self._failed(link, "version mismatch", now)
            return
        if link.instance and link.instance != reply.get("instance"):
            self.log.info(f"Node {link.idx} ({link.host}) is a new IMEX instance; "
                          "cleaning up its previous imports and exports.")
        link.instance = reply.get("instance")
        link.phase = "session"
        link.deadline = None
        link.failures = 0
        link.set("CONNECTED")
        self.log.info(f"Connection to node {link.idx} ({link.host}) established.")
        try:
            self.persist.add_importer(link.idx, link.host)
        except OSError as exc:
            self.log.warning(f"cannot update persistence file: {exc}")
        self._advance(now - self.started)

    def _close_link(self, link: Link) -> None:
        if link.sock is not None:
            try:
                self.sel.unregister(link.sock)
            except (KeyError, ValueError):
                pass
            _close(link.sock)
        link.sock = None
        link.phase = "idle"
        link.deadline = None

    def _failed(self, link: Link, why: str, now: float) -> None:
        self._close_link(link)
        self.log.debug(f"Connection to node {link.idx} ({link.host}) failed: {why}")
        if link.status == "CONNECTED":       # a restarted session that could not resume
            link.set("RECOVERING")
        self._retry_later(link, now)

    def _retry_later(self, link: Link, now: float) -> None:
        delay = backoff(link.failures) * self.scale
        link.failures += 1
        link.due = now + delay
        self.log.info(f"Reconnecting to node {link.idx} ({link.host}) in {delay:g} s "
                      f"(attempt {link.failures}).")

    def _session_ended(self, link: Link, said_bye: bool) -> None:
        self._close_link(link)
        if self.stopping:
            return
        link.set("RECOVERING")
        why = "shut down" if said_bye else "connection lost"
        self.log.warning(f"Connection to node {link.idx} ({link.host}) {why}; recovering.")
        link.failures = 0
        self._retry_later(link, time.monotonic())

    # ------------------------------------------------------------------ incoming
    def _on_accept(self, lsock, _mask, kind: str) -> None:
        while True:
            try:
                sock, peer = lsock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return
            peer_ip = peer[0]
            if kind == "cmd" and self.faults.cmd_unreachable and peer_ip != self.addr:
                # the command port answers only this tray's own queries (a firewall that
                # admits SERVER_PORT between trays but not IMEX_CMD_PORT)
                _close(sock)
                continue
            if kind == "cmd" and self.faults.cmd_drop and peer_ip != self.addr:
                kind = "drop"   # a firewall that DROPs: no answer, the asker waits it out
            held = sum(1 for c in self.conns if c.addr == peer_ip and c.kind == kind)
            if held >= PER_SOURCE_CAP:
                self.log.warning(f"Refusing connection from {peer_ip}: it holds {held} "
                                 f"connections on the {kind} port already.")
                _close(sock)
                continue
            sock.setblocking(False)
            tls = kind == "peer" and self.tls is not None
            if tls:
                # the server side: a client certificate signed by IMEX_SERVER_CERT_AUTH is
                # required before anything else is read (the handshake runs in _on_conn,
                # bounded like a hello by HANDSHAKE_TIMEOUT)
                try:
                    sock = self.tls.server.wrap_socket(sock, server_side=True,
                                                       do_handshake_on_connect=False)
                except OSError:
                    _close(sock)
                    continue
            conn = Conn(sock, kind, peer_ip, time.monotonic() + HANDSHAKE_TIMEOUT)
            conn.handshaking = tls
            self.conns.add(conn)
            self.sel.register(sock, selectors.EVENT_READ, (self._on_conn, conn))

    def _close_conn(self, conn: Conn) -> None:
        self.conns.discard(conn)
        try:
            self.sel.unregister(conn.sock)
        except (KeyError, ValueError):
            pass
        _close(conn.sock)

    def _on_conn(self, sock, _mask, conn: Conn) -> None:
        if conn.handshaking:
            self._accept_tls(conn)
            return
        if conn.kind == "peer" and self.tls is not None:
            data = self.tls.recv(sock)[0]
        else:
            data = _recv(sock)
        if data is None:
            return
        if conn.kind == "drop":
            if not data:
                self._close_conn(conn)
            return          # read and ignored; closed at its deadline
        try:
            msgs = conn.buf.feed(data) if data else None
        except protocol.ProtocolError:
            msgs = None
        if not msgs:
            if msgs is None:
                self._close_conn(conn)
            return
        for msg in msgs:
            if conn.kind == "cmd":
                reply = self.status() if msg.get("cmd") == "status" else {
                    "error": f"unknown command {msg.get('cmd')!r}"}
                _send(sock, reply)
                self._close_conn(conn)
                return
            if conn.deadline is not None:
                if not self._on_peer_hello(conn, msg):
                    self._close_conn(conn)
                    return
            elif msg.get("type") == "bye":
                self._close_conn(conn)
                return

    def _accept_tls(self, conn: Conn) -> None:
        """One step of the server side of a peer's handshake; a peer whose certificate is
        missing, expired or not signed by IMEX_SERVER_CERT_AUTH is refused and named."""
        assert self.tls is not None
        try:
            wait = self.tls.handshake(conn.sock)
        except OSError as exc:
            self.log.warning(f"Refusing connection from {conn.addr}: TLS authentication "
                             f"failed: {self.tls.reason(exc)}.")
            self._linger(conn)
            return
        if wait is not None:
            self.sel.modify(conn.sock, wait, (self._on_conn, conn))
            return
        conn.handshaking = False
        self.sel.modify(conn.sock, selectors.EVENT_READ, (self._on_conn, conn))
        self._on_conn(conn.sock, selectors.EVENT_READ, conn)   # a hello sent along with it

    def _linger(self, conn: Conn) -> None:
        """Close a connection refused at TLS so that the peer reads our alert (the reason):
        FIN after the alert, then what it still sends (under TLS 1.3 its hello follows its
        certificate at once) is read and dropped until it closes or TLS_LINGER passes.
        Closing with its hello unread would send a reset, which loses the alert."""
        self.sel.unregister(conn.sock)
        raw = socket.socket(fileno=conn.sock.detach())
        raw.setblocking(False)
        try:
            raw.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        conn.sock, conn.kind, conn.handshaking = raw, "drop", False
        conn.deadline = time.monotonic() + TLS_LINGER
        self.sel.register(raw, selectors.EVENT_READ, (self._on_conn, conn))

    def _on_peer_hello(self, conn: Conn, hello: dict) -> bool:
        if hello.get("type") != "hello":
            return False
        host = str(hello.get("host", ""))
        idx = self.nodes.index_of(host)
        if idx is None or idx == self.node_id or conn.addr not in (
                self.nodes.address(idx), self.nodes.entries[idx]):
            # only a member, from its own address, gets a session (audit F3-5: forged
            # hellos used to be welcomed from anywhere and held forever)
            self.log.warning(f"Rejecting hello from {conn.addr} claiming to be {host!r}: "
                             "not a member of this domain at that address.")
            _send(conn.sock, {"type": "reject", "reason": "not a member"})
            return False
        if self.faults.refuses(idx, host):
            self.log.warning(f"Refusing connection from {host} (simulated fault refuse_peer).")
            _send(conn.sock, {"type": "reject", "reason": "refused"})
            return False
        if not _send(conn.sock, self._hello("welcome")):
            return False
        for old in [c for c in self.conns if c.idx == idx and c is not conn]:
            self._close_conn(old)   # a member keeps one channel to us: the newest
        conn.deadline = None
        conn.idx = idx
        link = self.links.get(idx)
        if (self.faults.wake_on_hello and link is not None and link.phase == "idle"
                and link.status != "CONNECTED" and hello.get("digest") == self.digest
                and hello.get("version") == self.version):
            self.log.info(f"Node {link.idx} ({link.host}) announced itself; reconnecting now "
                          "(simulator setting wake_on_hello).")
            link.due = time.monotonic()
        return True

    # ------------------------------------------------------------------ command service
    def status(self) -> dict:
        conns = {str(self.node_id): {"host": self.addr, "status": "CONNECTED"}}
        for link in self.links.values():
            conns[str(link.idx)] = {"host": link.host, "status": link.status}
        return {"state": self.state, "node": self.node_id, "host": self.addr,
                "hostName": self.hostname, "version": self.version,
                "digest": self.digest, "instance": self.instance,
                "pid": os.getpid(), "nodes": len(self.nodes.entries),
                "connections": dict(sorted(conns.items(), key=lambda kv: int(kv[0]))),
                "faults": self.faults.active()}

    # ------------------------------------------------------------------ shutdown
    def _shutdown(self) -> int:
        self.state = "SHUTTING_DOWN"
        self.log.info("Notifying peers of shutdown.")
        bye = {"type": "bye", "node": self.node_id}
        for link in self.links.values():
            if link.phase == "session" and link.sock is not None:
                _send(link.sock, bye)
            self._close_link(link)
        for conn in list(self.conns):
            if conn.kind == "peer":
                _send(conn.sock, bye)
            self._close_conn(conn)
        for lsock in (self.server_sock, self.cmd_sock):
            if lsock is not None:
                _close(lsock)
        self.persist.clean_shutdown()
        self.log.info("IMEX daemon shut down cleanly.")
        return 0


def _recv(sock: socket.socket) -> bytes | None:
    """What a readable non-blocking socket holds: b"" at EOF or error, None if nothing."""
    try:
        return sock.recv(65536)
    except BlockingIOError:
        return None
    except OSError:
        return b""


def _send(sock: socket.socket, msg: dict) -> bool:
    """Best effort on a non-blocking socket (messages are small: one send suffices)."""
    data = protocol.encode(msg)
    try:
        sock.setblocking(True)
        sock.settimeout(0.5)
        sock.sendall(data)
        sock.setblocking(False)
        return True
    except OSError:
        return False


def _close(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    try:
        sock.close()
    except OSError:
        pass


def _interface_of(addr: str) -> str:
    if os.environ.get("IMEXCTL_SIM_LOCAL_IP"):
        return "lo" if addr.startswith("127.") or addr == "::1" else "sim0"
    try:
        for _idx, name in socket.if_nameindex():
            if name == "lo" and (addr.startswith("127.") or addr == "::1"):
                return name
        names = [n for _i, n in socket.if_nameindex() if n != "lo"]
        return names[0] if names else "unknown"
    except OSError:
        return "unknown"


def daemonize() -> None:
    """Classic double fork; the original parent exits 0 (systemd Type=forking)."""
    sys.stdout.flush()
    sys.stderr.flush()
    if os.fork() > 0:
        os._exit(0)
    os.setsid()
    if os.fork() > 0:
        os._exit(0)
    os.chdir("/")
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    os.close(devnull)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="nvidia-imex", description="Simulated NVIDIA IMEX daemon")
    p.add_argument("-c", "--config", default=simcfg.DEFAULT_CONFIG)
    p.add_argument("-p", "--port", type=int, default=None, help="override SERVER_PORT")
    p.add_argument("--nogpu", "-nogpu", action="store_true", help="NO GPU mode")
    p.add_argument("--version", action="store_true")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    version = "NO_GPU" if args.nogpu else simcfg.version()
    if args.version:
        print(f"IMEX version is: {simcfg.version()}")
        return 0
    try:
        cfg = simcfg.DaemonConfig.load(args.config)
    except simcfg.SimConfigError as exc:
        print(f"[ERROR] {exc}", file=sys.stderr)
        return 1
    if args.port is not None:
        cfg.server_port = args.port
    log = ImexLog(cfg.log_file, cfg.log_level, cfg.log_append)

    def fatal(msg: str, code: int = 1) -> int:
        log.error(msg)
        if not log.to_stderr:
            print(f"[ERROR] {msg}", file=sys.stderr)
        return code

    log.info(f"IMEX version {version} is running with the following configuration options:")
    log.info(f"Logging level = {cfg.log_level}")
    log.info(f"Logging file name/path = {cfg.log_file}")
    log.info(f"Append to log file = {int(cfg.log_append)}")
    log.info(f"Max Log file size = {cfg.raw.get('LOG_FILE_MAX_SIZE') or 1024} (MBs)")
    log.info(f"Use Syslog file = {cfg.raw.get('LOG_USE_SYSLOG') or 0}")
    # the line 580.159.04 prints after "Use Syslog file" (DRA-k8s PR #1465)
    log.info("Authentication and Encryption enabled = "
             f"{cfg.raw.get('IMEX_ENABLE_AUTH_ENCRYPTION', '').strip() or 0}")
    log.info(f"IMEX Library communication bind interface = {cfg.bind_ip}")
    log.info(f"IMEX library communication bind port = {cfg.server_port}")
    try:
        nodes = simcfg.read_node_list(cfg.node_config_file)
    except OSError as exc:
        return fatal(f"Failed to read node configuration file {cfg.node_config_file}: "
                     f"{exc.strerror}")
    ident = simcfg.identify(nodes, cfg.bind_ip)
    try:
        faults = simfaults.load(ident[0] if ident else None,
                                [nodes.entries[ident[0]], ident[1]] if ident else [])
    except simfaults.FaultError as exc:
        return fatal(str(exc))
    if faults.version and not args.nogpu:
        version = faults.version
    names = nodes.host_names()
    if names and not simcfg.at_least(faults.version or simcfg.version(),
                                     simcfg.HOSTNAMES_MIN_VERSION):
        return fatal(f"Invalid IP address '{names[0]}' in node configuration file "
                     f"{cfg.node_config_file}: host names need IMEX 570.158.01 or newer "
                     f"(this is {faults.version or simcfg.version()}).")
    for entry in names:
        log.info(f"Treating node config entry '{entry}' as a host name.")
    if ident is None:
        return fatal("No matching network interface found for any IP addresses in the node "
                     f"configuration file {cfg.node_config_file}.")
    node_id, addr = ident
    log.info(f"Identified this node as ID {node_id}, using bind IP of '{addr}', and network "
             f"interface of {_interface_of(addr)}")
    if faults.active():
        log.warning(f"Simulated faults active: {faults.active()} (from "
                    f"{'; '.join(faults.sources)})")
    if faults.fail_start:
        return fatal(faults.fail_start)
    if faults.no_ipv6 and ":" in (cfg.cmd_bind_ip + cfg.bind_ip):
        return fatal("Failed to bind IMEX server/command port: Address family not supported "
                     "by protocol (simulator setting no_ipv6)")
    tls = None
    if (cfg.raw.get("IMEX_ENABLE_AUTH_ENCRYPTION", "").strip() or "0") != "0":
        # imported only with auth on: ssl is ~10 ms of every daemon's start
        from imexctl_sim import tls as simtls

        try:
            simtls.enabled(cfg.raw)
            tls = simtls.load(cfg.raw)
        except simtls.AuthError as exc:
            return fatal(f"Failed to initialize authentication and encryption: {exc}")
        log.info(f"SSL credentials loaded: {tls.summary}.")
    if faults.late_start:  # as if this tray's prolog had started that much later
        time.sleep(faults.late_start * simcfg.time_scale())
    daemon = Daemon(cfg, nodes, node_id, addr, faults, log, version, tls)
    try:
        daemon.bind()
    except OSError as exc:
        return fatal(f"Failed to bind IMEX server/command port: {exc.strerror or exc}")
    if cfg.daemonize:
        daemonize()
    return daemon.run()


def entry() -> None:
    """The console script and launcher: :func:`main`, then exit without the interpreter's
    teardown (:func:`imexctl_sim.run_and_exit`)."""
    from imexctl_sim import run_and_exit

    run_and_exit(main)


if __name__ == "__main__":
    entry()
