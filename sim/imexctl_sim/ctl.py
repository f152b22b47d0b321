"""Simulated ``nvidia-imex-ctl [-c CFG | -i IP PORT] (-q | -N [-j] [-H]) | --version``.

Where it connects is where the real one does: ``IMEX_CMD_BIND_INTERFACE_IP`` from CFG,
or ``[::]`` when that is empty (kubernetes-sigs/dra-driver-nvidia-gpu #328). ``[::]``
reaches the local daemon's all-interfaces listener, except on a tray marked IPv6-less
(simulator setting ``no_ipv6``), where it fails with the real one-line gRPC error.
``-i`` is refused from version 580 (it was removed there).

``-q`` asks the local daemon's command service for its state word. ``-N`` reads the node
config named in CFG, asks the local daemon and then every member's command service
(node address, IMEX_CMD_PORT) in parallel, from this tray's own address, and prints the
real table or (``-j``) the real JSON. Exit codes: 0 ok; 255 node config unreadable
(real); 1 daemon not reachable for ``-q`` or other errors; 2 usage.

Start-up cost matters (the harness calls it several times per prolog per tray): stdlib
only, no argparse / dataclasses / pathlib / concurrent.futures.
"""

from __future__ import annotations

import errno
import json
import selectors
import socket
import sys
import time

from imexctl_sim import config as simcfg
from imexctl_sim import faults as simfaults
from imexctl_sim import protocol

QUERY_TIMEOUT = 2.0
GRPC_UNAVAILABLE = 14
REQUEST = b'{"cmd":"status"}\n'
USAGE = ("usage: nvidia-imex-ctl [-c <config.cfg> | -i <IP> <PORT>] "
         "<-q | -N [-j] [-H]> [-t <ms>] | --version")


class Usage(Exception):
    pass


def parse_args(argv: list[str]) -> dict:
    opts: dict = {"config": None, "endpoint": None, "q": False, "N": False, "j": False,
                  "H": False, "t": None, "version": False, "unsupported": None}
    it = iter(argv)
    for arg in it:
        try:
            if arg == "-c":
                opts["config"] = next(it)
            elif arg == "-i":
                opts["endpoint"] = (next(it), next(it))
            elif arg == "-t":
                opts["t"] = int(next(it))
            elif arg in ("-q", "-N", "-j", "-H"):
                opts[arg[1]] = True
            elif arg == "--version":
                opts["version"] = True
            elif arg in ("-n", "-s", "-d", "-m") or arg.startswith(("-u", "--u")):
                opts["unsupported"] = arg
            elif arg in ("-h", "--help"):
                raise Usage("")
            else:
                raise Usage(f"nvidia-imex-ctl: invalid option {arg!r}")
        except StopIteration:
            raise Usage(f"nvidia-imex-ctl: option {arg} needs a value") from None
        except ValueError:
            raise Usage(f"nvidia-imex-ctl: option {arg} needs a number") from None
    if opts["config"] is not None and opts["endpoint"] is not None:
        raise Usage("nvidia-imex-ctl: -c and -i are mutually exclusive")
    if opts["q"] and opts["N"]:
        raise Usage("nvidia-imex-ctl: -q and -N are mutually exclusive")
    return opts


def query_many(targets: list[tuple[str, int]], timeout: float,
               local: str | None) -> list[dict | None]:
    """Ask every (host, port) for its status at once; None where no answer came."""
    results: list[dict | None] = [None] * len(targets)
    sel = selectors.DefaultSelector()
    for i, (host, port) in enumerate(targets):
        sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET,
                             socket.SOCK_STREAM)
        sock.setblocking(False)
        try:
            src = protocol.source_for(host, local)
            if src:
                sock.bind((src, 0))
            err = sock.connect_ex((host, port))
        except OSError:
            sock.close()
            continue
        if err not in (0, errno.EINPROGRESS, errno.EAGAIN):
            sock.close()
            continue
        sel.register(sock, selectors.EVENT_WRITE, [i, False, b""])
    deadline = time.monotonic() + timeout
    while sel.get_map():
        left = deadline - time.monotonic()
        if left <= 0:
            break
        for key, _mask in sel.select(left):
            sock, st = key.fileobj, key.data
            done = False
            if not st[1]:
                if sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR):
                    done = True
                else:
                    try:
                        sock.send(REQUEST)
                        st[1] = True
                        sel.modify(sock, selectors.EVENT_READ, st)
                    except OSError:
                        done = True
            else:
                try:
                    chunk = sock.recv(65536)
                except BlockingIOError:
                    continue
                except OSError:
                    chunk = b""
                st[2] += chunk
                if len(st[2]) > protocol.MAX_LINE:      # a reply is one short line
                    st[2], chunk = b"", b""
                if not chunk or b"\n" in st[2]:
                    done = True
                    try:
                        reply = json.loads(st[2].partition(b"\n")[0])
                    except ValueError:
                        reply = None
                    if isinstance(reply, dict) and "state" in reply:
                        results[st[0]] = reply
            if done:
                sel.unregister(sock)
                sock.close()
    for key in list(sel.get_map().values()):
        key.fileobj.close()
    sel.close()
    return results


def query(host: str, port: int, timeout: float = QUERY_TIMEOUT,
          local: str | None = None) -> dict | None:
    return query_many([(host, port)], timeout, local)[0]


def build_view(nodes: simcfg.NodeList, local: dict | None, port: int,
               timeout: float = QUERY_TIMEOUT, local_addr: str | None = None):
    from imexctl_sim import view as simview
    from imexctl_sim.imexlog import stamp

    hosts = nodes.addresses()     # where to ask each member
    shown = nodes.entries         # what the real ctl prints as host: the entry as written
    ts = stamp()
    if local is None:
        views = [simview.NodeView(i, h, "UNAVAILABLE", "", "",
                                  {j: "INVALID" for j in range(len(hosts))})
                 for i, h in enumerate(shown)]
        return simview.DomainView(views, ts, local_up=False)
    local_idx = local.get("node") if local.get("host") in hosts else None
    others = [i for i in range(len(hosts)) if i != local_idx]
    answers = query_many([(hosts[i], port) for i in others], timeout, local_addr)
    reports: dict[int, dict | None] = dict(zip(others, answers))
    if local_idx is not None:
        reports[local_idx] = local
    views = []
    for i, host in enumerate(shown):
        rep = reports.get(i)
        if rep is None:
            views.append(simview.NodeView(i, host, "UNAVAILABLE", "", "",
                                          {j: "INVALID" for j in range(len(hosts))}))
            continue
        by_host = {c.get("host"): c.get("status", "INVALID")
                   for c in (rep.get("connections") or {}).values()}
        conns = {j: by_host.get(h, "INVALID") for j, h in enumerate(hosts)}
        views.append(simview.NodeView(i, host, str(rep.get("state", "UNAVAILABLE")),
                                      str(rep.get("version", "")),
                                      str(rep.get("hostName", "")), conns))
    return simview.DomainView(views, ts, local_up=True)


def _grpc_error(host: str, port: int, reason: str) -> str:
    """The real ctl's one-line failure (issue #328 shape)."""
    target = f"ipv6:%5B{host}%5D" if ":" in host else f"ipv4:{host}"
    return (f"Query Status returned error code: {GRPC_UNAVAILABLE} - failed to connect to "
            f"all addresses; last error: UNKNOWN: {target}:{port}: {reason}")


def _identity(cfg: simcfg.DaemonConfig) -> tuple[simcfg.NodeList | None, str | None]:
    """(node list or None if unreadable, this tray's address or None)."""
    try:
        nodes = simcfg.read_node_list(cfg.node_config_file)
    except OSError:
        nodes = None
    ident = simcfg.identify(nodes, cfg.bind_ip) if nodes is not None else None
    if ident is not None:
        return nodes, ident[1]
    forced = simcfg.local_addresses() if not cfg.bind_ip else {cfg.bind_ip}
    return nodes, (sorted(forced)[0] if forced else None)


def _tray_settings(local_addr: str | None) -> simfaults.Faults:
    try:
        return simfaults.load(None, [local_addr] if local_addr else [])
    except simfaults.FaultError:
        return simfaults.Faults()


def local_endpoint(cfg: simcfg.DaemonConfig, local_addr: str | None,
                   no_ipv6: bool) -> tuple[str, int, str]:
    """(host to connect, port, error). Empty IMEX_CMD_BIND_INTERFACE_IP = ``[::]``."""
    port = cfg.cmd_port
    bind = cfg.cmd_bind_ip
    if bind in ("", "::"):
        if no_ipv6:
            return "::", port, _grpc_error("::", port, "Address family not supported by "
                                                       "protocol")
        if bind == "::":
            return "::1", port, ""
        # [::] reaches the daemon's all-interfaces listener: the sim's is the node address
        return (local_addr or "::1"), port, ""
    if bind == "0.0.0.0":
        return "127.0.0.1", port, ""
    return bind, port, ""


def main(argv: list[str] | None = None) -> int:
    try:
        opts = parse_args(sys.argv[1:] if argv is None else argv)
    except Usage as exc:
        if str(exc):
            print(str(exc), file=sys.stderr)
        print(USAGE, file=sys.stderr)
        return 2
    version = simcfg.version()
    if opts["version"]:
        print(f"IMEX version is: {version}")
        return 0
    if opts["endpoint"] is not None and simcfg.at_least(version, simcfg.NO_I_FLAG_VERSION):
        print(f"nvidia-imex-ctl: invalid option '-i' (removed in 580; this is {version}); "
              "use -c with IMEX_CMD_BIND_INTERFACE_IP", file=sys.stderr)
        print(USAGE, file=sys.stderr)
        return 2
    if opts["unsupported"]:
        print(f"nvidia-imex-ctl: {opts['unsupported']} is not simulated", file=sys.stderr)
        return 2
    if not (opts["q"] or opts["N"]):
        print("nvidia-imex-ctl: one of -q or -N is required", file=sys.stderr)
        print(USAGE, file=sys.stderr)
        return 2
    timeout = opts["t"] / 1000.0 if opts["t"] else QUERY_TIMEOUT
    cfg_path = opts["config"] or simcfg.DEFAULT_CONFIG
    cfg = None
    if opts["endpoint"] is None or opts["N"]:
        try:
            cfg = simcfg.DaemonConfig.load(cfg_path)
        except simcfg.SimConfigError as exc:
            print(str(exc), file=sys.stderr)
            return 255 if opts["N"] else 1
    nodes, local_addr = _identity(cfg) if cfg is not None else (None, None)
    error = ""
    if opts["endpoint"] is not None:
        try:
            host, port = opts["endpoint"][0], int(opts["endpoint"][1])
        except ValueError:
            print(f"nvidia-imex-ctl: invalid port {opts['endpoint'][1]!r}", file=sys.stderr)
            return 2
    else:
        if not cfg.cmd_enabled:
            print(f"IMEX command service is not enabled (IMEX_CMD_ENABLED) in {cfg_path}",
                  file=sys.stderr)
            return 1
        host, port, error = local_endpoint(cfg, local_addr,
                                           _tray_settings(local_addr).no_ipv6)

    local = None if error else query(host, port, timeout, local_addr)
    if opts["q"]:
        if local is None:
            print(error or _grpc_error(host, port, "Connection refused"), file=sys.stderr)
            return 1
        print(local["state"])
        return 0

    if nodes is None:
        print(f"Failed to read node configuration file {cfg.node_config_file}.")
        return 255
    if _tray_settings(local_addr).ctl_hang:   # DRA-k8s #1417: -N may hang
        while True:
            time.sleep(3600)
    from imexctl_sim import view as simview

    view = build_view(nodes, local, cfg.cmd_port if opts["endpoint"] is None else port,
                      timeout, local_addr)
    render = simview.render_json if opts["j"] else simview.render_text
    sys.stdout.write(render(view, opts["H"]))
    return 0


def entry() -> None:
    """The console script and launcher: :func:`main`, then exit without the interpreter's
    teardown (:func:`imexctl_sim.run_and_exit`)."""
    from imexctl_sim import run_and_exit

    run_and_exit(main)


if __name__ == "__main__":
    entry()
