"""The ``imexctl`` process: how it starts (the fast path for the commands slurmd,
slurmctld and admins run all the time) and how it ends (the documented exit code, never a
traceback). The hooks live in ``cli/hooks.py``, the admin commands in ``cli/commands.py``,
argparse in ``cli/parser.py`` and what is printed in ``cli/display.py``: a hook imports
none of the admin commands and no argparse (lazy by layout)."""

from __future__ import annotations

import sys

from imexctl.cli.common import version_text
from imexctl.errors import EXIT_INTERNAL, EXIT_OK, EXIT_USAGE, ImexctlError

TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse
    from typing import Callable, Sequence


def main(argv: Sequence[str] | None = None) -> int:
    """The documented exit code, whatever became of stdout/stderr (imexctl.cli.stdio)."""
    from imexctl.cli.stdio import guarded

    with guarded():
        return _main(argv)


# The cyclic collector's first-generation threshold for one command's life (Python's is
# 700 allocations). A hook loads 20 to 40 modules whose tens of thousands of objects live
# until it exits, and at 700 the collector scanned them dozens of times per hook, freeing
# next to nothing.
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
    without the interpreter's teardown of every module, which cost each hook wall time
    after its work was done. Nothing is left unwritten by then: log events are
    flushed as they are written, stdout and stderr on the way out of ``guarded``, and
    state files are replaced atomically before the hook returns. imexctl registers no
    ``atexit`` handler (tests/unit/test_cli.py holds both)."""
    import os

    short_lived()
    rc = main()
    os._exit(rc)


# The commands slurmd, slurmctld and admins run all the time, and the flags each takes:
# parsed by hand, because building argparse's parser with every subcommand would be
# paid by every hook on every tray. Anything else or unusual (--help, a typo, an
# abbreviation) goes to argparse; tests/unit/test_cli_fast.py holds both to one answer.
FAST_FLAGS: dict[str, tuple[str, ...]] = {
    "prolog": (), "epilog": (), "prolog-slurmctld": (), "epilog-slurmctld": (),
    "task-prolog": (),
    "health": ("--json", "--no-drain", "--dry-run", "--repair-only"), "status": ("--json", "--local"),
}


def _fast_handler(command: str) -> Callable:
    """The handler of a fast-path command; a hook imports its own module only (the admin
    commands stay unloaded)."""
    if command == "status":
        from imexctl.cli.commands import cmd_status
        return cmd_status
    from imexctl.cli import hooks

    if command in ("prolog", "epilog"):
        return hooks.node_hook(command)
    if command in ("prolog-slurmctld", "epilog-slurmctld"):
        return hooks.controller_hook(command)
    return {"task-prolog": hooks.cmd_task_prolog, "health": hooks.cmd_health}[command]


def print_version(args: argparse.Namespace) -> int:
    print(version_text())    # argparse's --version action prints the same text
    return EXIT_OK


def fast_args(argv: Sequence[str]):
    """The namespace argparse would build for a common command line; None otherwise."""
    from types import SimpleNamespace

    argv, config = list(argv), None
    if argv == ["--version"]:    # probes and `imexctl --version` in every bug report
        return SimpleNamespace(command=None, handler=print_version)
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
    extra: dict[str, object] = {flag[2:].replace("-", "_"): flag in flags for flag in allowed}
    if command == "status":
        extra.update(nodes=None, partition=None)
    return SimpleNamespace(config=config, command=command, handler=_fast_handler(command),
                           **extra)


def _main(argv: Sequence[str] | None) -> int:
    args = fast_args(sys.argv[1:] if argv is None else argv)
    if args is None:
        from imexctl.cli.parser import build_parser

        parser = build_parser()
        try:
            args = parser.parse_args(argv)
        except SystemExit as exc:  # argparse exits 2 on usage errors, 0 on --help
            return int(exc.code or 0)
    if not getattr(args, "handler", None):
        from imexctl.cli.parser import build_parser

        build_parser().print_usage(sys.stderr)
        print("imexctl: a COMMAND is required (see imexctl --help)", file=sys.stderr)
        return EXIT_USAGE
    try:
        return args.handler(args)
    except ImexctlError as exc:
        for line in str(exc).splitlines() or [""]:   # a config lists every error it has
            print(f"imexctl: {line}", file=sys.stderr)
        return exc.exit_code
    except Exception as exc:  # noqa: BLE001 - a bug: one line here, the traceback logged
        import os

        from imexctl.base import log

        if os.environ.get("IMEXCTL_TRACEBACK") == "1":
            raise
        logged = log.configured()
        if logged:
            log.get_logger().exception("internal error", command=args.command,
                                       error=f"{type(exc).__name__}: {exc}")
        print(f"imexctl: internal error in '{args.command}': {type(exc).__name__}: {exc} "
              "(a bug in imexctl; " + ("the traceback is in the log)" if logged else
                                       "IMEXCTL_TRACEBACK=1 shows its traceback)"),
              file=sys.stderr)
        return EXIT_INTERNAL
