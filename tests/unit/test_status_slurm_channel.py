"""`imexctl status` on a tray whose channel Slurm's switch/nvidia_imex owns: the channel
Slurm allocated is read from `scontrol show resources` (25.11+) and reported."""

from imexctl.tray.ownership import StateStore
from imexctl.cli.display import status_table as render_table
from imexctl.ops.status import collect
from tests.support.records import make_record
from tests.support.status import slurm_world
from tests.support.memory_slurm import job_record


def world(tmp_path, channels, rule="slurm switch/nvidia_imex"):
    cfg, slurm = slurm_world(tmp_path)
    slurm.jobs[7] = job_record(7, ("tray01", "tray02"), state="RUNNING")
    asked = []

    def job_channels(job_id):
        asked.append(job_id)
        if isinstance(channels, Exception):
            raise channels
        return channels

    slurm.job_channels = job_channels
    StateStore(cfg.paths.state_dir).save(make_record(channel=None, channel_rule=rule,
                                                     phase="ready"))
    return cfg, slurm, asked


def test_slurm_channel_is_reported(tmp_path):
    cfg, slurm, asked = world(tmp_path, {"tray01": 4, "tray02": 4})
    status = collect(cfg, slurm=slurm, live=False)
    assert status["slurm"]["slurm_channel"] == 4 and asked == [7]
    assert status["decision"]["source"] == "slurm"
    assert "slurm channel: 4 (switch/nvidia_imex, from scontrol show resources)" in \
        render_table(status)


def test_older_slurm_or_failure_is_a_note_not_a_problem(tmp_path):
    cfg, slurm, _ = world(tmp_path, None)                   # 24.11: no such query
    status = collect(cfg, slurm=slurm, live=False)
    assert status["slurm"]["slurm_channel"] is None
    assert not [p for p in status["problems"] if "channel" in p or "Slurm" in p]
    assert any("needs 25.11+" in n for n in status["notes"])
    cfg, slurm, _ = world(tmp_path, RuntimeError("slurmctld away"))
    status = collect(cfg, slurm=slurm, live=False)
    assert any("not read: slurmctld away" in n for n in status["notes"])
    cfg, slurm, _ = world(tmp_path, {"tray02": 4})
    status = collect(cfg, slurm=slurm, live=False)
    assert status["slurm"]["slurm_channel"] is None
    assert any("no IMEX channel for job 7 on tray01" in n for n in status["notes"])


def test_imexctl_channel_asks_slurm_nothing(tmp_path):
    cfg, slurm, asked = world(tmp_path, {"tray01": 4}, rule="controller")
    status = collect(cfg, slurm=slurm, live=False)
    assert "slurm_channel" not in status["slurm"] and asked == []
