"""Patterns compiled on first use (imexctl.base.lazyre), and every lazy pattern of the package
compiles: a typo in one would otherwise surface only on the path that first uses it."""

from __future__ import annotations

import importlib
import pkgutil
import re

import pytest

import imexctl
from imexctl.base.lazyre import LazyPattern, lazy


def test_compiles_on_first_use_only_once_and_behaves_like_the_pattern(monkeypatch):
    calls = []
    real = re.compile
    monkeypatch.setattr(re, "compile", lambda *a: calls.append(a) or real(*a))
    pat = lazy(r"job-([1-9][0-9]*)", re.ASCII)
    assert calls == []
    assert pat.fullmatch("job-42").group(1) == "42"
    assert pat.fullmatch("job-042") is None and pat.search("x job-7 y").group(0) == "job-7"
    assert pat.sub("J", "job-1 job-2") == "J J" and pat.pattern == r"job-([1-9][0-9]*)"
    assert pat.flags & re.ASCII and pat.groups == 1
    assert calls == [(r"job-([1-9][0-9]*)", re.ASCII)]
    assert pat.compiled() is pat.compiled() and len(calls) == 1
    assert re.sub(pat.compiled(), "-", "job-9") == "-"


def test_a_bad_pattern_fails_where_it_is_first_used():
    pat = lazy(r"(unclosed")
    with pytest.raises(re.error):
        pat.match("x")


def _lazy_patterns():
    for info in pkgutil.walk_packages(imexctl.__path__, "imexctl."):
        if info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        for name, value in vars(module).items():
            values = value.values() if isinstance(value, dict) else [value]
            for item in values:
                if isinstance(item, LazyPattern):
                    yield f"{info.name}.{name}", item


def test_every_lazy_pattern_in_the_package_compiles():
    found = dict(_lazy_patterns())
    assert len(found) >= 30    # the hook path's patterns are lazy
    for where, pat in found.items():
        assert isinstance(pat.compiled(), re.Pattern), where
