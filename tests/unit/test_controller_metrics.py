"""Controller-side metrics: PrologSlurmctld/EpilogSlurmctld count into a private file
beside the channel table, and ``imexctl metrics --controller`` renders it with the table
per clique. Parsed back with prometheus-client's own text parser."""

from __future__ import annotations

import json
import multiprocessing
import os
import stat
import subprocess
import sys

import pytest
from prometheus_client.parser import text_string_to_metric_families

from imexctl import __version__
from imexctl.base import counting
from imexctl.controller import counters
from imexctl.controller.slurmctld import epilog_slurmctld, prolog_slurmctld
from imexctl.ops import controller_metrics
from tests.support.controller import make_cfg
from tests.support.memory_slurm import job_record, MemorySlurm
from tests.support.lifecycle import controller_ctx_of

U1 = "5b1b3a1e-1c1a-4d0e-9a5e-000000000001"
U2 = "5b1b3a1e-1c1a-4d0e-9a5e-000000000002"
RACK1 = [f"tray{i:02d}" for i in range(1, 5)]
RACK2 = [f"tray{i:02d}" for i in range(5, 9)]
C1, C2 = f"{U1}.32766", f"{U2}.32766"


@pytest.fixture(autouse=True)
def no_live_jobs_hold_channels(monkeypatch):
    from imexctl.controller import slurmctld as controller
    monkeypatch.setattr(controller, "held_by_live_jobs", lambda cfg: {})


@pytest.fixture
def slurm():
    s = MemorySlurm()
    s.add_nodes({n: f"10.0.0.{i}" for i, n in enumerate(RACK1 + RACK2, 1)})
    for n in RACK1:
        s.publish(n, {"cluster_uuid": U1, "clique_id": 32766, "gpu_count": 4,
                      "state": "Completed"})
    for n in RACK2:
        s.publish(n, {"cluster_uuid": U2, "clique_id": 32766, "gpu_count": 4,
                      "state": "Completed"})
    return s


def start(slurm, cfg, job_id, nodes, partition="trays"):
    slurm.jobs[job_id] = job_record(job_id, tuple(nodes), partition=partition)
    assert prolog_slurmctld(cfg, slurm, controller_ctx_of(slurm, job_id)) == 0


def _refused(*args, **kwargs):
    raise RuntimeError("slurmctld said no")


def parse(text):
    """{(sample name, frozenset(labels)): value}, {family: type}; the parser rejects
    anything that is not the text format."""
    values, types = {}, {}
    for fam in text_string_to_metric_families(text):
        types[fam.name] = fam.type
        for s in fam.samples:
            values[(s.name, frozenset(s.labels.items()))] = s.value
    return values, types


def val(values, name, **labels):
    return values[(name, frozenset(labels.items()))]


def decisions(values, outcome, reason):
    return val(values, "imexctl_controller_decisions_total", outcome=outcome, reason=reason)


def test_decisions_fail_opens_durations_and_the_table_per_clique(tmp_path, slurm, monkeypatch):
    cfg = make_cfg(tmp_path, policy={"partition": {"nvl": {"multi_clique": "refuse"},
                                                   "skp": {"multi_clique": "skip"}}},
                   channels={"count": 3})          # channels 1..2 per clique
    start(slurm, cfg, 1, RACK1 + RACK2)            # granted: one channel in each clique
    start(slurm, cfg, 2, RACK1[:1])                # granted: clique 1 now full
    start(slurm, cfg, 3, RACK1[1:2])               # waits: no free channel in clique 1
    start(slurm, cfg, 4, RACK1 + RACK2, "nvl")     # refused: spans cliques (scancel)
    start(slurm, cfg, 5, RACK1 + RACK2, "skp")     # policy skip: runs without IMEX
    with monkeypatch.context() as m:               # slurmctld refuses the record
        m.setattr(slurm, "set_admin_comment", _refused)
        start(slurm, cfg, 6, RACK2[:1])            # fails open: no record written
    slurm.set_job(2, state="COMPLETED")
    assert epilog_slurmctld(cfg, slurm, controller_ctx_of(slurm, 2)) == 0

    text, problems = controller_metrics.render(cfg)
    assert problems == []
    values, types = parse(text)
    assert decisions(values, "granted", "channel-table") == 2
    assert decisions(values, "waiting", "table-full") == 1
    assert decisions(values, "refused", "spans-cliques") == 1
    assert decisions(values, "fallback", "policy-skip") == 1
    assert val(values, "imexctl_controller_fail_opens_total", hook="prolog-slurmctld") == 1
    # a first start (no table, no other job) is no rebuild
    assert not any(name.startswith("imexctl_controller_channel_table_rebuilds")
                   for name, _ in values)
    # the table per clique: job 1 in both, job 6's allocation released when it failed
    assert val(values, "imexctl_controller_channels_in_use", clique=C1) == 1
    assert val(values, "imexctl_controller_channels_in_use", clique=C2) == 1
    assert val(values, "imexctl_controller_channel_capacity", clique=C1) == 2
    assert val(values, "imexctl_controller_channel_table_jobs") == 1
    hist = "imexctl_controller_hook_duration_seconds"
    assert val(values, hist + "_count", hook="prolog-slurmctld") == 6
    assert val(values, hist + "_count", hook="epilog-slurmctld") == 1
    assert val(values, hist + "_bucket", hook="prolog-slurmctld", le="+Inf") == 6
    assert val(values, "imexctl_build_info", version=__version__,
               python=sys.version.split()[0], role="controller") == 1
    for name in ("counters", "channel-table"):
        assert val(values, "imexctl_controller_state_file", file=name, state="ok") == 1
    for name, labels in values:     # every outcome and reason is one docs/monitoring.md lists
        if name == "imexctl_controller_decisions_total":
            got = dict(labels)
            assert got["reason"] in counters.DECISIONS[got["outcome"]], got
    assert types["imexctl_controller_decisions"] == "counter"
    assert types["imexctl_controller_hook_duration_seconds"] == "histogram"
    assert types["imexctl_controller_channels_in_use"] == "gauge"
    assert set(types) <= {n.removesuffix("_total") for n in controller_metrics.HELP}
    state = tmp_path / "ctld" / counters.STATE_FILE
    assert stat.S_IMODE(state.stat().st_mode) == 0o600


def test_a_fresh_controller_prints_zeroes_and_says_the_files_are_missing(tmp_path):
    cfg = make_cfg(tmp_path)
    text, problems = controller_metrics.render(cfg)
    values, _ = parse(text)
    assert problems == []
    assert decisions(values, "granted", "channel-table") == 0
    assert decisions(values, "refused", "spans-cliques") == 0
    assert val(values, "imexctl_controller_fail_opens_total", hook="prolog-slurmctld") == 0
    assert val(values, "imexctl_controller_state_file", file="counters", state="missing") == 1
    assert val(values, "imexctl_controller_state_file", file="channel-table",
               state="missing") == 1


def _bump(directory, n):
    for _ in range(n):
        assert counters.update(directory, lambda s: counting.inc(
            s, "imexctl_controller_decisions_total",
            {"outcome": "granted", "reason": "channel-table"})) is None


def test_two_processes_counting_at_once_lose_nothing(tmp_path):
    directory = tmp_path / "ctld"
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_bump, args=(directory, 150)) for _ in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    state, how = counters.load(directory)
    assert how == "ok"
    assert state["counters"]["imexctl_controller_decisions_total"] == {
        json.dumps([["outcome", "granted"], ["reason", "channel-table"]]): 300}


def _config(tmp_path):
    cfg = make_cfg(tmp_path)
    path = tmp_path / "imexctl.toml"
    path.write_text(f'[paths]\nstate_dir = "{cfg.paths.state_dir}"\n'
                    f'log_file = "{cfg.paths.log_file}"\n'
                    f'controller_dir = "{tmp_path}/ctld"\n'
                    f'slurm_conf = "{tmp_path}/slurm.conf"\n')
    return path


def _cli(config, *args):
    return subprocess.run([sys.executable, "-m", "imexctl", "--config", str(config),
                           "metrics", "--controller", *args],
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("damage", ["corrupt", "not-json", "symlink", "table"])
def test_a_damaged_file_still_prints_with_its_state_and_one_line(tmp_path, damage):
    config = _config(tmp_path)
    ctld = tmp_path / "ctld"
    ctld.mkdir(mode=0o700)
    state = ctld / counters.STATE_FILE
    if damage == "corrupt":
        state.write_text(json.dumps({"counters": {"imexctl_controller_decisions_total":
                                                  {"x": "NaN"}}}))
    elif damage == "not-json":
        state.write_bytes(b"\xff{")
    elif damage == "symlink":
        (tmp_path / "elsewhere.json").write_text("{}")
        state.symlink_to(tmp_path / "elsewhere.json")
    else:
        (ctld / "channels.json").write_text('{"format": 1, "jobs": [], "cursor": {}}')
    proc = _cli(config)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("imexctl: metrics --controller: ")
    values, _ = parse(proc.stdout)
    file, how = {"corrupt": ("counters", "corrupt"), "not-json": ("counters", "corrupt"),
                 "symlink": ("counters", "unreadable"),
                 "table": ("channel-table", "corrupt")}[damage]
    assert val(values, "imexctl_controller_state_file", file=file, state=how) == 1
    assert decisions(values, "granted", "channel-table") == 0
    if damage == "symlink":    # never written through either
        assert counters.update(ctld, lambda s: None) is not None
        assert (tmp_path / "elsewhere.json").read_text() == "{}"
    elif damage != "table":    # the next hook run starts the counters again
        assert counters.update(ctld, lambda s: counting.inc(
            s, "imexctl_controller_fail_opens_total", {"hook": "prolog-slurmctld"})) is None
        values, _ = parse(_cli(config).stdout)
        assert val(values, "imexctl_controller_state_file", file="counters", state="ok") == 1
        assert val(values, "imexctl_controller_fail_opens_total", hook="prolog-slurmctld") == 1


def test_the_textfile_is_written_atomically_beside_the_trays_name(tmp_path):
    config = _config(tmp_path)
    out = tmp_path / "textfile"
    proc = _cli(config, "--textfile", str(out))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"imexctl metrics: wrote {out}/imexctl-controller.prom"
    assert sorted(os.listdir(out)) == ["imexctl-controller.prom"]
    values, _ = parse((out / "imexctl-controller.prom").read_text())
    assert val(values, "imexctl_controller_state_file", file="counters", state="missing") == 1
    os.chmod(out, 0o777)                       # group/world-writable: refused, one line
    proc = _cli(config, "--textfile", str(out))
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("imexctl: metrics: --textfile ")


def test_a_hook_failing_before_its_code_runs_is_counted(tmp_path):
    """PrologSlurmctld started without SLURM_JOB_ID: exit 0 (a non-zero one requeues the
    job forever), one line, and the fail-open counted where the metrics live."""
    config = _config(tmp_path)
    env = {"PATH": "/usr/bin:/bin", "IMEXCTL_CONFIG": str(config), "SLURM_JOB_UID": "65534",
           "SLURM_JOB_USER": "nobody", "SLURM_JOB_NODELIST": "tray[01-02]"}
    proc = subprocess.run([sys.executable, "-m", "imexctl", "prolog-slurmctld"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "SLURM_JOB_ID" in proc.stderr
    assert "Traceback" not in proc.stderr
    values, _ = parse(_cli(config).stdout)
    assert val(values, "imexctl_controller_fail_opens_total", hook="prolog-slurmctld") == 1
    assert val(values, "imexctl_controller_fail_opens_total", hook="epilog-slurmctld") == 0


def test_a_rebuilt_table_is_counted_by_why(tmp_path, slurm):
    cfg = make_cfg(tmp_path)
    start(slurm, cfg, 1, RACK1[:1])
    (tmp_path / "ctld" / "channels.json").write_text("{not json")
    start(slurm, cfg, 2, RACK1[1:2])           # rebuilt from the live jobs' records
    values, _ = parse(controller_metrics.render(cfg)[0])
    assert val(values, "imexctl_controller_channel_table_rebuilds_total", why="corrupt") == 1
    assert decisions(values, "granted", "channel-table") == 2
