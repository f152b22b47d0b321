"""Per-job IMEX config rendering: deterministic, per-job ports, template rules."""

import pytest

from imexctl.errors import ConfigError
from imexctl.imex.render import (OWNED_KEYS, Ports, domain_digest, job_ports, load_template,
                                 render_daemon_config, render_nodes_config)


def test_nodes_config_is_one_address_per_line_in_order():
    assert render_nodes_config(["10.0.0.2", "10.0.0.1"]) == "10.0.0.2\n10.0.0.1\n"


@pytest.mark.parametrize("bad", [[], ["10.0.0.1", "10.0.0.1"], ["10.0.0.1 x"], [""]])
def test_nodes_config_rejects_bad_lists(bad):
    with pytest.raises(ValueError):
        render_nodes_config(bad)


def test_ports_differ_for_consecutive_jobs_and_stay_in_range():
    a, b = job_ports(100, 33792, 50176, 8192), job_ports(101, 33792, 50176, 8192)
    assert a != b and a.server == 33792 + 100 and a.cmd == 50176 + 100
    top = job_ports(8191, 33792, 50176, 8192)
    assert top.server == 33792 + 8191 and job_ports(8192, 33792, 50176, 8192).server == 33792


def test_daemon_config_renders_every_owned_key_once(tmp_path):
    text = render_daemon_config(load_template(None), nodes_config=tmp_path / "n.cfg",
                                ports=Ports(40000, 50000), log_file=tmp_path / "imex.log",
                                wait_for_quorum="RECOVERY")
    keys = [line.split("=")[0] for line in text.splitlines() if "=" in line and
            not line.startswith("#")]
    for key in OWNED_KEYS:
        assert keys.count(key) == 1, key
    assert "SERVER_PORT=40000\n" in text and "IMEX_CMD_PORT=50000\n" in text
    assert f"IMEX_NODE_CONFIG_FILE={tmp_path / 'n.cfg'}\n" in text
    assert "DAEMONIZE=0\n" in text


def test_template_may_not_set_owned_keys(tmp_path):
    tpl = tmp_path / "tpl.cfg"
    tpl.write_text("LOG_LEVEL=4\n# comment\nSERVER_PORT=50000\n")
    with pytest.raises(ConfigError, match=r"tpl.cfg:3: SERVER_PORT is set per job"):
        load_template(tpl)
    tpl.write_text("LOG_LEVEL=4\nthis is junk\n")
    with pytest.raises(ConfigError, match=r"tpl.cfg:2: not a KEY=VALUE line"):
        load_template(tpl)


def test_site_template_is_kept(tmp_path):
    tpl = tmp_path / "tpl.cfg"
    tpl.write_text("LOG_LEVEL=2\nIMEX_ENABLE_AUTH_ENCRYPTION=0")
    text = render_daemon_config(load_template(tpl), nodes_config=tmp_path / "n",
                                ports=Ports(1, 2), log_file=tmp_path / "l",
                                wait_for_quorum="NONE")
    assert text.startswith("LOG_LEVEL=2\nIMEX_ENABLE_AUTH_ENCRYPTION=0\n")
    assert "IMEX_WAIT_FOR_QUORUM=NONE\n" in text


def test_digest_identifies_domain():
    nodes = render_nodes_config(["10.0.0.1", "10.0.0.2"])
    d1 = domain_digest(nodes, Ports(1, 2), 5)
    assert d1 == domain_digest(nodes, Ports(1, 2), 5)
    assert d1 != domain_digest(nodes, Ports(1, 2), 6)
    assert d1 != domain_digest(render_nodes_config(["10.0.0.2", "10.0.0.1"]), Ports(1, 2), 5)
