"""Fabric identity: file source (simulator/harness), health decoding and the tray verdict."""

import json
import os

import pytest

from imexctl.tray.gpus import HEALTHY_MASK, ZERO_UUID, FabricError, decode_health, health_mask
from imexctl.tray.fabric import fabric_verdict, judge, local_verdict, read_fabric
from tests.support.fabric import not_imex_tray, simulated_tray, write_fabric_file
from imexctl.rules.cliques import TrayIdentity

UUID = "9c6f5af3-53bf-49b5-a436-b66766c413c3"


def test_file_round_trip_judged_like_real_gpus(tmp_path):
    path = tmp_path / "fabric.json"
    write_fabric_file(path, simulated_tray(UUID, 7, gpus=4))
    raw = json.loads(path.read_text())
    assert raw["gpus"][0]["state"] == "COMPLETED" and raw["gpus"][0]["status"] == "SUCCESS"
    gpus = read_fabric("file", path)
    assert [g.index for g in gpus] == [0, 1, 2, 3]
    assert judge(gpus).clique.clique == f"{UUID}.7"


def test_file_override_makes_tray_unfit(tmp_path):
    path = tmp_path / "fabric.json"
    write_fabric_file(path, simulated_tray(UUID, 7, gpus=2, **{"1": {"state": 2}}))
    verdict = judge(read_fabric("file", path))
    assert verdict.kind == "unfit" and "GPU 1 fabric state In Progress" in verdict.detail


def test_file_accepts_names_and_numbers(tmp_path):
    path = tmp_path / "f.json"
    path.write_text(json.dumps({"gpus": [
        {"cluster_uuid": UUID, "clique_id": 2, "state": "In Progress", "status": 23},
        {"cluster_uuid": UUID.upper(), "clique_id": "2", "state": 3, "status": "success"}]}))
    a, b = read_fabric("file", path)
    assert (a.state, a.status, a.health_mask, a.index) == (2, 23, HEALTHY_MASK, 0)
    assert (b.state, b.status, b.cluster_uuid, b.clique_id) == (3, 0, UUID, 2)


@pytest.mark.parametrize("body, needle", [
    ("{", "not JSON"),
    ("[]", "\"gpus\" list"),
    ('{"gpus": [1]}', "gpus[0]: expected an object"),
    ('{"gpus": [{"clique_id": 1}]}', "gpus[0]: missing key 'cluster_uuid'"),
    (json.dumps({"gpus": [{"cluster_uuid": "nope", "clique_id": 1}]}), "gpus[0]: bad value"),
    (json.dumps({"gpus": [{"cluster_uuid": UUID, "clique_id": 1, "state": "DONE"}]}),
     "unknown value 'DONE'"),
])
def test_file_errors_name_file_and_entry(tmp_path, body, needle):
    path = tmp_path / "fabric.json"
    path.write_text(body)
    with pytest.raises(FabricError) as err:
        read_fabric("file", path)
    assert str(path) in str(err.value) and needle in str(err.value)


def test_missing_file_and_bad_source(tmp_path):
    with pytest.raises(FabricError, match="fabric file not found"):
        read_fabric("file", tmp_path / "absent.json")
    with pytest.raises(FabricError, match="no fabric.file"):
        read_fabric("file", None)
    with pytest.raises(FabricError, match="unknown fabric source"):
        read_fabric("dcgm")


# NVML itself is tested against every real nvidia-ml-py release in test_fabric_releases.py.


def test_judge_fit_tray_names_its_clique():
    verdict = judge(simulated_tray(UUID, 7), observed=1.0)
    assert (verdict.kind, verdict.degraded, verdict.detail) == ("imex", False, f"clique {UUID}.7")
    assert verdict.clique == TrayIdentity(UUID, 7, 4, "Completed", 1.0)


@pytest.mark.parametrize("gpus, detail", [
    ([], "no NVIDIA GPU found: not an IMEX tray"),
    (not_imex_tray(2), "no NVLink fabric on GPUs 0,1 (fabric state NOT_SUPPORTED, no cluster "
                       "UUID): not an IMEX tray"),
])
def test_judge_not_an_imex_tray(gpus, detail):
    verdict = judge(gpus)
    assert (verdict.kind, verdict.detail, verdict.clique, verdict.degraded) == (
        "not_imex", detail, None, False)


@pytest.mark.parametrize("override, detail", [
    ({"state": 2}, "GPU 1 fabric state In Progress, not Completed"),
    ({"state": 1}, "GPU 1 fabric state Not Started, not Completed"),
    ({"status": 23}, "GPU 1 fabric status 23, not Success"),
    ({"health_summary": 2}, "GPU 1 fabric unhealthy (health summary UNHEALTHY)"),
    ({"health_mask": health_mask(route_recovery=1)}, "GPU 1 fabric unhealthy (route_recovery=TRUE)"),
    ({"health_mask": health_mask(incorrect_configuration=5)},
     "GPU 1 fabric unhealthy (incorrect_configuration=INSUFFICIENT_NVLINKS)"),
    ({"health_mask": health_mask(route_unhealthy=1, gfm_state=2)},
     "GPU 1 fabric unhealthy (route_unhealthy=TRUE)"),
    ({"clique_id": 8}, f"GPUs disagree on their clique (GPU 0={UUID}.7, GPU 1={UUID}.8)"),
    ({"state": 0, "cluster_uuid": ZERO_UUID, "clique_id": 0},
     "GPUs disagree: GPU 1 without NVLink fabric, the others with"),
    ({"cluster_uuid": ZERO_UUID}, "GPU 1 has no fabric cluster UUID (not MNNVL)"),
])
def test_judge_unfit_names_gpu_and_cause(override, detail):
    verdict = judge(simulated_tray(UUID, 7, gpus=2, **{"1": override}))
    assert (verdict.kind, verdict.detail, verdict.clique) == ("unfit", detail, None)


@pytest.mark.parametrize("override", [{"health_summary": 3},
                                      {"health_mask": health_mask(degraded_bw=1)}])
def test_judge_degraded_bandwidth_follows_site_policy(override):
    gpus = simulated_tray(UUID, 7, gpus=2, **{"0": override})
    warn = judge(gpus, "warn")
    assert (warn.kind, warn.degraded, warn.clique.clique) == ("imex", True, f"{UUID}.7")
    assert warn.detail.startswith("fabric bandwidth degraded: GPU 0 (")
    drain = judge(gpus, "drain")
    assert (drain.kind, drain.degraded, drain.clique) == ("unfit", True, None)
    assert drain.detail.endswith("(fabric.on_degraded = drain)")
    with pytest.raises(ValueError):
        judge(gpus, "ignore")


FM_LOST = health_mask(gfm_state=2, partition_assigned=2)   # 0xa1aa


def test_fabric_manager_restart_on_every_gpu_is_a_warning_under_either_policy():
    """Fidelity N5: gfm_state=DISCONNECTED and partition_assigned=FALSE on every GPU (what a
    fabric-manager restart sets on every tray of the rack) never make a tray unfit."""
    gpus = simulated_tray(UUID, 7, gpus=4, **{str(i): {"health_mask": FM_LOST} for i in range(4)})
    for policy in ("warn", "drain"):
        verdict = judge(gpus, on_fabric_manager=policy)
        assert (verdict.kind, verdict.degraded, verdict.clique.clique) == (
            "imex", True, f"{UUID}.7"), policy
        assert verdict.detail == ("fabric manager not reachable on every GPU (partition_assigned="
                                  "FALSE, gfm_state=DISCONNECTED): a fabric-manager restart or "
                                  "outage; running domains keep working")
    # the bandwidth policy does not apply to it
    assert judge(gpus, "drain").kind == "imex"


def test_a_summary_unhealthy_only_the_fabric_manager_explains_follows_its_policy():
    """Fidelity N18: if the driver also reports the health summary UNHEALTHY during a
    fabric-manager outage, the tray is still not unfit for it; with another bad bit, or
    no bit at all to explain the summary, it is."""
    gpus = simulated_tray(UUID, 7, gpus=4, **{str(i): {"health_mask": FM_LOST,
                                                       "health_summary": 2} for i in range(4)})
    for policy in ("warn", "drain"):
        verdict = judge(gpus, on_fabric_manager=policy)
        assert (verdict.kind, verdict.clique.clique) == ("imex", f"{UUID}.7"), policy
        assert verdict.detail.startswith("fabric manager not reachable on every GPU")
    some = simulated_tray(UUID, 7, gpus=2, **{"1": {"health_mask": FM_LOST, "health_summary": 2}})
    assert judge(some, on_fabric_manager="drain").detail.endswith(
        "(fabric.on_fabric_manager = drain)")
    assert judge(some, on_fabric_manager="warn").kind == "imex"
    other = simulated_tray(UUID, 7, gpus=2, **{"1": {
        "health_mask": health_mask(route_unhealthy=1, gfm_state=2), "health_summary": 2}})
    assert judge(other).detail == ("GPU 1 fabric unhealthy (health summary UNHEALTHY, "
                                   "route_unhealthy=TRUE)")


@pytest.mark.parametrize("field", [{"gfm_state": 2}, {"partition_assigned": 2}])
def test_fabric_manager_bits_on_some_gpus_drain_only_where_the_site_asks(field):
    gpus = simulated_tray(UUID, 7, gpus=2, **{"1": {"health_mask": health_mask(**field)}})
    warn = judge(gpus)
    name, value = next(iter(field.items()))
    shown = {"gfm_state": "DISCONNECTED", "partition_assigned": "FALSE"}[name]
    assert (warn.kind, warn.degraded) == ("imex", True)
    assert warn.detail == f"fabric manager not reachable: GPU 1 ({name}={shown})"
    drain = judge(gpus, on_fabric_manager="drain")
    assert (drain.kind, drain.clique) == ("unfit", None)
    assert drain.detail.endswith("(fabric.on_fabric_manager = drain)")
    with pytest.raises(ValueError, match="on_fabric_manager"):
        judge(gpus, on_fabric_manager="ignore")


def test_fabric_manager_policy_from_the_config(tmp_path):
    path = tmp_path / "fabric.json"
    write_fabric_file(path, simulated_tray(UUID, 7, gpus=2, **{"0": {"health_mask": FM_LOST}}))
    assert fabric_verdict("file", path).kind == "imex"
    assert fabric_verdict("file", path, on_fabric_manager="drain").kind == "unfit"


def test_health_mask_compose_and_decode():
    assert HEALTHY_MASK == 0x1AA == health_mask(partition_assigned=0, gfm_state=0)
    assert health_mask() == 0x51AA
    assert decode_health(health_mask(degraded_bw=1, gfm_state=0)) == {
        "degraded_bw": "TRUE", "route_recovery": "FALSE", "route_unhealthy": "FALSE",
        "access_timeout_recovery": "FALSE", "incorrect_configuration": "NONE",
        "partition_assigned": "TRUE"}
    assert decode_health(0) == {}
    with pytest.raises(ValueError, match="unknown health field 'bw'"):
        health_mask(bw=1)
    with pytest.raises(ValueError, match="does not fit"):
        health_mask(degraded_bw=4)


def test_file_expresses_every_verdict(tmp_path):
    """The simulator's file can say NOT_SUPPORTED, limited capacity and any health bit."""
    path = tmp_path / "fabric.json"
    path.write_text(json.dumps({"gpus": [{"state": "NOT_SUPPORTED"}, {"state": 0}]}))
    assert fabric_verdict("file", path).kind == "not_imex"
    path.write_text(json.dumps({"gpus": []}))
    assert fabric_verdict("file", path).kind == "not_imex"
    path.write_text(json.dumps({"gpus": [
        {"cluster_uuid": UUID, "clique_id": 1, "health_summary": "LIMITED_CAPACITY",
         "health_mask": "0x1a9"}]}))
    (gpu,) = read_fabric("file", path)
    assert (gpu.health_summary, gpu.health_mask) == (3, 0x1A9)
    verdict = fabric_verdict("file", path, on_degraded="drain")
    assert (verdict.kind, verdict.degraded) == ("unfit", True)
    write_fabric_file(path, not_imex_tray(1))
    assert json.loads(path.read_text())["gpus"][0]["health_summary"] == "NOT_SUPPORTED"
    assert fabric_verdict("file", path).kind == "not_imex"


def test_bad_source_is_an_unfit_verdict_not_an_exception(tmp_path):
    verdict = fabric_verdict("file", tmp_path / "absent.json")
    assert verdict.kind == "unfit" and "fabric file not found" in verdict.detail


@pytest.mark.parametrize("value", ["Infinity", "NaN", "1e999", "1.5", "true"])
def test_file_non_integer_numbers_are_fabric_errors(tmp_path, value):
    """S-10: Infinity in a numeric field was an OverflowError traceback."""
    path = tmp_path / "fabric.json"
    for key in ("clique_id", "health_mask", "index", "state"):
        gpu = f'"cluster_uuid": "{UUID}", "clique_id": 1, "{key}": {value}'
        path.write_text('{"gpus": [{' + gpu + '}]}')  # a later duplicate key wins in JSON
        with pytest.raises(FabricError, match=r"gpus\[0\]: bad value"):
            read_fabric("file", path)


def test_file_fifo_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "fabric.json"
    os.mkfifo(fifo)
    with pytest.raises(FabricError, match="not a regular file"):
        read_fabric("file", fifo)


def test_local_verdict_uses_site_policy(tmp_path):
    from imexctl.config import parse_config
    from imexctl.errors import ConfigError
    path = tmp_path / "fabric.json"
    write_fabric_file(path, simulated_tray(UUID, 3, **{"2": {"health_summary": 3}}))
    raw = {"fabric": {"source": "file", "file": str(path), "on_degraded": "drain"}}
    assert local_verdict(parse_config(raw, None, "tray01")).kind == "unfit"
    raw["fabric"]["on_degraded"] = "warn"
    assert local_verdict(parse_config(raw, None, "tray01")).degraded
    raw["fabric"]["on_degraded"] = "ignore"
    with pytest.raises(ConfigError, match="fabric.on_degraded = 'ignore' is not allowed; "
                                          "use one of: warn, drain"):
        parse_config(raw, None, "tray01")
