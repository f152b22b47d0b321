"""Slurm's job and node state words, as imexctl judges them: each set defined once, with
why it differs from the others.

Job states are the base word of Slurm's ``JobState`` (``RUNNING``, ``COMPLETING``...),
flags after ``+`` dropped (:func:`base_state`). Node states are the words of a node's
``State`` (``IDLE+DRAIN``), suffix symbols dropped (``NodeRecord.state_words``).
"""

from __future__ import annotations

# A job in these states may hold IMEX domains on its trays now: what the backends list as
# a node's jobs (a pending or requeued job holds nothing yet).
ACTIVE_JOB = frozenset({"RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED"})

# A job whose node prologs run now: a prolog that fails requeues it (outcome); in any other
# state it was already requeued (another tray's prolog failed), cancelled or ended.
STARTING = frozenset({"RUNNING", "CONFIGURING"})

# The job named in a tray's ownership record still owns that tray's domain (prolog,
# health, status): also a job that is pending or requeued again, or between steps
# (signaling, stage-out, resizing), so that its domain is never torn down under it.
OWNER_LIVE = frozenset(ACTIVE_JOB | {"PENDING", "REQUEUED", "RESIZING", "SIGNALING",
                                     "STAGE_OUT"})

# A job in these states may hold its IMEX channels in the controller's channel table.
# Not PENDING or REQUEUED: a busy cluster's waiting jobs must not pin channels; a
# requeued job gets its channels again from its next PrologSlurmctld.
CHANNEL_HOLDING = frozenset(ACTIVE_JOB | {"SIGNALING", "STAGE_OUT", "STOPPED", "RESIZING"})
# The same set as squeue's ``-t`` codes (the controller's live-job query).
CHANNEL_HOLDING_CODES = "CF,R,CG,S,SI,SO,ST,RS"

# Node words meaning "not taking jobs because someone said so".
UNAVAILABLE = frozenset({"DRAIN", "DRAINED", "DRAINING", "DOWN", "FAIL", "FAILING"})
# Node words meaning drained (Slurm keeps the reason after a RESUME, so "drained" is read
# from the state, never from the reason).
DRAINED = frozenset({"DRAIN", "DRAINED", "DRAINING"})


def node_words(state: str) -> frozenset[str]:
    """``IDLE+DRAIN*`` -> ``{"IDLE", "DRAIN"}`` (the suffix symbols say "not responding",
    "powered down"... and never change what a word means here)."""
    return frozenset(w.rstrip("*~#!%$@^-") for w in str(state).upper().split("+") if w)


def base_state(state: str) -> str:
    """``COMPLETING+REQUEUE`` -> ``COMPLETING``."""
    return str(state).split("+")[0].strip().upper()
