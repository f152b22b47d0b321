"""The parsed configuration cache: hooks skip tomllib, an edited file is parsed again,
and a cache that others could have written is never trusted."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from imexctl.base import cache as configcache
from imexctl.config import load_config
from imexctl.errors import ConfigError

TOML = '[imex]\nready_timeout_s = 42\n[policy]\nmode = "all"\n'


@pytest.fixture
def cache(tmp_path, monkeypatch):
    d = tmp_path / "cache"
    monkeypatch.setattr(configcache, "CACHE_DIR", d)
    return d


def write_cfg(tmp_path, text=TOML):
    path = tmp_path / "imexctl.toml"
    path.write_text(text)
    return path


def test_second_load_uses_the_cached_table(tmp_path, cache):
    path = write_cfg(tmp_path)
    assert load_config(path, "tray01").imex.ready_timeout_s == 42
    stored = list(cache.iterdir())
    assert len(stored) == 1 and json.loads(stored[0].read_text())["imex"]["ready_timeout_s"] == 42
    assert oct(cache.stat().st_mode & 0o777) == "0o700"
    assert oct(stored[0].stat().st_mode & 0o777) == "0o600"
    # what the cache holds is what is used (the key is the file's bytes)
    stored[0].write_text(json.dumps({"imex": {"ready_timeout_s": 7}, "policy": {"mode": "all"}}))
    assert load_config(path, "tray01").imex.ready_timeout_s == 7


def test_an_edited_file_is_parsed_again(tmp_path, cache):
    path = write_cfg(tmp_path)
    load_config(path, "tray01")
    path.write_text(TOML.replace("42", "43"))
    assert load_config(path, "tray01").imex.ready_timeout_s == 43
    assert len(list(cache.iterdir())) == 2


def test_cached_table_is_still_validated(tmp_path, cache):
    path = write_cfg(tmp_path)
    load_config(path, "tray01")
    entry = next(cache.iterdir())
    entry.write_text(json.dumps({"imex": {"ready_timeout_s": "soon"}}))
    with pytest.raises(ConfigError, match="ready_timeout_s must be a number"):
        load_config(path, "tray01")


@pytest.mark.parametrize("tamper", ["group-writable dir", "symlinked entry", "not JSON"])
def test_an_untrustworthy_cache_is_ignored(tmp_path, cache, tamper):
    path = write_cfg(tmp_path)
    load_config(path, "tray01")
    entry = next(cache.iterdir())
    entry.write_text(json.dumps({"imex": {"ready_timeout_s": 7}}))
    if tamper == "group-writable dir":
        cache.chmod(0o770)
    elif tamper == "symlinked entry":
        other = tmp_path / "elsewhere.json"
        other.write_text(entry.read_text())
        entry.unlink()
        entry.symlink_to(other)
    else:
        entry.write_text("{not json")
    assert load_config(path, "tray01").imex.ready_timeout_s == 42


def test_invalid_toml_still_names_the_file(tmp_path, cache):
    path = write_cfg(tmp_path, "[imex\n")
    with pytest.raises(ConfigError, match=f"{path}: invalid TOML: "):
        load_config(path, "tray01")
    assert not cache.exists() or list(cache.iterdir()) == []


def test_old_tables_are_pruned(tmp_path, cache):
    path = write_cfg(tmp_path)
    for i in range(configcache.KEEP + 3):
        path.write_text(TOML.replace("42", str(100 + i)))
        load_config(path, "tray01")
    assert len(list(cache.iterdir())) == configcache.KEEP


def test_a_hook_with_a_cached_config_never_imports_tomllib(tmp_path):
    path = write_cfg(tmp_path)
    code = (f"import sys, imexctl.base.cache as c, pathlib; c.CACHE_DIR = pathlib.Path({str(tmp_path / 'c')!r}); "
            f"from imexctl.config import load_config; cfg = load_config({str(path)!r}, 'tray01'); "
            "print(cfg.imex.ready_timeout_s, 'tomllib' in sys.modules)")
    runs = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           check=True, env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
                           ).stdout.split() for _ in range(2)]
    assert runs == [["42.0", "True"], ["42.0", "False"]]


@pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/usr/sbin/runuser"),
                    reason="needs root to run as another user")
def test_slurmuser_gets_its_own_cache_and_a_planted_one_is_ignored(tmp_path):
    """PrologSlurmctld runs as SlurmUser, who cannot write /run: its cache is
    /tmp/imexctl-config-<uid>. A directory of that name owned by someone else is ignored."""
    import pwd
    import shutil

    import tempfile
    user = pwd.getpwnam("nobody")
    where = tempfile.mkdtemp(prefix="imexctl-cfgtest-", dir="/tmp")  # readable by nobody
    os.chmod(where, 0o755)
    path = write_cfg(__import__("pathlib").Path(where))
    path.chmod(0o644)
    mine = f"/tmp/imexctl-config-{user.pw_uid}"
    shutil.rmtree(mine, ignore_errors=True)
    code = ("import sys; from imexctl.config import load_config; "
            f"cfg = load_config({str(path)!r}, 'tray01'); "
            "print(cfg.imex.ready_timeout_s, 'tomllib' in sys.modules)")
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

    def run():
        out = subprocess.run(["/usr/sbin/runuser", "-u", "nobody", "--", sys.executable, "-c",
                              code], capture_output=True, text=True, timeout=60, cwd=repo,
                             env={"PATH": "/usr/bin:/bin", "PYTHONPATH": repo,
                                  "PYTHONDONTWRITEBYTECODE": "1"})
        assert out.returncode == 0, out.stderr
        return out.stdout.split()
    try:
        assert [run(), run()] == [["42.0", "True"], ["42.0", "False"]]
        st = os.lstat(mine)
        assert st.st_uid == user.pw_uid and st.st_mode & 0o777 == 0o700
        # planted by root (or anyone else): not this user's, never trusted
        shutil.rmtree(mine)
        os.mkdir(mine, 0o777)
        assert run() == ["42.0", "True"] and run() == ["42.0", "True"]
    finally:
        shutil.rmtree(mine, ignore_errors=True)
        shutil.rmtree(where, ignore_errors=True)
