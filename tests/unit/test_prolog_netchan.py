"""The prolog and epilog with the port probe, node entries and channel0 policy (issue 9)."""

from __future__ import annotations

import os
import socket
import stat

import pytest

from imexctl.imex.render import job_ports
from imexctl.lifecycle.epilog import run_epilog
from imexctl.lifecycle.prolog import run_prolog
from imexctl.tray.ownership import StateStore
from tests.support.lifecycle import ctx_for, make_cfg
from tests.support.sim_daemon import sim_cfg

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="channel mknod needs root")


def test_outgoing_connection_on_the_job_port_does_not_fault_render(tmp_path, slurm):
    cfg = make_cfg(tmp_path)
    ports = job_ports(42, cfg.imex.server_port_base, cfg.imex.cmd_port_base, cfg.imex.port_span)
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    client = socket.socket()
    client.bind(("127.0.0.1", ports.cmd))
    client.connect(server.getsockname())
    try:
        rc = run_prolog(cfg, slurm, ctx_for())
    finally:
        client.close()
        server.close()
    assert rc == 1  # no nvidia-imex here: the prolog gets past render to start
    assert slurm.nodes_["tray01"].reason.startswith("imexctl: prolog/start:")


def test_a_listener_of_another_simulated_tray_is_not_in_the_way(tmp_path, slurm):
    cfg = make_cfg(tmp_path)
    ports = job_ports(42, cfg.imex.server_port_base, cfg.imex.cmd_port_base, cfg.imex.port_span)
    other = socket.socket()
    other.bind(("127.0.0.2", ports.server))  # tray02's daemon in the same namespace
    other.listen()
    try:
        assert run_prolog(cfg, slurm, ctx_for()) == 1
    finally:
        other.close()
    assert slurm.nodes_["tray01"].reason.startswith("imexctl: prolog/start:")


@root_only
def test_domain_config_names_this_trays_address_for_the_command_service(tmp_path, slurm):
    import random
    job_id = random.randrange(100_000, 900_000)
    from tests.support.memory_slurm import job_record
    slurm.jobs[job_id] = job_record(job_id, ("tray01",))
    cfg = sim_cfg(tmp_path, policy="all")
    ctx = ctx_for(job_id, nodes="tray01")
    assert run_prolog(cfg, slurm, ctx) == 0, StateStore(cfg.paths.state_dir).last_outcome()
    try:
        text = (tmp_path / "run" / f"job-{job_id}" / "config.cfg").read_text()
        assert "IMEX_CMD_BIND_INTERFACE_IP=127.0.0.1\n" in text
    finally:
        assert run_epilog(cfg, slurm, ctx) == 0


def driver_channel0(tmp_path):
    path = tmp_path / "dev" / "channels" / "channel0"
    os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(234, 0))
    os.chmod(path, 0o666)
    return path


@root_only
def test_epilog_leaves_the_drivers_channel0_by_default(tmp_path, slurm):
    cfg = make_cfg(tmp_path)
    path = driver_channel0(tmp_path)
    assert run_epilog(cfg, slurm, ctx_for()) == 0
    assert stat.S_IMODE(os.lstat(path).st_mode) == 0o666


@root_only
def test_prolog_removes_channel0_when_the_site_asks(tmp_path, slurm):
    cfg = make_cfg(tmp_path, channels={"channel0": "remove"})
    path = driver_channel0(tmp_path)
    run_prolog(cfg, slurm, ctx_for())
    assert not os.path.lexists(path)
