"""Counters and histograms kept in a JSON-able dict between short-lived processes: the
trays' metrics (``imexctl.ops.metrics``) and the controller hooks' (``imexctl.controller.
counters``) both persist ``{"counters": {name: {label key: n}}, "histograms": {name:
{label key: {"buckets", "sum", "count"}}}}`` and render it with the same code."""

from __future__ import annotations

import json


def inc(state: dict, name: str, labels: dict[str, str], n: float = 1) -> None:
    """Add ``n`` to counter ``name`` with ``labels``."""
    series = state.setdefault("counters", {}).setdefault(name, {})
    key = label_key(labels)
    series[key] = series.get(key, 0) + n


def observe(state: dict, name: str, labels: dict[str, str], value: float,
            buckets: tuple[float, ...]) -> None:
    """Count ``value`` into histogram ``name`` (cumulative ``buckets``, sum, count)."""
    series = state.setdefault("histograms", {}).setdefault(name, {})
    h = series.setdefault(label_key(labels), {"buckets": [0] * len(buckets), "sum": 0.0,
                                              "count": 0})
    for i, bound in enumerate(buckets):
        if value <= bound:
            h["buckets"][i] += 1
    h["sum"] += value
    h["count"] += 1


def label_key(labels: dict[str, str]) -> str:
    """The labels as one stable key: a JSON list of sorted pairs."""
    return json.dumps(sorted(labels.items()))


__all__ = ["inc", "observe", "label_key"]
