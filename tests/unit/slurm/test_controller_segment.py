"""PrologSlurmctld's segment check on each backend: pyslurm 24.11's Job has no
segment_size, so the controller asks scontrol, which prints SegmentSize (26.05)."""

from __future__ import annotations

import json

from imexctl.controller import slurmctld as controller
from imexctl.rules import decision as dec
from tests.support.lifecycle import controller_ctx

U1 = "5b1b3a1e-1c1a-4d0e-9a5e-000000000001"
U2 = "5b1b3a1e-1c1a-4d0e-9a5e-000000000002"


def hook_ctx():
    """Job 7's PrologSlurmctld context, from slurmctld's environment."""
    return controller_ctx(7, "tray[01-04]", partition="trays", cluster="unit")


def publish(world):
    for name, uuid in (("tray01", U1), ("tray02", U1), ("tray03", U1), ("tray04", U2)):
        extra = {"imex": {"cluster_uuid": uuid, "clique_id": 1, "gpu_count": 4,
                          "state": "Completed"}}
        world.set_node(name, Extra=json.dumps(extra, separators=(",", ":")))


def run(world, tmp_path, backend_kind):
    from tests.support.slurm_world import make_backend

    slurm = make_backend(backend_kind, world)
    cfg = world.config(backend=backend_kind)
    object.__setattr__(cfg.paths, "controller_dir", tmp_path / "ctld")
    object.__setattr__(cfg.policy, "mode", "all")
    controller.prolog_slurmctld(cfg, slurm, hook_ctx())
    return world.state()["jobs"]["7"]["AdminComment"]


def test_segment_spanning_cliques_is_seen_on_both_backends(world, tmp_path, backend_kind):
    publish(world)
    world.set_job(7, SegmentSize=2)
    text = run(world, tmp_path, backend_kind)
    record = dec.decode(text)
    assert record is not None and record.action == "domains", text
    assert "warning: a segment spans cliques:" in record.note
    if backend_kind == "pyslurm":   # pyslurm could not tell: scontrol was asked
        assert [c for c in world.calls("scontrol") if "job" in " ".join(map(str, c))]
