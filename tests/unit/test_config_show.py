"""A fresh install needs no configuration file; `config show` says where each value came from."""

import json
import subprocess
import sys

import pytest

from imexctl import config as config_mod
from imexctl.cli import main
from imexctl.config import Config, load_config
from imexctl.ops.settings import effective_settings
from imexctl.errors import EXIT_CONFIG, EXIT_OK


@pytest.fixture
def no_config_anywhere(monkeypatch, tmp_path):
    """No --config, no $IMEXCTL_CONFIG, and the default search path points at nothing."""
    monkeypatch.delenv("IMEXCTL_CONFIG", raising=False)
    monkeypatch.setattr(config_mod, "DEFAULT_SEARCH_PATH",
                        (tmp_path / "etc/imexctl/imexctl.toml", tmp_path / "etc/slurm/x.toml"))
    return tmp_path


def test_no_file_anywhere_gives_builtin_defaults(no_config_anywhere):
    cfg = load_config(node="tray01")
    assert cfg.source is None
    assert cfg == Config(node="tray01")
    assert all(s.origin == "default" for s in effective_settings(cfg))


def test_named_file_must_exist(monkeypatch, tmp_path):
    monkeypatch.setenv("IMEXCTL_CONFIG", str(tmp_path / "absent.toml"))
    with pytest.raises(config_mod.ConfigError, match="absent.toml: file not found"):
        load_config()


def test_settings_say_file_or_default(tmp_path):
    path = tmp_path / "imexctl.toml"
    path.write_text('[imex]\nlauncher = "systemd"\n[channels]\nfile_mode = "0600"\n'
                    '[policy]\npartitions = ["gb200"]\n')
    settings = {s.key: s for s in effective_settings(load_config(path, node="t1"))}
    assert (settings["imex.launcher"].value, settings["imex.launcher"].origin) == ("systemd", "file")
    assert settings["channels.file_mode"].value == "0600"
    assert settings["channels.file_mode"].origin == "file"
    assert settings["policy.partitions"].value == ["gb200"]
    assert (settings["imex.ready_timeout_s"].value, settings["imex.ready_timeout_s"].origin) \
        == (None, "default")   # derived from slurm.conf by the prolog
    assert settings["paths.state_dir"].value == "/var/lib/imexctl"
    # every key of every section is listed exactly once (the per-partition policy as
    # tables of its own: none in this file)
    assert len(settings) == sum(len(config_mod.fields(c)) for c in config_mod.SECTIONS.values()) \
        - len(config_mod.FROM_TABLES)


def test_partition_policies_shown_as_the_file_writes_them(tmp_path):
    path = tmp_path / "imexctl.toml"
    path.write_text('[policy.partition.nvl72]\nmulti_clique = "refuse"\n'
                    '[policy.partition.a100]\nmulti_clique = "skip"\n')
    settings = {s.key: s for s in effective_settings(load_config(path, node="t1"))}
    assert not [k for k in settings if "partition_multi_clique" in k]
    assert (settings["policy.partition.nvl72.multi_clique"].value,
            settings["policy.partition.nvl72.multi_clique"].origin) == ("refuse", "file")
    assert settings["policy.partition.a100.multi_clique"].value == "skip"
    assert settings["policy.multi_clique"].origin == "default"
    # the internal field is no key of the file
    path.write_text('[policy]\npartition_multi_clique = {}\n')
    with pytest.raises(config_mod.ConfigError,
                       match=r"unknown key 'policy.partition_multi_clique' \(did you mean 'multi_clique'\?\); allowed in \[policy\]"
                             r": .*multi_clique, partition.<name>.multi_clique$"):
        load_config(path, node="t1")


def test_config_show_json(tmp_path, capsys):
    path = tmp_path / "imexctl.toml"
    path.write_text('[paths]\nstate_dir = "/srv/{node}/state"\n')
    assert main(["--config", str(path), "config", "show", "--json"]) == EXIT_OK
    out = json.loads(capsys.readouterr().out)
    assert out["schema"] == "imexctl.config/1" and out["source"] == str(path)
    node = out["node"]
    assert out["settings"]["paths.state_dir"] == {"value": f"/srv/{node}/state", "origin": "file"}
    assert out["settings"]["paths.run_dir"] == {"value": "/run/imexctl", "origin": "default"}


def test_config_show_table_and_check_without_file(no_config_anywhere, capsys):
    assert main(["config", "show"]) == EXIT_OK
    out = capsys.readouterr().out
    assert out.startswith("# no configuration file: built-in defaults")
    assert any(line.startswith("imex.launcher") and '"direct"' in line and "(default)" in line
               for line in out.splitlines())
    assert main(["config", "check"]) == EXIT_OK
    assert "built-in defaults: OK" in capsys.readouterr().out


def test_bad_file_still_exit_3(tmp_path, capsys):
    path = tmp_path / "imexctl.toml"
    path.write_text("[imex]\nlauncher = 'podman'\n")
    assert main(["--config", str(path), "config", "show"]) == EXIT_CONFIG
    assert "imex.launcher" in capsys.readouterr().err


def test_status_runs_with_no_config_file(tmp_path):
    """The reported bug: `imexctl status` on a fresh install exited 3. Run the real CLI
    in a child whose default search path and state live under tmp_path."""
    code = (
        "import sys\n"
        "from pathlib import Path\n"
        "import imexctl.config as c\n"
        f"root = Path({str(tmp_path)!r})\n"
        "c.DEFAULT_SEARCH_PATH = (root / 'none.toml',)\n"
        "from imexctl.cli import main\n"
        "sys.exit(main(['status', '--json', '--local']))\n"
    )
    env = {"PATH": "/usr/bin:/bin", "SLURMD_NODENAME": "tray09"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, timeout=60)
    assert proc.returncode == EXIT_OK, proc.stderr
    assert json.loads(proc.stdout)["node"] == "tray09"
