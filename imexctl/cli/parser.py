"""The argparse tree of ``imexctl``: every command, its options and help text. Only the
argparse path (``--help``, an unusual command line) builds it; the fast path does not."""

from __future__ import annotations

import argparse

from imexctl.cli import commands, hooks
from imexctl.cli.common import version_text
from imexctl.config import Lifetime
from imexctl.errors import EXIT_CODES


HEALTH_EXIT_CODES = """exit codes (HealthCheckProgram, NHC):
  0  healthy; repairs made, if any, are listed
  1  problem found: node drained with 'imexctl: health/<check>: <cause>', unless
     --repair-only, --no-drain or --dry-run, the node already carries another drain
     (that one is kept), or a prolog/epilog holds the drain lock (left to the next run)
  2  usage error (--no-drain, --dry-run and --repair-only exclude each other)
  3  configuration error"""


def exit_code_table() -> str:
    rows = "\n".join(f"  {code}  {text}" for code, text in EXIT_CODES.items())
    return f"exit codes:\n{rows}"


def version_action() -> type:
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
    parser = argparse.ArgumentParser(
        prog="imexctl",
        description="Per-job NVIDIA IMEX domains for Slurm: prolog/epilog lifecycle, "
                    "status and health checks.",
        epilog=exit_code_table(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action=version_action(),
                        help="show imexctl's version and what it runs on, and exit")
    parser.add_argument("--config", metavar="FILE",
                        help="configuration file (default: $IMEXCTL_CONFIG, "
                             "/etc/imexctl/imexctl.toml, /etc/slurm/imexctl.toml; "
                             "task-prolog skips $IMEXCTL_CONFIG, the job user's)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    def add(name: str, help_text: str, handler) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text, description=help_text,
                           epilog=exit_code_table(),
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        p.set_defaults(handler=handler)
        return p

    add("prolog", "slurmd Prolog: bring up this job's IMEX domain on this tray",
        hooks.node_hook("prolog"))
    add("epilog", "slurmd Epilog: tear down and verify this job's IMEX domain on this tray",
        hooks.node_hook("epilog"))
    add("prolog-slurmctld", "PrologSlurmctld: group the job's trays by NVLink clique, pick "
        "one channel per group, record the decision in AdminComment",
        hooks.controller_hook("prolog-slurmctld"))
    add("epilog-slurmctld", "EpilogSlurmctld: release the job's IMEX channels",
        hooks.controller_hook("epilog-slurmctld"))
    add("task-prolog", "TaskProlog: export the job's IMEX domain (IMEX_CHANNEL, "
        "IMEX_DOMAIN_NODES, IMEX_CLIQUE, IMEX_DOMAIN_STATE) to its tasks", hooks.cmd_task_prolog)
    health = add("health", "HealthCheckProgram: find stale domains, leaked channels, "
                           "unhealthy fabric; repair what is safe, drain on the rest",
                 hooks.cmd_health)
    health.epilog = HEALTH_EXIT_CODES
    health.add_argument("--no-drain", action="store_true",
                        help="report only: change nothing (no repair, no drain or resume, "
                             "no identity publish, no state file); exit codes as usual")
    health.add_argument("--dry-run", action="store_true",
                        help="change nothing, and list each change a full run would make "
                             "(repairs, the drain or resume with its reason)")
    health.add_argument("--repair-only", action="store_true",
                        help="repair what is safe, never drain or resume this node (for "
                             "NHC, which drains on the exit code)")
    health.add_argument("--json", action="store_true",
                        help="the report as JSON (problems, repairs, notes, would, drain, "
                             "mode, exit code)")
    recover = add("recover", "clear what an earlier boot left (domain record, per-job "
                             "directories, channels) and republish the fabric identity; "
                             "run at boot before slurmd", commands.cmd_recover)
    recover.add_argument("--node", metavar="NAME",
                         help="this tray's Slurm NodeName (default: SLURMD_NODENAME, else the "
                              "NodeName whose NodeHostname is this host in the local "
                              "slurm.conf, else the host name)")
    recover.add_argument("--no-publish", action="store_true",
                         help="do not contact Slurm (identity is not republished)")
    recover.add_argument("--dry-run", action="store_true",
                         help="change nothing; list what recover would stop, remove, write "
                              "and publish")
    metrics = add("metrics", "Prometheus metrics of this node (stdout, or a textfile for "
                             "node_exporter)", commands.cmd_metrics)
    metrics.add_argument("--controller", action="store_true",
                         help="the slurmctld host's metrics instead (PrologSlurmctld's "
                              "decisions, fail-opens, hook times, the channel table per "
                              "clique); run as SlurmUser or root on the controller; the "
                              "textfile is DIR/imexctl-controller.prom")
    out = metrics.add_mutually_exclusive_group()
    out.add_argument("--textfile", metavar="DIR",
                     help="write DIR/imexctl.prom atomically (default: [metrics] "
                          "textfile_dir; stdout when neither is set)")
    out.add_argument("--stdout", action="store_true",
                     help="print the text to stdout even when [metrics] textfile_dir "
                          "is set")
    status = add("status", "show the IMEX domain on this node, or (--nodes/--partition) "
                           "the IMEX picture of many trays from Slurm alone", commands.cmd_status)
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
                           "its fix (exit 3 when any check fails)", commands.cmd_doctor)
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
                   commands.cmd_identity)
    identity.add_argument("action", choices=("publish", "show"))
    identity.add_argument("nodelist", nargs="?")
    identity.add_argument("--json", action="store_true")
    topo = add("topology", "render Slurm's topology.conf / topology.yaml for topology/block "
                           "from published identities: one block per NVLink clique",
               commands.cmd_topology)
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
    maintain = add("maintain", "change one clique's IMEX domain: drain its trays (imexctl: "
                               "maintain/...), wait for their jobs to end, let each tray's "
                               "health apply the change, check every tray runs it, resume "
                               "the trays drained here (docs/operations.md)",
                   commands.cmd_maintain)
    which = maintain.add_mutually_exclusive_group(required=True)
    which.add_argument("--clique", metavar="KEY",
                       help="the clique's key <cluster uuid>.<clique id> (imexctl identity "
                            "show)")
    which.add_argument("--node", metavar="TRAY", help="the clique that TRAY publishes")
    what = maintain.add_mutually_exclusive_group(required=True)
    what.add_argument("--membership", action="store_true",
                      help="a persistent clique's membership (a tray added, replaced, "
                           "renumbered) or TLS changed: every daemon restarts on the "
                           "membership Slurm shows")
    what.add_argument("--tls", action="store_true",
                      help="a persistent clique's TLS files changed (site CA, certificates): "
                           "every daemon restarts on them")
    what.add_argument("--lifetime", choices=[lifetime.value for lifetime in Lifetime],
                      help="switch the clique to this imex.lifetime (deploy it in the trays' "
                           "imexctl.toml while they are drained); refused while a job runs "
                           "on the clique")
    what.add_argument("--abandon", action="store_true",
                      help="give up: resume the clique's trays drained by imexctl maintain "
                           "(only those)")
    maintain.add_argument("--deadline", metavar="DURATION",
                          help="stop waiting after DURATION (90s, 30m, 2h): the trays stay "
                               "drained, exit 8; run again to continue (default: wait)")
    maintain.add_argument("--no-wait", action="store_true",
                          help="one pass: drain, show what is left, exit (8 until done)")
    maintain.add_argument("--dry-run", action="store_true",
                          help="change nothing: show what a pass would drain and resume")
    maintain.add_argument("--poll", metavar="SECONDS", type=float, default=10.0,
                          help="seconds between looks at Slurm while waiting (default 10)")
    maintain.add_argument("--json", action="store_true",
                          help="the last pass as JSON (phase, trays, jobs, drained, resumed)")
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
    config.set_defaults(handler=commands.cmd_config)
    return parser
