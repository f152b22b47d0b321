"""slurm.conf read locally: settings, node addresses (hostlists, DEFAULT), Include, configless."""

import os

import pytest

from imexctl.slurm.localconf import LocalConfError, find_slurm_conf, load

MAIN = """\
# cluster config
ClusterName=gb200
SwitchType=switch/nvidia_imex   # trailing comment
PrologEpilogTimeout=120
NodeName=DEFAULT CPUs=144 \\
    RealMemory=800000
NodeName=tray[01-04] NodeAddr=10.1.0.[11-14] Features=imex
NodeName=tray05 NodeHostname=tray05-bmc
NodeName=tray[06-07]
PartitionName=nvl Nodes=tray[01-07] SwitchType=ignored
Include nodes.d/*.conf
include "extra.conf"
"""


@pytest.fixture
def conf_dir(tmp_path):
    (tmp_path / "nodes.d").mkdir()
    (tmp_path / "slurm.conf").write_text(MAIN)
    (tmp_path / "nodes.d" / "a.conf").write_text("NodeName=gpu[1-2] NodeAddr=fd00::1,fd00::2\n")
    (tmp_path / "nodes.d" / "b.conf").write_text("NodeName=bad[1-3] NodeAddr=10.0.0.[1-2]\n")
    (tmp_path / "extra.conf").write_text("PrologTimeout=90\nswitchtype=switch/none\n")
    return tmp_path


def test_settings_nodes_and_includes(conf_dir):
    conf = load(conf_dir / "slurm.conf")
    assert conf.get("clustername") == "gb200"
    # extra.conf is read last and wins; keys are case-insensitive
    assert conf.switch_type == "switch/none" and not conf.slurm_manages_imex_channels
    assert conf.prolog_timeout_s == 90 and conf.timeout_s("PrologEpilogTimeout") == 120
    assert conf.addresses(["tray01", "tray04", "tray05", "tray07", "gpu2", "nope"]) == {
        "tray01": "10.1.0.11", "tray04": "10.1.0.14", "tray05": "tray05-bmc",
        "tray07": "tray07", "gpu2": "fd00::2"}
    assert conf.nodes["tray05"].hostname == "tray05-bmc"
    assert [p.name for p in conf.files] == ["slurm.conf", "a.conf", "b.conf", "extra.conf"]
    assert any("bad[1-3]" in p and "3 names" in p for p in conf.problems)
    assert "bad1" not in conf.nodes


@pytest.mark.parametrize("text, name, limit", [
    ("PrologEpilogTimeout=120\n", "PrologEpilogTimeout", 120),
    ("PrologTimeout=90\nPrologEpilogTimeout=120\n", "PrologTimeout", 90),      # 24.11+
    ("PrologTimeout=UNLIMITED\nPrologEpilogTimeout=120\n", "PrologTimeout", None),
    ("PrologEpilogTimeout=INFINITE\n", "PrologEpilogTimeout", None),
    ("PrologEpilogTimeout=65534\n", "PrologEpilogTimeout", None),               # INFINITE16
    ("ClusterName=x\n", "PrologEpilogTimeout", None),                           # unset
])
def test_the_prologs_time_limit_is_one_fact(tmp_path, text, name, limit):
    """How long slurmd lets a Prolog run, asked by doctor: the key that sets it and its
    seconds, None for no limit."""
    (tmp_path / "slurm.conf").write_text(text)
    conf = load(tmp_path / "slurm.conf")
    assert (conf.prolog_timeout_name, conf.prolog_timeout_s) == (name, limit)


def test_a_prolog_time_limit_that_is_no_number_is_named(tmp_path):
    (tmp_path / "slurm.conf").write_text("PrologTimeout=soon\n")
    with pytest.raises(LocalConfError, match="PrologTimeout='soon' is not a number"):
        load(tmp_path / "slurm.conf").prolog_timeout_s


def test_switch_type_from_main_file_without_include(tmp_path):
    (tmp_path / "slurm.conf").write_text("SwitchType=switch/nvidia_imex\n")
    assert load(tmp_path / "slurm.conf").slurm_manages_imex_channels


def test_configless_copy_is_found_when_etc_has_none(tmp_path):
    run = tmp_path / "run" / "slurm" / "conf"
    run.mkdir(parents=True)
    (run / "slurm.conf").write_text("NodeName=t1 NodeAddr=192.0.2.1\n")
    found = find_slurm_conf({}, candidates=(tmp_path / "etc" / "slurm.conf", run / "slurm.conf"))
    assert found == run / "slurm.conf"
    assert load(found).addresses(["t1"]) == {"t1": "192.0.2.1"}
    assert str(find_slurm_conf({"SLURM_CONF": "/x/slurm.conf"})) == "/x/slurm.conf"
    with pytest.raises(LocalConfError, match="no local slurm.conf"):
        find_slurm_conf({}, candidates=(tmp_path / "none",))


def test_fifo_missing_and_include_loops_are_errors_not_hangs(tmp_path):
    os.mkfifo(tmp_path / "fifo.conf")
    with pytest.raises(LocalConfError, match="not a regular file"):
        load(tmp_path / "fifo.conf")
    with pytest.raises(LocalConfError, match="cannot open"):
        load(tmp_path / "absent.conf")
    (tmp_path / "loop.conf").write_text("Include loop.conf\n")
    with pytest.raises(LocalConfError, match="nested deeper"):
        load(tmp_path / "loop.conf")


def test_ten_thousand_nodes_one_line_each(tmp_path):
    lines = [f"NodeName=n{i:05d} NodeAddr=10.{i >> 8}.{i & 255}.1" for i in range(10000)]
    (tmp_path / "slurm.conf").write_text("\n".join(lines) + "\n")
    conf = load(tmp_path / "slurm.conf")
    assert len(conf.nodes) == 10000 and conf.addresses(["n09999"]) == {"n09999": "10.39.15.1"}


def test_channel_owner_from_mode_or_local_switch_type(tmp_path):
    from imexctl.config import parse_config
    from imexctl.slurm.localconf import slurm_owns_channels
    from tests.support.memory_slurm import MemorySlurm

    def cfg(mode, conf):
        return parse_config({"channels": {"mode": mode},
                             "paths": {"slurm_conf": str(conf)} if conf else {}}, None, "tray01")
    (tmp_path / "slurm.conf").write_text("SwitchType=switch/nvidia_imex\n")
    asked = []
    slurm = MemorySlurm(switch="switch/none")
    real = slurm.switch_type
    slurm.switch_type = lambda: asked.append(1) or real()
    assert slurm_owns_channels(cfg("auto", tmp_path / "slurm.conf"), slurm) is True
    assert slurm_owns_channels(cfg("imexctl", tmp_path / "slurm.conf"), slurm) is False
    assert slurm_owns_channels(cfg("slurm", None), slurm) is True
    assert asked == []
    # no local slurm.conf: ask slurmctld if possible, else say so
    assert slurm_owns_channels(cfg("auto", tmp_path / "absent.conf"), slurm) is False
    assert asked == [1]
    with pytest.raises(LocalConfError):
        slurm_owns_channels(cfg("auto", tmp_path / "absent.conf"))
    # the reason status shows comes from the same rule
    from imexctl.slurm.localconf import channel_owner
    assert channel_owner(cfg("auto", tmp_path / "slurm.conf")).why == \
        f"SwitchType=switch/nvidia_imex in {tmp_path / 'slurm.conf'}"
    assert channel_owner(cfg("imexctl", None)).why == "channels.mode = imexctl"
    assert channel_owner(cfg("auto", tmp_path / "absent.conf"), slurm).why == \
        "SwitchType=switch/none from slurmctld"


def test_only_the_wanted_nodes_are_parsed(conf_dir):
    (conf_dir / "extra.conf").write_text("NodeName=solo1 NodeAddr=10.9.9.1\n"
                                         "NodeName=solo2 NodeAddr=10.9.9.2\nSwitchType=x/y\n")
    conf = load(conf_dir / "slurm.conf", nodes=["tray05", "gpu1", "solo2"])
    assert conf.addresses(["tray05", "gpu1", "solo1", "solo2"]) == {
        "tray05": "tray05-bmc", "gpu1": "fd00::1", "solo2": "10.9.9.2"}
    assert "solo1" not in conf.nodes            # single-node line of another node: skipped
    assert conf.switch_type == "x/y"            # settings are still read in full
