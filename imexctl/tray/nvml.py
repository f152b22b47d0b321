"""NVLink fabric identity through NVML, for every ``nvidia-ml-py`` a site may have.

Works with nvidia-ml-py 12.535 to 13.x: the v3 struct (with ``healthSummary``), then v2,
then the deprecated v1 call, each laid out as the C header has it (several releases' own
classes have wrong offsets, see ``_FabricInfoV3``), and the 16 cluster-UUID bytes read
raw. Any quirk of a binding becomes a ``FabricError``, never a traceback.
"""

from __future__ import annotations

import ctypes

from imexctl.base import importing
from imexctl.tray.gpus import STATE_NOT_SUPPORTED, STATUS_SUCCESS, ZERO_UUID, FabricError, GpuFabric, NoNvidiaDriver

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25


class _FabricInfoV1(ctypes.Structure):
    """nvmlGpuFabricInfo_t as the C header lays it out (deprecated v1 call)."""
    _fields_ = [("clusterUuid", ctypes.c_uint8 * 16), ("status", ctypes.c_uint),
                ("cliqueId", ctypes.c_uint32), ("state", ctypes.c_uint)]


class _FabricInfoV2(ctypes.Structure):
    """nvmlGpuFabricInfo_v2_t (C header); ``version`` word 0x02000024 = v2, 36 bytes."""
    VERSION = 0x02000024
    _fields_ = [("version", ctypes.c_uint), ("clusterUuid", ctypes.c_uint8 * 16),
                ("status", ctypes.c_uint), ("cliqueId", ctypes.c_uint32),
                ("state", ctypes.c_uint), ("healthMask", ctypes.c_uint32)]


class _FabricInfoV3(ctypes.Structure):
    """nvmlGpuFabricInfo_v3_t (C header): v2 plus ``healthSummary``; 0x03000028, 40 bytes."""
    VERSION = 0x03000028
    _fields_ = _FabricInfoV2._fields_ + [("healthSummary", ctypes.c_uint8)]


# Why our own structs and not the binding's classes: in every release before 13.615 the
# binding's c_nvmlGpuFabricInfo_t sizes clusterUuid with NVML_DEVICE_UUID_BUFFER_SIZE (80),
# and 12.550-12.560's c_nvmlGpuFabricInfoV_t does the same, so status/cliqueId/state sit at
# the wrong offsets and a GB200 reads "NOT_SUPPORTED". 12.550-12.575 lack the v2/v3 classes.
# The C layouts are ABI and fixed by their version words; only the calls come from the binding.


def read_gpus(pynvml: Any = None, progress: Any = None) -> list[GpuFabric]:
    """Query every GPU's fabric info through NVML (nvidia-ml-py). Any binding quirk
    (missing class or function, undecodable field) becomes a FabricError, never a traceback.
    ``progress(text)`` is told each call before it is made (a hang then names it)."""
    tell = progress or (lambda text: None)
    if pynvml is None:
        try:
            pynvml = import_pynvml()
        except ImportError:
            raise FabricError("nvidia-ml-py (pynvml) is not installed") from None
    try:
        tell("NVML nvmlInit")
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        if getattr(exc, "value", None) == NVML_ERROR_LIBRARY_NOT_FOUND:
            raise NoNvidiaDriver("no NVIDIA driver (libnvidia-ml.so.1 not found)") from None
        raise FabricError(f"NVML init failed: {exc}") from None
    try:
        tell("NVML nvmlDeviceGetCount")
        count = pynvml.nvmlDeviceGetCount()
        return [_nvml_gpu(pynvml, i, tell) for i in range(count)]
    except pynvml.NVMLError as exc:
        raise FabricError(f"NVML query failed: {exc}") from None
    except (AttributeError, TypeError, ValueError, UnicodeDecodeError) as exc:
        raise FabricError(f"NVML binding {_binding_version(pynvml)} not usable: "
                          f"{type(exc).__name__}: {exc}") from None
    finally:
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError:
            pass


def import_pynvml() -> Any:
    """``import pynvml`` without the ``ctypes.util`` it imports and never calls: every
    release since 12.535 does ``from ctypes.util import find_library`` and then loads
    ``libnvidia-ml.so.1`` by name. That import pulls subprocess, shutil, tempfile, bz2
    and lzma (most of NVML's share of ``imexctl status``). The name is bound
    to a stand-in that loads the real module if it is ever called."""
    return importing.import_with_stand_in("pynvml", "ctypes.util", ("find_library",))


def _binding_version(pynvml: Any) -> str:
    try:
        from importlib.metadata import version
        return f"nvidia-ml-py {version('nvidia-ml-py')}"
    except Exception:
        return "pynvml"


def _nvml_gpu(pynvml: Any, index: int, tell: Any = None) -> GpuFabric:
    tell = tell or (lambda text: None)
    tell(f"NVML nvmlDeviceGetHandleByIndex on GPU {index}")
    handle = pynvml.nvmlDeviceGetHandleByIndex(index)
    tell(f"NVML nvmlDeviceGetUUID on GPU {index}")
    gpu_uuid = pynvml.nvmlDeviceGetUUID(handle)
    if isinstance(gpu_uuid, bytes):
        gpu_uuid = gpu_uuid.decode("ascii", "replace")
    try:
        tell(f"NVML nvmlDeviceGetGpuFabricInfoV on GPU {index}")
        info = _query_fabric(pynvml, handle)
    except pynvml.NVMLError as exc:
        if getattr(exc, "value", None) in (NVML_ERROR_NOT_SUPPORTED,
                                           NVML_ERROR_FUNCTION_NOT_FOUND):
            # No fabric on this GPU, or a driver older than the fabric API.
            return GpuFabric(index, gpu_uuid, ZERO_UUID, 0, STATE_NOT_SUPPORTED, STATUS_SUCCESS, 0)
        raise
    return GpuFabric(
        index=index, uuid=gpu_uuid, cluster_uuid=_uuid_from_bytes(_raw_uuid(info)),
        clique_id=int(info.cliqueId), state=int(info.state) & 0xFF, status=int(info.status),
        health_mask=int(getattr(info, "healthMask", 0)),
        health_summary=int(getattr(info, "healthSummary", 0)))


def _query_fabric(pynvml: Any, handle: Any) -> ctypes.Structure:
    """v3 (with healthSummary), then v2, then the deprecated v1 call. A driver answers
    ARGUMENT_VERSION_MISMATCH to a struct version newer than it knows, and a driver (or
    binding, 12.535) without the versioned call has no such function."""
    call_v = getattr(pynvml, "nvmlDeviceGetGpuFabricInfoV", None) or _unwrapped(
        pynvml, "nvmlDeviceGetGpuFabricInfoV")
    if call_v is not None:
        for cls in (_FabricInfoV3, _FabricInfoV2):
            info = cls(version=cls.VERSION)
            try:
                # The binding passes its argument straight to C: it must be a pointer.
                call_v(handle, ctypes.byref(info))
                return info
            except pynvml.NVMLError as exc:
                code = getattr(exc, "value", None)
                if code == NVML_ERROR_FUNCTION_NOT_FOUND:
                    break
                if code != NVML_ERROR_ARGUMENT_VERSION_MISMATCH:
                    raise
    v1 = _FabricInfoV1()
    pynvml.nvmlDeviceGetGpuFabricInfo(handle, ctypes.byref(v1))
    return v1


def _unwrapped(pynvml: Any, name: str) -> Any:
    """Call a C function the binding has no wrapper for (12.535 lacks the versioned fabric
    call that newer drivers have) through the binding's own function-pointer lookup."""
    lookup = getattr(pynvml, "_nvmlGetFunctionPointer", None)
    check = getattr(pynvml, "_nvmlCheckReturn", None)
    if lookup is None or check is None:
        return None

    def call(*args: Any) -> None:
        check(lookup(name)(*args))
    return call


def _uuid_from_bytes(raw: bytes) -> str:
    """The 16 bytes as canonical UUID text (what ``uuid.UUID(bytes=...)`` prints), without
    importing uuid on every prolog."""
    h = bytes(raw).hex()
    if len(h) != 32:
        raise ValueError(f"cluster UUID has {len(raw)} bytes, not 16")
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def _raw_uuid(info: Any) -> bytes:
    """The 16 cluster-UUID bytes, read raw from the struct's memory (12.5xx's ``c_char``
    declaration of this field cut it at the first NUL and decoded it as UTF-8)."""
    return ctypes.string_at(ctypes.addressof(info) + type(info).clusterUuid.offset, 16)
