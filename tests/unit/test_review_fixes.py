"""Fixes from the end-of-session review: each guards one behaviour."""

import uuid
from types import SimpleNamespace

import pytest

from imexctl.slurm.records import JobRecordError, SlurmNotFound


def _record(job_id=7):
    return SimpleNamespace(job_id=job_id)


def test_owner_with_an_unreadable_record_counts_as_alive(monkeypatch):
    """Its own user text broke the record: Slurm still has the job (squeue says so), so
    its domain is not torn down as stale and the hook does not end as 'Slurm
    unreachable'. A job Slurm no longer knows is not alive."""
    from imexctl.tray.ownership import owner_alive
    from tests.support.memory_slurm import MemorySlurm

    slurm = MemorySlurm()
    slurm.add_nodes({"tray01": "10.0.0.1"})
    slurm.add_job(7, ("tray01",))

    def unreadable(job_id):
        raise JobRecordError("JobName newline")
    monkeypatch.setattr(slurm, "job", unreadable)
    assert owner_alive(slurm, _record(), "tray01") is True
    slurm.jobs.pop(7)                               # ended meanwhile: squeue says so
    assert owner_alive(slurm, _record(), "tray01") is False
    monkeypatch.setattr(slurm, "job", MemorySlurm.job.__get__(slurm))
    with pytest.raises(SlurmNotFound):
        slurm.job(7)
    assert owner_alive(slurm, _record(), "tray01") is False


@pytest.mark.parametrize("raw", [bytes(16), bytes(range(16)), b"\xff" * 16])
def test_nvml_cluster_uuid_text_matches_uuid_module(raw):
    from imexctl.tray.nvml import _uuid_from_bytes

    assert _uuid_from_bytes(raw) == str(uuid.UUID(bytes=raw))
    with pytest.raises(ValueError):
        _uuid_from_bytes(raw[:15])


def test_cluster_view_stops_asking_for_slurm_channels_once_slurm_cannot_say():
    from imexctl.ops.clusterstatus import _slurm_channels

    asked = []

    class Old:
        def job_channels(self, job_id):
            asked.append(job_id)
            return None            # 24.11: no `scontrol show resources`
    jobs = [{"job_id": j, "domains": [{"nodes": ["t1"], "channel": None}]} for j in (1, 2, 3)]
    _slurm_channels(Old(), jobs)
    assert asked == [1]
    assert all(d["channel"] is None for j in jobs for d in j["domains"])


def test_lazy_adapter_picks_once_even_when_the_backend_is_unusable(monkeypatch):
    from imexctl.slurm import adapter, deferred
    from imexctl.errors import SlurmError

    calls = []

    def broken(cfg):
        calls.append(cfg)
        raise SlurmError("slurm.backend = 'pyslurm' but pyslurm is not installed")
    monkeypatch.setattr(adapter, "get_adapter", broken)
    a = deferred.deferred_adapter("cfg")
    for _ in range(3):
        with pytest.raises(SlurmError, match="slurm.backend"):
            a.job(1)
    assert calls == ["cfg"]
