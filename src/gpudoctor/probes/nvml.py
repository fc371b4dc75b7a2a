"""NVML probe: the driver's view of the GPUs, read through nvidia-ml-py (pynvml).

NVML APIs read, in this order (pynvml names):

- ``nvmlInit``, ``nvmlSystemGetDriverVersion``, ``nvmlSystemGetCudaDriverVersion``,
  ``nvmlSystemGetNVMLVersion``, ``nvmlDeviceGetCount``;
- per GPU, by index: ``nvmlDeviceGetHandleByIndex``, ``nvmlDeviceGetName``,
  ``nvmlDeviceGetUUID``, ``nvmlDeviceGetSerial``, ``nvmlDeviceGetPciInfo``,
  ``nvmlDeviceGetCudaComputeCapability``, ``nvmlDeviceGetArchitecture``,
  ``nvmlDeviceGetMemoryInfo``, ``nvmlDeviceGetCurrPcieLinkGeneration``,
  ``nvmlDeviceGetMaxPcieLinkGeneration``, ``nvmlDeviceGetGpuMaxPcieLinkGeneration``,
  ``nvmlDeviceGetCurrPcieLinkWidth``, ``nvmlDeviceGetMaxPcieLinkWidth``,
  ``nvmlDeviceGetPcieReplayCounter``, ``nvmlDeviceGetPerformanceState``,
  ``nvmlDeviceGetCurrentClocksEventReasons`` (driver < 535:
  ``nvmlDeviceGetCurrentClocksThrottleReasons``), ``nvmlDeviceGetTemperature``
  (GPU sensor), ``nvmlDeviceGetTemperatureThreshold`` (shutdown, slowdown, GPU
  max), ``nvmlDeviceGetPowerUsage``, ``nvmlDeviceGetEnforcedPowerLimit``,
  ``nvmlDeviceGetPowerManagementDefaultLimit``, ``nvmlDeviceGetPersistenceMode``,
  ``nvmlDeviceGetEccMode``, ``nvmlDeviceGetTotalEccErrors``,
  ``nvmlDeviceGetRetiredPages``, ``nvmlDeviceGetRetiredPagesPendingStatus``,
  ``nvmlDeviceGetRemappedRows``, ``nvmlDeviceGetMigMode``,
  ``nvmlDeviceGetNvLinkState`` (links 0-17), ``nvmlDeviceGetP2PStatus`` (NVLink
  capability, towards every other GPU; only for a GPU with a link up),
  ``nvmlDeviceGetComputeMode``,
  ``nvmlDeviceGetCpuAffinityWithinScope`` (node scope; else
  ``nvmlDeviceGetCpuAffinity``), ``nvmlDeviceGetMemoryAffinity`` (node scope),
  ``nvmlDeviceGetNumaNodeId``, ``nvmlDeviceGetUtilizationRates``,
  ``nvmlDeviceGetComputeRunningProcesses``.

Files read (for the size of the affinity masks only):
``/sys/devices/system/cpu/possible`` and ``/sys/devices/system/node/possible``.

Why a child process: an NVML call can block forever in the kernel (a GPU that
fell off the bus, a wedged driver), and a Python thread cannot interrupt a
ctypes call. So NVML runs in a forked child (``os.fork``: no re-import; the
``python -m gpudoctor.probes.nvml`` fallback speaks the same protocol where
fork is unavailable or other threads run). pynvml is imported only there. The
child writes one line per event to a pipe, a progress line *before* every NVML
call, and facts as they are read; the parent reads with ``poll`` until the
deadline (``ctx.nvml_timeout`` capped by the run's budget). On timeout the
parent SIGKILLs the child, names the call(s) that were running, keeps what was
already read, and reaps the child only with ``WNOHANG``: a child stuck in the
kernel (D state) is left for a later, non-blocking reap rather than waited on.

Inside the child, after nvmlInit and the device count, each GPU is read on its
own thread (NVML is thread-safe; ctypes releases the GIL), so the GPUs'
first-call latencies overlap and one hung GPU does not leave the others
unread. :func:`start` forks the child without waiting, so a caller can overlap
NVML's latency with other probes; :func:`collect` is ``start(ctx).result()``.

Errors: one query wrapper (:class:`_Query`) maps every NVML error to an
Unavailable reason (NotSupported -> not_supported, NoPermission ->
no_permission, FunctionNotFound -> not_supported "driver too old for <fn>",
GpuIsLost / Unknown / ResetRequired -> error and the GPU is marked lost, its
remaining queries skipped; DriverNotLoaded -> driver_not_loaded; Timeout ->
timeout; others -> error with NVML's message and code name). nvmlInit failures
set ``status`` and make every other fact unavailable with an actionable detail.

Recorded answers (``ctx.nvml_replay``, ``<root>/nvml.json`` under a fixture
root) replace the library with :class:`~gpudoctor.probes.nvml_replay.ReplayNVML`
in the same child, through the same query code; see that module for the format.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from typing import IO, Any, Callable, Iterable, Protocol

from .. import children
from ..context import ProbeContext
from ..facts import Unavailable, from_jsonable, to_jsonable
from .files import read_cpulist
from .nvml_replay import ReplayUnavailable, call_key

# NVML return codes (nvml.h; stable C ABI), so the parent needs no pynvml. All of them, so that
# a fact's detail names the code a person can look up rather than a number.
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_ALREADY_INITIALIZED = 5
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_INSUFFICIENT_SIZE = 7
NVML_ERROR_INSUFFICIENT_POWER = 8
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_IRQ_ISSUE = 11
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_CORRUPTED_INFOROM = 14
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_RESET_REQUIRED = 16
NVML_ERROR_OPERATING_SYSTEM = 17
NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18
NVML_ERROR_IN_USE = 19
NVML_ERROR_MEMORY = 20
NVML_ERROR_NO_DATA = 21
NVML_ERROR_VGPU_ECC_NOT_SUPPORTED = 22
NVML_ERROR_INSUFFICIENT_RESOURCES = 23
NVML_ERROR_FREQ_NOT_SUPPORTED = 24
NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25
NVML_ERROR_DEPRECATED = 26
NVML_ERROR_NOT_READY = 27
NVML_ERROR_GPU_NOT_FOUND = 28
NVML_ERROR_INVALID_STATE = 29
NVML_ERROR_RESET_TYPE_NOT_SUPPORTED = 30
NVML_ERROR_UNKNOWN = 999

NVML_TEMPERATURE_GPU = 0
NVML_TEMPERATURE_THRESHOLD_SHUTDOWN = 0
NVML_TEMPERATURE_THRESHOLD_SLOWDOWN = 1
NVML_TEMPERATURE_THRESHOLD_GPU_MAX = 3
NVML_MEMORY_ERROR_TYPE_CORRECTED = 0
NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
NVML_VOLATILE_ECC = 0
NVML_AGGREGATE_ECC = 1
NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS = 0
NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR = 1
NVML_AFFINITY_SCOPE_NODE = 0
NVML_FEATURE_ENABLED = 1
NVML_P2P_CAPS_INDEX_NVLINK = 2
NVML_P2P_STATUS_OK = 0

# nvmlDeviceGetNvLinkState is asked for links 0..NVLINK_LINKS_PROBED-1 (18 = Hopper/Blackwell).
NVLINK_LINKS_PROBED = 18

ARCHITECTURES = {
    2: "kepler",
    3: "maxwell",
    4: "pascal",
    5: "volta",
    6: "turing",
    7: "ampere",
    8: "ada",
    9: "hopper",
    10: "blackwell",
}

COMPUTE_MODES = {0: "default", 1: "exclusive_thread", 2: "prohibited", 3: "exclusive_process"}

# Every key of a GPU entry besides "index" and "lost", in schema order.
GPU_FIELDS = (
    "name", "uuid", "serial", "bus_id", "pci_device_id", "compute_capability", "architecture",
    "memory_total_bytes", "memory_used_bytes",
    "pcie_gen", "pcie_max_gen", "pcie_gpu_max_gen", "pcie_width", "pcie_max_width", "pcie_replay_counter",
    "pstate", "clocks_event_reasons",
    "temperature_c", "temperature_slowdown_c", "temperature_shutdown_c", "temperature_max_operating_c",
    "power_draw_w", "power_limit_w", "power_default_limit_w",
    "persistence_mode", "ecc_enabled", "ecc_pending_enabled",
    "ecc_uncorrected_volatile", "ecc_uncorrected_aggregate", "ecc_corrected_volatile",
    "retired_pages_sbe", "retired_pages_dbe", "retired_pages_pending",
    "remapped_rows_correctable", "remapped_rows_uncorrectable", "remapped_rows_pending", "remapped_rows_failed",
    "mig_enabled", "mig_pending_enabled", "nvlink_links", "nvlink_active", "nvlink_peers", "compute_mode",
    "cpu_affinity", "memory_affinity", "numa_node_id", "utilization_gpu_pct", "processes",
)
SYSTEM_FIELDS = ("driver_version", "cuda_driver_version", "nvml_version", "device_count")

_HANG_HINT = "the driver may be hung: check `dmesg` for Xid errors (79: GPU has fallen off the bus)"
_LOST_HINT = "check `dmesg` for Xid errors (79: GPU has fallen off the bus); the GPU needs a reset or the host a reboot"

# nvmlInit failure code -> (status, reason, what a person can do).
_INIT_FAILURES: dict[int, tuple[str, str, str]] = {
    NVML_ERROR_LIBRARY_NOT_FOUND: (
        "library_not_found",
        "not_found",
        "libnvidia-ml.so.1 could not be loaded: the NVIDIA driver's user-space libraries are not installed "
        "or not visible here (install the driver; in a container, run with the NVIDIA container toolkit; "
        "check `ldconfig -p | grep libnvidia-ml`)",
    ),
    NVML_ERROR_DRIVER_NOT_LOADED: (
        "driver_not_loaded",
        "driver_not_loaded",
        "the NVIDIA kernel driver is not loaded: check `lsmod | grep nvidia` and `dmesg | grep -i nvrm`, "
        "then `sudo modprobe nvidia` or reinstall the driver for the running kernel",
    ),
    NVML_ERROR_NO_PERMISSION: (
        "no_permission",
        "no_permission",
        "no permission to open the NVIDIA devices: check the permissions of /dev/nvidiactl and /dev/nvidia*, "
        "or the devices passed into the container",
    ),
    NVML_ERROR_LIB_RM_VERSION_MISMATCH: (
        "driver_library_mismatch",
        "error",
        "the NVML library and the loaded kernel module are from different driver versions "
        "(usually a driver upgrade without a reboot): reboot, or unload and reload the nvidia modules",
    ),
    # The driver gave up waiting on the GPU: the same as NVML not answering within our deadline.
    NVML_ERROR_TIMEOUT: ("timeout", "timeout", _HANG_HINT),
}


# ---------------------------------------------------------------------------
# Where facts go: the child's pipe, or (in the parent / in-process) an assembler.


class Sink(Protocol):
    def calling(self, call: str, gpu: int | None) -> None: ...
    def init_failed(self, status: str, error: str, reason: str, detail: str) -> None: ...
    def system(self, key: str, value: Any) -> None: ...
    def gpu(self, index: int, key: str, value: Any) -> None: ...
    def gpu_done(self, index: int) -> None: ...
    def recording(self, answers: dict[str, Any]) -> None: ...
    def crashed(self, detail: str) -> None: ...
    def finished(self) -> None: ...


def _failure_text(name: str, code: int | None, message: str) -> str:
    return f"{name}: {message}" + (f" ({_error_name(code)})" if code is not None else "")


_ERROR_NAMES = {
    value: name for name, value in globals().items() if name.startswith("NVML_ERROR_") and isinstance(value, int)
}


def _error_name(code: int | None) -> str:
    if code is None:
        return "no NVML code"
    return _ERROR_NAMES.get(code, f"NVML error {code}")


def unavailable_for(name: str, code: int | None, message: str) -> tuple[Unavailable, bool]:
    """Map an NVML error of call `name` to (Unavailable, GPU is lost)."""
    if code == NVML_ERROR_NOT_SUPPORTED:
        return Unavailable("not_supported", f"{name}: not supported on this GPU or driver"), False
    if code == NVML_ERROR_NO_PERMISSION:
        return Unavailable("no_permission", f"{name}: insufficient permissions (try as root)"), False
    if code == NVML_ERROR_FUNCTION_NOT_FOUND:
        return Unavailable("not_supported", f"driver too old for {name}"), False
    if code in (NVML_ERROR_GPU_IS_LOST, NVML_ERROR_UNKNOWN, NVML_ERROR_RESET_REQUIRED):
        # A GPU that needs a reset is as unusable as a lost one: stop asking it, say so.
        return Unavailable("error", f"{_failure_text(name, code, message)}; {_LOST_HINT}"), True
    if code == NVML_ERROR_DRIVER_NOT_LOADED:
        return Unavailable("driver_not_loaded", _failure_text(name, code, message)), False
    if code == NVML_ERROR_TIMEOUT:
        return Unavailable("timeout", _failure_text(name, code, message)), False
    return Unavailable("error", _failure_text(name, code, message)), False


class _GpuLost(Exception):
    pass


class PeerHandle:
    """Another GPU's handle passed as an argument (nvmlDeviceGetP2PStatus): the backend gets
    `handle`; progress lines and recorded keys name the GPU by `index`."""

    __slots__ = ("index", "handle")

    def __init__(self, index: int, handle: Any) -> None:
        self.index = index
        self.handle = handle


class _Query:
    """The one NVML call wrapper: progress line first, then the call, errors -> Unavailable."""

    def __init__(self, nv: Any, sink: Sink) -> None:
        self.nv = nv
        self.sink = sink
        self.error_class: type[BaseException] = getattr(nv, "NVMLError", Exception)
        self.code: int | None = None
        self.missing_function = False
        self.lost = False

    def call(self, name: str, *args: Any, handle: Any = None, gpu: int | None = None) -> Any:
        self.code = None
        self.missing_function = False
        self.lost = False
        self.sink.calling(call_key(name, args), gpu)
        try:
            fn = getattr(self.nv, name)
        except AttributeError:
            self.missing_function = True
            return Unavailable("not_supported", f"the installed nvidia-ml-py has no {name}; upgrade nvidia-ml-py")
        args = tuple(a.handle if isinstance(a, PeerHandle) else a for a in args)
        try:
            return fn(handle, *args) if handle is not None else fn(*args)
        except self.error_class as exc:
            code = getattr(exc, "value", None)
            self.code = code if isinstance(code, int) else None
            self.missing_function = self.code == NVML_ERROR_FUNCTION_NOT_FOUND
            failure, self.lost = unavailable_for(name, self.code, _message(exc))
            return failure
        except Exception as exc:  # a ctypes or pynvml surprise must not end the probe
            return Unavailable("error", f"{name} raised {type(exc).__name__}: {exc}")


def _message(exc: BaseException) -> str:
    try:
        return str(exc) or type(exc).__name__
    except Exception:
        return type(exc).__name__


def _text(value: Any) -> str:
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    return str(value).strip("\x00").strip()


def _convert(value: Any, convert: Callable[[Any], Any], name: str) -> Any:
    if isinstance(value, Unavailable):
        return value
    try:
        return convert(value)
    except Exception as exc:
        shown = repr(value)
        shown = shown if len(shown) <= 60 else shown[:57] + "..."
        return Unavailable("error", f"{name}: unexpected answer {shown} ({type(exc).__name__}: {exc})")


def normalise_bus_id(text: str) -> str:
    """NVML's "00000000:18:00.0" -> sysfs' "0000:18:00.0" (lower case)."""
    domain, bus, rest = text.strip().split(":")
    device, function = rest.split(".")
    return f"{int(domain, 16):04x}:{int(bus, 16):02x}:{int(device, 16):02x}.{int(function, 16)}"


def mask_to_ids(words: Iterable[Any]) -> list[int]:
    """64-bit mask words (word 0 = ids 0-63) -> sorted ids."""
    ids: list[int] = []
    for w, word in enumerate(words):
        word = int(word)
        bit = 0
        while word:
            if word & 1:
                ids.append(w * 64 + bit)
            word >>= 1
            bit += 1
    return ids


def _architecture(value: Any) -> Any:
    name = ARCHITECTURES.get(int(value))
    if name is None:
        return Unavailable("not_supported", f"NVML architecture id {int(value)} is not known to gpudoctor")
    return name


def _cuda_version(value: Any) -> str:
    v = int(value)
    return f"{v // 1000}.{(v % 1000) // 10}"


class _GpuReader:
    def __init__(self, q: _Query, sink: Sink, index: int, handle: Any) -> None:
        self.q = q
        self.sink = sink
        self.index = index
        self.handle = handle
        self.done: set[str] = set()
        self.lost_at: Unavailable | None = None

    def put(self, key: str, value: Any) -> None:
        self.sink.gpu(self.index, key, value)
        self.done.add(key)

    def call(self, name: str, *args: Any) -> Any:
        value = self.q.call(name, *args, handle=self.handle, gpu=self.index)
        if self.q.lost:
            self.lost_at = value
        return value

    def check_lost(self) -> None:
        if self.lost_at is not None:
            raise _GpuLost

    def field(self, key: str, name: str, *args: Any, convert: Callable[[Any], Any] = lambda v: v) -> Any:
        value = _convert(self.call(name, *args), convert, name)
        self.put(key, value)
        self.check_lost()
        return value

    def fields(self, name: str, *args: Any, **converters: Callable[[Any], Any]) -> None:
        """One call feeding several facts."""
        value = self.call(name, *args)
        for key, convert in converters.items():
            self.put(key, _convert(value, convert, name))
        self.check_lost()


def _nvlink_peers(r: _GpuReader, count: int) -> Any:
    """NVML indices of the other GPUs this one reaches over NVLink peer-to-peer: its NVLink island
    (direct links or through NVSwitches alike). Unavailable when a question got no answer."""
    peers: list[int] = []
    for other in range(count):
        if other == r.index:
            continue
        handle = r.q.call("nvmlDeviceGetHandleByIndex", other, gpu=r.index)
        if isinstance(handle, Unavailable):
            continue  # unreachable, so no peer; its own entry says it is lost
        status = r.call("nvmlDeviceGetP2PStatus", PeerHandle(other, handle), NVML_P2P_CAPS_INDEX_NVLINK)
        if isinstance(status, Unavailable):
            return status
        try:
            if int(status) == NVML_P2P_STATUS_OK:
                peers.append(other)
        except (TypeError, ValueError):
            return Unavailable("error", f"nvmlDeviceGetP2PStatus: unexpected answer {status!r}")
    return peers


def _read_gpu_fields(r: _GpuReader, cpu_words: int, node_words: int, count: int) -> None:
    r.field("name", "nvmlDeviceGetName", convert=_text)
    r.field("uuid", "nvmlDeviceGetUUID", convert=_text)
    r.field("serial", "nvmlDeviceGetSerial", convert=_text)
    r.fields(
        "nvmlDeviceGetPciInfo",
        bus_id=lambda p: normalise_bus_id(_text(p.busId)),
        pci_device_id=lambda p: f"0x{int(p.pciDeviceId):08x}",
    )
    r.field("compute_capability", "nvmlDeviceGetCudaComputeCapability", convert=lambda v: f"{int(v[0])}.{int(v[1])}")
    r.field("architecture", "nvmlDeviceGetArchitecture", convert=_architecture)
    r.fields(
        "nvmlDeviceGetMemoryInfo", memory_total_bytes=lambda m: int(m.total), memory_used_bytes=lambda m: int(m.used)
    )
    r.field("pcie_gen", "nvmlDeviceGetCurrPcieLinkGeneration", convert=int)
    r.field("pcie_max_gen", "nvmlDeviceGetMaxPcieLinkGeneration", convert=int)
    r.field("pcie_gpu_max_gen", "nvmlDeviceGetGpuMaxPcieLinkGeneration", convert=int)
    r.field("pcie_width", "nvmlDeviceGetCurrPcieLinkWidth", convert=int)
    r.field("pcie_max_width", "nvmlDeviceGetMaxPcieLinkWidth", convert=int)
    r.field("pcie_replay_counter", "nvmlDeviceGetPcieReplayCounter", convert=int)
    r.field("pstate", "nvmlDeviceGetPerformanceState", convert=int)

    reasons = r.call("nvmlDeviceGetCurrentClocksEventReasons")
    if isinstance(reasons, Unavailable) and r.q.missing_function:
        # driver < 535 has only the older name (slated for removal in CUDA 14)
        reasons = r.call("nvmlDeviceGetCurrentClocksThrottleReasons")
    r.put("clocks_event_reasons", _convert(reasons, int, "nvmlDeviceGetCurrentClocksEventReasons"))
    r.check_lost()

    r.field("temperature_c", "nvmlDeviceGetTemperature", NVML_TEMPERATURE_GPU, convert=int)
    r.field("temperature_slowdown_c", "nvmlDeviceGetTemperatureThreshold", NVML_TEMPERATURE_THRESHOLD_SLOWDOWN,
            convert=int)
    r.field("temperature_shutdown_c", "nvmlDeviceGetTemperatureThreshold", NVML_TEMPERATURE_THRESHOLD_SHUTDOWN,
            convert=int)
    r.field("temperature_max_operating_c", "nvmlDeviceGetTemperatureThreshold", NVML_TEMPERATURE_THRESHOLD_GPU_MAX,
            convert=int)

    def watts(mw: Any) -> float:
        return int(mw) / 1000.0

    r.field("power_draw_w", "nvmlDeviceGetPowerUsage", convert=watts)
    r.field("power_limit_w", "nvmlDeviceGetEnforcedPowerLimit", convert=watts)
    r.field("power_default_limit_w", "nvmlDeviceGetPowerManagementDefaultLimit", convert=watts)
    r.field("persistence_mode", "nvmlDeviceGetPersistenceMode", convert=lambda v: int(v) == NVML_FEATURE_ENABLED)
    r.fields(
        "nvmlDeviceGetEccMode",
        ecc_enabled=lambda v: int(v[0]) == NVML_FEATURE_ENABLED,
        ecc_pending_enabled=lambda v: int(v[1]) == NVML_FEATURE_ENABLED,
    )
    r.field("ecc_uncorrected_volatile", "nvmlDeviceGetTotalEccErrors",
            NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC, convert=int)
    r.field("ecc_uncorrected_aggregate", "nvmlDeviceGetTotalEccErrors",
            NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_AGGREGATE_ECC, convert=int)
    r.field("ecc_corrected_volatile", "nvmlDeviceGetTotalEccErrors",
            NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_VOLATILE_ECC, convert=int)
    r.field("retired_pages_sbe", "nvmlDeviceGetRetiredPages",
            NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS, convert=len)
    r.field("retired_pages_dbe", "nvmlDeviceGetRetiredPages", NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR,
            convert=len)
    r.field("retired_pages_pending", "nvmlDeviceGetRetiredPagesPendingStatus",
            convert=lambda v: int(v) == NVML_FEATURE_ENABLED)
    r.fields(
        "nvmlDeviceGetRemappedRows",
        remapped_rows_correctable=lambda v: int(v[0]),
        remapped_rows_uncorrectable=lambda v: int(v[1]),
        remapped_rows_pending=lambda v: bool(int(v[2])),
        remapped_rows_failed=lambda v: bool(int(v[3])),
    )
    r.fields(
        "nvmlDeviceGetMigMode",
        mig_enabled=lambda v: int(v[0]) == NVML_FEATURE_ENABLED,
        mig_pending_enabled=lambda v: int(v[1]) == NVML_FEATURE_ENABLED,
    )

    links = active = 0
    failure: Unavailable | None = None
    for link in range(NVLINK_LINKS_PROBED):
        state = r.call("nvmlDeviceGetNvLinkState", link)
        if r.lost_at is not None:
            failure = state
            break
        if isinstance(state, Unavailable):
            if r.q.code in (NVML_ERROR_NOT_SUPPORTED, NVML_ERROR_INVALID_ARGUMENT):
                continue  # no such link on this GPU
            failure = state
            break
        links += 1
        active += 1 if int(state) == NVML_FEATURE_ENABLED else 0
    r.put("nvlink_links", failure if failure is not None else links)
    r.put("nvlink_active", failure if failure is not None else active)
    r.check_lost()
    # A GPU with no link up has no NVLink peers: asked (one call per other GPU) only with one up.
    if failure is not None:
        r.put("nvlink_peers", failure)
    else:
        r.put("nvlink_peers", _nvlink_peers(r, count) if active else [])
    r.check_lost()

    r.field("compute_mode", "nvmlDeviceGetComputeMode",
            convert=lambda v: COMPUTE_MODES.get(int(v), f"unknown_{int(v)}"))

    affinity = r.call("nvmlDeviceGetCpuAffinityWithinScope", cpu_words, NVML_AFFINITY_SCOPE_NODE)
    if isinstance(affinity, Unavailable) and r.q.missing_function:
        affinity = r.call("nvmlDeviceGetCpuAffinity", cpu_words)
    r.put("cpu_affinity", _convert(affinity, mask_to_ids, "nvmlDeviceGetCpuAffinity"))
    r.check_lost()
    r.field("memory_affinity", "nvmlDeviceGetMemoryAffinity", node_words, NVML_AFFINITY_SCOPE_NODE,
            convert=mask_to_ids)
    r.field("numa_node_id", "nvmlDeviceGetNumaNodeId", convert=int)
    r.field("utilization_gpu_pct", "nvmlDeviceGetUtilizationRates", convert=lambda u: int(u.gpu))
    r.field("processes", "nvmlDeviceGetComputeRunningProcesses", convert=len)


def _read_gpu(nv: Any, sink: Sink, index: int, cpu_words: int, node_words: int, count: int) -> None:
    try:
        _read_one_gpu(_Query(nv, sink), sink, index, cpu_words, node_words, count)
    except Exception as exc:  # a bug here must not hide the other GPUs
        sink.crashed(f"reading GPU {index}: {type(exc).__name__}: {exc}")
    sink.gpu_done(index)


def _read_one_gpu(q: _Query, sink: Sink, index: int, cpu_words: int, node_words: int, count: int) -> None:
    sink.gpu(index, "lost", False)
    handle = q.call("nvmlDeviceGetHandleByIndex", index, gpu=index)
    if isinstance(handle, Unavailable):
        sink.gpu(index, "lost", True)
        skipped = Unavailable(handle.reason, f"no NVML handle for GPU {index}: {handle.detail}")
        for key in GPU_FIELDS:
            sink.gpu(index, key, skipped)
        return
    r = _GpuReader(q, sink, index, handle)
    try:
        _read_gpu_fields(r, cpu_words, node_words, count)
    except _GpuLost:
        sink.gpu(index, "lost", True)
        lost = r.lost_at.detail if r.lost_at is not None else "GPU lost"
        skipped = Unavailable("error", f"not read: GPU {index} was lost ({lost})")
        for key in GPU_FIELDS:
            if key not in r.done:
                sink.gpu(index, key, skipped)


def _warm_topology(nv: Any, node_words: int) -> None:
    try:  # the same call, with the same arguments, as GPU 0's memory_affinity query
        nv.nvmlDeviceGetMemoryAffinity(nv.nvmlDeviceGetHandleByIndex(0), node_words, NVML_AFFINITY_SCOPE_NODE)
    except Exception:
        pass


def read_nvml(nv: Any, sink: Sink, cpu_words: int = 1, node_words: int = 1, parallel: bool = True) -> None:
    """Read every NVML fact from backend `nv` into `sink`. The one query path of probe and recorder.

    Init, versions and count on the calling thread; then the GPUs, each on its own thread
    unless `parallel` is false. `sink` must accept events from several threads.
    """
    q = _Query(nv, sink)
    sink.calling("nvmlInit", None)
    try:
        nv.nvmlInit()
    except q.error_class as exc:
        code = getattr(exc, "value", None)
        code = code if isinstance(code, int) else None
        status, reason, advice = _INIT_FAILURES.get(code or -1, ("error", "error", ""))
        text = _failure_text("nvmlInit", code, _message(exc))
        sink.init_failed(status, text, reason, f"{text}: {advice}" if advice else text)
        return
    except Exception as exc:
        text = f"nvmlInit raised {type(exc).__name__}: {exc}"
        sink.init_failed("error", text, "error", text)
        return
    sink.system("driver_version", _convert(q.call("nvmlSystemGetDriverVersion"), _text, "nvmlSystemGetDriverVersion"))
    sink.system(
        "cuda_driver_version",
        _convert(q.call("nvmlSystemGetCudaDriverVersion"), _cuda_version, "nvmlSystemGetCudaDriverVersion"),
    )
    sink.system("nvml_version", _convert(q.call("nvmlSystemGetNVMLVersion"), _text, "nvmlSystemGetNVMLVersion"))
    count = _convert(q.call("nvmlDeviceGetCount"), int, "nvmlDeviceGetCount")
    sink.system("device_count", count)
    if isinstance(count, Unavailable):
        return
    if not parallel or count < 1:
        for index in range(count):
            _read_gpu(nv, sink, index, cpu_words, node_words, count)
        return
    # NVML builds its CPU/NUMA topology on the first affinity query of a process, under a lock
    # (about 16 ms on a 2 x H200 host). A side thread asks early, so that overlaps the GPU
    # threads' other calls instead of stalling them at their affinity queries. Never joined:
    # its answer is not used, and should it hang, GPU 0's own query names the hang.
    threading.Thread(target=_warm_topology, args=(nv, node_words), name="nvml-topology", daemon=True).start()
    # One thread per GPU: NVML is thread-safe and ctypes drops the GIL, so the GPUs' first-call
    # latencies (RPCs to each GPU's firmware) overlap, and one hung GPU does not keep the others unread.
    threads = [
        threading.Thread(
            target=_read_gpu, args=(nv, sink, i, cpu_words, node_words, count), name=f"nvml-gpu{i}", daemon=True
        )
        for i in range(count)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


# ---------------------------------------------------------------------------
# Assembling the section (parent side).


class Assembler:
    """Collects sink events and builds the ``nvml`` section of the facts."""

    def __init__(self) -> None:
        # The call each reader (None: the system stage, else a GPU index) is in, until it is done.
        self.in_flight: dict[int | None, str] = {}
        self.gpus_done: set[int] = set()
        self.init_failure: tuple[str, str, str, str] | None = None
        self.system_facts: dict[str, Any] = {}
        self.gpu_facts: dict[int, dict[str, Any]] = {}
        self.answers: dict[str, Any] | None = None
        self.crash: str | None = None
        self.complete = False

    # Sink interface
    def calling(self, call: str, gpu: int | None) -> None:
        if gpu is not None:
            self.in_flight.pop(None, None)  # the system stage is over once GPUs are read
        self.in_flight[gpu] = call

    def init_failed(self, status: str, error: str, reason: str, detail: str) -> None:
        self.init_failure = (status, error, reason, detail)

    def system(self, key: str, value: Any) -> None:
        self.system_facts[key] = value

    def gpu(self, index: int, key: str, value: Any) -> None:
        self.gpu_facts.setdefault(index, {})[key] = value

    def gpu_done(self, index: int) -> None:
        self.in_flight.pop(index, None)
        self.gpus_done.add(index)

    def recording(self, answers: dict[str, Any]) -> None:
        self.answers = answers

    def crashed(self, detail: str) -> None:
        self.crash = detail

    def finished(self) -> None:
        self.complete = True

    # Results
    def where(self) -> str:
        """The calls in flight, e.g. "nvmlDeviceGetPowerUsage on GPU 1"."""
        if not self.in_flight:
            return "no NVML call (between calls)"
        parts = [
            call + (f" on GPU {gpu}" if gpu is not None else "")
            for gpu, call in sorted(self.in_flight.items(), key=lambda item: -1 if item[0] is None else item[0])
        ]
        return " and ".join(parts)

    def result(self, interrupted: tuple[str, str] | None = None) -> dict[str, Any]:
        """The section. `interrupted` = (reason, detail) when the child did not finish."""
        if self.init_failure is not None:
            status, error, reason, detail = self.init_failure
            gone = Unavailable(reason, detail)
            return _section(status, error, dict.fromkeys(SYSTEM_FIELDS, gone), gone)
        if self.crash is not None and interrupted is None:
            interrupted = ("error", f"the NVML probe failed in its child process: {self.crash}")
        if interrupted is None and not self.complete:
            interrupted = ("error", f"the NVML child process stopped without finishing, {self.where()}")
        status, error = "ok", ""
        fill = Unavailable("error", "not read by the NVML probe")
        if interrupted is not None:
            reason, detail = interrupted
            status, error = ("timeout" if reason == "timeout" else "error"), detail
            fill = Unavailable(reason, detail)
        system = {key: self.system_facts.get(key, fill) for key in SYSTEM_FIELDS}
        count = system["device_count"]
        if isinstance(count, Unavailable):
            if status == "ok":
                status, error = "error", count.detail
            return _section(status, error, system, count)
        gpus = [self._gpu_entry(i, fill, interrupted) for i in range(count)]
        return _section(status, error, system, gpus)

    def _gpu_entry(self, index: int, fill: Unavailable, interrupted: tuple[str, str] | None) -> dict[str, Any]:
        got = self.gpu_facts.get(index, {})
        entry: dict[str, Any] = {"index": index, "lost": bool(got.get("lost", False))}
        missing = fill
        if interrupted is not None and index in self.in_flight:
            # A GPU being read when the child stopped: after a hang, that GPU is unreachable.
            if interrupted[0] == "timeout":
                entry["lost"] = True
            missing = Unavailable(interrupted[0], f"not read: {interrupted[1]}")
        elif interrupted is not None and index not in self.gpus_done:
            missing = Unavailable(interrupted[0], f"not read: the probe stopped earlier ({interrupted[1]})")
        for key in GPU_FIELDS:
            entry[key] = got.get(key, missing)
        return entry


def _section(status: str, error: str, system: dict[str, Any], gpus: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"status": status, "error": error}
    out.update(system)
    out["gpus"] = gpus
    return out


# ---------------------------------------------------------------------------
# The child: events as lines on a pipe.


class _PipeSink:
    """Child side. Facts are buffered and written together with the next progress line,
    so each NVML call costs one write, and what was read before a hang is already out."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.pending: list[bytes] = []
        self.lock = threading.Lock()  # GPU reader threads share the pipe

    def _add(self, tag: str, payload: Any, flush: bool = False) -> None:
        line = tag.encode() + b" " + json.dumps(payload, separators=(",", ":")).encode() + b"\n"
        with self.lock:
            self.pending.append(line)
            if flush:
                data = b"".join(self.pending)
                self.pending.clear()
                while data:
                    written = os.write(self.fd, data)
                    data = data[written:]

    def calling(self, call: str, gpu: int | None) -> None:
        self._add("C", [call, gpu], flush=True)

    def init_failed(self, status: str, error: str, reason: str, detail: str) -> None:
        self._add("I", [status, error, reason, detail])

    def system(self, key: str, value: Any) -> None:
        self._add("S", [key, to_jsonable(value)])

    def gpu(self, index: int, key: str, value: Any) -> None:
        self._add("G", [index, key, to_jsonable(value)])

    def gpu_done(self, index: int) -> None:
        self._add("D", index, flush=True)

    def recording(self, answers: dict[str, Any]) -> None:
        self._add("R", answers)

    def crashed(self, detail: str) -> None:
        self._add("X", detail, flush=True)

    def finished(self) -> None:
        self._add("E", None, flush=True)


def _dispatch(line: bytes, sink: Assembler) -> None:
    tag, _, payload = line.partition(b" ")
    try:
        data = json.loads(payload)
        if tag == b"C":
            sink.calling(str(data[0]), data[1])
        elif tag == b"S":
            sink.system(str(data[0]), from_jsonable(data[1]))
        elif tag == b"G":
            sink.gpu(int(data[0]), str(data[1]), from_jsonable(data[2]))
        elif tag == b"D":
            sink.gpu_done(int(data))
        elif tag == b"I":
            sink.init_failed(*(str(x) for x in data))
        elif tag == b"R":
            sink.recording(data)
        elif tag == b"X":
            sink.crashed(str(data))
        elif tag == b"E":
            sink.finished()
        else:
            raise ValueError(f"unknown tag {tag!r}")
    except Exception as exc:
        sink.crashed(f"unreadable message from the NVML child ({type(exc).__name__}: {exc}): {line[:80]!r}")


def _open_backend(plan: dict[str, Any], sink: Sink) -> Any:
    """The backend the child reads: recorded answers or the real pynvml. None after init_failed."""
    replay = plan.get("replay")
    try:
        if replay:
            sink.calling("loading recorded NVML answers", None)
            from .nvml_replay import ReplayNVML

            return ReplayNVML.from_file(replay)
        sink.calling("import pynvml", None)
        import pynvml  # type: ignore[import-untyped]

        return pynvml
    except ReplayUnavailable as exc:
        status = "library_not_found" if exc.reason == "not_found" else "error"
        sink.init_failed(status, exc.detail, exc.reason, exc.detail)
    except ImportError as exc:
        detail = f"the Python package nvidia-ml-py (module pynvml) is not installed ({exc}): pip install nvidia-ml-py"
        sink.init_failed("library_not_found", detail, "not_found", detail)
    return None


def _child_main(plan: dict[str, Any], fd: int) -> None:
    """Runs in the child: read NVML (or record it) and report every step on fd."""
    try:
        # Ctrl-C or a kill of the process group ends us at once, even inside a C call.
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        # Belt and braces: should the parent die without killing us, do not linger past the deadline
        # (clamped: an alarm takes a C int, and the deadline may be days, or inf).
        signal.signal(signal.SIGALRM, signal.SIG_DFL)
        signal.alarm(children.alarm_seconds(float(plan.get("timeout", 5.0))))
    except ValueError:  # not the main thread of this process
        pass
    sink = _PipeSink(fd)
    try:
        backend = _open_backend(plan, sink)
        if backend is not None:
            cpu_words, node_words = int(plan.get("cpu_words", 1)), int(plan.get("node_words", 1))
            if plan.get("mode") == "record":
                from .nvml_record import RecordingBackend

                recorder = RecordingBackend(backend, scrub=bool(plan.get("scrub", True)))
                read_nvml(recorder, sink, cpu_words, node_words)
                sink.recording(recorder.answers())
            else:
                read_nvml(backend, sink, cpu_words, node_words)
        sink.finished()
    except BrokenPipeError:
        return  # the parent gave up on us
    except Exception as exc:
        try:
            sink.crashed(f"{type(exc).__name__}: {exc}")
        except OSError:
            pass


# ---------------------------------------------------------------------------
# The parent: start the child, read until the deadline, never block on it.

# Children killed but not yet reaped (stuck in the kernel); retried without blocking.
_UNREAPED: list[Any] = []


def _reap_leftovers() -> None:
    for child in list(_UNREAPED):
        if child.poll() is not None:
            _UNREAPED.remove(child)


class _Forked:
    """The forked child (in gpudoctor's own process group: killed by pid), registered in
    gpudoctor.children until reaped."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.status: int | None = None

    def poll(self) -> int | None:
        """Non-blocking reap; the raw wait status, or None while it runs."""
        if self.status is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                pid, status = self.pid, 0
            if pid:
                self.status = status
                children.unregister(self.pid)
        return self.status

    def kill(self) -> None:
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def describe(self) -> str:
        return _describe_wait(self.status)


class _Spawned:
    def __init__(self, proc: Any) -> None:
        self.proc = proc

    def poll(self) -> int | None:
        code: int | None = self.proc.poll()  # WNOHANG inside
        if code is not None:
            children.unregister(self.proc.pid)
        return code

    def kill(self) -> None:
        try:
            self.proc.kill()
        except OSError:
            pass

    def describe(self) -> str:
        code = self.proc.returncode
        if code is None:
            return "did not exit"
        return f"was killed by {_signal_name(-code)}" if code < 0 else f"exited with status {code}"


def _signal_name(num: int) -> str:
    try:
        return f"signal {num} ({signal.Signals(num).name})"
    except ValueError:
        return f"signal {num}"


def _describe_wait(status: int | None) -> str:
    if status is None:
        return "did not exit"
    if os.WIFSIGNALED(status):
        return f"was killed by {_signal_name(os.WTERMSIG(status))}"
    return f"exited with status {os.WEXITSTATUS(status)}"


def _wait_nohang(child: Any, grace: float) -> bool:
    """Poll (never block) until the child is reaped or grace seconds pass."""
    end = time.monotonic() + grace
    delay = 0.0002
    while child.poll() is None:
        if time.monotonic() >= end:
            return False
        time.sleep(delay)
        delay = min(delay * 2, 0.002)
    return True


# What the child may write before it is stopped as runaway: a recording of a big host is a few
# hundred kilobytes.
OUTPUT_CAP = 16 << 20


def _pump(fd: int, deadline: float, on_line: Callable[[bytes], None], done: Callable[[], bool]) -> str:
    """Feed complete lines from fd to on_line until done() (children.DONE), EOF (EOF), the
    deadline (DEADLINE) or more than OUTPUT_CAP bytes (CUT); see gpudoctor.children.pump.

    Past the deadline, what is already in the pipe is still read (without waiting), so a
    child collected late (see start()) is judged by what it had said by then."""

    def line(raw: bytes) -> None:
        if raw:
            on_line(raw)

    # a last line without its newline was cut short by the child's death: not a message
    return children.pump([children.Capture(fd, OUTPUT_CAP, line, partial_line=False)], deadline, done)


def _can_fork() -> bool:
    # fork() in a multi-threaded process can deadlock the child on a lock another thread held.
    return hasattr(os, "fork") and threading.active_count() == 1


def _grow_pipe(fd: int) -> None:
    # Room for every event of a big host, so a child started early (start()) is not held up
    # by a full pipe before the parent reads. Linux only; elsewhere the default size does.
    try:
        import fcntl

        fcntl.fcntl(fd, getattr(fcntl, "F_SETPIPE_SZ", 1031), 1 << 20)
    except (ImportError, OSError):
        pass


def _detach_stdio() -> None:
    """In the forked child: stdin, stdout and stderr to /dev/null. A child stuck in the kernel
    outlives gpudoctor; holding the caller's pipes open, it would make a job script that reads
    $(gpudoctor check) or pipes it into tee wait for it. It reports on its own pipe only."""
    try:
        null = os.open(os.devnull, os.O_RDWR)
    except OSError:
        return
    for fd in (0, 1, 2):
        try:
            os.dup2(null, fd)
        except OSError:
            pass
    if null > 2:
        os.close(null)


def _start_forked(plan: dict[str, Any]) -> tuple[Any, int]:
    r, w = os.pipe()
    _grow_pipe(w)
    with children.starting:  # a stop signal now is acted on once the child is registered
        try:
            pid = os.fork()
        except OSError:
            os.close(r)
            os.close(w)
            raise
        if pid == 0:  # the child: never return into the caller's code
            code = 70
            try:
                children.forget_in_child()
                os.close(r)
                _detach_stdio()
                _child_main(plan, w)
                code = 0
            finally:
                os._exit(code)
        children.register(pid, group=False)
    os.close(w)
    return _Forked(pid), r


def _start_spawned(plan: dict[str, Any]) -> tuple[Any, int]:
    import subprocess

    if not sys.executable:
        raise OSError("no Python interpreter path (sys.executable) to start the NVML child with")
    src = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ)
    env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    with children.starting:
        proc = subprocess.Popen(
            [sys.executable, "-m", "gpudoctor.probes.nvml", json.dumps(plan)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
            close_fds=True,
        )
        children.register(proc.pid, group=False)
    stdout: IO[bytes] = proc.stdout  # type: ignore[assignment]
    fd = os.dup(stdout.fileno())
    stdout.close()
    _grow_pipe(fd)
    return _Spawned(proc), fd


class PendingChild:
    """A started NVML child whose events are read (until its deadline) by :meth:`wait`."""

    def __init__(self, plan: dict[str, Any], timeout: float, sink: Assembler, use_fork: bool | None = None) -> None:
        _reap_leftovers()
        self.sink = sink
        self.timeout = timeout
        self.deadline = time.monotonic() + timeout
        self.outcome: tuple[str, str] | None = None
        self.waited = False
        self.child: Any = None
        self.fd = -1
        fork = _can_fork() if use_fork is None else use_fork
        try:
            self.child, self.fd = _start_forked(dict(plan, timeout=timeout)) if fork else _start_spawned(
                dict(plan, timeout=timeout)
            )
        except OSError as exc:
            self.outcome = ("error", f"cannot start the NVML child process: {exc}")

    def wait(self) -> tuple[str, str] | None:
        """None when the child finished, else (reason, detail): a timeout naming the stuck call(s),
        or how the child died. Returns by the deadline; never blocks on the child."""
        if self.waited or self.child is None:
            return self.outcome
        self.waited = True
        sink, child = self.sink, self.child
        try:
            ended = _pump(self.fd, self.deadline, lambda line: _dispatch(line, sink), lambda: sink.complete)
        except BaseException:  # KeyboardInterrupt, a stop signal: the child goes too
            child.kill()
            _UNREAPED.append(child)
            raise
        finally:
            os.close(self.fd)
        if ended == children.CUT:
            child.kill()
            if not _wait_nohang(child, 0.1):
                _UNREAPED.append(child)
            self.outcome = (
                "error",
                f"the NVML child process wrote more than {OUTPUT_CAP >> 20} MiB (while calling {sink.where()}) "
                "and was stopped",
            )
            return self.outcome
        if ended == children.DEADLINE:
            child.kill()
            if not _wait_nohang(child, 0.1):
                _UNREAPED.append(child)  # stuck in the kernel (D state): reaped later, never waited on
            self.outcome = (
                "timeout",
                f"NVML did not answer within {self.timeout:.1f} s, stuck in {sink.where()}; {_HANG_HINT}",
            )
            return self.outcome
        # It said it is done (or closed the pipe): a moment to exit, then kill; never a blocking wait.
        if not _wait_nohang(child, min(0.5, max(0.05, self.deadline - time.monotonic()))):
            child.kill()
            if not _wait_nohang(child, 0.1):
                _UNREAPED.append(child)
        if sink.complete:
            self.outcome = None
        elif sink.crash is not None:
            self.outcome = ("error", f"the NVML probe broke in its child process, in {sink.where()}: {sink.crash}")
        else:
            self.outcome = ("error", f"the NVML child process {child.describe()} while calling {sink.where()}")
        return self.outcome


    def cancel(self) -> None:
        """Stop a child whose answer is no longer wanted (the run ended early); never blocks."""
        if self.waited or self.child is None:
            return
        self.waited = True
        self.outcome = ("error", "cancelled: the run stopped before NVML was collected")
        os.close(self.fd)
        self.child.kill()
        if not _wait_nohang(self.child, 0.1):
            _UNREAPED.append(self.child)


def run_child(
    plan: dict[str, Any], timeout: float, sink: Assembler, use_fork: bool | None = None
) -> tuple[str, str] | None:
    """Run the NVML child for plan, feeding its events to sink; see :meth:`PendingChild.wait`."""
    return PendingChild(plan, timeout, sink, use_fork).wait()


def _mask_words(ctx: ProbeContext, absolute: str, fallback: int) -> int:
    ids = read_cpulist(ctx, absolute)
    count = max(ids) + 1 if isinstance(ids, list) and ids else fallback
    return max(1, -(-count // 64))  # integers throughout: a float overflows on garbage ids


def make_plan(ctx: ProbeContext, mode: str = "probe") -> dict[str, Any]:
    return {
        "mode": mode,
        "replay": str(ctx.nvml_replay) if ctx.nvml_replay is not None else None,
        "cpu_words": _mask_words(ctx, "/sys/devices/system/cpu/possible", os.cpu_count() or 64),
        "node_words": _mask_words(ctx, "/sys/devices/system/node/possible", 1),
    }


class PendingNvml:
    """The NVML probe started in the background: NVML's own latency (import, init, first calls:
    about 90 ms on a 2 x H200 host) can overlap other probes; :meth:`result` collects it."""

    def __init__(self, ctx: ProbeContext) -> None:
        timeout = ctx.budget(ctx.nvml_timeout)
        adopted = _take_prestarted(ctx, timeout)
        if adopted is not None:
            self.sink, self.child = adopted
        else:
            self.sink = Assembler()
            self.child = PendingChild(make_plan(ctx), timeout, self.sink)

    def result(self) -> dict[str, Any]:
        return self.sink.result(self.child.wait())

    def cancel(self) -> None:
        self.child.cancel()


# ---------------------------------------------------------------------------
# Starting before the command line is parsed (the console script's first step).

# Commands that probe this machine with NVML unless told otherwise, and the options that tell them
# otherwise. (`run` is not one: it asks NVML only when sysfs cannot place a GPU, then execs.)
PROBING_COMMANDS = frozenset({"check", "probe", "gate", "select", "topo", "fix", "tiers", "bench"})
_NOT_LIVE = ("--facts", "--root", "--sysfs-root", "--procfs-root", "--help", "-h")
_PRESTARTED: list[tuple[Assembler, PendingChild]] = []


def prestart(argv: list[str], timeout: float = 5.0) -> bool:
    """Fork the NVML child for a live probe now, when `argv` is a command that will want one.

    The console script calls this before it imports click and parses the command line (about
    20 ms on a 2 x H200 host), so NVML's own start-up overlaps them. The probe adopts the child
    only when it would have started the same one (see _take_prestarted); an unused child is
    stopped by discard_prestarted(). A guess from argv alone: the command is the first word
    that is not an option, and any option that points elsewhere (--facts, --root, ...) or asks
    for help means no prestart."""
    command = next((a for a in argv if not a.startswith("-")), None)
    if command not in PROBING_COMMANDS or _PRESTARTED:
        return False
    if any(a == option or a.startswith(option + "=") for a in argv for option in _NOT_LIVE):
        return False
    sink = Assembler()
    _PRESTARTED.append((sink, PendingChild(make_plan(ProbeContext()), timeout, sink)))
    return True


def _take_prestarted(ctx: ProbeContext, timeout: float) -> tuple[Assembler, PendingChild] | None:
    """The prestarted child, when `ctx` probes this machine and the child's deadline is the one a
    child started now would get (within a second, never later); else it is stopped, and None."""
    if not _PRESTARTED:
        return None
    sink, child = _PRESTARTED.pop()
    wanted = time.monotonic() + timeout
    if ctx.live and ctx.nvml_replay is None and wanted - 1.0 <= child.deadline <= wanted:
        return sink, child
    child.cancel()
    return None


def discard_prestarted() -> None:
    """Stop a prestarted child nobody adopted (the command failed first, or did not probe)."""
    while _PRESTARTED:
        _PRESTARTED.pop()[1].cancel()


def start(ctx: ProbeContext) -> PendingNvml:
    """Fork the NVML child now; call ``.result()`` later (by then the deadline still holds)."""
    return PendingNvml(ctx)


def collect(ctx: ProbeContext) -> dict[str, Any]:
    """The ``nvml`` section of the facts (see the module docstring)."""
    return start(ctx).result()


def _spawned_main(argv: list[str]) -> int:
    """``python -m gpudoctor.probes.nvml PLAN_JSON``: the fallback child; events on stdout."""
    out = os.dup(1)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)  # nothing else may write into the event stream
    os.close(devnull)
    _child_main(json.loads(argv[0]), out)
    return 0


if __name__ == "__main__":
    raise SystemExit(_spawned_main(sys.argv[1:]))
