"""Simulated ``nvidia-imex -c CFG [-p PORT] [--nogpu] [--version]``.

One daemon per tray: identifies itself in the node config, dials every other member on
SERVER_PORT (hello with node-map digest and version; ``!M!`` / ``!V!`` on mismatch),
serves its state on IMEX_CMD_PORT for ``nvidia-imex-ctl``, says goodbye to its peers on
SIGTERM/SIGINT/SIGQUIT (they show RECOVERING and reconnect with the real back-off),
and after an unclean stop waits in WAITING_FOR_RECOVERY for its former importers.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import sys
import threading
import time
import uuid
from pathlib import Path

from imexctl.sim import config as simcfg
from imexctl.sim import faults as simfaults
from imexctl.sim import protocol
from imexctl.sim.imexlog import ImexLog
from imexctl.sim.persist import PersistFile

# Reconnect back-off observed on real daemons (seconds, before time scaling); doubling
# after the last entry, capped.
BACKOFF = (15.0, 31.0, 62.0, 125.0)
BACKOFF_CAP = 300.0
HANDSHAKE_TIMEOUT = 5.0
TICK = 0.02


def backoff(attempt: int) -> float:
    if attempt < len(BACKOFF):
        return BACKOFF[attempt]
    return min(BACKOFF_CAP, BACKOFF[-1] * 2 ** (attempt - len(BACKOFF) + 1))


class Link:
    """This daemon's view of its connection to one peer (its outgoing channel)."""

    def __init__(self, idx: int, host: str):
        self.idx = idx
        self.host = host
        self.status = "NEVER_CONNECTED"
        self.since = time.monotonic()
        self.sock: socket.socket | None = None
        self.wake = threading.Event()
        self.instance: str | None = None
        self.attempts = 0

    def set(self, status: str) -> bool:
        if status == self.status:
            return False
        self.status = status
        self.since = time.monotonic()
        return True


class Daemon:
    def __init__(self, cfg: simcfg.DaemonConfig, nodes: simcfg.NodeList, node_id: int,
                 addr: str, faults: simfaults.Faults, log: ImexLog, version: str):
        self.cfg = cfg
        self.nodes = nodes
        self.node_id = node_id
        self.addr = addr
        self.faults = faults
        self.log = log
        self.version = version
        self.instance = uuid.uuid4().hex
        self.scale = simcfg.time_scale()
        self.state = "INITIALIZING"
        self.stop = threading.Event()
        self.lock = threading.RLock()
        self.inbound: set[socket.socket] = set()
        self.links = {i: Link(i, nodes.address(i)) for i in range(len(nodes.entries))
                      if i != node_id}
        self.persist = PersistFile(simcfg.run_dir().absolute(), nodes.digest, node_id)
        self.recovery: dict[int, str] = {}
        self.started = time.monotonic()
        self.server_sock: socket.socket | None = None
        self.cmd_sock: socket.socket | None = None
        self.last_usr1 = 0.0
        self.hostname = os.environ.get("IMEXCTL_SIM_HOSTNAME") or socket.gethostname()

    # ------------------------------------------------------------------ start-up
    def bind(self) -> None:
        host = self.cfg.bind_ip or self.addr
        self.server_sock = protocol.listen(host, self.cfg.server_port)
        if self.cfg.cmd_enabled:
            cmd_host = self.cfg.cmd_bind_ip.strip() or self.addr
            self.cmd_sock = protocol.listen(cmd_host, self.cfg.cmd_port)
            self.log.info(f"IMEX command service listening on {cmd_host}:{self.cfg.cmd_port}")

    def run(self) -> int:
        self._signals()
        self._recovery_check()
        self.log.info("NvGpu Library version matched with GPU Driver version")
        self._thread(self._accept_loop, self.server_sock, self._serve_peer, name="peer-server")
        if self.cmd_sock is not None:
            self._thread(self._accept_loop, self.cmd_sock, self._serve_cmd, name="cmd-server")
        self.log.info("Started processing of incoming messages.")
        self.log.info(f"Creating gRPC channels to all peers (nPeers = {len(self.nodes.entries)}).")
        if self.cfg.wait_for_quorum != "FULL":
            self.log.info("IMEX_WAIT_FOR_QUORUM != FULL, continuing initialization without "
                          "waiting for connections to all nodes.")
        for link in self.links.values():
            if self.faults.refuses(link.idx, link.host) or self.faults.refuses(
                    None, self.nodes.entries[link.idx]):
                self.log.warning(f"Not connecting to node {link.idx} ({link.host}): "
                                 "peer refused (simulated fault refuse_peer)")
                continue
            self._thread(self._link_loop, link, name=f"link-{link.idx}")
        self._thread(self._ticker, name="ticker")
        while not self.stop.wait(0.2):
            pass
        return self._shutdown()

    def _thread(self, target, *args, name: str) -> None:
        threading.Thread(target=target, args=args, name=name, daemon=True).start()

    def _signals(self) -> None:
        if self.faults.hang_on_sigterm:
            for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT):
                signal.signal(sig, self._ignored)
        else:
            for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT):
                signal.signal(sig, self._on_stop)
        signal.signal(signal.SIGHUP, self._on_hup)
        signal.signal(signal.SIGUSR1, self._on_usr1)

    def _on_stop(self, signum, _frame) -> None:
        self.log.info(f"Received signal {signal.Signals(signum).name}, shutting down.")
        self.state = "SHUTTING_DOWN"
        self.stop.set()

    def _ignored(self, signum, _frame) -> None:
        self.log.warning(f"Received signal {signal.Signals(signum).name}; ignored "
                         "(simulated fault hang_on_sigterm)")

    def _on_hup(self, _signum, _frame) -> None:
        self.log.info("SIGHUP received: dumping in-memory log buffer (no config reload).")

    def _on_usr1(self, _signum, _frame) -> None:
        now = time.monotonic()
        if now - self.last_usr1 < 5.0:
            self.log.info("SIGUSR1 ignored: processed less than 5 s ago.")
            return
        self.last_usr1 = now
        self.log.info("SIGUSR1 received: restarting all outgoing client connections.")
        for link in self.links.values():
            sock = link.sock
            if sock is not None:
                _close(sock)
            link.wake.set()

    def _recovery_check(self) -> None:
        prev = self.persist.read_previous()
        if prev is None:
            self.log.info(f"nvidia-imex persistence file {self.persist.path} does not exist."
                          "  Assuming no previous importers.")
        elif not prev:
            self.log.info(f"nvidia-imex persistence file {self.persist.path} lists no "
                          "previous importers.")
        elif self.cfg.wait_for_quorum == "NONE":
            self.log.info(f"nvidia-imex persistence file {self.persist.path} lists "
                          f"{len(prev)} previous importers; IMEX_WAIT_FOR_QUORUM=NONE, "
                          "not waiting for recovery.")
        else:
            self.recovery = {i: h for i, h in prev.items() if i in self.links}
            self.persist.importers = dict(self.recovery)
            nodes = ", ".join(f"Node {i}: {h}" for i, h in sorted(self.recovery.items()))
            self.log.warning("IMEX was not shut down cleanly; waiting for previous importers "
                             f"to reconnect before becoming ready ({nodes}).")
        self.persist.write()

    # ------------------------------------------------------------------ state
    def _ticker(self) -> None:
        while not self.stop.is_set():
            now = time.monotonic()
            elapsed = now - self.started
            if self.faults.crash_after is not None and elapsed >= self.faults.crash_after:
                self.log.critical("Simulated crash (fault crash_after): aborting.")
                os._exit(134)
            with self.lock:
                self._advance(elapsed)
                if self.cfg.grace_time >= 0:
                    for link in self.links.values():
                        if (link.status == "RECOVERING"
                                and now - link.since >= self.cfg.grace_time * self.scale):
                            link.set("DISCONNECTED")
                            self.log.info(f"Node {link.idx} ({link.host}) disconnected for "
                                          "longer than the grace time; cleaning up its "
                                          "imports and exports.")
            time.sleep(TICK)

    def _advance(self, elapsed: float) -> None:
        if self.state in ("READY", "SHUTTING_DOWN"):
            return
        if self.faults.never_ready:
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
            missing = [i for i in self.recovery if self.links[i].status != "CONNECTED"]
            if not missing:
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

    # ------------------------------------------------------------------ peers
    def _hello(self, kind: str) -> dict:
        return {"type": kind, "node": self.node_id, "host": self.addr,
                "digest": self.nodes.digest, "version": self.version,
                "instance": self.instance}

    def _link_loop(self, link: Link) -> None:
        failures = 0
        while not self.stop.is_set():
            outcome = self._dial(link)
            if self.stop.is_set():
                break
            if outcome == "session":
                failures = 0
            delay = backoff(failures) * self.scale
            failures += 1
            link.attempts += 1
            self.log.info(f"Reconnecting to node {link.idx} ({link.host}) in {delay:g} s "
                          f"(attempt {failures}).")
            if link.wake.wait(delay):
                self.log.info(f"Node {link.idx} ({link.host}) announced itself; "
                              "reconnecting now.")
            link.wake.clear()

    def _dial(self, link: Link) -> str:
        try:
            sock = protocol.connect(link.host, self.cfg.server_port, HANDSHAKE_TIMEOUT)
        except OSError as exc:
            self.log.debug(f"Connection to node {link.idx} ({link.host}) failed: {exc}")
            return "failed"
        try:
            protocol.send(sock, self._hello("hello"))
            reader = protocol.Reader(sock)
            reply = reader.recv()
        except (OSError, protocol.ProtocolError) as exc:
            self.log.debug(f"Handshake with node {link.idx} ({link.host}) failed: {exc}")
            _close(sock)
            return "failed"
        if not reply or reply.get("type") != "welcome":
            reason = (reply or {}).get("reason", "closed")
            self.log.warning(f"Node {link.idx} ({link.host}) rejected the connection "
                             f"({reason}).")
            _close(sock)
            return "failed"
        with self.lock:
            if reply.get("digest") != self.nodes.digest:
                if link.set("NODE_MAP_MISMATCH"):
                    self.log.error(f"Node map mismatch with node {link.idx} ({link.host}): "
                                   "nodes_config differs; communication disabled.")
                _close(sock)
                return "failed"
            if reply.get("version") != self.version:
                if link.set("VERSION_MISMATCH"):
                    self.log.error(f"Version mismatch with node {link.idx} ({link.host}): "
                                   f"local {self.version}, remote {reply.get('version')}; "
                                   "communication disabled.")
                _close(sock)
                return "failed"
            if link.instance and link.instance != reply.get("instance"):
                self.log.info(f"Node {link.idx} ({link.host}) is a new IMEX instance; "
                              "cleaning up its previous imports and exports.")
            link.instance = reply.get("instance")
            link.sock = sock
            link.set("CONNECTED")
            self.log.info(f"Connection to node {link.idx} ({link.host}) established.")
        try:
            self.persist.add_importer(link.idx, link.host)
        except OSError as exc:
            self.log.warning(f"cannot update persistence file: {exc}")
        sock.settimeout(None)
        said_bye = False
        try:
            while not self.stop.is_set():
                msg = reader.recv()
                if msg is None:
                    break
                if msg.get("type") == "bye":
                    said_bye = True
                    break
        except (OSError, protocol.ProtocolError):
            pass
        _close(sock)
        with self.lock:
            link.sock = None
            if self.stop.is_set():
                return "stopped"
            link.set("RECOVERING")
        why = "shut down" if said_bye else "connection lost"
        self.log.warning(f"Connection to node {link.idx} ({link.host}) {why}; recovering.")
        return "session"

    def _accept_loop(self, lsock: socket.socket, handler) -> None:
        lsock.settimeout(0.2)
        while not self.stop.is_set():
            try:
                conn, peer = lsock.accept()
            except socket.timeout:
                continue
            except OSError:
                if self.stop.is_set():
                    return
                time.sleep(0.05)
                continue
            conn.settimeout(HANDSHAKE_TIMEOUT)
            self._thread(handler, conn, peer, name=f"{handler.__name__}")

    def _serve_peer(self, conn: socket.socket, _peer) -> None:
        reader = protocol.Reader(conn)
        try:
            hello = reader.recv()
            if not hello or hello.get("type") != "hello":
                return
            host = str(hello.get("host", ""))
            idx = self.nodes.index_of(host)
            if self.faults.refuses(idx, host):
                self.log.warning(f"Refusing connection from {host} (simulated fault "
                                 "refuse_peer).")
                protocol.send(conn, {"type": "reject", "reason": "refused"})
                return
            protocol.send(conn, self._hello("welcome"))
            with self.lock:
                self.inbound.add(conn)
                link = self.links.get(idx) if idx is not None else None
                compatible = (hello.get("digest") == self.nodes.digest
                              and hello.get("version") == self.version)
                if link is not None and compatible and link.status != "CONNECTED":
                    link.wake.set()
            conn.settimeout(None)
            while not self.stop.is_set():
                msg = reader.recv()
                if msg is None or msg.get("type") == "bye":
                    break
        except (OSError, protocol.ProtocolError):
            pass
        finally:
            with self.lock:
                self.inbound.discard(conn)
            _close(conn)

    # ------------------------------------------------------------------ command service
    def status(self) -> dict:
        with self.lock:
            conns = {str(self.node_id): {"host": self.addr, "status": "CONNECTED"}}
            for link in self.links.values():
                conns[str(link.idx)] = {"host": link.host, "status": link.status}
            return {"state": self.state, "node": self.node_id, "host": self.addr,
                    "hostName": self.hostname, "version": self.version,
                    "digest": self.nodes.digest, "instance": self.instance,
                    "pid": os.getpid(), "nodes": len(self.nodes.entries),
                    "connections": dict(sorted(conns.items(), key=lambda kv: int(kv[0]))),
                    "faults": self.faults.active()}

    def _serve_cmd(self, conn: socket.socket, _peer) -> None:
        try:
            req = protocol.Reader(conn).recv()
            if req and req.get("cmd") == "status":
                protocol.send(conn, self.status())
            elif req:
                protocol.send(conn, {"error": f"unknown command {req.get('cmd')!r}"})
        except (OSError, protocol.ProtocolError):
            pass
        finally:
            _close(conn)

    # ------------------------------------------------------------------ shutdown
    def _shutdown(self) -> int:
        with self.lock:
            self.state = "SHUTTING_DOWN"
            socks = [link.sock for link in self.links.values() if link.sock] + list(self.inbound)
        self.log.info("Notifying peers of shutdown.")
        for sock in socks:
            try:
                sock.settimeout(0.5)
                protocol.send(sock, {"type": "bye", "node": self.node_id})
            except OSError:
                pass
            _close(sock)
        for lsock in (self.server_sock, self.cmd_sock):
            if lsock is not None:
                _close(lsock)
        self.persist.remove()
        self.log.info("IMEX daemon shut down cleanly.")
        return 0


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
        import psutil

        for name, addrs in psutil.net_if_addrs().items():
            if any(a.address.split("%", 1)[0] == addr for a in addrs):
                return name
    except Exception:  # noqa: BLE001 - only cosmetic
        pass
    return "lo" if addr.startswith("127.") else "unknown"


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
        cfg = simcfg.DaemonConfig.load(Path(args.config))
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
    log.info("Authentication and Encryption enabled = "
             f"{cfg.raw.get('IMEX_ENABLE_AUTH_ENCRYPTION') or 0}")
    log.info(f"IMEX Library communication bind interface = {cfg.bind_ip}")
    log.info(f"IMEX library communication bind port = {cfg.server_port}")
    try:
        nodes = simcfg.read_node_list(cfg.node_config_file)
    except OSError as exc:
        return fatal(f"Failed to read node configuration file {cfg.node_config_file}: "
                     f"{exc.strerror}")
    for entry in nodes.entries:
        if not simcfg.is_ip(entry):
            log.info(f"Treating node config entry '{entry}' as a host name.")
    ident = simcfg.identify(nodes, cfg.bind_ip)
    if ident is None:
        return fatal("No matching network interface found for any IP addresses in the node "
                     f"configuration file {cfg.node_config_file}.")
    node_id, addr = ident
    log.info(f"Identified this node as ID {node_id}, using bind IP of '{addr}', and network "
             f"interface of {_interface_of(addr)}")
    try:
        faults = simfaults.load(node_id, [nodes.entries[node_id], addr])
    except simfaults.FaultError as exc:
        return fatal(str(exc))
    if faults.active():
        log.warning(f"Simulated faults active: {faults.active()} (from "
                    f"{'; '.join(faults.sources)})")
    if faults.version and not args.nogpu:
        version = faults.version
    if faults.fail_start:
        return fatal(faults.fail_start)
    daemon = Daemon(cfg, nodes, node_id, addr, faults, log, version)
    try:
        daemon.bind()
    except OSError as exc:
        return fatal(f"Failed to bind IMEX server/command port: {exc.strerror or exc}")
    if cfg.daemonize:
        daemonize()
    return daemon.run()


if __name__ == "__main__":
    sys.exit(main())
