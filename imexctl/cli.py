"""Command line: thin argument parsing over the library; heavy imports stay lazy.

Every job start pays this start-up time on every tray, so only the subcommand that
runs imports what it needs.
"""

from __future__ import annotations

import argparse
import sys
from typing import Callable, Sequence

from imexctl import __version__
from imexctl.errors import (EXIT_CODES, EXIT_OK, EXIT_USAGE, ImexctlError,
                            NotImplementedYet)


def _exit_code_table() -> str:
    rows = "\n".join(f"  {code}  {text}" for code, text in EXIT_CODES.items())
    return f"exit codes:\n{rows}"


def _not_yet(name: str) -> Callable[[argparse.Namespace], int]:
    def run(_args: argparse.Namespace) -> int:
        raise NotImplementedYet(f"'imexctl {name}' is not implemented yet")
    return run


def _cmd_config_check(args: argparse.Namespace) -> int:
    from imexctl.config import load_config

    cfg = load_config(args.config)
    print(f"{cfg.source}: OK (node {cfg.node or '?'}, launcher {cfg.imex.launcher}, "
          f"fabric {cfg.fabric.source}, channels {cfg.channels.mode})")
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="imexctl",
        description="Per-job NVIDIA IMEX domains for Slurm: prolog/epilog lifecycle, "
                    "status and health checks.",
        epilog=_exit_code_table(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"imexctl {__version__}")
    parser.add_argument("--config", metavar="FILE",
                        help="configuration file (default: $IMEXCTL_CONFIG, "
                             "/etc/imexctl/imexctl.toml, /etc/slurm/imexctl.toml)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    def add(name: str, help_text: str, handler) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text, description=help_text,
                           epilog=_exit_code_table(),
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        p.set_defaults(handler=handler)
        return p

    add("prolog", "slurmd Prolog: bring up this job's IMEX domain on this tray",
        _not_yet("prolog"))
    add("epilog", "slurmd Epilog: tear down and verify this job's IMEX domain on this tray",
        _not_yet("epilog"))
    add("prolog-slurmctld", "PrologSlurmctld: check the allocation forms one NVLink clique",
        _not_yet("prolog-slurmctld"))
    add("epilog-slurmctld", "EpilogSlurmctld: release cluster-side IMEX resources of the job",
        _not_yet("epilog-slurmctld"))
    add("health", "HealthCheckProgram: find stale domains, leaked channels, unhealthy fabric",
        _not_yet("health"))
    status = add("status", "show the IMEX domain(s) on this node", _not_yet("status"))
    status.add_argument("--json", action="store_true", help="machine-readable output")
    identity = add("identity", "publish or show trays' NVLink fabric identity in Slurm",
                   _not_yet("identity"))
    identity.add_argument("action", choices=("publish", "show"))
    identity.add_argument("nodelist", nargs="?")
    identity.add_argument("--json", action="store_true")
    config = add("config", "configuration commands", None)
    config.add_argument("action", choices=("check",),
                        help="check: parse and validate the configuration file")
    config.set_defaults(handler=_cmd_config_check)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse exits 2 on usage errors, 0 on --help
        return int(exc.code or 0)
    if not getattr(args, "handler", None):
        parser.print_usage(sys.stderr)
        print("imexctl: a COMMAND is required (see imexctl --help)", file=sys.stderr)
        return EXIT_USAGE
    try:
        return args.handler(args)
    except ImexctlError as exc:
        print(f"imexctl: {exc}", file=sys.stderr)
        return exc.exit_code
