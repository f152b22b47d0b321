"""Metrics: parsed back with prometheus-client's own text parser, values checked."""

from __future__ import annotations

import os

import pytest
from prometheus_client.parser import text_string_to_metric_families

from imexctl.tray import expected
from imexctl.ops import metrics
from imexctl.cli import main
from tests.support.fabric import simulated_tray, write_fabric_file
from imexctl.tray.ownership import StateStore
from tests.support.lifecycle import UUID, make_cfg
from tests.support.records import make_record


def parse(text):
    """{family name: {(sample name, frozenset(labels)): value}} and the family types."""
    values, types = {}, {}
    for fam in text_string_to_metric_families(text):
        types[fam.name] = fam.type
        for s in fam.samples:
            values.setdefault(fam.name, {})[(s.name, frozenset(s.labels.items()))] = s.value
    return values, types


def sample(values, family, name=None, **labels):
    return values[family][(name or family, frozenset(labels.items()))]


def test_hook_outcomes_and_step_histograms(tmp_path):
    cfg = make_cfg(tmp_path)
    metrics.observe(cfg, "prolog", "ok", {"fabric": 3.0, "wait-ready": 1500.0}, 1600.0)
    metrics.observe(cfg, "prolog", "ok", {"fabric": 7.0, "wait-ready": 700.0}, 800.0)
    metrics.observe(cfg, "prolog", "node-fault", {"fabric": 2.0}, 5.0,
                    reason="imexctl: prolog/fabric: GPU 0 fabric state Not Started")
    metrics.observe(cfg, "prolog", "job-fault", reason="imexctl: allocation spans cliques: x")
    metrics.count(cfg, "stale_domains_found", 2)
    values, types = parse(metrics.render(cfg, live_fabric=False))
    assert types["imexctl_hook_outcomes"] == "counter"
    assert types["imexctl_hook_step_duration_seconds"] == "histogram"
    out = "imexctl_hook_outcomes"
    assert sample(values, out, out + "_total", hook="prolog", step="none", **{"class": "ok"}) == 2
    assert sample(values, out, out + "_total", hook="prolog", step="fabric",
                  **{"class": "node-fault"}) == 1
    assert sample(values, out, out + "_total", hook="prolog", step="none",
                  **{"class": "job-fault"}) == 1
    h = "imexctl_hook_step_duration_seconds"
    assert sample(values, h, h + "_count", hook="prolog", step="fabric") == 3
    assert sample(values, h, h + "_sum", hook="prolog", step="fabric") == pytest.approx(0.012)
    assert sample(values, h, h + "_bucket", hook="prolog", step="wait-ready", le="1.0") == 1
    assert sample(values, h, h + "_bucket", hook="prolog", step="wait-ready", le="2.5") == 2
    assert sample(values, h, h + "_bucket", hook="prolog", step="wait-ready", le="+Inf") == 2
    d = "imexctl_hook_duration_seconds"
    assert sample(values, d, d + "_count", hook="prolog") == 3
    s = "imexctl_stale_domains_found"
    assert sample(values, s, s + "_total") == 2


def test_stuck_record_is_its_own_state(tmp_path):
    """A record kept because its daemon could not be verified stopped: alert on it."""
    cfg = make_cfg(tmp_path)
    write_fabric_file(tmp_path / "fabric.json", simulated_tray(UUID, 1))
    StateStore(cfg.paths.state_dir).save(make_record(job_id=43, phase="stuck"))
    values, _ = parse(metrics.render(cfg))
    assert sample(values, "imexctl_domain_state", state="stuck") == 1
    assert sum(sample(values, "imexctl_domain_state", state=s) for s in metrics.domain_states()) == 1
    assert sample(values, "imexctl_domain_job_id") == 43


def test_live_gauges(tmp_path):
    cfg = make_cfg(tmp_path)
    write_fabric_file(tmp_path / "fabric.json",
                      simulated_tray(UUID, 1, **{"3": {"health_mask": 0x1A6}}))
    StateStore(cfg.paths.state_dir).save(make_record(job_id=42, phase="ready"))
    expected.write(cfg, expected.UP, job_id=42)
    values, types = parse(metrics.render(cfg))
    assert sample(values, "imexctl_domain_state", state="ready") == 1
    assert sample(values, "imexctl_domain_state", state="idle") == 0
    assert sample(values, "imexctl_domain_job_id") == 42
    assert sample(values, "imexctl_expected_state", state="up") == 1
    assert sample(values, "imexctl_expected_state", state="idle") == 0
    assert sample(values, "imexctl_imex_expected") == 1
    assert sample(values, "imexctl_channels_in_use") == 0
    gpus = {dict(k[1])["gpu"]: v for k, v in values["imexctl_nvlink_gpu_healthy"].items()}
    assert gpus == {"0": 1, "1": 1, "2": 1, "3": 0}
    assert sample(values, "imexctl_nvlink_gpus_unhealthy") == 1
    assert sample(values, "imexctl_stale_domains_found", "imexctl_stale_domains_found_total") == 0
    assert types["imexctl_domain_state"] == "gauge"


def test_hooks_refresh_the_configured_textfile_from_the_cached_probe(tmp_path):
    cfg = make_cfg(tmp_path, metrics={"textfile_dir": f"{tmp_path}/textfile"})
    metrics.remember_fabric(cfg, simulated_tray(UUID, 1))
    os.remove(tmp_path / "fabric.json")  # a hook never probes NVML for metrics
    metrics.observe(cfg, "epilog", "ok", {"stop-daemon": 12.0}, 20.0)
    target = tmp_path / "textfile" / "imexctl.prom"
    values, _ = parse(target.read_text())
    assert sample(values, "imexctl_nvlink_gpus") == 4
    out = "imexctl_hook_outcomes"
    assert sample(values, out, out + "_total", hook="epilog", step="none", **{"class": "ok"}) == 1
    assert sorted(os.listdir(tmp_path / "textfile")) == ["imexctl.prom"]


def test_corrupt_state_restarts_counters_and_never_raises(tmp_path):
    cfg = make_cfg(tmp_path)
    (tmp_path / "state" / "metrics").mkdir(parents=True)
    (tmp_path / "state" / "metrics" / "state.json").write_text("[1, 2")
    metrics.observe(cfg, "health", "ok")
    values, _ = parse(metrics.render(cfg, live_fabric=False))
    out = "imexctl_hook_outcomes"
    assert sample(values, out, out + "_total", hook="health", step="none", **{"class": "ok"}) == 1
    os.chmod(tmp_path / "state" / "metrics", 0o777)  # unsafe: refused, logged, not raised
    metrics.observe(cfg, "health", "ok")
    values, _ = parse(metrics.render(cfg, live_fabric=False))
    assert sample(values, out, out + "_total", hook="health", step="none", **{"class": "ok"}) == 1


def test_label_values_are_escaped():
    assert metrics._labels({"a": 'x"y\\z\nw'}) == '{a="x\\"y\\\\z\\nw"}'


def test_cli_writes_the_textfile(tmp_path, config_file, capsys, monkeypatch):
    monkeypatch.setenv("SLURMD_NODENAME", "tray01")
    make_cfg(tmp_path)
    assert main(["--config", str(config_file), "metrics"]) == 0
    assert f"wrote {tmp_path}/textfile/imexctl.prom" in capsys.readouterr().out
    other = tmp_path / "other"
    assert main(["--config", str(config_file), "metrics", "--textfile", str(other)]) == 0
    values, _ = parse((other / "imexctl.prom").read_text())
    assert sample(values, "imexctl_domain_state", state="idle") == 1
