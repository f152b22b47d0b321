"""`imexctl recover`: what an earlier boot left is torn down, the identity republished;
a domain of this boot is kept; a second run changes nothing."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from imexctl.tray import expected
from imexctl.cli import main
from imexctl.ops.health import default_teardown
from imexctl.lifecycle.teardown import job_dir
from imexctl.ops.recover import from_old_boot, recover
from imexctl.tray.bootid import read_boot_id
from imexctl.tray.ownership import StateStore
from tests.support.health import mkchannel, needs_root
from tests.support.memory_slurm import MemorySlurm
from tests.support.lifecycle import UUID, leftovers, make_cfg, published
from tests.support.records import make_record

THIS_BOOT = "aaaaaaaa-0000-0000-0000-000000000001"
OLD_BOOT = "bbbbbbbb-0000-0000-0000-000000000002"


def plant(cfg, tmp_path, job_id=41, channel=9, boot_id=OLD_BOOT, **kw):
    job_dir(cfg, job_id).mkdir(parents=True, exist_ok=True)
    if channel is not None:
        mkchannel(cfg, channel)
    StateStore(cfg.paths.state_dir).save(make_record(job_id=job_id, channel=channel,
                                                     job_dir=str(job_dir(cfg, job_id)), **kw))
    path = tmp_path / "state" / "domain.json"
    raw = json.loads(path.read_text())
    if boot_id:
        raw["boot_id"] = boot_id
    path.write_text(json.dumps(raw))


def test_boot_id_is_read_from_the_configured_file_and_the_kernels_by_default(tmp_path):
    from imexctl.config import Paths
    from imexctl.tray.bootid import current_boot_id

    (tmp_path / "boot_id").write_text(THIS_BOOT + "\n")
    assert read_boot_id(tmp_path / "boot_id") == THIS_BOOT
    assert read_boot_id(tmp_path / "absent") is None
    (tmp_path / "empty").write_text("")
    assert read_boot_id(tmp_path / "empty") is None
    cfg = make_cfg(tmp_path)
    assert current_boot_id(cfg) == read_boot_id(cfg.paths.boot_id_file)
    # [paths] boot_id_file's default is the kernel's, a UUID that names this boot
    kernel = read_boot_id(Paths().boot_id_file)
    assert kernel is not None and len(kernel) == 36 and kernel.count("-") == 4


def test_old_boot_rules():
    rec = make_record(started_at=100.0)
    assert from_old_boot(rec, {"boot_id": OLD_BOOT}, THIS_BOOT, booted_at=50.0)
    assert not from_old_boot(rec, {"boot_id": THIS_BOOT}, THIS_BOOT, booted_at=500.0)
    # records written before boot ids: started before this boot
    assert from_old_boot(rec, {}, THIS_BOOT, booted_at=500.0)
    assert not from_old_boot(rec, {}, THIS_BOOT, booted_at=50.0)


@needs_root
def test_recover_clears_an_old_boot_and_republishes(tmp_path, slurm):
    cfg = make_cfg(tmp_path)
    plant(cfg, tmp_path)
    job_dir(cfg, 40).mkdir(parents=True)
    mkchannel(cfg, 3)
    slurm.publish("tray01", published(clique=7))
    done = recover(cfg, default_teardown(cfg), slurm, current_boot=THIS_BOOT)
    assert done.failures == [] and done.stale_found == 1
    assert done.repaired == ["tore down the domain of job 41 left by an earlier boot",
                             f"removed leftover {job_dir(cfg, 40)}", "removed leaked channel3",
                             f"published identity {UUID}.1 (was {UUID}.7)"]
    assert leftovers(tmp_path) == {"job_dirs": [], "channels": [],
                                   "record": False}
    assert expected.read(cfg).state == "idle"
    again = recover(cfg, default_teardown(cfg), slurm, current_boot=THIS_BOOT)
    assert (again.repaired, again.failures, again.stale_found) == ([], [], 0)


@needs_root
def test_a_domain_of_this_boot_is_kept(tmp_path, slurm):
    cfg = make_cfg(tmp_path)
    plant(cfg, tmp_path, boot_id=THIS_BOOT)
    job_dir(cfg, 40).mkdir(parents=True)
    done = recover(cfg, default_teardown(cfg), None, current_boot=THIS_BOOT)
    assert done.repaired == [f"removed leftover {job_dir(cfg, 40)}"]
    assert leftovers(tmp_path) == {"job_dirs": ["job-41"], "channels": ["channel9"],
                                   "record": True}


def test_republish_is_best_effort(tmp_path):
    s = MemorySlurm()   # the real Extra rule: a non-JSON Extra is refused
    s.add_nodes({"tray01": "127.0.0.1"})
    s.set_node("tray01", extra="rack=7 row=3")
    cfg = make_cfg(tmp_path)
    plant(cfg, tmp_path, channel=None)
    done = recover(cfg, default_teardown(cfg), s, current_boot=THIS_BOOT)
    assert done.failures == [] and done.repaired[0].startswith("tore down the domain of job 41")
    assert len(done.notes) == 1 and "Extra is not a JSON object" in done.notes[0]


def test_a_failed_teardown_is_reported(tmp_path):
    cfg = make_cfg(tmp_path)
    plant(cfg, tmp_path, channel=None)
    done = recover(cfg, lambda record: [("stop-daemon", "daemon stuck")], None,
                   current_boot=THIS_BOOT)
    assert done.failures == [("reboot", "domain of job 41 left by an earlier boot could not "
                                        "be removed (stop-daemon: daemon stuck)")]
    assert expected.read(cfg) is None  # not claimed idle while a domain may linger


def test_cli_recover_without_slurm(tmp_path, config_file, capsys, monkeypatch):
    monkeypatch.setenv("SLURMD_NODENAME", "tray01")
    cfg = make_cfg(tmp_path)
    plant(cfg, tmp_path, channel=None, started_at=1.0, boot_id=None)  # pre-boot-id record
    assert main(["--config", str(config_file), "recover", "--no-publish"]) == 0
    out = capsys.readouterr().out
    assert "imexctl recover: repaired: tore down the domain of job 41 left by an earlier boot" \
        in out
    assert main(["--config", str(config_file), "recover", "--no-publish"]) == 0
    assert "nothing left by an earlier boot (tray01)" in capsys.readouterr().out
    assert not os.path.exists(tmp_path / "state" / "domain.json")


def test_cli_recover_cleans_even_when_slurm_cannot_be_used(tmp_path, config_file, capsys,
                                                           monkeypatch):
    """slurm.backend = "pyslurm" without pyslurm (removed in a Slurm upgrade): the boot-time
    recovery still tears down what the last boot left, and only the republish is lost."""
    # not installed, even where it is (the trixie root's venv)
    monkeypatch.setattr("imexctl.slurm.probe._pyslurm_origin", lambda: None)
    monkeypatch.setenv("SLURMD_NODENAME", "tray01")
    config_file.write_text(config_file.read_text() + '[slurm]\nbackend = "pyslurm"\n')
    plant(make_cfg(tmp_path), tmp_path, channel=None, started_at=1.0, boot_id=None)
    assert main(["--config", str(config_file), "recover"]) == 0
    out = capsys.readouterr().out
    assert "repaired: tore down the domain of job 41 left by an earlier boot" in out
    assert "note: fabric identity not republished: slurm.backend = \"pyslurm\" but pyslurm " \
           "is not installed" in out
    assert not os.path.exists(tmp_path / "state" / "domain.json")


def test_cli_recover_tries_slurm_once_per_call_at_boot(tmp_path, config_file, capsys,
                                                       monkeypatch):
    """slurmd waits for the boot-time recovery: with slurmctld down, each Slurm call is
    tried once (not slurm.attempts times) and the lost republish is a note."""
    monkeypatch.setenv("SLURMD_NODENAME", "tray01")
    bindir = tmp_path / "slurm-bin"
    bindir.mkdir()
    calls = tmp_path / "calls"
    for tool in ("scontrol", "squeue", "sinfo"):
        (bindir / tool).write_text(f'#!/bin/sh\necho "{tool} $*" >> {calls}\n'
                                   'echo "slurm_load_node error: Unable to contact slurm '
                                   'controller (connect failure)" >&2\nexit 1\n')
        (bindir / tool).chmod(0o755)
    config_file.write_text(config_file.read_text().replace(
        "[paths]\n", f'[paths]\nslurm_bin_dir = "{bindir}"\n', 1)
        + '[slurm]\nbackend = "cli"\nattempts = 3\n')
    assert main(["--config", str(config_file), "recover"]) == 0
    out = capsys.readouterr().out
    assert "imexctl recover: note:" in out and "Unable to contact slurm controller" in out
    assert len(calls.read_text().splitlines()) == 1, calls.read_text()


def test_cli_recover_finds_its_node_name_as_slurmd_does(tmp_path, config_file, capsys,
                                                        monkeypatch):
    """At boot SLURMD_NODENAME is unset: where NodeName is not the host name, the NodeName
    whose NodeHostname is this host names the tray ({node} paths, the published identity)."""
    import socket
    monkeypatch.delenv("SLURMD_NODENAME", raising=False)
    host = socket.gethostname().split(".")[0]
    conf = tmp_path / "slurm.conf"
    conf.write_text(f"ClusterName=c\nNodeName=gb-r01-t[01-02] NodeHostname={host},other-host "
                    "NodeAddr=10.0.0.1,10.0.0.2\n")
    config_file.write_text(config_file.read_text().replace(
        "[paths]\n", f'[paths]\nslurm_conf = "{conf}"\n', 1))
    assert main(["--config", str(config_file), "recover", "--no-publish"]) == 0
    assert "nothing left by an earlier boot (gb-r01-t01)" in capsys.readouterr().out
    assert main(["--config", str(config_file), "recover", "--no-publish", "--node",
                 "gb-r01-t02"]) == 0
    assert "(gb-r01-t02)" in capsys.readouterr().out
    assert main(["--config", str(config_file), "recover", "--node", "../x"]) == 2
    assert "is not a valid node name" in capsys.readouterr().err
    # the host is in no node line: the host name, as before
    conf.write_text("ClusterName=c\nNodeName=gb-r01-t01 NodeHostname=elsewhere\n")
    assert main(["--config", str(config_file), "recover", "--no-publish"]) == 0
    assert f"({host})" in capsys.readouterr().out


def test_boot_id_comes_from_the_configured_file(tmp_path):
    from imexctl.tray.bootid import current_boot_id
    (tmp_path / "boot_id").write_text(THIS_BOOT + "\n")
    cfg = make_cfg(tmp_path, paths={"boot_id_file": f"{tmp_path}/boot_id"})
    assert current_boot_id(cfg) == THIS_BOOT
    plant(cfg, tmp_path, channel=None)
    done = recover(cfg, default_teardown(cfg))
    assert done.repaired == ["tore down the domain of job 41 left by an earlier boot"]
