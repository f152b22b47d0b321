"""Simulated ``nvidia-imex-ctl [-c CFG | -i IP PORT] (-q | -N [-j] [-H]) | --version``.

``-q`` asks the local daemon's command service for its state word. ``-N`` reads the node
config named in CFG, asks the local daemon and then every member's command service
(node address, IMEX_CMD_PORT) for its state and connections, and prints the real table
or (``-j``) the real JSON. Exit codes: 0 ok; 255 node config unreadable (real); 1 daemon
not reachable for ``-q`` or other errors; 2 usage.
"""

from __future__ import annotations

import argparse
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from imexctl.sim import config as simcfg
from imexctl.sim import protocol
from imexctl.sim import view as simview
from imexctl.sim.imexlog import stamp

QUERY_TIMEOUT = 2.0
GRPC_UNAVAILABLE = 14


def _local_endpoint(cfg: simcfg.DaemonConfig) -> tuple[str, int]:
    node_addr = None
    if not cfg.cmd_bind_ip.strip():
        try:
            nodes = simcfg.read_node_list(cfg.node_config_file)
            ident = simcfg.identify(nodes, cfg.bind_ip)
            node_addr = ident[1] if ident else None
        except OSError:
            node_addr = None
        if node_addr is None:
            forced = simcfg.local_addresses() if cfg.bind_ip == "" else {cfg.bind_ip}
            node_addr = sorted(forced)[0] if forced else None
    return simcfg.cmd_endpoint(cfg, node_addr), cfg.cmd_port


def query(host: str, port: int, timeout: float = QUERY_TIMEOUT) -> dict | None:
    try:
        reply = protocol.request(host, port, {"cmd": "status"}, timeout)
    except (OSError, protocol.ProtocolError):
        return None
    return reply if "state" in reply else None


def build_view(nodes: simcfg.NodeList, local: dict | None, port: int,
               timeout: float = QUERY_TIMEOUT) -> simview.DomainView:
    hosts = [nodes.address(i) for i in range(len(nodes.entries))]
    ts = stamp()
    if local is None:
        views = [simview.NodeView(i, h, "UNAVAILABLE", "", "",
                                  {j: "INVALID" for j in range(len(hosts))})
                 for i, h in enumerate(hosts)]
        return simview.DomainView(views, ts, local_up=False)
    local_idx = local.get("node")

    def one(i: int) -> dict | None:
        if i == local_idx and local.get("host") == hosts[i]:
            return local
        return query(hosts[i], port, timeout)

    with ThreadPoolExecutor(max_workers=min(32, max(1, len(hosts)))) as pool:
        reports = list(pool.map(one, range(len(hosts))))
    views = []
    for i, (host, rep) in enumerate(zip(hosts, reports)):
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


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="nvidia-imex-ctl",
                                description="Simulated NVIDIA IMEX control tool")
    src = p.add_mutually_exclusive_group()
    src.add_argument("-c", dest="config", default=None, help="nvidia-imex config file")
    src.add_argument("-i", dest="endpoint", nargs=2, metavar=("IP", "PORT"))
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("-q", action="store_true", help="query the local daemon's state once")
    mode.add_argument("-N", action="store_true", help="full status of the IMEX domain")
    mode.add_argument("-n", action="store_true", help="monitor the domain (not simulated)")
    mode.add_argument("--version", action="store_true")
    p.add_argument("-j", action="store_true", help="JSON output for -N")
    p.add_argument("-H", action="store_true", help="show host names with -N")
    p.add_argument("-t", type=int, default=None, help="timeout in ms")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.version:
        print(f"IMEX version is: {simcfg.version()}")
        return 0
    if not (args.q or args.N):
        print("nvidia-imex-ctl: one of -q or -N is required (-n, -s, -d, -m are not "
              "simulated)", file=sys.stderr)
        return 2
    timeout = args.t / 1000.0 if args.t else QUERY_TIMEOUT
    cfg_path = Path(args.config or simcfg.DEFAULT_CONFIG)
    cfg = None
    if args.endpoint is None or args.N:
        try:
            cfg = simcfg.DaemonConfig.load(cfg_path)
        except simcfg.SimConfigError as exc:
            print(str(exc), file=sys.stderr)
            return 255 if args.N else 1
    if args.endpoint is not None:
        try:
            host, port = args.endpoint[0], int(args.endpoint[1])
        except ValueError:
            print(f"nvidia-imex-ctl: invalid port {args.endpoint[1]!r}", file=sys.stderr)
            return 2
    else:
        if not cfg.cmd_enabled:
            print(f"IMEX command service is not enabled (IMEX_CMD_ENABLED) in {cfg_path}",
                  file=sys.stderr)
            return 1
        host, port = _local_endpoint(cfg)

    if args.q:
        reply = query(host, port, timeout)
        if reply is None:
            print(f"Query Status returned error code: {GRPC_UNAVAILABLE}", file=sys.stderr)
            print(f"Failed to connect to the IMEX daemon command service at {host}:{port}",
                  file=sys.stderr)
            return 1
        print(reply["state"])
        return 0

    try:
        nodes = simcfg.read_node_list(cfg.node_config_file)
    except OSError:
        print(f"Failed to read node configuration file {cfg.node_config_file}.")
        return 255
    local = query(host, port, timeout)
    view = build_view(nodes, local, cfg.cmd_port if args.endpoint is None else port, timeout)
    if args.j:
        sys.stdout.write(simview.render_json(view, args.H))
    else:
        sys.stdout.write(simview.render_text(view, args.H))
    return 0


if __name__ == "__main__":
    sys.exit(main())
