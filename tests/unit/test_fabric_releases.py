"""The NVML fabric reader against the real ``pynvml.py`` of every nvidia-ml-py release in
tests/nvml-releases.txt (12.535 .. newest 13.x), cached by scripts/bootstrap.

Only NVML's C layer is faked: the binding's function-pointer cache is filled with Python
functions that write the C header's struct layouts byte by byte, the way a driver of a
given generation would (which struct versions it accepts). Everything above that, the
binding's classes, wrappers and error mapping, is the real released code.
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
import struct
import sys
import types
import uuid
from pathlib import Path

import pytest

from imexctl.tray.fabric import fabric_verdict, read_fabric
from imexctl.tray.gpus import health_mask

ROOT = Path(__file__).resolve().parents[2]
RELEASES = [line.strip() for line in (ROOT / "tests/nvml-releases.txt").read_text().splitlines()
            if line.strip() and not line.startswith("#")]
CACHE = ROOT / ".cache/nvml"
# A cluster UUID with NUL bytes early on: 12.5xx's c_char field would cut it at byte 2.
CLUSTER = uuid.UUID("7f00003a-0000-4b2c-9d00-00aa10000001")
V2, V3 = 0x02000024, 0x03000028
DRIVER_580 = frozenset({V2, V3})      # nvmlDeviceGetGpuFabricInfoV with v2 and v3 structs
DRIVER_570 = frozenset({V2})          # v3 unknown: ARGUMENT_VERSION_MISMATCH
DRIVER_535 = None                     # no nvmlDeviceGetGpuFabricInfoV symbol at all


_LOADED: dict[str, types.ModuleType] = {}


def load_release(version: str, monkeypatch) -> types.ModuleType:
    """The release's pynvml module, registered as ``pynvml`` for this test only."""
    path = CACHE / version / "pynvml.py"
    if not path.is_file():
        if os.environ.get("CI"):
            pytest.fail(f"{path} missing: scripts/bootstrap must cache nvidia-ml-py {version}")
        pytest.skip(f"nvidia-ml-py {version} not cached; run scripts/bootstrap")
    mod = _LOADED.get(version)
    if mod is None:
        spec = importlib.util.spec_from_file_location("pynvml", path)
        mod = importlib.util.module_from_spec(spec)
        monkeypatch.setitem(sys.modules, "pynvml", mod)  # the module looks itself up
        spec.loader.exec_module(mod)
        _LOADED[version] = mod
    monkeypatch.setitem(sys.modules, "pynvml", mod)
    return mod


class FakeDriver:
    """NVML's C entry points for one tray. ``gpus``: per GPU a dict with cluster (UUID),
    clique, state, status, mask, summary, or ``"not_supported"`` for NVML_ERROR_NOT_SUPPORTED."""

    def __init__(self, gpus: list, accepts: frozenset | None):
        self.gpus, self.accepts = gpus, accepts
        self.seen: list[str] = []          # struct versions offered, in call order

    def install(self, mod: types.ModuleType, monkeypatch) -> None:
        monkeypatch.setattr(mod, "nvmlLib", types.SimpleNamespace())  # no real .so: no symbol
        cache = {"nvmlInitWithFlags": lambda flags: 0, "nvmlShutdown": lambda: 0,
                 "nvmlDeviceGetCount_v2": self.count,
                 "nvmlDeviceGetHandleByIndex_v2": self.handle,
                 "nvmlDeviceGetUUID": self.gpu_uuid,
                 "nvmlDeviceGetGpuFabricInfo": self.fabric_v1}
        if self.accepts is not None:
            cache["nvmlDeviceGetGpuFabricInfoV"] = self.fabric_v
        monkeypatch.setattr(mod, "_nvmlGetFunctionPointer_cache", cache)

    def count(self, ref):
        ref._obj.value = len(self.gpus)
        return 0

    def handle(self, index, ref):
        ctypes.memmove(ctypes.addressof(ref._obj), ctypes.byref(ctypes.c_void_p(index.value + 1)),
                       ctypes.sizeof(ctypes.c_void_p))
        return 0

    @staticmethod
    def index(handle) -> int:
        return ctypes.cast(handle, ctypes.c_void_p).value - 1

    def gpu_uuid(self, handle, buf, size):
        text = f"GPU-{uuid.UUID(int=self.index(handle) + 1)}".encode() + b"\0"
        ctypes.memmove(buf, text, len(text))
        return 0

    def _spec(self, handle):
        return self.gpus[self.index(handle)]

    def fabric_v1(self, handle, ref):
        assert type(ref).__name__ == "CArgObject", "must pass ctypes.byref(info)"
        self.seen.append("v1")
        spec = self._spec(handle)
        if spec == "not_supported":
            return 3
        body = spec["cluster"].bytes + struct.pack("<IIB", spec["status"], spec["clique"],
                                                   spec["state"])
        ctypes.memmove(ctypes.addressof(ref._obj), body, len(body))
        return 0

    def fabric_v(self, handle, ref):
        assert type(ref).__name__ == "CArgObject", "must pass ctypes.byref(info)"
        base = ctypes.addressof(ref._obj)
        version = ctypes.c_uint32.from_address(base).value
        self.seen.append(f"{version:#x}")
        if version not in self.accepts:
            return 25  # NVML_ERROR_ARGUMENT_VERSION_MISMATCH
        spec = self._spec(handle)
        if spec == "not_supported":
            return 3
        # C layout: version, clusterUuid[16], status, cliqueId, state (uchar), healthMask
        # [, healthSummary (uchar)]; state is written as one byte, as C does.
        body = spec["cluster"].bytes + struct.pack("<IIB3xI", spec["status"], spec["clique"],
                                                   spec["state"], spec["mask"])
        if version == V3:
            body += bytes([spec["summary"]])
        ctypes.memmove(base + 4, body, len(body))
        return 0


def gb200(clique=7, mask=None, summary=1, state=3, status=0):
    return {"cluster": CLUSTER, "clique": clique, "state": state, "status": status,
            "mask": health_mask() if mask is None else mask, "summary": summary}


# Observed on a real H100 80GB HBM3, driver 580.159.04: SUCCESS, state NOT_SUPPORTED, zeros.
H100 = {"cluster": uuid.UUID(int=0), "clique": 0, "state": 0, "status": 0, "mask": 0,
        "summary": 0}


@pytest.fixture(params=RELEASES)
def release(request, monkeypatch):
    return load_release(request.param, monkeypatch)


def test_release_list_spans_12_535_to_13():
    assert RELEASES[0].startswith("12.535") and any(v.startswith("13.") for v in RELEASES)
    # the releases whose classes are missing or mislaid are all in the list
    assert {"12.550.89", "12.560.30", "12.570.172", "12.575.51"} <= set(RELEASES)


def test_gb200_tray_reads_raw_uuid_and_health(release, monkeypatch):
    drv = FakeDriver([gb200(), gb200()], DRIVER_580)
    drv.install(release, monkeypatch)
    verdict = fabric_verdict("nvml")
    assert verdict.kind == "imex" and not verdict.degraded, verdict.detail
    assert verdict.clique.clique == f"{CLUSTER}.7" and verdict.clique.gpu_count == 2
    gpu = verdict.gpus[0]
    assert gpu.uuid == f"GPU-{uuid.UUID(int=1)}"
    # Every binding, 12.535 (no wrapper for the versioned call) included, asks for v3 first.
    assert drv.seen == [f"{V3:#x}"] * 2
    assert (gpu.health_summary, gpu.health_mask) == (1, health_mask())


def test_older_driver_refusing_v3_falls_back_to_v2(release, monkeypatch):
    drv = FakeDriver([gb200(clique=3)], DRIVER_570)
    drv.install(release, monkeypatch)
    verdict = fabric_verdict("nvml")
    assert verdict.kind == "imex" and verdict.clique.clique == f"{CLUSTER}.3"
    assert drv.seen == [f"{V3:#x}", f"{V2:#x}"]
    assert verdict.gpus[0].health_summary == 0 and verdict.gpus[0].health_mask == health_mask()


def test_driver_without_versioned_call_uses_v1(release, monkeypatch):
    drv = FakeDriver([gb200(clique=11)], DRIVER_535)
    drv.install(release, monkeypatch)
    verdict = fabric_verdict("nvml")
    assert verdict.kind == "imex" and verdict.clique.clique == f"{CLUSTER}.11"
    assert drv.seen == ["v1"]


def test_h100_without_nvlink_fabric_is_not_an_imex_tray(release, monkeypatch):
    FakeDriver([H100] * 4, DRIVER_580).install(release, monkeypatch)
    verdict = fabric_verdict("nvml")
    assert verdict.kind == "not_imex" and verdict.clique is None
    assert "not an IMEX tray" in verdict.detail and "GPUs 0,1,2,3" in verdict.detail


def test_not_supported_error_is_not_an_imex_tray(release, monkeypatch):
    FakeDriver(["not_supported"], DRIVER_580).install(release, monkeypatch)
    assert fabric_verdict("nvml").kind == "not_imex"


def test_limited_capacity_warns_or_drains(release, monkeypatch):
    degraded = gb200(mask=health_mask(degraded_bw=1), summary=3)
    FakeDriver([gb200(), degraded], DRIVER_580).install(release, monkeypatch)
    warn = fabric_verdict("nvml", on_degraded="warn")
    assert (warn.kind, warn.degraded) == ("imex", True)
    assert warn.detail == ("fabric bandwidth degraded: GPU 1 (health summary LIMITED_CAPACITY, "
                           "degraded_bw=TRUE)")
    drain = fabric_verdict("nvml", on_degraded="drain")
    assert (drain.kind, drain.degraded, drain.clique) == ("unfit", True, None)


def test_unhealthy_route_and_fabric_not_completed_are_unfit(release, monkeypatch):
    sick = gb200(mask=health_mask(route_unhealthy=1), summary=2)
    FakeDriver([sick], DRIVER_570).install(release, monkeypatch)
    verdict = fabric_verdict("nvml")
    assert verdict.kind == "unfit"
    assert verdict.detail == "GPU 0 fabric unhealthy (route_unhealthy=TRUE)"
    FakeDriver([gb200(state=2)], DRIVER_580).install(release, monkeypatch)
    verdict = fabric_verdict("nvml")
    assert verdict.kind == "unfit" and verdict.detail == "GPU 0 fabric state In Progress, not Completed"


def test_no_driver_library_is_not_an_imex_tray(release, monkeypatch):
    def no_library(*_a, **_k):
        raise OSError("libnvidia-ml.so.1: cannot open shared object file")
    monkeypatch.setattr(release, "CDLL", no_library)
    monkeypatch.setattr(release, "nvmlLib", None)
    verdict = fabric_verdict("nvml")
    assert verdict.kind == "not_imex" and "libnvidia-ml.so.1 not found" in verdict.detail
    with pytest.raises(Exception, match="libnvidia-ml"):
        read_fabric("nvml")


def test_struct_layouts_match_the_c_header():
    """Size in the low bytes of each version word; field offsets as nvml.h lays them out."""
    from imexctl.tray.nvml import _FabricInfoV1, _FabricInfoV2, _FabricInfoV3
    assert (ctypes.sizeof(_FabricInfoV1), ctypes.sizeof(_FabricInfoV2),
            ctypes.sizeof(_FabricInfoV3)) == (28, V2 & 0xFFFF, V3 & 0xFFFF)
    assert (_FabricInfoV2.VERSION, _FabricInfoV3.VERSION) == (V2, V3)
    assert [(n, getattr(_FabricInfoV3, n).offset) for n, _ in _FabricInfoV3._fields_] == [
        ("version", 0), ("clusterUuid", 4), ("status", 20), ("cliqueId", 24), ("state", 28),
        ("healthMask", 32), ("healthSummary", 36)]


@pytest.mark.parametrize("version", RELEASES)
def test_every_release_imports_without_ctypes_util_and_its_heavy_imports(version):
    """imexctl.tray.nvml.import_pynvml: the release's module loads with find_library bound to a
    stand-in, so status and health do not import subprocess, shutil, tempfile, bz2, lzma;
    the stand-in still answers if called."""
    import subprocess
    path = CACHE / version
    if not (path / "pynvml.py").is_file():
        if os.environ.get("CI"):
            pytest.fail(f"{path} missing: scripts/bootstrap must cache nvidia-ml-py {version}")
        pytest.skip(f"nvidia-ml-py {version} not cached; run scripts/bootstrap")
    code = ("import sys; sys.path.insert(0, sys.argv[1]); from imexctl.tray.nvml import import_pynvml; "
            "p = import_pynvml(); assert p.__file__.startswith(sys.argv[1]), p.__file__; "
            "heavy = [m for m in ('ctypes.util', 'subprocess', 'shutil', 'tempfile', 'bz2', "
            "'lzma') if m in sys.modules]; "
            "print(','.join(heavy) or '-', p.find_library('c'), "
            "type(sys.modules['ctypes.util']).__name__)")
    out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True,
                         text=True, timeout=60, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    heavy, libc, kind = out.stdout.split()
    assert heavy == "-" and libc.startswith("libc.so") and kind == "module"


def test_a_hung_nvml_call_names_the_call_and_gpu_and_the_hook_goes_on(monkeypatch):
    """NVML calls do hang on real trays: the fabric read gives up at its deadline with a
    reason naming the call and the GPU, and the caller is not held (issue 29)."""
    import threading
    import time

    from imexctl.tray import fabric

    release = load_release(RELEASES[-1], monkeypatch)
    drv = FakeDriver([gb200(), gb200(), gb200()], DRIVER_580)
    drv.install(release, monkeypatch)
    released = threading.Event()
    answer = drv.fabric_v

    def hangs_on_gpu_2(handle, ref):
        if drv.index(handle) == 2:
            released.wait()              # as a driver stuck in an ioctl
        return answer(handle, ref)
    release._nvmlGetFunctionPointer_cache["nvmlDeviceGetGpuFabricInfoV"] = hangs_on_gpu_2
    monkeypatch.setattr(fabric, "NVML_DEADLINE_S", 0.5)
    try:
        started = time.monotonic()
        verdict = fabric.fabric_verdict("nvml")
        took = time.monotonic() - started
        assert verdict.kind == "unfit"
        assert verdict.detail == ("NVML nvmlDeviceGetGpuFabricInfoV on GPU 2 did not answer "
                                  "in 0.5s"), verdict.detail
        assert took < 5
    finally:
        released.set()
