"""`imexctl identity publish|show`: what a tray publishes for each fabric verdict, and
usage errors for bad node lists (audit F-24)."""

from __future__ import annotations

import json

import pytest

from imexctl import cli
from imexctl.config import local_node_name
from tests.support.fabric import not_imex_tray, simulated_tray, write_fabric_file
from imexctl.errors import UsageError
from imexctl.ops.identity import publish, show
from tests.support.lifecycle import UUID, make_cfg
from tests.support.memory_slurm import MemorySlurm


@pytest.fixture
def slurm():
    s = MemorySlurm()
    s.add_nodes({"tray01": "127.0.0.1", "tray02": "127.0.0.2"})
    return s


def cfg_with(tmp_path, gpus, **sections):
    cfg = make_cfg(tmp_path, **sections)  # writes a healthy clique-1 tray: replace it
    write_fabric_file(tmp_path / "fabric.json", gpus)
    return cfg


def extra(slurm, node="tray01"):
    raw = slurm.nodes_[node].extra
    return json.loads(raw)["imex"] if raw else None


def test_publish_fit_tray(tmp_path, slurm):
    done = publish(cfg_with(tmp_path, simulated_tray(UUID, 5)), slurm)
    assert done.exit_code == 0
    assert (extra(slurm)["cluster_uuid"], extra(slurm)["clique_id"]) == (UUID, 5)
    assert extra(slurm)["auth"] == "off"
    assert done.lines == [f"tray01: published clique {UUID}.5 (4 GPUs, imex.auth off, "
                          "imex.lifetime job)"]


def test_publish_degraded_tray_warns_or_refuses(tmp_path, slurm):
    gpus = simulated_tray(UUID, 5, **{"3": {"health_summary": 3}})
    done = publish(cfg_with(tmp_path, gpus), slurm)
    assert done.exit_code == 0
    assert extra(slurm)["clique_id"] == 5
    assert ("tray01: warning: fabric bandwidth degraded: GPU 3 (health summary "
            "LIMITED_CAPACITY)") in done.lines
    slurm.set_node("tray01", extra="")
    done = publish(cfg_with(tmp_path, gpus, fabric={"on_degraded": "drain"}), slurm)
    assert done.exit_code == 1
    assert extra(slurm) is None
    assert "fabric not usable: fabric bandwidth degraded" in done.lines[0]


def test_publish_on_non_nvlink_tray_publishes_not_imex_and_succeeds(tmp_path, slurm):
    """Issue 10: published, so the controller groups the tray as "no domain", not as
    "unpublished" (which would leave every such job to the node prologs' fallback)."""
    from imexctl.rules import groups
    from imexctl.rules.cliques import identity_from_extra

    done = publish(cfg_with(tmp_path, not_imex_tray(8)), slurm)
    assert done.exit_code == 0
    published = extra(slurm)
    assert published["cluster_uuid"] == "00000000-0000-0000-0000-000000000000"
    assert published["gpu_count"] == 8
    ident = identity_from_extra(slurm.nodes_["tray01"].extra)
    assert ident is not None and not ident.imex
    grouping = groups.group_trays(["tray01"], {"tray01": ident})
    assert grouping.non_imex == ("tray01",) and grouping.unpublished == ()
    assert "published \"not an IMEX tray\": no NVLink fabric on GPUs 0,1,2,3,4,5,6,7" \
        in done.lines[0]


def test_publish_unfit_tray_is_a_node_fault(tmp_path, slurm):
    gpus = simulated_tray(UUID, 5, **{"1": {"state": 2}})
    done = publish(cfg_with(tmp_path, gpus), slurm)
    assert done.exit_code == 1
    assert extra(slurm) is None
    assert "GPU 1 fabric state In Progress, not Completed" in done.lines[0]


@pytest.mark.parametrize("nodelist", ["tray[01-", "tray[3-1]", "a]b", "tray[01-99999999]"])
def test_show_bad_node_list_is_a_usage_error(tmp_path, slurm, nodelist):
    with pytest.raises(UsageError) as exc:
        show(make_cfg(tmp_path), nodelist, slurm=slurm)
    assert str(exc.value).startswith("identity show: bad node list: ") and nodelist in str(exc.value)
    assert exc.value.exit_code == 2
    assert not slurm.calls


def test_show_through_the_cli_exits_2_without_traceback(tmp_path, monkeypatch, capsys):
    cfg = tmp_path / "imexctl.toml"
    cfg.write_text(f'[paths]\nstate_dir = "{tmp_path}/s"\nrun_dir = "{tmp_path}/r"\n'
                   f'log_file = "{tmp_path}/log/imexctl.log"\n')
    monkeypatch.setenv("SLURMD_NODENAME", "tray01")
    assert cli.main(["--config", str(cfg), "identity", "show", "tray[01-"]) == 2
    err = capsys.readouterr().err
    assert "bad node list" in err and "Traceback" not in err


def test_show_lists_published_and_missing(tmp_path, slurm):
    cfg = cfg_with(tmp_path, simulated_tray(UUID, 5))
    publish(cfg, slurm)
    rows = show(cfg, "tray[01-02]", slurm=slurm)
    assert [(r["node"], r["clique"]) for r in rows] == [("tray01", f"{UUID}.5"),
                                                         ("tray02", None)]


@pytest.mark.parametrize("name, expected", [("tray01", "tray01"), ("tray01\n", ""),
                                            ("tray 01", ""), ("-tray", "")])
def test_local_node_name_is_fullmatched(monkeypatch, name, expected):
    monkeypatch.setenv("SLURMD_NODENAME", name)
    assert local_node_name() == expected
