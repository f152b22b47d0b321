"""monitoring/: the alert and recording rules pass promtool, their unit tests pass, and every
query of the rules and the Grafana dashboard names only metrics imexctl exports.

promtool comes from Debian's prometheus package: on PATH, or extracted by scripts/bootstrap
into .cache/promtool/usr/bin. Without it these tests skip on a developer's machine and fail
in CI (CI=true), so the rules cannot go unchecked there.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from imexctl.controller import counters
from imexctl.tray import expected
from imexctl.ops import controller_metrics, metrics

REPO = Path(__file__).resolve().parents[2]
MONITORING = REPO / "monitoring"
RULES = MONITORING / "imexctl.rules.yml"
RULE_TESTS = MONITORING / "imexctl.rules.test.yml"
DASHBOARD = MONITORING / "imexctl.dashboard.json"

# Values the label matchers of the queries may name (a typo matches nothing, silently).
OUTCOME_CLASSES = {"ok", "skipped", "job-fault", "node-fault", "slurm-error"}  # runner.py
LABEL_VALUES = {
    ("imexctl_domain_state", "state"): set(metrics.domain_states()),
    ("imexctl_expected_state", "state"): set(expected.STATES),
    ("imexctl_hook_outcomes_total", "class"): OUTCOME_CLASSES,
    ("imexctl_hook_outcomes_total", "hook"): {"prolog", "epilog", "health", "recover"},
    ("imexctl_hook_step_duration_seconds_bucket", "hook"): {"prolog", "epilog", "health",
                                                            "recover"},
    ("imexctl_build_info", "role"): {"controller"},
    ("imexctl_controller_decisions_total", "outcome"): set(counters.DECISIONS),
    ("imexctl_controller_decisions_total", "reason"): {
        r for reasons in counters.DECISIONS.values() for r in reasons},
    ("imexctl_controller_fail_opens_total", "hook"): set(counters.HOOKS),
    ("imexctl_controller_hook_duration_seconds_bucket", "hook"): set(counters.HOOKS),
    ("imexctl_controller_channel_table_rebuilds_total", "why"): set(counters.REBUILDS),
    ("imexctl_controller_state_file", "state"): set(controller_metrics.STATES),
    ("imexctl_controller_state_file", "file"): {"counters", "channel-table"},
}
KEYWORDS = {"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring",
            "group_left", "group_right", "inf", "nan", "atan2"}


def promtool() -> str:
    found = shutil.which("promtool") or str(REPO / ".cache/promtool/usr/bin/promtool")
    if os.access(found, os.X_OK):
        return found
    message = ("promtool not found (Debian's prometheus package; scripts/bootstrap puts it "
               "in .cache/promtool)")
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


def run_promtool(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([promtool(), *args], cwd=MONITORING, capture_output=True,
                          text=True, timeout=120)


def exported_names() -> set[str]:
    """The series names imexctl's textfiles can hold: the declared families of
    imexctl.ops.metrics (trays) and imexctl.ops.controller_metrics (the slurmctld host), a
    histogram as its _bucket, _sum and _count series."""
    names = set()
    for name, (kind, _) in (*metrics.HELP.items(), *controller_metrics.HELP.items()):
        if kind == "histogram":
            names |= {f"{name}_bucket", f"{name}_sum", f"{name}_count"}
        else:
            names.add(name)
    return names


def metric_names(expr: str) -> set[str]:
    """The metric (and recorded) names a PromQL expression selects."""
    e = re.sub(r'"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'|`[^`]*`', '""', expr)   # strings
    e = re.sub(r"\$\{?\w+\}?", "5m", e)                                     # Grafana variables
    e = re.sub(r"\{[^}]*\}", " ", e)                                        # label matchers
    e = re.sub(r"\[[^\]]*\]", " ", e)                                       # ranges
    e = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", e)
    e = re.sub(r"\boffset\s+\w+", " ", e)
    names = set()
    for match in re.finditer(r"(?<![\w.:])([A-Za-z_:][\w:]*)(\s*\()?", e):
        word, call = match.group(1), match.group(2)
        if call or word.lower() in KEYWORDS:
            continue
        names.add(word)
    return names


def matchers(expr: str) -> list[tuple[str, str, str, str]]:
    """(metric, label, operator, value) for each label matcher of a named selector."""
    found = []
    for sel in re.finditer(r"([A-Za-z_:][\w:]*)\s*\{([^}]*)\}", expr):
        for m in re.finditer(r'(\w+)\s*(=~|!~|!=|=)\s*"([^"]*)"', sel.group(2)):
            found.append((sel.group(1), m.group(1), m.group(2), m.group(3)))
    return found


def dashboard_queries() -> list[tuple[str, str]]:
    """(where, expression) for every query of the dashboard: panel targets (rows too) and
    template variables."""
    dash = json.loads(DASHBOARD.read_text())
    queries = []

    def walk(panels):
        for p in panels:
            for t in p.get("targets", []):
                queries.append((f"panel {p['title']!r} {t['refId']}", t["expr"]))
            walk(p.get("panels", []))
    walk(dash["panels"])
    for var in dash.get("templating", {}).get("list", []):
        if var.get("type") == "query":
            q = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
            m = re.fullmatch(r"label_values\((\w+),\s*(\w+)\)", q)
            assert m, f"variable {var['name']}: {q!r} is not label_values(metric, label)"
            queries.append((f"variable {var['name']}", m.group(1)))
    return queries


def rule_queries() -> tuple[list[tuple[str, str]], set[str]]:
    """(where, expr) of every rule, and the names the recording rules define. A line
    reader for the rules file's own layout (``- record:``/``- alert:``, then ``expr:`` on
    one line or as a ``|`` block): PyYAML is no dependency, and promtool checks the YAML."""
    queries, recorded = [], set()
    lines = RULES.read_text().splitlines()
    name = None
    i = 0
    while i < len(lines):
        line = lines[i]
        head = re.match(r"\s*- (record|alert): (\S+)\s*$", line)
        if head:
            name = head.group(2)
            if head.group(1) == "record":
                recorded.add(name)
        expr = re.match(r"(\s*)expr: (.*)$", line)
        if expr:
            assert name, f"line {i + 1}: expr outside a rule"
            text = expr.group(2).strip()
            if text in ("|", ">", "|-", ">-"):
                indent, block = len(expr.group(1)), []
                while i + 1 < len(lines) and (not lines[i + 1].strip() or
                                              len(lines[i + 1]) - len(lines[i + 1].lstrip())
                                              > indent):
                    i += 1
                    block.append(lines[i].strip())
                text = " ".join(block)
            queries.append((name, text))
            name = None
        i += 1
    return queries, recorded


# ------------------------------------------------------------------------------ promtool
def test_promtool_check_rules() -> None:
    proc = run_promtool("check", "rules", RULES.name)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout


def test_promtool_test_rules() -> None:
    proc = run_promtool("test", "rules", RULE_TESTS.name)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout


def test_dashboard_queries_are_valid_promql(tmp_path) -> None:
    """Each dashboard query, with Grafana's variables filled in, as a recording rule that
    promtool parses."""
    rules = ["groups:", "  - name: dashboard", "    rules:"]
    for i, (_, expr) in enumerate(dashboard_queries()):
        filled = (expr.replace("$__rate_interval", "5m").replace("$instance", ".*"))
        rules += [f"      - record: dashboard_query_{i}",
                  f"        expr: {json.dumps(filled)}"]
    (tmp_path / "dashboard.rules.yml").write_text("\n".join(rules) + "\n")
    proc = subprocess.run([promtool(), "check", "rules", "dashboard.rules.yml"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


# ------------------------------------------------------------------------------ metric names
def test_metric_name_parser() -> None:
    assert metric_names('histogram_quantile(0.95, sum by (hook, le) (rate('
                        'imexctl_hook_duration_seconds_bucket{instance=~"$instance", '
                        'hook="prolog"}[$__rate_interval])))') == \
        {"imexctl_hook_duration_seconds_bucket"}
    assert metric_names('time() - imexctl_metrics_generated_timestamp_seconds > 1800') == \
        {"imexctl_metrics_generated_timestamp_seconds"}
    assert metric_names('a unless on(instance) b offset 15m and bool c{x="y(z)"}') == \
        {"a", "b", "c"}
    assert metric_names('x:imexctl_y:rate5m{hook="prolog"} > 1e3') == {"x:imexctl_y:rate5m"}


def test_every_dashboard_query_names_only_exported_metrics() -> None:
    exported = exported_names()
    queries = dashboard_queries()
    assert len(queries) >= 15
    used = set()
    for where, expr in queries:
        names = metric_names(expr)
        assert names, f"{where}: {expr!r} names no metric"
        assert names <= exported, f"{where}: {sorted(names - exported)} not exported by imexctl"
        used |= names
    # the dashboard shows each family imexctl exports, not a stale subset
    families = {re.sub(r"_(bucket|sum|count)$", "", n) if n.startswith(
        ("imexctl_hook_duration", "imexctl_hook_step_duration",
         "imexctl_controller_hook_duration")) else n for n in used}
    assert families >= set(metrics.HELP) - {"imexctl_nvlink_gpus"}
    assert families >= set(controller_metrics.HELP)


def test_every_rule_names_only_exported_or_recorded_metrics() -> None:
    exported = exported_names()
    queries, recorded = rule_queries()
    assert len(queries) >= 15
    for where, expr in queries:
        names = metric_names(expr)
        assert names, f"{where}: {expr!r} names no metric"
        assert names <= exported | recorded, \
            f"{where}: {sorted(names - exported - recorded)} not exported by imexctl"
    for name in recorded:   # Prometheus' level:metric:operations naming
        assert re.fullmatch(r"[a-z_]*:imexctl_[a-z_]+:[a-z0-9_]+", name), name


@pytest.mark.parametrize("source", ["dashboard", "rules"])
def test_label_matchers_name_values_imexctl_writes(source) -> None:
    queries = dashboard_queries() if source == "dashboard" else rule_queries()[0]
    checked = 0
    for where, expr in queries:
        for metric, label, op, value in matchers(expr):
            allowed = LABEL_VALUES.get((metric, label))
            if allowed is None or value.startswith("$"):
                continue
            values = value.split("|") if op in ("=~", "!~") else [value]
            assert set(values) <= allowed, f"{where}: {metric}{{{label}{op}{value!r}}}"
            checked += 1
    assert checked >= 3
