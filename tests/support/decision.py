"""Sealed controller decisions for a job on tray01..tray03, tray01 alone in its clique
(UUID) and tray02 and tray03 in another (OTHER)."""

from __future__ import annotations

from imexctl.rules import decision as dec
from tests.support.lifecycle import UUID
from tests.support.memory_slurm import SEAL

OTHER = "5b1b3a1e-1c1a-4d0e-9a5e-000000000002"
KEY1, KEY2 = f"{UUID}.1", f"{OTHER}.1"
NODES = ("tray01", "tray02", "tray03")


CLUSTER = "unit"     # tests/support/lifecycle.py's slurm.conf ClusterName


def record_for(job_id, action="domains", groups=(), mode="imexctl", nodes=NODES, restart=0,
               note="", cluster=CLUSTER):
    return dec.encode(dec.Decision(job_id=job_id, action=action, channel_mode=mode,
                                   groups=tuple(groups), restart_count=restart,
                                   nodes_hash=dec.nodes_hash(nodes), note=note,
                                   cluster=cluster), SEAL)


def two_groups(channel1=7, channel2=9):
    return (dec.GroupDecision(KEY1, channel1, ("tray01",)),
            dec.GroupDecision(KEY2, channel2, ("tray02", "tray03")))


def record_of(size: int, job_id: int = 7) -> str:
    """A decision-record-shaped text of exactly ``size`` characters (one group per clique,
    then a seal-shaped tail): what a backend must write and read back whole."""
    head = f"imexctl:v2;j={job_id};r=0;h=0123456789ab;m=imexctl;a=domains"
    parts, k = [head], 1
    while len(head) + 70 * k < size - 64:   # a group is under 70 characters
        parts.append(f";g=5b1b3a1e-1c1a-4d0e-9a5e-{k:012d}.32766/1/gb[{18 * k - 17:04d}-{18 * k:04d}]")
        k += 1
    text = "".join(parts) + ";s=MUNGE:"
    return text + "A" * (size - len(text) - 1) + ":"

