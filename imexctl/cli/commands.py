"""The admin commands: status, doctor, identity, config, topology, recover, metrics. No
hook imports this module."""

from __future__ import annotations

import os
import re
import sys

from imexctl.cli.common import one_try, setup
from imexctl.errors import EXIT_CONFIG, EXIT_NODE_FAULT, EXIT_OK, EXIT_USAGE, ImexctlError

TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse


def cmd_topology(args: argparse.Namespace) -> int:
    from imexctl.ops import topoconf
    from imexctl.errors import EXIT_DRIFT
    from imexctl.base.fsutil import atomic_write
    from imexctl.slurm.adapter import get_adapter
    from imexctl.slurm.hostlist import expand
    from imexctl.slurm.localconf import LocalConfError, load
    from imexctl.rules.cliques import identity_from_extra

    cfg = setup(args, stderr_level="error")
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
        identities = {n: identity_from_extra(records[n].extra if n in records else "")
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


def boot_node_name(args: argparse.Namespace) -> str | None:
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


def cmd_recover(args: argparse.Namespace) -> int:
    from imexctl.ops.health import default_teardown
    from imexctl.ops.recover import recover
    from imexctl.slurm.adapter import get_adapter

    from imexctl.slurm.records import NODE_NAME

    if args.node is not None and not re.fullmatch(NODE_NAME, args.node):
        print(f"imexctl: recover --node {args.node!r} is not a valid node name (letters, "
              "digits, '.', '_', '-'; at most 64)", file=sys.stderr)
        return EXIT_USAGE
    cfg = setup(args, node=args.node or boot_node_name(args), stderr_level="error")
    slurm, unusable = None, None
    if not args.no_publish:
        try:   # one try per Slurm call: at boot slurmctld may be down, and slurmd waits
            slurm = get_adapter(one_try(cfg))
        except ImexctlError as exc:   # the local recovery must run whatever Slurm's state
            unusable = f"fabric identity not republished: {exc}"
    dry_run = bool(getattr(args, "dry_run", False))
    done = recover(cfg, default_teardown(cfg), slurm, dry_run=dry_run)
    if unusable:
        done.notes.append(unusable)
    lines = [f"imexctl recover: repaired: {t}" for t in done.repaired]
    lines += [f"imexctl recover: would: {a.step}: {a.what}" for a in done.actions]
    lines += [f"imexctl recover: note: {t}" for t in done.notes]
    lines += [f"imexctl recover: FAIL {step}: {cause}" for step, cause in done.failures]
    if dry_run:
        lines.append(f"imexctl recover: dry run: nothing changed ({cfg.node})")
    print("\n".join(lines or [f"imexctl recover: nothing left by an earlier boot ({cfg.node})"]))
    return EXIT_NODE_FAULT if done.failures else EXIT_OK


def cmd_metrics(args: argparse.Namespace) -> int:
    from imexctl.ops.metrics import render, write_textfile

    cfg = setup(args, stderr_level="error")
    directory = args.textfile or (None if args.stdout else cfg.metrics.textfile_dir)
    if getattr(args, "controller", False):
        return _controller_metrics(cfg, args, directory)
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


def _controller_metrics(cfg, args: argparse.Namespace, directory) -> int:
    """``metrics --controller``: the slurmctld host's metrics; a file it cannot read is
    a series in the text and one ``imexctl:`` line on stderr, never a failure."""
    from imexctl.ops import controller_metrics

    try:
        if not directory:
            text, problems = controller_metrics.render(cfg)
            print(text, end="")
        else:
            target, problems = controller_metrics.write_textfile(cfg, directory)
            print(f"imexctl metrics: wrote {target}")
    except OSError as exc:     # UnsafePathError too: a group-writable directory is refused
        what = "--textfile" if args.textfile else "[metrics] textfile_dir"
        print(f"imexctl: metrics: {what} {directory}: {exc}", file=sys.stderr)
        return EXIT_USAGE if args.textfile else EXIT_CONFIG
    for problem in problems:
        print(f"imexctl: metrics --controller: {problem}", file=sys.stderr)
    return EXIT_OK


def cmd_status(args: argparse.Namespace) -> int:
    from imexctl.cli import display

    # status usually logs nothing: structlog and the log file only if something does
    cfg = setup(args, stderr_level="error", defer_logging=True)
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
        view = clusterstatus.collect(cfg, get_adapter(one_try(cfg)), names, args.partition)
        print(display.status_json(view) if args.json else display.cluster_table(view))
        if not view["nodes"]:    # a mistyped partition or node list is not "all is well"
            what = f"--partition {args.partition}" if args.partition else f"--nodes {args.nodes}"
            print(f"imexctl: status {what}: Slurm knows no such tray", file=sys.stderr)
            return EXIT_USAGE
        return EXIT_OK
    from imexctl.ops.status import collect

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
            slurm = get_adapter(one_try(cfg, 5.0))
        except Exception as exc:  # status must answer even when Slurm cannot be used
            print(f"imexctl: status: Slurm not asked ({exc})", file=sys.stderr)
    status = collect(cfg, slurm=slurm)
    print(display.status_json(status) if args.json else display.status_table(status))
    return EXIT_OK


def cmd_doctor(args: argparse.Namespace) -> int:
    import json

    from imexctl.config import load_config
    from imexctl.ops.doctor import FAIL, run
    from imexctl.errors import EXIT_CONFIG

    cfg = load_config(args.config)
    slurm = None
    if cfg.imex.lifetime.value == "persistent" and not args.slurm_only:
        from imexctl.slurm.adapter import get_adapter
        try:    # the clique's published lifetimes: one query, 5 s at most
            slurm = get_adapter(one_try(cfg, 5.0))
        except Exception:  # noqa: BLE001 - doctor reports Slurm not asked
            slurm = None
    findings = run(cfg, slurm_conf=args.slurm_conf, node_checks=not args.slurm_only,
                   slurm=slurm)
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


def cmd_identity(args: argparse.Namespace) -> int:
    from imexctl.cli import display
    from imexctl.ops.identity import publish, show

    cfg = setup(args, stderr_level="error")
    if args.action == "publish":
        done = publish(cfg)
        failed = done.exit_code != EXIT_OK     # a failure's line names the program
        print("\n".join(f"imexctl: {line}" if failed else line for line in done.lines))
        return done.exit_code
    rows = show(cfg, args.nodelist)
    print(display.identity_json(rows) if args.json else display.identity_table(rows))
    return EXIT_OK


def cmd_config(args: argparse.Namespace) -> int:
    import json

    from imexctl.config import load_config
    from imexctl.ops.settings import effective_settings

    from imexctl.tray.ports import ephemeral_conflicts, ephemeral_range

    cfg = load_config(args.config)
    source = str(cfg.source) if cfg.source else "no configuration file: built-in defaults"
    if args.action == "systemd":
        return config_systemd(cfg, args)
    if args.action == "check":
        print(f"{source}: OK (node {cfg.node or '?'}, launcher {cfg.imex.launcher}, "
              f"fabric {cfg.fabric.source}, channels {cfg.channels.mode})")
        from imexctl.ops.settings import inert_settings

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


def config_systemd(cfg, args: argparse.Namespace) -> int:
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


def parse_duration(text: str) -> float:
    """``90``, ``90s``, ``30m``, ``2h``, ``1d`` -> seconds; ValueError otherwise."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*", text or "")
    if match is None:
        raise ValueError(f"{text!r} is not a duration (90s, 30m, 2h)")
    return float(match.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}[
        match.group(2)]


def cmd_maintain(args: argparse.Namespace) -> int:
    import json

    from imexctl.config import Lifetime
    from imexctl.errors import EXIT_PENDING, EXIT_REFUSED
    from imexctl.ops import maintain
    from imexctl.slurm.adapter import get_adapter
    from imexctl.slurm.hostlist import compress
    from imexctl.rules.cliques import CLIQUE_KEY_RE
    from imexctl.slurm.records import NODE_NAME

    if args.node is not None and not re.fullmatch(NODE_NAME, args.node):
        print(f"imexctl: maintain --node {args.node!r} is not a valid node name",
              file=sys.stderr)
        return EXIT_USAGE
    if args.clique is not None and not re.fullmatch(CLIQUE_KEY_RE, args.clique):
        print(f"imexctl: maintain --clique {args.clique!r} is not a clique key (<cluster "
              "uuid>.<clique id>, as `imexctl identity show` prints it)", file=sys.stderr)
        return EXIT_USAGE
    try:
        deadline_s = parse_duration(args.deadline) if args.deadline else None
        if not 0 < args.poll <= 3600:
            raise ValueError(f"--poll {args.poll:g}: give 0 < SECONDS <= 3600")
    except ValueError as exc:
        print(f"imexctl: maintain: {exc}", file=sys.stderr)
        return EXIT_USAGE
    cfg = setup(args, stderr_level="error")
    slurm = get_adapter(cfg)
    where = {"clique": args.clique, "node": args.node}
    if args.abandon:
        if args.dry_run:
            print("imexctl: maintain: --abandon --dry-run: nothing to show; run "
                  "`imexctl maintain --no-wait --dry-run ...`", file=sys.stderr)
            return EXIT_USAGE
        key, resumed = maintain.abandon(slurm, **where)
        print(f"imexctl maintain: clique {key}: maintenance given up; "
              + (f"resumed {compress(resumed)}" if resumed else
                 "no tray was drained by imexctl maintain"))
        return EXIT_OK
    change = (maintain.Change.membership() if args.membership
              else maintain.Change.tls() if args.tls
              else maintain.Change.switch(Lifetime(args.lifetime)))
    shown: list[str] = []

    def show(progress: maintain.Progress) -> None:   # each pass: only what is new
        if args.json:
            return
        for line in maintain_lines(progress, args.dry_run):
            if line not in shown:
                shown.append(line)
                print(line, flush=True)

    try:
        progress = maintain.run(slurm, change, **where, wait=not args.no_wait,
                                deadline_s=deadline_s, poll_s=args.poll,
                                dry_run=args.dry_run, on_pass=show)
    except KeyboardInterrupt:
        print("imexctl maintain: interrupted: the clique's trays stay drained; run the "
              "same command again to continue, or with --abandon to resume them",
              file=sys.stderr)
        return EXIT_PENDING
    if args.json:
        print(json.dumps(progress.to_json(), indent=2, sort_keys=True))
    else:
        print(maintain_end(progress, args))
    if progress.phase == maintain.REFUSED:
        return EXIT_REFUSED
    return EXIT_OK if progress.phase == maintain.DONE or args.dry_run else EXIT_PENDING


def maintain_lines(progress, dry_run: bool) -> list[str]:
    """What one pass of ``imexctl maintain`` found and did, as an admin reads it."""
    from imexctl.ops import maintain
    from imexctl.slurm.hostlist import compress

    change = {maintain.MEMBERSHIP: "membership change", maintain.TLS: "TLS change"}.get(
        progress.change.kind, f"switch to imex.lifetime = {progress.change.lifetime}")
    head = "imexctl maintain:" + (" dry run:" if dry_run else "")
    lines = [f"{head} clique {progress.clique}, {change}: trays "
             f"{compress(t.name for t in progress.trays)} (maintenance {progress.token})"]
    for tray in progress.held:
        lines.append(f"{head} left alone: {tray.name} is {tray.state} for another reason "
                     f"({tray.reason or 'none'}): not maintained, not resumed")
    if progress.phase == maintain.REFUSED:
        return lines
    if progress.drained:
        lines.append(f"{head} drained {compress(progress.drained)}")
    lines += [f"{head} would {what}" for what in progress.would]
    if progress.jobs:
        lines.append(f"{head} waiting for jobs to end: {progress.job_list()}")
    for tray in progress.trays:
        if tray.waiting:
            lines.append(f"{head} waiting for {tray.name}: {tray.waiting}")
    if progress.error:
        lines.append(f"{head} Slurm did not answer ({progress.error}): looking again")
    return lines


def maintain_end(progress, args: argparse.Namespace) -> str:
    """The closing line: what was done, or what is left and what to run."""
    from imexctl.ops import maintain
    from imexctl.slurm.hostlist import compress

    maintained = compress(progress.maintained) or "none"
    if progress.phase == maintain.REFUSED:
        return (f"imexctl maintain: REFUSED: {progress.job_list()} still running on clique "
                f"{progress.clique}; a lifetime switch under live domains breaks them. "
                "Nothing was drained. Run it again once they end (or after scontrol "
                "update nodename=... state=drain reason=... lets them finish)")
    if progress.phase == maintain.DONE:
        if args.dry_run:
            return "imexctl maintain: dry run: nothing changed"
        what = (f"every tray runs digest {progress.digest}" if progress.digest
                else f"every tray runs imex.lifetime = {progress.change.lifetime}")
        held = compress(t.name for t in progress.held)
        return (f"imexctl maintain: done: clique {progress.clique}: {what}; resumed "
                f"{compress(progress.resumed) or 'none'} (maintained {maintained})"
                + (f"; {held} left alone: run it again once back in service" if held else ""))
    if args.dry_run:
        return "imexctl maintain: dry run: nothing changed"
    why = ("--deadline passed" if progress.phase == maintain.DEADLINE else "--no-wait")
    left = "jobs to end" if progress.phase == maintain.WAITING_JOBS else "trays to restart"
    return (f"imexctl maintain: NOT DONE ({why}; waiting for {left}): {maintained} stay "
            "drained with 'imexctl: maintain/...'. Run the same command again to continue, "
            "or with --abandon instead of the change to resume them")
