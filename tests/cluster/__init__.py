"""Integration harness: a real multi-node Slurm of simulated trays in network namespaces."""

from tests.cluster.harness import Cluster, HarnessError

__all__ = ["Cluster", "HarnessError"]
