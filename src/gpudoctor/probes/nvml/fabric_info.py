"""A GPU's NVLink fabric registration, as NVML reports it (nvmlDeviceGetGpuFabricInfoV).

On NVSwitch systems the fabric manager registers every GPU with the fabric; NVML says how far
that got: the state (not supported, not started, in progress, completed), the status of a
completed registration (an nvmlReturn_t), the clique and cluster the GPU joined, and a health
mask of 2- and 4-bit fields (degraded bandwidth, route recovery, unhealthy route, access timeout
recovery, incorrect configuration); version 3 of the structure adds a one-byte health summary.

The call fills a structure the caller passes by reference (ctypes.byref: passing the structure
itself crashed the child on the real H200 host). The structures below are nvml.h's layouts
(nvmlGpuFabricInfo_t, _v2_t, _v3_t, with nvmlGpuFabricState_t an unsigned char), defined here
rather than taken from pynvml so an nvidia-ml-py that lacks v3 still asks for it. Asked in order:
``nvmlDeviceGetGpuFabricInfoV`` with v3, with v2 when the driver answers
NVML_ERROR_ARGUMENT_VERSION_MISMATCH (a driver older than v3), and the unversioned
``nvmlDeviceGetGpuFabricInfo`` when the library or nvidia-ml-py lacks the V call
(NVML_ERROR_FUNCTION_NOT_FOUND). NOT_SUPPORTED, or a SUCCESS answer with state
NVML_GPU_FABRIC_STATE_NOT_SUPPORTED (what the single-H200 VM answers), is not_supported.

Recorded answers (the fake NVML): key ``nvmlDeviceGetGpuFabricInfoV(3)`` (the structure's
version), ``(2)``, or ``nvmlDeviceGetGpuFabricInfo``; the answer is the structure's fields as
an object, ``{"clusterUuid": [16 ints], "status": 0, "cliqueId": 0, "state": 3,
"healthMask": 0, "healthSummary": 1}``.
"""

from __future__ import annotations

import ctypes
from typing import Any

from ...facts import Unavailable
from .errors import NVML_ERROR_ARGUMENT_VERSION_MISMATCH, error_name

NVML_GPU_FABRIC_UUID_LEN = 16


class FabricInfoV1(ctypes.Structure):
    """nvml.h nvmlGpuFabricInfo_t (no version field)."""

    _fields_ = [
        ("clusterUuid", ctypes.c_ubyte * NVML_GPU_FABRIC_UUID_LEN),
        ("status", ctypes.c_uint),  # nvmlReturn_t
        ("cliqueId", ctypes.c_uint),
        ("state", ctypes.c_ubyte),  # nvmlGpuFabricState_t
    ]


class FabricInfoV2(ctypes.Structure):
    """nvml.h nvmlGpuFabricInfo_v2_t."""

    _fields_ = [
        ("version", ctypes.c_uint),
        ("clusterUuid", ctypes.c_ubyte * NVML_GPU_FABRIC_UUID_LEN),
        ("status", ctypes.c_uint),
        ("cliqueId", ctypes.c_uint),
        ("state", ctypes.c_ubyte),
        ("healthMask", ctypes.c_uint),
    ]


class FabricInfoV3(ctypes.Structure):
    """nvml.h nvmlGpuFabricInfo_v3_t (nvmlGpuFabricInfoV_t)."""

    _fields_ = [*FabricInfoV2._fields_, ("healthSummary", ctypes.c_ubyte)]  # v2's, then the summary


def struct_version(cls: type[ctypes.Structure], version: int) -> int:
    """nvml.h NVML_STRUCT_VERSION: the structure's size with the version in the top byte
    (v2 0x02000024, v3 0x03000028)."""
    return ctypes.sizeof(cls) | (version << 24)


def new_info(version: int) -> ctypes.Structure:
    """A zeroed structure of that version (1: the unversioned one), its version field set."""
    if version == 3:
        return FabricInfoV3(version=struct_version(FabricInfoV3, 3))
    if version == 2:
        return FabricInfoV2(version=struct_version(FabricInfoV2, 2))
    return FabricInfoV1()


class OutStruct:
    """A structure NVML fills in, as an argument of Query.call: the backend gets
    ``ctypes.byref(struct)``; the recorded key names the structure's version (none for the
    unversioned one)."""

    __slots__ = ("struct",)

    def __init__(self, struct: ctypes.Structure) -> None:
        self.struct = struct


def version_of(struct: Any) -> int | None:
    """The version a versioned NVML structure asks for (its top byte), None without one."""
    version = getattr(struct, "version", None)
    return int(version) >> 24 if isinstance(version, int) else None


# nvml.h NVML_GPU_FABRIC_STATE_*
STATES = {0: "not_supported", 1: "not_started", 2: "in_progress", 3: "completed"}
NVML_GPU_FABRIC_STATE_NOT_SUPPORTED = 0
NVML_GPU_FABRIC_STATE_COMPLETED = 3
NVML_SUCCESS = 0

# nvml.h NVML_GPU_FABRIC_HEALTH_MASK_SHIFT_* / _WIDTH_* of the yes/no fields, whose values are
# _NOT_SUPPORTED 0, _TRUE 1, _FALSE 2.
YES_NO_FIELDS = {
    "degraded_bandwidth": (0, 0x3),
    "route_recovery": (2, 0x3),
    "route_unhealthy": (4, 0x3),
    "access_timeout_recovery": (6, 0x3),
}
YES_NO = {0: "not_supported", 1: "yes", 2: "no"}
# NVML_GPU_FABRIC_HEALTH_MASK_SHIFT_INCORRECT_CONFIGURATION 8, _WIDTH_ 0xf, and its values.
INCORRECT_CONFIGURATION = (8, 0xF)
INCORRECT_CONFIGURATIONS = {
    0: "not_supported",
    1: "none",
    2: "incorrect_sysguid",
    3: "incorrect_chassis_sn",
    4: "no_partition",
    5: "insufficient_nvlinks",
    6: "incompatible_gpu_fw",
    7: "invalid_location",
    8: "gpu_state_invalid",
}
# NVML_GPU_FABRIC_HEALTH_SUMMARY_* (v3's healthSummary)
HEALTH_SUMMARIES = {0: "not_supported", 1: "healthy", 2: "unhealthy", 3: "limited_capacity"}

# The facts this call feeds, in schema order.
FABRIC_FIELDS = ("fabric_state", "fabric_status", "fabric_clique_id", "fabric_cluster_uuid", "fabric_health")


def decode_health(mask: int, summary: int | None) -> dict[str, Any]:
    """The health mask's named fields (and v3's summary; not_supported before v3)."""
    health: dict[str, Any] = {"mask": mask}
    for name, (shift, width) in YES_NO_FIELDS.items():
        health[name] = YES_NO.get((mask >> shift) & width, f"unknown_{(mask >> shift) & width}")
    shift, width = INCORRECT_CONFIGURATION
    value = (mask >> shift) & width
    health["incorrect_configuration"] = INCORRECT_CONFIGURATIONS.get(value, f"unknown_{value}")
    health["summary"] = HEALTH_SUMMARIES.get(summary, f"unknown_{summary}") if summary is not None else "not_supported"
    return health


def cluster_uuid(raw: Any) -> str | Unavailable:
    """The 16 bytes as a UUID (8-4-4-4-12 hex); all zero means the GPU is in no cluster."""
    data = bytes(int(b) & 0xFF for b in raw)
    if len(data) != NVML_GPU_FABRIC_UUID_LEN:
        raise ValueError(f"cluster UUID of {len(data)} bytes")
    if not any(data):
        return Unavailable("not_found", "the fabric gave no cluster UUID (all zero): the GPU is in no cluster")
    h = data.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def facts_of(info: ctypes.Structure, call: str) -> dict[str, Any]:
    """The facts a SUCCESS answer gives."""
    state = int(info.state)
    if state == NVML_GPU_FABRIC_STATE_NOT_SUPPORTED:
        none = Unavailable("not_supported", f"{call}: fabric state NOT_SUPPORTED (no NVLink fabric for this GPU)")
        return dict.fromkeys(FABRIC_FIELDS, none)
    out: dict[str, Any] = {"fabric_state": STATES.get(state, f"unknown_{state}")}
    if state == NVML_GPU_FABRIC_STATE_COMPLETED:
        status = int(info.status)
        out["fabric_status"] = "success" if status == NVML_SUCCESS else error_name(status)
        out["fabric_clique_id"] = int(info.cliqueId)
        out["fabric_cluster_uuid"] = cluster_uuid(info.clusterUuid)
    else:
        # nvml.h: status "must be checked only if state returns complete"; no clique before that
        pending = Unavailable("not_supported", f"{call}: the GPU's fabric registration is not completed")
        out["fabric_status"] = out["fabric_clique_id"] = out["fabric_cluster_uuid"] = pending
    if hasattr(info, "healthMask"):
        summary = int(info.healthSummary) if hasattr(info, "healthSummary") else None
        out["fabric_health"] = decode_health(int(info.healthMask), summary)
    else:
        out["fabric_health"] = Unavailable("not_supported", f"{call}: the unversioned structure has no health mask")
    return out


def read_fabric(call: Any) -> dict[str, Any]:
    """The fabric facts of one GPU. `call(name, *args)` is the GPU reader's NVML call (an
    Unavailable on failure; the reader's query says the NVML code and whether the function was
    missing); the call is re-asked with an older structure where the driver wants one."""
    attempts = [("nvmlDeviceGetGpuFabricInfoV", 3)]
    failures: list[Unavailable] = []
    while attempts:
        name, version = attempts.pop(0)
        info = new_info(version)
        args = (OutStruct(info),)
        answer, code, missing = call(name, *args)
        shown = f"{name} (v{version})" if version > 1 else name
        if isinstance(answer, Unavailable):
            failures.append(answer)
            if name == "nvmlDeviceGetGpuFabricInfoV" and version == 3 and code == NVML_ERROR_ARGUMENT_VERSION_MISMATCH:
                attempts.append(("nvmlDeviceGetGpuFabricInfoV", 2))
            elif name == "nvmlDeviceGetGpuFabricInfoV" and missing:
                attempts.append(("nvmlDeviceGetGpuFabricInfo", 1))
            continue
        try:
            return facts_of(info, shown)
        except (TypeError, ValueError, AttributeError) as exc:
            bad = Unavailable("error", f"{shown}: unexpected answer ({type(exc).__name__}: {exc})")
            return dict.fromkeys(FABRIC_FIELDS, bad)
    last = failures[-1]
    if len(failures) > 1:
        last = Unavailable(last.reason, "; then ".join(f.detail for f in failures))
    return dict.fromkeys(FABRIC_FIELDS, last)
