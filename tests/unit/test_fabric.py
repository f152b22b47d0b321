"""Fabric identity: file source (simulator/harness) and NVML source (mocked at the boundary)."""

import ctypes
import json
import sys
import types
import uuid

import pytest

from imexctl.fabric import (HEALTHY_MASK, FabricError, GpuFabric, read_fabric,
                            simulated_tray, write_fabric_file)
from imexctl.topology import TrayUnfit, tray_identity

UUID = "9c6f5af3-53bf-49b5-a436-b66766c413c3"


def test_file_round_trip_judged_like_real_gpus(tmp_path):
    path = tmp_path / "fabric.json"
    write_fabric_file(path, simulated_tray(UUID, 7, gpus=4))
    raw = json.loads(path.read_text())
    assert raw["gpus"][0]["state"] == "COMPLETED" and raw["gpus"][0]["status"] == "SUCCESS"
    gpus = read_fabric("file", path)
    assert [g.index for g in gpus] == [0, 1, 2, 3]
    assert tray_identity(gpus).clique == f"{UUID}.7"


def test_file_override_makes_tray_unfit(tmp_path):
    path = tmp_path / "fabric.json"
    write_fabric_file(path, simulated_tray(UUID, 7, gpus=2, **{"1": {"state": 2}}))
    with pytest.raises(TrayUnfit, match="GPU 1 fabric state In Progress"):
        tray_identity(read_fabric("file", path))


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


class FakeNVMLError(Exception):
    def __init__(self, value):
        super().__init__(f"NVML error {value}")
        self.value = value


class FakeInfo(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint), ("clusterUuid", ctypes.c_uint8 * 16),
                ("status", ctypes.c_uint), ("cliqueId", ctypes.c_uint32),
                ("state", ctypes.c_uint), ("healthMask", ctypes.c_uint32)]

    def __init__(self):
        super().__init__(version=0x02000024)


def fake_pynvml(gpus):
    """A pynvml stand-in with the documented call shapes (reference imex.md §4.1)."""
    mod = types.ModuleType("pynvml")
    mod.NVMLError = FakeNVMLError
    mod.NVML_ERROR_NOT_SUPPORTED = 3
    mod.c_nvmlGpuFabricInfo_v2_t = FakeInfo
    mod.calls = []
    mod.nvmlInit = lambda: mod.calls.append("init")
    mod.nvmlShutdown = lambda: mod.calls.append("shutdown")
    mod.nvmlDeviceGetCount = lambda: len(gpus)
    mod.nvmlDeviceGetHandleByIndex = lambda i: i
    mod.nvmlDeviceGetUUID = lambda h: f"GPU-{h}".encode()

    def get_info(handle, ref):
        # The real binding hands its argument to C: anything but a pointer would crash.
        assert type(ref).__name__ == "CArgObject", "must pass ctypes.byref(info)"
        spec = gpus[handle]
        if spec is None:
            raise FakeNVMLError(3)
        info = ref._obj
        assert info.version == 0x02000024
        info.clusterUuid[:] = list(uuid.UUID(spec["cluster"]).bytes)
        info.cliqueId, info.state = spec["clique"], spec["state"]
        info.status, info.healthMask = spec.get("status", 0), spec.get("mask", HEALTHY_MASK)
        return 0
    mod.nvmlDeviceGetGpuFabricInfoV = get_info
    return mod


def test_nvml_source_reads_every_gpu(monkeypatch):
    mod = fake_pynvml([{"cluster": UUID, "clique": 32766, "state": 3},
                       {"cluster": UUID, "clique": 32766, "state": 3, "mask": 0x1A9}])
    monkeypatch.setitem(sys.modules, "pynvml", mod)
    gpus = read_fabric("nvml")
    assert gpus[0] == GpuFabric(0, "GPU-0", UUID, 32766, 3, 0, HEALTHY_MASK)
    assert gpus[1].health_mask == 0x1A9
    assert mod.calls == ["init", "shutdown"]
    with pytest.raises(TrayUnfit, match="GPU 1 fabric unhealthy .degraded_bw=1"):
        tray_identity(gpus)


def test_nvml_gpu_without_fabric_reads_as_not_supported(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml([None]))
    (gpu,) = read_fabric("nvml")
    assert gpu.state == 0 and gpu.cluster_uuid == str(uuid.UUID(int=0))
    with pytest.raises(TrayUnfit, match="Not Supported"):
        tray_identity([gpu])


def test_nvml_init_failure_is_a_fabric_error(monkeypatch):
    mod = fake_pynvml([])

    def boom():
        raise FakeNVMLError(9)
    mod.nvmlInit = boom
    monkeypatch.setitem(sys.modules, "pynvml", mod)
    with pytest.raises(FabricError, match="NVML init failed"):
        read_fabric("nvml")
