"""Per-job IMEX config rendering: deterministic, per-job ports, template rules, node
entries (addresses unless the driver takes host names) and the command-service address."""

import threading

import pytest

from imexctl.errors import ConfigError
from imexctl.imex.render import (OWNED_KEYS, Ports, RenderError, domain_digest,
                                 hostnames_supported, job_ports, load_template, node_entries,
                                 render_daemon_config, render_nodes_config, resolve_address)


def test_nodes_config_is_one_address_per_line_in_order():
    assert render_nodes_config(["10.0.0.2", "10.0.0.1"]) == "10.0.0.2\n10.0.0.1\n"


@pytest.mark.parametrize("bad", [[], ["10.0.0.1", "10.0.0.1"], ["10.0.0.1 x"], [""]])
def test_nodes_config_rejects_bad_lists(bad):
    with pytest.raises(RenderError):
        render_nodes_config(bad)


def test_ports_differ_for_consecutive_jobs_and_stay_in_range():
    a, b = job_ports(100, 33792, 50176, 8192), job_ports(101, 33792, 50176, 8192)
    assert a != b and a.server == 33792 + 100 and a.cmd == 50176 + 100
    top = job_ports(8191, 33792, 50176, 8192)
    assert top.server == 33792 + 8191 and job_ports(8192, 33792, 50176, 8192).server == 33792


def test_daemon_config_renders_every_owned_key_once(tmp_path):
    text = render_daemon_config(load_template(None), nodes_config=tmp_path / "n.cfg",
                                ports=Ports(40000, 50000), log_file=tmp_path / "imex.log",
                                wait_for_quorum="RECOVERY", cmd_bind_ip="10.0.0.7")
    keys = [line.split("=")[0] for line in text.splitlines() if "=" in line and
            not line.startswith("#")]
    for key in OWNED_KEYS:
        assert keys.count(key) == 1, key
    assert "SERVER_PORT=40000\n" in text and "IMEX_CMD_PORT=50000\n" in text
    assert f"IMEX_NODE_CONFIG_FILE={tmp_path / 'n.cfg'}\n" in text
    assert "DAEMONIZE=0\n" in text
    assert "IMEX_CMD_BIND_INTERFACE_IP=10.0.0.7\n" in text  # never empty: ctl would try [::]
    # the job's statistics into its own log, not the host-wide stats file (fidelity N13)
    assert f"STATS_FILE_NAME={tmp_path / 'imex.log'}\n" in text
    # a job's daemon log (RAM, under /run) at most 64 MB x 4 (fidelity N14)
    assert "LOG_FILE_MAX_SIZE=64\n" in text and "LOG_MAX_ROTATE_COUNT=3\n" in text


def test_template_may_not_set_owned_keys(tmp_path):
    tpl = tmp_path / "tpl.cfg"
    tpl.write_text("LOG_LEVEL=4\n# comment\nSERVER_PORT=50000\n")
    with pytest.raises(ConfigError, match=r"tpl.cfg:3: SERVER_PORT is set per job"):
        load_template(tpl)
    tpl.write_text("LOG_LEVEL=4\nthis is junk\n")
    with pytest.raises(ConfigError, match=r"tpl.cfg:2: not a KEY=VALUE line"):
        load_template(tpl)
    tpl.write_text("IMEX_CMD_BIND_INTERFACE_IP=\n")
    with pytest.raises(ConfigError, match=r"tpl.cfg:1: IMEX_CMD_BIND_INTERFACE_IP is set per"):
        load_template(tpl)


def test_command_service_address_must_be_an_ip(tmp_path):
    for bad in ("", "tray01", "10.0.0.1 x"):
        with pytest.raises(RenderError, match="IMEX_CMD_BIND_INTERFACE_IP"):
            render_daemon_config(load_template(None), nodes_config=tmp_path / "n",
                                 ports=Ports(1, 2), log_file=tmp_path / "l",
                                 wait_for_quorum="NONE", cmd_bind_ip=bad)


def test_site_template_is_kept(tmp_path):
    tpl = tmp_path / "tpl.cfg"
    tpl.write_text("LOG_LEVEL=2\nIMEX_ENABLE_AUTH_ENCRYPTION=0")
    text = render_daemon_config(load_template(tpl), nodes_config=tmp_path / "n",
                                ports=Ports(1, 2), log_file=tmp_path / "l",
                                wait_for_quorum="NONE", cmd_bind_ip="::1")
    assert text.startswith("LOG_LEVEL=2\nIMEX_ENABLE_AUTH_ENCRYPTION=0\n")
    assert "IMEX_WAIT_FOR_QUORUM=NONE\n" in text


def test_digest_identifies_domain():
    nodes = render_nodes_config(["10.0.0.1", "10.0.0.2"])
    d1 = domain_digest(nodes, Ports(1, 2), 5)
    assert d1 == domain_digest(nodes, Ports(1, 2), 5)
    assert d1 != domain_digest(nodes, Ports(1, 2), 6)
    assert d1 != domain_digest(render_nodes_config(["10.0.0.2", "10.0.0.1"]), Ports(1, 2), 5)


def render_tray(tmp_path, node_addrs, index, **kw):
    """What one tray of a domain renders: nodes_config.cfg, config.cfg, digest."""
    got = node_entries(node_addrs, index, **kw)
    nodes = render_nodes_config(got.entries)
    ports = job_ports(4242, 18432, 20480, 2048)
    cfg = render_daemon_config(load_template(None), nodes_config=tmp_path / "nodes_config.cfg",
                               ports=ports, log_file=tmp_path / "imex.log",
                               wait_for_quorum="RECOVERY", cmd_bind_ip=got.cmd_bind_ip)
    return nodes, cfg, domain_digest(nodes, ports, 7)


def test_trays_of_one_domain_render_identically_but_for_their_own_address(tmp_path):
    addrs = [f"10.1.0.{i}" for i in range(1, 19)]
    trays = [render_tray(tmp_path, addrs, i) for i in range(18)]
    assert len({nodes for nodes, _, _ in trays}) == 1
    assert len({digest for _, _, digest in trays}) == 1
    for i, (_, cfg, _) in enumerate(trays):
        assert f"IMEX_CMD_BIND_INTERFACE_IP=10.1.0.{i + 1}\n" in cfg
        others = [line for line in cfg.splitlines()
                  if not line.startswith("IMEX_CMD_BIND_INTERFACE_IP=")]
        assert others == [line for line in trays[0][1].splitlines()
                          if not line.startswith("IMEX_CMD_BIND_INTERFACE_IP=")]


def test_names_are_written_as_addresses_resolved_here():
    """The system resolver, for real: localhost is in every /etc/hosts."""
    got = node_entries(["10.0.0.1", "localhost"], 1)
    assert got.entries == ("10.0.0.1", "127.0.0.1") and got.cmd_bind_ip == "127.0.0.1"
    assert resolve_address("localhost") == "127.0.0.1"  # IPv4 preferred over ::1


def test_host_names_are_kept_only_when_asked_and_the_bind_ip_is_still_an_address():
    got = node_entries(["10.0.0.1", "localhost"], 1, host_names=True)
    assert got.entries == ("10.0.0.1", "localhost") and got.cmd_bind_ip == "127.0.0.1"
    got = node_entries(["localhost", "tray-that-does-not-resolve.invalid"], 0,
                       host_names=True)  # only this tray's own entry is looked up
    assert got.entries == ("localhost", "tray-that-does-not-resolve.invalid")


def dns(table):
    """A stand-in for the system resolver (the DNS boundary)."""
    def resolve(name):
        if name not in table:
            raise RenderError(f"cannot resolve node address {name!r}: Name or service not known")
        return table[name]
    return resolve


@pytest.mark.parametrize("answer, result", [
    (["10.0.0.5"], "10.0.0.5"),
    (["fd00::5", "10.0.0.5", "10.0.0.5"], "10.0.0.5"),       # IPv4 first, duplicates merged
    (["fd00::5"], "fd00::5"),
    (["10.0.0.5", "10.0.0.6"], "several addresses (10.0.0.5, 10.0.0.6)"),
    ([], "resolves to no IP address"),
])
def test_a_name_must_resolve_to_one_address_whatever_tray_asks(answer, result):
    resolver = dns({"tray05": answer})
    if result[0].isdigit() or ":" in result:
        assert resolve_address("tray05", resolver) == result
        assert resolve_address("tray05", dns({"tray05": list(reversed(answer))})) == result
    else:
        with pytest.raises(RenderError, match=result.replace("(", r"\(").replace(")", r"\)")):
            resolve_address("tray05", resolver)


def test_unresolvable_bad_or_duplicate_entries_are_render_errors():
    with pytest.raises(RenderError, match="cannot resolve node address 'tray09'"):
        node_entries(["10.0.0.1", "tray09"], 0, resolver=dns({}))
    with pytest.raises(RenderError, match="invalid node address"):
        node_entries(["10.0.0.1", "tray;rm"], 0, resolver=dns({}))
    with pytest.raises(RenderError, match=r"duplicate node address 10.0.0.1 \(from 10.0.0.1, tray02\)"):
        node_entries(["10.0.0.1", "tray02"], 0, resolver=dns({"tray02": ["10.0.0.1"]}))
    with pytest.raises(RenderError, match=r"duplicate node address 10.0.0.1 \(from n1, n2\)"):
        node_entries(["10.0.0.1", "10.0.0.1"], 0, labels=["n1", "n2"])
    with pytest.raises(RenderError, match="not in the job's node list"):
        node_entries(["10.0.0.1"], 1)


def test_a_hanging_resolver_is_bounded():
    gate = threading.Event()

    def hang(name):
        gate.wait(10)
        return ["10.0.0.9"]

    try:
        with pytest.raises(RenderError, match="took longer than 0.2s"):
            node_entries(["tray01", "tray02"], 0, resolver=hang, timeout_s=0.2)
    finally:
        gate.set()


@pytest.mark.parametrize("version, ok", [
    ("570.158.01", True), ("570.172", True), ("580.159.04", True), ("570.148.08", False),
    ("565.57.01", False),
])
def test_host_names_need_driver_570_158_01(version, ok):
    assert hostnames_supported(version) is ok
    with pytest.raises(ValueError):
        hostnames_supported("latest")


# ipaddress's spelling on every input: the rendered file is what every tray compares.
@pytest.mark.parametrize("text", [
    "10.0.0.1", "0.0.0.0", "255.255.255.255", "192.168.1.100", "1.2.3.4",
    "256.1.1.1", "10.01.0.1", "010.0.0.1", "1.2.3", "1.2.3.4.5", "1.2.3.4 ", " 1.2.3.4",
    "1.2.3.4\n", "1..3.4", "", "tray01", "10.0.0.1%eth0", "١.٢.٣.٤", "1.2.3.-4",
    "::1", "fe80::1%eth0", "2001:DB8::0:1", "::ffff:10.0.0.1", "::FFFF:1.2.3.4", "1:2:3"])
def test_canonical_ip_agrees_with_ipaddress(text):
    import ipaddress

    from imexctl.imex.render import canonical_ip, is_ip_address

    try:
        expected = str(ipaddress.ip_address(text))
    except ValueError:
        expected = None
    assert canonical_ip(text) == expected
    assert is_ip_address(text) is (expected is not None)


def test_disconnected_grace_time_is_the_packaged_default_unless_the_site_sets_it(tmp_path):
    # fidelity N4: the built-in template rendered IMEX_NODE_DISCONNECTED_GRACE_TIME=0, which
    # drops a lost peer's imports at once (mid-job); the packaged config ships -1
    from imexctl.config import parse_config

    def render(**kw):
        return render_daemon_config(load_template(None), nodes_config=tmp_path / "n",
                                    ports=Ports(40000, 50000), log_file=tmp_path / "l",
                                    wait_for_quorum="RECOVERY", cmd_bind_ip="10.0.0.7", **kw)
    cfg = parse_config({}, None, "tray01")
    text = render(grace_time=cfg.imex.node_disconnected_grace_time)
    assert [line for line in text.splitlines() if "GRACE" in line] == [
        "IMEX_NODE_DISCONNECTED_GRACE_TIME=-1"]
    cfg = parse_config({"imex": {"node_disconnected_grace_time": 300}}, None, "tray01")
    assert "IMEX_NODE_DISCONNECTED_GRACE_TIME=300\n" in render(
        grace_time=cfg.imex.node_disconnected_grace_time)
    with pytest.raises(ConfigError, match=r"node_disconnected_grace_time = -2 is out of range"):
        parse_config({"imex": {"node_disconnected_grace_time": -2}}, None, "tray01")
    tpl = tmp_path / "tpl.cfg"
    tpl.write_text("IMEX_NODE_DISCONNECTED_GRACE_TIME=0\n")
    with pytest.raises(ConfigError, match=r"tpl.cfg:1: IMEX_NODE_DISCONNECTED_GRACE_TIME is "
                                          r"set per job by imexctl; remove it from the template "
                                          r"\(set imex.node_disconnected_grace_time in "
                                          r"imexctl.toml instead\)"):
        load_template(tpl)
