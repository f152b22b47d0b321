"""The hooks Slurm runs, each with its failure policy: a node prolog or epilog drains with
an ``imexctl:`` reason; PrologSlurmctld and EpilogSlurmctld fail open (exit 0); the
TaskProlog never fails the task; health is NHC's HealthCheckProgram."""

from __future__ import annotations

import sys
import time

from imexctl.cli.common import setup, start_logging
from imexctl.errors import EXIT_OK, EXIT_USAGE, ImexctlError

TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse
    from typing import Callable


def node_hook(kind: str) -> Callable[[argparse.Namespace], int]:
    """prolog / epilog on a tray: context from slurmd's environment, then the lifecycle."""
    def run(args: argparse.Namespace) -> int:
        import os

        from imexctl.base import log
        from imexctl.slurm.deferred import deferred_adapter
        from imexctl.slurm.context import job_context_from_env

        # The epilog needs no node list, and Slurm does not always give one (context.py).
        ctx = job_context_from_env(os.environ, hook="node", need_nodelist=kind == "prolog")
        cfg = setup(args, node=ctx.node)
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
        after_hook(cfg, kind, ctx.job_id, started)
        return rc
    return run


def after_hook(cfg, kind: str, job_id: int, started: float) -> None:
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


def controller_hook(kind: str) -> Callable[[argparse.Namespace], int]:
    """PrologSlurmctld / EpilogSlurmctld: exit 0 whatever happens (audit F-08).

    A non-zero PrologSlurmctld requeues a batch job forever, so every error, of any type,
    is reported and the node prologs, which fall back to published identities, decide.
    """
    def run(args: argparse.Namespace) -> int:
        started, cfg = time.monotonic(), None
        try:
            import os

            from imexctl.controller import slurmctld as controller
            from imexctl.base import log
            from imexctl.config import load_config
            from imexctl.slurm.context import job_context_from_env

            ctx = job_context_from_env(os.environ, hook="controller",
                                       need_nodelist=kind == "prolog-slurmctld")
            cfg = load_config(args.config)  # node: this host (slurmctld runs no slurmd)
            steps = controller.Steps(started)
            if kind == "prolog-slurmctld":
                from imexctl.slurm.adapter import get_adapter

                slurm = get_adapter(cfg)
                steps.lap("config")
                # Every job start waits for this hook: its Slurm queries go out before
                # logging (structlog) is set up, and slurmctld answers meanwhile.
                sent = controller.send_queries(cfg, slurm, ctx)
                steps.lap("send-queries")
                start_logging(cfg, controller=True)
                log.bind(job_id=ctx.job_id, restart_count=ctx.restart_count, hook=kind)
                steps.lap("logging")
                return controller.prolog_slurmctld(cfg, slurm, ctx, sent, started, steps)
            # EpilogSlurmctld asks Slurm only when a reconciliation is due: its adapter
            # is picked then (as the node epilog's)
            from imexctl.slurm.deferred import deferred_adapter

            slurm = deferred_adapter(cfg)
            steps.lap("config")
            # set up by the first line: a job that held no channel writes none
            start_logging(cfg, controller=True, defer=True)
            return controller.epilog_slurmctld(cfg, slurm, ctx, started, steps)
        except Exception as exc:  # noqa: BLE001 - fail open, whatever it was
            what = str(exc) if isinstance(exc, ImexctlError) else f"{type(exc).__name__}: {exc}"
            print(f"imexctl: {kind}: {what} (failing open: the node prologs decide)",
                  file=sys.stderr)
            _count_fail_open(cfg, args, kind, started)
            return EXIT_OK
    return run


def _count_fail_open(cfg, args: argparse.Namespace, kind: str, started: float) -> None:
    """Count a controller hook that failed before its own code ran (its environment, the
    config), where the controller metrics live; nothing when the config cannot be read."""
    try:
        from imexctl.config import load_config
        from imexctl.controller import slurmctld as controller

        cfg = cfg if cfg is not None else load_config(args.config)
        tally = controller.new_tally(cfg, kind, started)
        tally.failed_open = True
        error = tally.save()
        if error:
            print(f"imexctl: {kind}: controller metrics not recorded: {error}", file=sys.stderr)
    except Exception:  # noqa: BLE001 - the hook fails open regardless
        pass


def cmd_task_prolog(args: argparse.Namespace) -> int:
    """TaskProlog: stdout is parsed by slurmstepd, so only export/unset lines go there;
    it runs as the job's user, once per task, and never fails the task."""
    try:
        import os

        from imexctl.config import load_config
        from imexctl.lifecycle.taskprolog import task_lines

        # the task's environment is the job user's: its $IMEXCTL_CONFIG would let a job
        # point the TaskProlog at facts of its own making (docs/security.md)
        lines = task_lines(load_config(args.config, trust_env=False), os.environ)
    except Exception as exc:  # noqa: BLE001 - the task must start regardless
        print(f"imexctl: task-prolog: {exc}", file=sys.stderr)
        lines = ["export IMEX_DOMAIN_STATE=UNKNOWN"]
    if lines:
        print("\n".join(lines))
    return EXIT_OK


def cmd_health(args: argparse.Namespace) -> int:
    from imexctl.cli.display import health_json, health_lines
    from imexctl.ops.health import run_checks
    from imexctl.slurm.adapter import get_adapter

    chosen = [flag for flag in ("no_drain", "dry_run", "repair_only") if getattr(args, flag)]
    if len(chosen) > 1:
        print("imexctl: health: " + " and ".join(f"--{f.replace('_', '-')}" for f in chosen)
              + " exclude each other", file=sys.stderr)
        return EXIT_USAGE
    mode = chosen[0].replace("_", "-") if chosen else "full"
    cfg = setup(args, stderr_level="error")
    report = run_checks(cfg, get_adapter(cfg), mode=mode)
    print(health_json(report) if args.json else "\n".join(health_lines(report)))
    return report.exit_code
