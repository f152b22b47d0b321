"""imexctl.toml parsing: valid files load, bad ones are rejected naming file and key."""

import re
from pathlib import Path

import pytest

from imexctl.config import load_config
from imexctl.errors import ConfigError
from tests.support.config import write


def test_defaults_when_file_is_empty(tmp_path):
    cfg = load_config(write(tmp_path, ""), node="tray01")
    assert cfg.paths.channel_dir == Path("/dev/nvidia-caps-imex-channels")
    assert cfg.imex.launcher == "direct"
    assert cfg.channels.file_mode == 0o600
    assert cfg.node == "tray01"


def test_node_placeholder_expands_in_paths(tmp_path):
    cfg = load_config(write(tmp_path, f"""
[paths]
state_dir = "{tmp_path}/trays/{{node}}/state"
[fabric]
source = "file"
file = "{tmp_path}/trays/{{node}}/fabric.json"
"""), node="tray07")
    assert cfg.paths.state_dir == tmp_path / "trays/tray07/state"
    assert cfg.fabric.file == tmp_path / "trays/tray07/fabric.json"


def test_env_variable_selects_file(tmp_path, monkeypatch):
    path = write(tmp_path, '[log]\nlevel = "debug"\n')
    monkeypatch.setenv("IMEXCTL_CONFIG", str(path))
    assert load_config(node="n1").log.level == "debug"


@pytest.mark.parametrize("text, needle", [
    ("[paths\n", "invalid TOML"),
    ("[bogus]\n", "unknown section [bogus]"),
    ("[imex]\nlauncher = \"docker\"\n", "imex.launcher = 'docker' is not allowed; use one of: direct, systemd"),
    ("[imex]\nservr_port_base = 1\n", "unknown key 'imex.servr_port_base'"),
    ("[imex]\nready_timeout_s = 0\n", "imex.ready_timeout_s = 0 is out of range"),
    ("[imex]\nport_span = \"8\"\n", "imex.port_span must be a number"),
    ("[imex]\nport_span = 1.5\n", "imex.port_span must be an integer"),
    ("[imex]\nserver_port_base = 60000\nport_span = 8192\n", "exceeds 65535"),
    ("[imex]\nserver_port_base = 40000\ncmd_port_base = 40010\n", "port ranges overlap"),
    ("[paths]\nstate_dir = \"relative/dir\"\n", "paths.state_dir must be an absolute path"),
    ("[paths]\nstate_dir = \"/var/../etc\"\n", "must not contain '..'"),
    ("[paths]\nrun_dir = \"/" + "r" * 224 + "\"\n",   # fidelity N16: IMEX takes 256
     "paths.run_dir is 225 characters; at most 224"),
    ("[fabric]\nsource = \"file\"\n", "fabric.file is required"),
    ("[channels]\nfile_mode = \"0666\"\n", "lets other users open the channel; use 0600"),
    ("[channels]\nfile_mode = \"0604\"\n", "lets other users open the channel; use 0600"),
    ("[channels]\nfile_mode = 600\n", "octal string"),
    ("[policy]\npartitions = \"gpu\"\n", "policy.partitions must be a list"),
    ("paths = 3\n", "'paths' must be a table"),
])
def test_bad_files_name_file_and_key(tmp_path, text, needle):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as err:
        load_config(path, node="n1")
    assert str(path) in str(err.value)
    assert needle in str(err.value)


def test_missing_file_is_named(tmp_path):
    with pytest.raises(ConfigError, match=r"nope\.toml: file not found"):
        load_config(tmp_path / "nope.toml", node="n1")


def test_node_placeholder_without_node_name(tmp_path, monkeypatch):
    path = write(tmp_path, '[paths]\nstate_dir = "/x/{node}"\n')
    monkeypatch.delenv("SLURMD_NODENAME", raising=False)
    with pytest.raises(ConfigError, match="node name is unknown"):
        load_config(path, node="")


def test_node_placeholder_with_a_refused_slurmd_nodename_names_the_value(tmp_path, monkeypatch):
    """Audit F-24: 'tray01\\n' is refused, and the message shows exactly what was refused."""
    path = write(tmp_path, '[paths]\nstate_dir = "/x/{node}"\n')
    monkeypatch.setenv("SLURMD_NODENAME", "tray01\n")
    with pytest.raises(ConfigError, match=r"SLURMD_NODENAME='tray01\\n' is not a valid node name"):
        load_config(path, node="")


def test_multi_clique_policy_per_partition_and_channel_count():
    from imexctl.config import parse_config
    cfg = parse_config({"policy": {"multi_clique": "skip",
                                   "partition": {"nvl": {"multi_clique": "refuse"}}},
                        "channels": {"count": 64}}, None, "tray01")
    assert cfg.policy.multi_clique == "skip"
    assert cfg.policy.partition_multi_clique == {"nvl": "refuse"}
    assert cfg.channels.count == 64
    assert parse_config({}, None, "t").policy.multi_clique == "per-clique"


@pytest.mark.parametrize("policy, needle", [
    ({"multi_clique": "sometimes"}, "policy.multi_clique = 'sometimes' is not allowed"),
    ({"partition": {"nvl": {"multi_clique": "never"}}}, "policy.partition.nvl.multi_clique"),
    ({"partition": {"nvl": {"mode": "refuse"}}}, "takes exactly one key, multi_clique"),
    ({"partition": "nvl"}, "policy.partition must be tables"),
])
def test_bad_multi_clique_policy_names_the_key(policy, needle):
    from imexctl.config import parse_config
    with pytest.raises(ConfigError, match=re.escape(needle)):
        parse_config({"policy": policy}, None, "tray01")


def test_every_error_is_reported_at_once_with_a_suggestion(tmp_path):
    """An admin fixing a config sees every mistake in one run, each naming file and key,
    with the likely key for a typo."""
    from imexctl.errors import ConfigError

    path = tmp_path / "imexctl.toml"
    path.write_text('[imx]\n[imex]\nlaunchr = "direct"\nport_span = "many"\n'
                    '[policy]\nmode = "sometimes"\n')
    with pytest.raises(ConfigError) as exc:
        load_config(path)
    lines = str(exc.value).splitlines()
    assert len(lines) == 4, lines
    assert all(line.startswith(f"{path}: ") for line in lines)
    assert any("unknown section [imx] (did you mean 'imex'?)" in line for line in lines)
    assert any("unknown key 'imex.launchr' (did you mean 'launcher'?)" in line for line in lines)
    assert any("imex.port_span" in line for line in lines)
    assert any("policy.mode" in line for line in lines)


def test_config_check_warns_about_settings_that_do_nothing(tmp_path):
    import subprocess
    import sys

    path = tmp_path / "imexctl.toml"
    path.write_text('[policy]\nmode = "partitions"\n[fabric]\nfile = "/etc/fabric.json"\n')
    res = subprocess.run([sys.executable, "-m", "imexctl", "--config", str(path), "config",
                          "check"], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert 'warning: policy.mode = "partitions" with no policy.partitions' in res.stdout
    assert "warning: fabric.file is set but fabric.source = 'nvml'" in res.stdout
    bad = tmp_path / "bad.toml"
    bad.write_text('[imex]\nlaunchr = "direct"\nport_spam = 3\n')
    res = subprocess.run([sys.executable, "-m", "imexctl", "--config", str(bad), "config",
                          "check"], capture_output=True, text=True, timeout=60)
    assert res.returncode == 3 and "Traceback" not in res.stderr
    assert [line.startswith("imexctl: ") for line in res.stderr.splitlines()] == [True, True]
