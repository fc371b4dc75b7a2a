"""What the NVML probe reads: the system facts, then every GPU's fields, each GPU on its own
thread. :func:`read_nvml` is the one query path of the probe and the recorder; the field list
(:data:`GPU_FIELDS`) is the schema's, in its order.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Iterable

from ...facts import Unavailable
from ...model.bus_ids import parse_bus_id
from .errors import (
    INIT_FAILURES,
    NVML_ERROR_INVALID_ARGUMENT,
    NVML_ERROR_NOT_SUPPORTED,
    exception_text,
    failure_text,
    unavailable_for,
)
from .fabric_info import FABRIC_FIELDS, read_fabric
from .query import PeerHandle, Query, Sink, as_text, converted

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
NVML_SUCCESS = 0

# nvml.h field id (nvmlDeviceGetFieldValues): the action the driver says this GPU needs (r570+).
NVML_FI_DEV_GET_GPU_RECOVERY_ACTION = 230
# nvml.h nvmlDeviceGpuRecoveryAction_t, in the words of the facts.
RECOVERY_ACTIONS = {
    0: "none",
    1: "gpu_reset",
    2: "node_reboot",
    3: "drain_p2p",
    4: "drain_and_reset",
    5: "recover_imex_domain",
    6: "bus_reset",
    7: "system_reboot",
}
# nvml.h nvmlNvLinkErrorCounter_t (nvmlDeviceGetNvLinkErrorCounter), in the words of the facts.
NVLINK_ERROR_COUNTERS = {"replay": 0, "recovery": 1, "crc_flit": 2, "crc_data": 3}

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
    "mig_enabled", "mig_pending_enabled", "recovery_action",
    "nvlink_links", "nvlink_active", "nvlink_peers", "nvlink_errors", "nvlink_link_errors",
    "fabric_state", "fabric_status", "fabric_clique_id", "fabric_cluster_uuid", "fabric_health", "compute_mode",
    "cpu_affinity", "memory_affinity", "numa_node_id", "utilization_gpu_pct", "processes",
)
SYSTEM_FIELDS = ("driver_version", "cuda_driver_version", "nvml_version", "device_count")


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


class _GpuLost(Exception):
    pass


class GpuReader:
    """One GPU's reading: each fact goes to the sink as it comes; a lost GPU stops the reading."""

    def __init__(self, q: Query, sink: Sink, index: int, handle: Any) -> None:
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
        value = converted(self.call(name, *args), convert, name)
        self.put(key, value)
        self.check_lost()
        return value

    def fields(self, name: str, *args: Any, **converters: Callable[[Any], Any]) -> None:
        """One call feeding several facts."""
        value = self.call(name, *args)
        for key, convert in converters.items():
            self.put(key, converted(value, convert, name))
        self.check_lost()


def _nvlink_peers(r: GpuReader, count: int) -> Any:
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


def _recovery_action(r: GpuReader) -> Any:
    """The driver's recovery action for the GPU: one field value; a field the driver does not have
    answers in the entry's own return code, not as an error of the call."""
    answer = r.call("nvmlDeviceGetFieldValues", [NVML_FI_DEV_GET_GPU_RECOVERY_ACTION])
    if isinstance(answer, Unavailable):
        return answer
    try:
        entry = answer[0]
        code = int(entry.nvmlReturn)
        if code != NVML_SUCCESS:
            failure, _lost = unavailable_for(f"field {NVML_FI_DEV_GET_GPU_RECOVERY_ACTION} (GPU recovery action)",
                                             code, "field value not read")
            return failure
        action = int(entry.value.uiVal)
    except (AttributeError, IndexError, TypeError, ValueError) as exc:
        return Unavailable("error", f"nvmlDeviceGetFieldValues: unexpected answer ({type(exc).__name__}: {exc})")
    return RECOVERY_ACTIONS.get(action, f"unknown_{action}")


def nvlink_link_errors(r: GpuReader, active_links: list[int]) -> Any:
    """Each active link's error counters (counts since the driver loaded), in link order:
    [{"link": 0, "replay": 0, "recovery": 0, "crc_flit": 0, "crc_data": 0}, ...]."""
    out: list[dict[str, int]] = []
    for link in active_links:
        entry = {"link": link}
        for name, counter in NVLINK_ERROR_COUNTERS.items():
            value = converted(r.call("nvmlDeviceGetNvLinkErrorCounter", link, counter), int,
                              "nvmlDeviceGetNvLinkErrorCounter")
            if isinstance(value, Unavailable):
                return value
            entry[name] = value
        out.append(entry)
    return out


def _nvlink_errors(per_link: Any) -> Any:
    """Each error counter summed over the active links."""
    if isinstance(per_link, Unavailable):
        return per_link
    return {name: sum(entry[name] for entry in per_link) for name in NVLINK_ERROR_COUNTERS}


def _fabric(r: GpuReader) -> None:
    """The GPU's NVLink fabric registration (gpudoctor.probes.nvml.fabric_info)."""

    def call(name: str, *args: Any) -> tuple[Any, int | None, bool]:
        answer = r.call(name, *args)
        return answer, r.q.code, r.q.missing_function

    facts = read_fabric(call)
    for key in FABRIC_FIELDS:
        r.put(key, facts[key])
    r.check_lost()


def read_gpu_fields(r: GpuReader, cpu_words: int, node_words: int, count: int) -> None:
    r.field("name", "nvmlDeviceGetName", convert=as_text)
    r.field("uuid", "nvmlDeviceGetUUID", convert=as_text)
    r.field("serial", "nvmlDeviceGetSerial", convert=as_text)
    r.fields(
        "nvmlDeviceGetPciInfo",
        bus_id=lambda p: parse_bus_id(as_text(p.busId)),
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
    r.put("clocks_event_reasons", converted(reasons, int, "nvmlDeviceGetCurrentClocksEventReasons"))
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
    r.put("recovery_action", _recovery_action(r))
    r.check_lost()

    links = 0
    active: list[int] = []
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
        if int(state) == NVML_FEATURE_ENABLED:
            active.append(link)
    r.put("nvlink_links", failure if failure is not None else links)
    r.put("nvlink_active", failure if failure is not None else len(active))
    r.check_lost()
    # A GPU with no link up has no NVLink peers: asked (one call per other GPU) only with one up.
    if failure is not None:
        r.put("nvlink_peers", failure)
    else:
        r.put("nvlink_peers", _nvlink_peers(r, count) if active else [])
    r.check_lost()
    if failure is not None:
        per_link: Any = failure
    elif not links:
        per_link = Unavailable("not_supported", "the GPU has no NVLink links")
    else:
        per_link = nvlink_link_errors(r, active)
    r.put("nvlink_errors", _nvlink_errors(per_link))
    r.put("nvlink_link_errors", per_link)
    r.check_lost()

    _fabric(r)

    r.field("compute_mode", "nvmlDeviceGetComputeMode",
            convert=lambda v: COMPUTE_MODES.get(int(v), f"unknown_{int(v)}"))

    affinity = r.call("nvmlDeviceGetCpuAffinityWithinScope", cpu_words, NVML_AFFINITY_SCOPE_NODE)
    if isinstance(affinity, Unavailable) and r.q.missing_function:
        affinity = r.call("nvmlDeviceGetCpuAffinity", cpu_words)
    r.put("cpu_affinity", converted(affinity, mask_to_ids, "nvmlDeviceGetCpuAffinity"))
    r.check_lost()
    r.field("memory_affinity", "nvmlDeviceGetMemoryAffinity", node_words, NVML_AFFINITY_SCOPE_NODE,
            convert=mask_to_ids)
    r.field("numa_node_id", "nvmlDeviceGetNumaNodeId", convert=int)
    r.field("utilization_gpu_pct", "nvmlDeviceGetUtilizationRates", convert=lambda u: int(u.gpu))
    r.field("processes", "nvmlDeviceGetComputeRunningProcesses", convert=len)


def _read_gpu(nv: Any, sink: Sink, index: int, cpu_words: int, node_words: int, count: int) -> None:
    try:
        _read_one_gpu(Query(nv, sink), sink, index, cpu_words, node_words, count)
    except Exception as exc:  # a bug here must not hide the other GPUs
        sink.crashed(f"reading GPU {index}: {type(exc).__name__}: {exc}")
    sink.gpu_done(index)


def _read_one_gpu(q: Query, sink: Sink, index: int, cpu_words: int, node_words: int, count: int) -> None:
    sink.gpu(index, "lost", False)
    handle = q.call("nvmlDeviceGetHandleByIndex", index, gpu=index)
    if isinstance(handle, Unavailable):
        sink.gpu(index, "lost", True)
        skipped = Unavailable(handle.reason, f"no NVML handle for GPU {index}: {handle.detail}")
        for key in GPU_FIELDS:
            sink.gpu(index, key, skipped)
        return
    r = GpuReader(q, sink, index, handle)
    try:
        read_gpu_fields(r, cpu_words, node_words, count)
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
    q = Query(nv, sink)
    sink.calling("nvmlInit", None)
    try:
        nv.nvmlInit()
    except q.error_class as exc:
        code = getattr(exc, "value", None)
        code = code if isinstance(code, int) else None
        status, reason, advice = INIT_FAILURES.get(code or -1, ("error", "error", ""))
        text = failure_text("nvmlInit", code, exception_text(exc))
        sink.init_failed(status, text, reason, f"{text}: {advice}" if advice else text)
        return
    except Exception as exc:
        text = f"nvmlInit raised {type(exc).__name__}: {exc}"
        sink.init_failed("error", text, "error", text)
        return
    sink.system(
        "driver_version", converted(q.call("nvmlSystemGetDriverVersion"), as_text, "nvmlSystemGetDriverVersion")
    )
    sink.system(
        "cuda_driver_version",
        converted(q.call("nvmlSystemGetCudaDriverVersion"), _cuda_version, "nvmlSystemGetCudaDriverVersion"),
    )
    sink.system("nvml_version", converted(q.call("nvmlSystemGetNVMLVersion"), as_text, "nvmlSystemGetNVMLVersion"))
    count = converted(q.call("nvmlDeviceGetCount"), int, "nvmlDeviceGetCount")
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
