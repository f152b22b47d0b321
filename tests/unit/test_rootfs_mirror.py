"""The harness builds its Slurm roots only from the mirror this machine's apt sources
name (architecture review: no hard-coded public host)."""

from __future__ import annotations

import pytest

from tests.cluster.rootfs import RootfsError, mirror


def test_the_mirror_comes_from_the_apt_sources(tmp_path, monkeypatch):
    monkeypatch.delenv("IMEXCTL_HARNESS_MIRROR", raising=False)
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list.d" / "debian.sources").write_text(
        "Types: deb\nURIs: http://mirror.example.site/debian-security\nSuites: bookworm-security\n\n"
        "Types: deb\nURIs: http://mirror.example.site/debian\nSuites: bookworm\n")
    assert mirror(tmp_path) == "http://mirror.example.site/debian"
    (tmp_path / "sources.list.d" / "debian.sources").unlink()
    (tmp_path / "sources.list").write_text("deb [arch=amd64] http://apt.lab/debian bookworm main\n")
    assert mirror(tmp_path) == "http://apt.lab/debian"


def test_no_archive_in_the_apt_sources_says_what_to_configure(tmp_path, monkeypatch):
    monkeypatch.delenv("IMEXCTL_HARNESS_MIRROR", raising=False)
    (tmp_path / "sources.list").write_text("# nothing here\n")
    with pytest.raises(RootfsError, match="no Debian archive in this machine's apt sources"):
        mirror(tmp_path)
    monkeypatch.setenv("IMEXCTL_HARNESS_MIRROR", "http://override/debian")
    assert mirror(tmp_path) == "http://override/debian"
