"""Config keys for ports, node entries and channels: defaults and what is refused."""

from pathlib import Path

import pytest

from imexctl.config import load_config
from imexctl.errors import ConfigError
from tests.support.config import write


def test_defaults(tmp_path):
    cfg = load_config(write(tmp_path, ""), node="tray01")
    assert (cfg.imex.server_port_base, cfg.imex.cmd_port_base, cfg.imex.port_span) == \
        (18432, 20480, 2048)
    assert cfg.imex.server_port_base + cfg.imex.port_span <= cfg.imex.cmd_port_base
    assert cfg.imex.cmd_port_base + cfg.imex.port_span - 1 < 32768  # below Linux's ephemeral
    assert (cfg.imex.node_entries, cfg.imex.driver_version) == ("address", "")
    assert cfg.channels.channel0 == "keep"
    assert cfg.channels.params_file == Path("/proc/driver/nvidia/params")


def test_host_names_with_a_new_enough_driver(tmp_path):
    cfg = load_config(write(tmp_path, '[imex]\nnode_entries = "hostname"\n'
                                      'driver_version = "580.159.04"\n'), node="n1")
    assert cfg.imex.node_entries == "hostname"


@pytest.mark.parametrize("text, needle", [
    ('[imex]\nnode_entries = "hostname"\n', 'needs imex.driver_version >= 570.158.01'),
    ('[imex]\nnode_entries = "hostname"\ndriver_version = "570.148.08"\n',
     'needs imex.driver_version >= 570.158.01'),
    ('[imex]\ndriver_version = "r570"\n', "imex.driver_version: not a driver version"),
    ('[imex]\nnode_entries = "dns"\n', "imex.node_entries = 'dns' is not allowed"),
    ('[channels]\nchannel0 = "delete"\n', "channels.channel0 = 'delete' is not allowed; "
                                          "use one of: keep, remove"),
    ('[channels]\nparams_file = "params"\n', "channels.params_file must be an absolute path"),
    ('[channels]\nfile_mode = "0640"\n', "lets other users open the channel; use 0600"),
    ('[channels]\nfile_mode = "0400"\n', "does not let the job's user open the channel "
                                         "read-write; use 0600"),
    ('[channels]\nfile_mode = "0000"\n', "use 0600"),
])
def test_refused(tmp_path, text, needle):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as err:
        load_config(path, node="n1")
    assert str(path) in str(err.value) and needle in str(err.value)


@pytest.mark.parametrize("mode, value", [("0600", 0o600), ("600", 0o600), ("0700", 0o700)])
def test_owner_only_modes_are_accepted(tmp_path, mode, value):
    cfg = load_config(write(tmp_path, f'[channels]\nfile_mode = "{mode}"\n'), node="n1")
    assert cfg.channels.file_mode == value
