"""Fault classes and the stable exit codes they map to.

Slurm decides what happens to a job and a node from a hook's exit code, so every
error imexctl raises belongs to exactly one class, and each class has one code.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_NODE_FAULT = 1      # this node is unhealthy; hooks and health drain it (imexctl: reason)
EXIT_USAGE = 2           # bad command line
EXIT_CONFIG = 3          # imexctl.toml missing or invalid
EXIT_JOB_FAULT = 4       # reserved: never returned (the runner catches JobFault; prolog exits 0)
EXIT_SLURM = 5           # slurmctld could not be reached / answered an error
EXIT_NOT_IMPLEMENTED = 6 # reserved: no current subcommand raises NotImplementedYet
EXIT_DRIFT = 7           # a --check found the file in place differs from what it should be
EXIT_PENDING = 8         # imexctl maintain: not finished (--no-wait, --deadline): trays left drained
EXIT_REFUSED = 9         # imexctl maintain: refused (a job holds the clique): nothing changed
EXIT_INTERNAL = 70       # a bug in imexctl (EX_SOFTWARE): one stderr line, the traceback in the log

EXIT_CODES = {
    EXIT_OK: "success",
    EXIT_NODE_FAULT: "node fault: hooks and health drain the node with an 'imexctl:' reason",
    EXIT_USAGE: "usage error",
    EXIT_CONFIG: "configuration error (file, key and allowed values are named)",
    EXIT_JOB_FAULT: "reserved (a refused job: the prolog cancels it and exits 0)",
    EXIT_SLURM: "Slurm unreachable or returned an error",
    EXIT_NOT_IMPLEMENTED: "reserved",
    EXIT_DRIFT: "check found drift: the file in place differs (what moved is named)",
    EXIT_PENDING: "maintain: not finished yet (--no-wait, --deadline, interrupted): the "
                  "clique's trays stay drained; run it again to continue",
    EXIT_REFUSED: "maintain: refused (jobs hold the clique's trays, named): nothing changed",
    EXIT_INTERNAL: "internal error (a bug in imexctl): one line names it, the traceback is "
                   "in the log",
}


class ImexctlError(Exception):
    """Base class: carries the exit code that the CLI returns."""

    exit_code = EXIT_NODE_FAULT


class ConfigError(ImexctlError):
    """imexctl.toml is missing, unreadable or invalid."""

    exit_code = EXIT_CONFIG


class UsageError(ImexctlError):
    """The command line asks for something that cannot be (a bad node list...)."""

    exit_code = EXIT_USAGE


class JobFault(ImexctlError):
    """The job's allocation cannot form one IMEX domain; healthy nodes stay up."""

    exit_code = EXIT_JOB_FAULT


class JobWait(JobFault):
    """The job cannot start yet but may later (no free channel in a clique, trays not yet
    published): it is requeued, and Slurm starts it again after its requeue delay."""


class NodeFault(ImexctlError):
    """This node cannot serve IMEX; it must be drained with an owned reason.

    Helpers raise it with the cause only: the step runner knows which step it was in and
    names it in the drain reason (``imexctl: <hook>/<step>: <cause>``).
    """

    exit_code = EXIT_NODE_FAULT

    def __init__(self, cause: str):
        super().__init__(cause)
        self.cause = cause


class SlurmError(ImexctlError):
    """A call to Slurm failed after bounded retries."""

    exit_code = EXIT_SLURM


class NotImplementedYet(ImexctlError):
    exit_code = EXIT_NOT_IMPLEMENTED
