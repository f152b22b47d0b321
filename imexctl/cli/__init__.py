"""Command line: thin argument parsing over the library; heavy imports stay lazy.

Every job start pays this start-up time on every tray, so only the subcommand that
runs imports what it needs.
"""

from __future__ import annotations

import os
import re
import sys
import time

from imexctl import __version__
from imexctl.errors import (EXIT_CODES, EXIT_CONFIG, EXIT_NODE_FAULT, EXIT_OK, EXIT_USAGE,
                            ImexctlError)

TYPE_CHECKING = False   # typing is imported for type checkers only: ~3 ms of start-up
if TYPE_CHECKING:
    import argparse
    from typing import Callable, Sequence

    from imexctl.config import Config


HEALTH_EXIT_CODES = """exit codes (HealthCheckProgram, NHC):
  0  healthy; repairs made, if any, are listed
  1  problem found: node drained with 'imexctl: health/<check>: <cause>', unless
     --no-drain, the node already carries another drain (that one is kept), or a
     prolog/epilog holds the drain lock (left to the next run)
  2  usage error
  3  configuration error"""


def _formatter_class() -> type:
    """argparse's formatter, minus its ``import shutil`` (with bz2 and lzma) at every
    start-up: argparse builds a formatter for each add_argument. Same width rule as
    ``shutil.get_terminal_size``: $COLUMNS, else the terminal, else 80."""
    import argparse

    class _Formatter(argparse.RawDescriptionHelpFormatter):
        def __init__(self, prog: str, indent_increment: int = 2, max_help_position: int = 24,
                     width: int | None = None):
            if width is None:
                import os
                try:
                    width = int(os.environ.get("COLUMNS", "0"))
                except ValueError:
                    width = 0
                if width <= 0:
                    try:
                        width = os.get_terminal_size(sys.__stdout__.fileno()).columns
                    except (AttributeError, ValueError, OSError):
                        width = 0
                width = (width or 80) - 2
            super().__init__(prog, indent_increment, max_help_position, width)
    return _Formatter


def _exit_code_table() -> str:
    rows = "\n".join(f"  {code}  {text}" for code, text in EXIT_CODES.items())
    return f"exit codes:\n{rows}"


def _setup(args: argparse.Namespace, node: str | None = None, stderr_level: str = "warning",
           defer_logging: bool = False):
    """Load the config and start logging; shared by every subcommand that does work."""
    from imexctl.config import load_config

    cfg = load_config(args.config, node=node)
    _start_logging(cfg, stderr_level, defer_logging)
    return cfg


def _start_logging(cfg, stderr_level: str = "warning", defer: bool = False,
                   controller: bool = False) -> None:
    from imexctl.base import log

    log_file, fallback = cfg.paths.log_file, None
    if controller:      # SlurmUser's hooks: a log SlurmUser can write, out of the box
        from imexctl.controller.slurmctld import table_dir

        log_file = cfg.paths.controller_log_file or log_file
        if not cfg.paths.controller_log_file:
            fallback = table_dir(cfg) / CONTROLLER_LOG
    log.setup_logging(log_file, cfg.log.level, cfg.node, stderr_level=stderr_level,
                      max_bytes=cfg.log.max_bytes, defer=defer, fallback=fallback,
                      sink=cfg.log.sink, socket_path=cfg.log.socket)


CONTROLLER_LOG = "imexctl-controller.log"


def _hook(kind: str) -> Callable[[argparse.Namespace], int]:
    """prolog / epilog on a tray: context from slurmd's environment, then the lifecycle."""
    def run(args: argparse.Namespace) -> int:
        import os

        from imexctl.base import log
        from imexctl.slurm.adapter import deferred_adapter
        from imexctl.slurm.context import job_context_from_env

        # The epilog needs no node list, and Slurm does not always give one (context.py).
        ctx = job_context_from_env(os.environ, hook="node", need_nodelist=kind == "prolog")
        cfg = _setup(args, node=ctx.node)
        log.bind(job_id=ctx.job_id, restart_count=ctx.restart_count, hook=kind)
        log.get_logger().info(f"{kind} started", user=ctx.user, uid=ctx.uid,
                              nodelist=ctx.nodelist_expr)
        if not ctx.nodelist_expr:
            log.get_logger().warning("Slurm gave no node list (SLURM_JOB_NODELIST, "
                                     "SLURM_NODELIST): this tray's part of the job is "
                                     "cleaned by job id")
        if kind == "prolog":  # each hook imports only its own steps
            from imexctl.lifecycle.prolog import run_prolog as hook
        else:
            from imexctl.lifecycle.epilog import run_epilog as hook
        started = time.time()
        rc = hook(cfg, deferred_adapter(cfg), ctx)
        _after_hook(cfg, kind, ctx.job_id, started)
        return rc
    return run


def _after_hook(cfg, kind: str, job_id: int, started: float) -> None:
    """Publish the hook's transition ("IMEX expected here" file) and outcome (metrics);
    best effort, never a traceback from a hook."""
    try:
        from imexctl.tray import expected
        from imexctl.ops import metrics
        outcome = expected.after_hook(cfg, kind, job_id, started)
        if outcome is not None:
            metrics.observe_outcome(cfg, outcome)
    except Exception as exc:  # noqa: BLE001
        print(f"imexctl: {kind}: expected-state/metrics not updated: {exc}", file=sys.stderr)


def _controller_hook(kind: str) -> Callable[[argparse.Namespace], int]:
    """PrologSlurmctld / EpilogSlurmctld: exit 0 whatever happens (audit F-08).

    A non-zero PrologSlurmctld requeues a batch job forever, so every error, of any type,
    is reported and the node prologs, which fall back to published identities, decide.
    """
    def run(args: argparse.Namespace) -> int:
        try:
            import os

            from imexctl.controller import slurmctld as controller
            from imexctl.base import log
            from imexctl.config import load_config
            from imexctl.slurm.adapter import get_adapter
            from imexctl.slurm.context import job_context_from_env

            ctx = job_context_from_env(os.environ, hook="controller",
                                       need_nodelist=kind == "prolog-slurmctld")
            cfg = load_config(args.config)  # node: this host (slurmctld runs no slurmd)
            slurm = get_adapter(cfg)
            if kind == "prolog-slurmctld":
                # Every job start waits for this hook: its Slurm queries go out before
                # logging (structlog) is set up, and slurmctld answers meanwhile.
                sent = controller.send_queries(cfg, slurm, ctx)
                _start_logging(cfg, controller=True)
                log.bind(job_id=ctx.job_id, restart_count=ctx.restart_count, hook=kind)
                return controller.prolog_slurmctld(cfg, slurm, ctx, sent)
            _start_logging(cfg, controller=True)
            log.bind(job_id=ctx.job_id, restart_count=ctx.restart_count, hook=kind)
            return controller.epilog_slurmctld(cfg, slurm, ctx)
        except Exception as exc:  # noqa: BLE001 - fail open, whatever it was
            what = str(exc) if isinstance(exc, ImexctlError) else f"{type(exc).__name__}: {exc}"
            print(f"imexctl: {kind}: {what} (failing open: the node prologs decide)",
                  file=sys.stderr)
            return EXIT_OK
    return run


def _cmd_topology(args: argparse.Namespace) -> int:
    from imexctl.ops import topoconf
    from imexctl.errors import EXIT_DRIFT
    from imexctl.base.fsutil import atomic_write
    from imexctl.slurm.adapter import get_adapter
    from imexctl.slurm.hostlist import expand
    from imexctl.slurm.localconf import LocalConfError, load
    from imexctl.rules.cliques import identity_from_extra

    cfg = _setup(args, stderr_level="error")
    try:
        names = expand(args.nodes) if args.nodes else list(load(cfg.paths.slurm_conf).nodes)
    except LocalConfError as exc:      # no local slurm.conf (a login node, configless)
        print(f"imexctl: topology: {exc}; name the trays with --nodes, or set [paths] "
              "slurm_conf", file=sys.stderr)
        return EXIT_CONFIG
    except ValueError as exc:
        print(f"imexctl: topology --nodes {args.nodes!r}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        sizes = [int(s) for s in args.block_sizes.split(",")] if args.block_sizes else None
        records = get_adapter(cfg).nodes(names)
        identities = {n: identity_from_extra(getattr(records.get(n), "extra", ""))
                      for n in names}
        topo = topoconf.build(names, identities, sizes)
        text = (topoconf.render_yaml(topo, args.name) if args.format == "yaml"
                else topoconf.render_conf(topo))
        if args.check:
            with open(args.check, encoding="utf-8") as handle:
                drift = topoconf.check(handle.read(), topo)
        elif args.output:
            atomic_write(args.output, text)
    except (ValueError, OSError) as exc:
        print(f"imexctl: topology: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.check:
        if drift.clean:
            print(f"{args.check}: up to date ({len(topo.blocks)} blocks)")
            return EXIT_OK
        for node, (old, new) in drift.moved.items():
            print(f"{args.check}: {node} moved: {old} -> {new}")
        if drift.sizes:
            print(f"{args.check}: BlockSizes {','.join(map(str, drift.sizes[0])) or '-'} -> "
                  f"{','.join(map(str, drift.sizes[1]))}")
        return EXIT_DRIFT
    if not args.output:
        print(text, end="")
    return EXIT_OK


def _cmd_task_prolog(args: argparse.Namespace) -> int:
    """TaskProlog: stdout is parsed by slurmstepd, so only export/unset lines go there;
    it runs as the job's user, once per task, and never fails the task."""
    try:
        import os

        from imexctl.config import load_config
        from imexctl.lifecycle.taskprolog import task_lines

        lines = task_lines(load_config(args.config), os.environ)
    except Exception as exc:  # noqa: BLE001 - the task must start regardless
        print(f"imexctl: task-prolog: {exc}", file=sys.stderr)
        lines = ["export IMEX_DOMAIN_STATE=UNKNOWN"]
    if lines:
        print("\n".join(lines))
    return EXIT_OK


def _cmd_health(args: argparse.Namespace) -> int:
    from imexctl.ops.health import render, render_json, run_checks
    from imexctl.slurm.adapter import get_adapter

    cfg = _setup(args, stderr_level="error")
    report = run_checks(cfg, get_adapter(cfg), drain=not args.no_drain)
    print(render_json(report) if args.json else "\n".join(render(report)))
    return report.exit_code


def _boot_node_name(args: argparse.Namespace) -> str | None:
    """At boot no slurmd has said this tray's NodeName (SLURMD_NODENAME): find it in the
    local slurm.conf as slurmd does, by NodeHostname, so {node} paths and the published
    identity match the hooks' where NodeName is not the host name. None: the host name."""
    import os

    if os.environ.get("SLURMD_NODENAME"):
        return None
    from imexctl.config import load_config
    from imexctl.slurm.records import NODE_NAME
    from imexctl.slurm.localconf import LocalConfError, load

    try:
        conf = load(load_config(args.config).paths.slurm_conf)
    except (LocalConfError, ImexctlError):
        return None     # no readable slurm.conf: the host name, as before
    name = conf.node_of_host(os.uname().nodename)
    return name if name and re.fullmatch(NODE_NAME, name) else None


def _cmd_recover(args: argparse.Namespace) -> int:
    from imexctl.ops.health import default_teardown
    from imexctl.ops.recover import recover
    from imexctl.slurm.adapter import get_adapter

    from imexctl.slurm.records import NODE_NAME

    if args.node is not None and not re.fullmatch(NODE_NAME, args.node):
        print(f"imexctl: recover --node {args.node!r} is not a valid node name (letters, "
              "digits, '.', '_', '-'; at most 64)", file=sys.stderr)
        return EXIT_USAGE
    cfg = _setup(args, node=args.node or _boot_node_name(args), stderr_level="error")
    slurm, unusable = None, None
    if not args.no_publish:
        try:   # one try per Slurm call: at boot slurmctld may be down, and slurmd waits
            slurm = get_adapter(_one_try(cfg))
        except ImexctlError as exc:   # the local recovery must run whatever Slurm's state
            unusable = f"fabric identity not republished: {exc}"
    done = recover(cfg, default_teardown(cfg), slurm)
    if unusable:
        done.notes.append(unusable)
    lines = [f"imexctl recover: repaired: {t}" for t in done.repaired]
    lines += [f"imexctl recover: note: {t}" for t in done.notes]
    lines += [f"imexctl recover: FAIL {step}: {cause}" for step, cause in done.failures]
    print("\n".join(lines or [f"imexctl recover: nothing left by an earlier boot ({cfg.node})"]))
    return EXIT_NODE_FAULT if done.failures else EXIT_OK


def _cmd_metrics(args: argparse.Namespace) -> int:
    from imexctl.ops.metrics import render, write_textfile

    cfg = _setup(args, stderr_level="error")
    directory = args.textfile or (None if args.stdout else cfg.metrics.textfile_dir)
    if not directory:
        print(render(cfg), end="")
        return EXIT_OK
    try:
        print(f"imexctl metrics: wrote {write_textfile(cfg, directory)}")
    except OSError as exc:     # UnsafePathError too: a group-writable directory is refused
        what = "--textfile" if args.textfile else "[metrics] textfile_dir"
        print(f"imexctl: metrics: {what} {directory}: {exc}", file=sys.stderr)
        return EXIT_USAGE if args.textfile else EXIT_CONFIG
    return EXIT_OK


def _one_try(cfg: Config, timeout_cap_s: float | None = None) -> Config:
    """``cfg`` with one try per Slurm call (and at most ``timeout_cap_s`` each): for
    commands run while slurmctld may be the thing that is down (boot, an incident), where a
    quick answer beats the hooks' retries."""
    from imexctl.base.dataclass import replace

    timeout = cfg.slurm.timeout_s if timeout_cap_s is None else \
        min(cfg.slurm.timeout_s, timeout_cap_s)
    return replace(cfg, slurm=replace(cfg.slurm, attempts=1, timeout_s=timeout))


def _cmd_status(args: argparse.Namespace) -> int:
    from imexctl.ops.status import render_json

    # status usually logs nothing: structlog and the log file only if something does
    cfg = _setup(args, stderr_level="error", defer_logging=True)
    if args.nodes is not None or args.partition:
        from imexctl.ops import clusterstatus
        from imexctl.slurm.adapter import get_adapter
        from imexctl.slurm.hostlist import expand

        try:
            names = expand(args.nodes) if args.nodes is not None else None
        except ValueError as exc:
            print(f"imexctl: status --nodes {args.nodes!r}: {exc}", file=sys.stderr)
            return EXIT_USAGE
        # One try per call (a large node table may take the configured timeout): with
        # slurmctld down this fails in one timeout, not attempts x timeout plus back-off.
        view = clusterstatus.collect(cfg, get_adapter(_one_try(cfg)), names, args.partition)
        print(render_json(view) if args.json else clusterstatus.render_table(view))
        if not view["nodes"]:    # a mistyped partition or node list is not "all is well"
            what = f"--partition {args.partition}" if args.partition else f"--nodes {args.nodes}"
            print(f"imexctl: status {what}: Slurm knows no such tray", file=sys.stderr)
            return EXIT_USAGE
        return EXIT_OK
    from imexctl.ops.status import collect, render_table

    if os.geteuid() != 0:
        # The ownership record, job files and outcomes are root's (a job's channel is
        # private to it): a non-root view would be a wall of "unreadable".
        print("imexctl: status: this tray's IMEX state is readable by root only (each "
              "job's channel is private to the job); run it as root, or ask Slurm's view "
              f"with: imexctl status --nodes {cfg.node}", file=sys.stderr)
        return EXIT_USAGE
    slurm = None
    if not args.local:
        from imexctl.slurm.adapter import get_adapter

        # In an incident slurmctld may be the thing that is down: ask once, briefly.
        try:
            slurm = get_adapter(_one_try(cfg, 5.0))
        except Exception as exc:  # status must answer even when Slurm cannot be used
            print(f"imexctl: status: Slurm not asked ({exc})", file=sys.stderr)
    status = collect(cfg, slurm=slurm)
    print(render_json(status) if args.json else render_table(status))
    return EXIT_OK


def _cmd_doctor(args: argparse.Namespace) -> int:
    import json

    from imexctl.config import load_config
    from imexctl.ops.doctor import FAIL, run
    from imexctl.errors import EXIT_CONFIG

    cfg = load_config(args.config)
    findings = run(cfg, slurm_conf=args.slurm_conf, node_checks=not args.slurm_only)
    fails = sum(f.level == FAIL for f in findings)
    if args.json:
        print(json.dumps({"schema": "imexctl.doctor/1", "node": cfg.node,
                          "failed": fails,
                          "warnings": sum(f.level == "warn" for f in findings),
                          "findings": [f.__dict__ for f in findings]}, indent=2))
    else:
        for f in findings:
            if f.level == "ok" and not args.verbose:
                continue
            print(f"{f.level.upper():<4} {f.check}: {f.message}")
            if f.fix and f.level != "ok":
                print(f"     fix: {f.fix}")
        bad = [f for f in findings if f.level != "ok"]
        print(f"imexctl doctor: {len(findings)} checks, {fails} failed, "
              f"{len(bad) - fails} warnings" + ("" if args.verbose else " (-v lists passes)"))
    return EXIT_CONFIG if any(f.level == FAIL for f in findings) else EXIT_OK


def _cmd_identity(args: argparse.Namespace) -> int:
    from imexctl.ops.identity import publish, show

    cfg = _setup(args, stderr_level="error")
    if args.action == "publish":
        return publish(cfg)
    return show(cfg, args.nodelist, as_json=args.json)


def _cmd_config(args: argparse.Namespace) -> int:
    import json

    from imexctl.config import effective_settings, load_config

    from imexctl.tray.ports import ephemeral_conflicts, ephemeral_range

    cfg = load_config(args.config)
    source = str(cfg.source) if cfg.source else "no configuration file: built-in defaults"
    if args.action == "systemd":
        return _config_systemd(cfg, args)
    if args.action == "check":
        print(f"{source}: OK (node {cfg.node or '?'}, launcher {cfg.imex.launcher}, "
              f"fabric {cfg.fabric.source}, channels {cfg.channels.mode})")
        from imexctl.config import inert_settings

        for text in inert_settings(cfg):
            print(f"warning: {text}")
        imex = cfg.imex
        clash = ephemeral_conflicts([
            (imex.server_port_base, imex.server_port_base + imex.port_span),
            (imex.cmd_port_base, imex.cmd_port_base + imex.port_span)])
        if clash:
            lo, hi = ephemeral_range()
            ranges = ",".join(f"{a}-{b}" for a, b in clash)
            print(f"warning: per-job ports {ranges} lie in this host's ephemeral range "
                  f"{lo}-{hi}: outgoing connections can take them (the daemon then fails to "
                  "bind); move them or reserve them with net.ipv4.ip_local_reserved_ports")
        return EXIT_OK
    settings = effective_settings(cfg)
    if args.json:
        print(json.dumps({"schema": "imexctl.config/1", "source": cfg.source and str(cfg.source),
                          "node": cfg.node,
                          "settings": {s.key: {"value": s.value, "origin": s.origin}
                                       for s in settings}}, indent=2))
        return EXIT_OK
    print(f"# {source}; node {cfg.node or '?'}")
    width = max(len(s.key) for s in settings)
    for s in settings:
        print(f"{s.key:<{width}}  {json.dumps(s.value):<40}  ({s.origin})")
    return EXIT_OK


def _config_systemd(cfg, args: argparse.Namespace) -> int:
    """Print (or, with --write, install) the drop-ins and tmpfiles.d for this config."""
    from pathlib import Path

    from imexctl.base.fsutil import atomic_write
    from imexctl.ops.units import render_all, this_imexctl

    root = Path(args.root or "/")
    files = render_all(cfg, this_imexctl())
    for path, text in files.items():
        if not args.write:
            print(f"# ==> {path} <==\n{text}")
            continue
        target = root / path.relative_to("/")
        try:
            target.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
            atomic_write(target, text, 0o644)
        except OSError as exc:
            print(f"imexctl: config systemd --write: cannot write {target}: "
                  f"{exc.strerror or exc} (run as root, or name a writable --root DIR)",
                  file=sys.stderr)
            return EXIT_USAGE
        print(f"wrote {target}")
    if args.write:
        print("now run: systemctl daemon-reload && systemd-tmpfiles --create "
              "&& systemctl enable imexctl-recover.service")
    return EXIT_OK


def _version_action() -> type:
    import argparse

    class VersionAction(argparse.Action):
        """argparse's ``version`` action, with the text made only when asked for."""
        def __init__(self, option_strings, dest, **kwargs):
            super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS,
                             **kwargs)

        def __call__(self, parser, namespace, values, option_string=None):
            print(version_text())      # stdout, as argparse's own action
            parser.exit()
    return VersionAction


def build_parser() -> argparse.ArgumentParser:
    import argparse

    _Formatter = _formatter_class()
    parser = argparse.ArgumentParser(
        prog="imexctl",
        description="Per-job NVIDIA IMEX domains for Slurm: prolog/epilog lifecycle, "
                    "status and health checks.",
        epilog=_exit_code_table(),
        formatter_class=_Formatter,
    )
    parser.add_argument("--version", action=_version_action(),
                        help="show imexctl's version and what it runs on, and exit")
    parser.add_argument("--config", metavar="FILE",
                        help="configuration file (default: $IMEXCTL_CONFIG, "
                             "/etc/imexctl/imexctl.toml, /etc/slurm/imexctl.toml)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    def add(name: str, help_text: str, handler) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text, description=help_text,
                           epilog=_exit_code_table(),
                           formatter_class=_Formatter)
        p.set_defaults(handler=handler)
        return p

    add("prolog", "slurmd Prolog: bring up this job's IMEX domain on this tray",
        _hook("prolog"))
    add("epilog", "slurmd Epilog: tear down and verify this job's IMEX domain on this tray",
        _hook("epilog"))
    add("prolog-slurmctld", "PrologSlurmctld: group the job's trays by NVLink clique, pick "
        "one channel per group, record the decision in AdminComment",
        _controller_hook("prolog-slurmctld"))
    add("epilog-slurmctld", "EpilogSlurmctld: release the job's IMEX channels",
        _controller_hook("epilog-slurmctld"))
    add("task-prolog", "TaskProlog: export the job's IMEX domain (IMEX_CHANNEL, "
        "IMEX_DOMAIN_NODES, IMEX_CLIQUE, IMEX_DOMAIN_STATE) to its tasks", _cmd_task_prolog)
    health = add("health", "HealthCheckProgram: find stale domains, leaked channels, "
                           "unhealthy fabric; repair what is safe, drain on the rest",
                 _cmd_health)
    health.epilog = HEALTH_EXIT_CODES
    health.add_argument("--no-drain", action="store_true",
                        help="report only: do not drain or resume this node")
    health.add_argument("--json", action="store_true",
                        help="the report as JSON (problems, repairs, notes, drain, exit code)")
    recover = add("recover", "clear what an earlier boot left (domain record, per-job "
                             "directories, channels) and republish the fabric identity; "
                             "run at boot before slurmd", _cmd_recover)
    recover.add_argument("--node", metavar="NAME",
                         help="this tray's Slurm NodeName (default: SLURMD_NODENAME, else the "
                              "NodeName whose NodeHostname is this host in the local "
                              "slurm.conf, else the host name)")
    recover.add_argument("--no-publish", action="store_true",
                         help="do not contact Slurm (identity is not republished)")
    metrics = add("metrics", "Prometheus metrics of this node (stdout, or a textfile for "
                             "node_exporter)", _cmd_metrics)
    out = metrics.add_mutually_exclusive_group()
    out.add_argument("--textfile", metavar="DIR",
                     help="write DIR/imexctl.prom atomically (default: [metrics] "
                          "textfile_dir; stdout when neither is set)")
    out.add_argument("--stdout", action="store_true",
                     help="print the text to stdout even when [metrics] textfile_dir "
                          "is set")
    status = add("status", "show the IMEX domain on this node, or (--nodes/--partition) "
                           "the IMEX picture of many trays from Slurm alone", _cmd_status)
    status.add_argument("--json", action="store_true",
                        help="machine-readable output (schema: docs/status-json.md)")
    status.add_argument("--local", action="store_true",
                        help="node view without asking Slurm (no drain, identity or "
                             "owner-job checks)")
    where = status.add_mutually_exclusive_group()
    where.add_argument("--nodes", metavar="NODELIST",
                       help="cluster view of these trays (Slurm hostlist, e.g. tray[01-18])")
    where.add_argument("--partition", metavar="P", help="cluster view of partition P")
    doctor = add("doctor", "check this node's Slurm configuration, directories, NVML and "
                           "IMEX channel device for what imexctl needs; each finding names "
                           "its fix (exit 3 when any check fails)", _cmd_doctor)
    doctor.add_argument("--slurm-conf", metavar="FILE",
                        help="slurm.conf to read (default: the one the hooks read: "
                             "[paths] slurm_conf, else $SLURM_CONF, /etc/slurm/slurm.conf, "
                             "/run/slurm/conf/slurm.conf, /var/spool/slurmd/conf-cache/"
                             "slurm.conf)")
    doctor.add_argument("--slurm-only", action="store_true",
                        help="on the controller: the slurm.conf checks and PrologSlurmctld's "
                             "channel table directory (no GPU, no IMEX checks)")
    doctor.add_argument("--json", action="store_true", help="machine-readable findings")
    doctor.add_argument("-v", "--verbose", action="store_true", help="list passing checks too")
    identity = add("identity", "publish or show trays' NVLink fabric identity in Slurm",
                   _cmd_identity)
    identity.add_argument("action", choices=("publish", "show"))
    identity.add_argument("nodelist", nargs="?")
    identity.add_argument("--json", action="store_true")
    topo = add("topology", "render Slurm's topology.conf / topology.yaml for topology/block "
                           "from published identities: one block per NVLink clique",
               _cmd_topology)
    topo.add_argument("--format", choices=("conf", "yaml"), default="conf",
                      help="topology.conf (default) or topology.yaml (Slurm 25.05+)")
    topo.add_argument("--nodes", metavar="HOSTLIST",
                      help="nodes to place (default: every node of the local slurm.conf)")
    topo.add_argument("--block-sizes", metavar="N[,N...]",
                      help="BlockSizes (default: smallest block, doubled per level)")
    topo.add_argument("--name", default="nvlink", help="topology name in topology.yaml")
    topo.add_argument("--check", metavar="FILE",
                      help="compare with FILE; exit 7 naming the trays that moved")
    topo.add_argument("-o", "--output", metavar="FILE", help="write FILE atomically")
    config = add("config", "configuration commands", None)
    config.add_argument("action", choices=("check", "show", "systemd"),
                        help="check: parse and validate the configuration file; "
                             "show: every effective setting and where it came from "
                             "(file or default); systemd: the unit drop-ins and "
                             "tmpfiles.d file for the configured paths")
    config.add_argument("--json", action="store_true", help="show: machine-readable output")
    config.add_argument("--write", action="store_true",
                        help="systemd: install the files instead of printing them")
    config.add_argument("--root", metavar="DIR", help="systemd --write: under DIR, not /")
    config.set_defaults(handler=_cmd_config)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """The documented exit code, whatever became of stdout/stderr (imexctl.cli.stdio)."""
    from imexctl.cli.stdio import guarded

    with guarded():
        return _main(argv)


# The cyclic collector's first-generation threshold for one command's life (Python's is
# 700 allocations). A hook loads 20 to 40 modules whose tens of thousands of objects live
# until it exits, and at 700 the collector scanned them dozens of times per hook, freeing
# next to nothing: 3 ms of the prolog's CPU, 1-3 ms of each other hook's (bench/README).
# At this threshold a hook runs through without a pass, and a long wait (wait-ready, a
# stop's grace) still collects its cycles every 100,000 allocations.
GC_THRESHOLD = 100_000


def short_lived() -> None:
    """Tune the interpreter for one command's life; :func:`entry` calls it first. Not
    done on import: a long-lived host of the library (pytest, a service) keeps its own."""
    import gc

    gc.set_threshold(GC_THRESHOLD)


def entry() -> None:
    """The ``imexctl`` executable (and ``python -m imexctl``): :func:`main`, then exit
    without the interpreter's teardown of every module, which cost each hook 3-5 ms of
    wall time after its work was done. Nothing is left unwritten by then: log events are
    flushed as they are written, stdout and stderr on the way out of ``guarded``, and
    state files are replaced atomically before the hook returns. imexctl registers no
    ``atexit`` handler (tests/unit/test_cli.py holds both)."""
    import os

    short_lived()
    rc = main()
    os._exit(rc)


# The commands slurmd, slurmctld and admins run all the time, and the flags each takes:
# parsed by hand, because building argparse's parser with every subcommand costs about
# 6 ms of every hook on every tray. Anything else or unusual (--help, a typo, an
# abbreviation) goes to argparse; tests/unit/test_cli_fast.py holds both to one answer.
FAST_FLAGS: dict[str, tuple[str, ...]] = {
    "prolog": (), "epilog": (), "prolog-slurmctld": (), "epilog-slurmctld": (),
    "task-prolog": (), "health": ("--json", "--no-drain"), "status": ("--json", "--local"),
}


def _fast_handler(command: str) -> Callable:
    if command in ("prolog", "epilog"):
        return _hook(command)
    if command in ("prolog-slurmctld", "epilog-slurmctld"):
        return _controller_hook(command)
    return {"task-prolog": _cmd_task_prolog, "health": _cmd_health,
            "status": _cmd_status}[command]


def version_text() -> str:
    """``imexctl <version>``, then what it runs on: the versions a bug report needs."""
    import platform
    from importlib import metadata

    lines = [f"imexctl {__version__}", f"python {platform.python_version()} ({sys.executable})"]
    for dist in ("structlog", "nvidia-ml-py", "pyslurm", "psutil", "tenacity"):
        try:
            lines.append(f"{dist} {metadata.version(dist)}")
        except metadata.PackageNotFoundError:
            lines.append(f"{dist} not installed")
        except Exception as exc:  # noqa: BLE001 - a broken install is reported, not raised
            lines.append(f"{dist} unreadable ({type(exc).__name__})")
    return "\n".join(lines)


def _print_version(args: argparse.Namespace) -> int:
    print(version_text())    # argparse's --version action prints the same text
    return EXIT_OK


def fast_args(argv: Sequence[str]):
    """The namespace argparse would build for a common command line; None otherwise."""
    from types import SimpleNamespace

    argv, config = list(argv), None
    if argv == ["--version"]:    # probes and `imexctl --version` in every bug report
        return SimpleNamespace(command=None, handler=_print_version)
    if len(argv) >= 2 and argv[0] == "--config" and not argv[1].startswith("-"):
        config, argv = argv[1], argv[2:]
    elif argv and argv[0].startswith("--config=") and len(argv[0]) > len("--config="):
        config, argv = argv[0].split("=", 1)[1], argv[1:]
    if not argv or argv[0] not in FAST_FLAGS:
        return None
    command, flags = argv[0], argv[1:]
    allowed = FAST_FLAGS[command]
    if len(set(flags)) != len(flags) or not set(flags) <= set(allowed):
        return None
    extra = {flag[2:].replace("-", "_"): flag in flags for flag in allowed}
    if command == "status":
        extra.update(nodes=None, partition=None)
    return SimpleNamespace(config=config, command=command, handler=_fast_handler(command),
                           **extra)


def _main(argv: Sequence[str] | None) -> int:
    args = fast_args(sys.argv[1:] if argv is None else argv)
    if args is None:
        parser = build_parser()
        try:
            args = parser.parse_args(argv)
        except SystemExit as exc:  # argparse exits 2 on usage errors, 0 on --help
            return int(exc.code or 0)
    if not getattr(args, "handler", None):
        build_parser().print_usage(sys.stderr)
        print("imexctl: a COMMAND is required (see imexctl --help)", file=sys.stderr)
        return EXIT_USAGE
    try:
        return args.handler(args)
    except ImexctlError as exc:
        for line in str(exc).splitlines() or [""]:   # a config lists every error it has
            print(f"imexctl: {line}", file=sys.stderr)
        return exc.exit_code
