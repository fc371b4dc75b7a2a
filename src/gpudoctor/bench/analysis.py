"""The snapshot's `bench` section from a worker run: each figure beside its datasheet value
(efficiency %) and beside the median of the node's other GPUs of the same kind (vs peers %).

Facts only: the GPUs are joined to the snapshot's GPUs by PCI bus id, the datasheet row comes
from rules/data/gpu_specs.yaml. Judging (is 62 % of the peers bad?) is left to
rules/performance.yaml.
"""

from __future__ import annotations

import math
import statistics
from datetime import datetime, timezone
from typing import Any, Mapping

from ..advice.gpu_specs import MachineGpu, load_specs, machine_gpus, pcie_link_gbs
from ..facts import Unavailable
from ..model.bus_ids import normalise_bus_id
from ..model.gpus import match_gpu
from ..model.spec_match import match_row
from .runner import BenchRun

# test name → (unit, the datasheet field its spec comes from)
GPU_TESTS: dict[str, tuple[str, str | None]] = {
    "matmul_fp32": ("TFLOP/s", "fp32_tflops"),
    "matmul_tf32": ("TFLOP/s", "tf32_tflops"),
    "matmul_fp16": ("TFLOP/s", "fp16_tflops"),
    "matmul_bf16": ("TFLOP/s", "bf16_tflops"),
    "matmul_fp8": ("TFLOP/s", "fp8_tflops"),
    "matmul_bf16_unaligned": ("TFLOP/s", "bf16_tflops"),
    "copy": ("GB/s", "memory_bandwidth_gbs"),
    "h2d": ("GB/s", None),  # the card's PCIe generation at x16
    "d2h": ("GB/s", None),
}
QUICK_SKIPS = {"matmul_bf16_unaligned"}  # measured by --full only
SPEEDUPS = {"tf32": "matmul_tf32", "fp16": "matmul_fp16", "bf16": "matmul_bf16", "fp8": "matmul_fp8"}
METRIC_KEYS = ("value", "unit", "n", "bytes", "repeats", "inner", "ms", "spread_pct")


def _missing(run: BenchRun, test: str) -> Unavailable:
    if run.status == "timeout":
        return Unavailable("timeout", f"not measured: {run.error}")
    if run.status != "ok":
        return Unavailable("error", f"not measured: {run.error}")
    return Unavailable("error", f"the worker reported no result for {test}")


def metric_from(result: Mapping[str, Any] | None, run: BenchRun, test: str) -> Any:
    """A worker result as a metric dict, or an Unavailable saying why there is none."""
    if result is None:
        return _missing(run, test)
    if "unsupported" in result:
        return Unavailable("not_supported", str(result["unsupported"]))
    if "error" in result:
        return Unavailable("error", str(result["error"]))
    value = result.get("value")
    if not isinstance(value, (int, float)) or isinstance(value, bool) or value != value:
        return Unavailable("error", f"no number in the result of {test}")
    metric = {k: result[k] for k in METRIC_KEYS if k in result and result[k] is not None}
    for key in ("value", "ms", "spread_pct"):
        if isinstance(metric.get(key), float):
            metric[key] = _significant(metric[key])
    return metric


def _significant(value: float, digits: int = 5) -> float:
    """Rounded to a few significant digits: 784.1234 → 784.12, 0.0040105 → 0.0040105."""
    if value == 0 or value != value:
        return value
    return round(value, max(0, digits - 1 - int(math.floor(math.log10(abs(value))))))


def spec_value(row: Mapping[str, Any] | None, test: str) -> Any:
    """The datasheet figure one device should reach in this test, or why there is none."""
    if row is None:
        return Unavailable("not_found", "this GPU is not in rules/data/gpu_specs.yaml")
    per_package = float(row.get("devices_per_package") or 1)
    if test in ("h2d", "d2h"):
        ceiling = pcie_link_gbs(row.get("pcie_gen"), 16)
        if ceiling is None:
            return Unavailable("not_found", f"no PCIe generation for {row.get('id')}")
        return ceiling
    field_name = GPU_TESTS[test][1]
    value = row.get(field_name) if field_name else None
    if not isinstance(value, (int, float)):
        return Unavailable("not_found", f"the datasheet of {row.get('name')} gives no {field_name}")
    return round(float(value) / per_package, 2)


def _pct(a: float, b: float) -> float:
    return round(100.0 * a / b, 1) if b else 0.0


def join_devices(
    devices: list[Mapping[str, Any]], machine: list[MachineGpu], start: Mapping[str, Any]
) -> dict[int, MachineGpu | None]:
    """Worker device index → the snapshot's GPU: by PCI bus id; by index only when the worker saw
    every GPU in PCI order (no CUDA_VISIBLE_DEVICES, CUDA_DEVICE_ORDER=PCI_BUS_ID)."""
    index_ok = not start.get("cuda_visible_devices") and start.get("cuda_device_order") == "PCI_BUS_ID"
    out: dict[int, MachineGpu | None] = {}
    for dev in devices:
        idx = dev.get("index")
        if not isinstance(idx, int):
            continue
        out[idx] = match_gpu(
            machine, bus_id=dev.get("bus_id"), index=idx, index_known=index_ok and dev.get("device_type") != "cpu"
        )
    return out


def build_section(
    run: BenchRun,
    facts: Mapping[str, Any],
    table: Mapping[str, Any] | None = None,
    collected_at: str | None = None,
) -> dict[str, Any]:
    """The `bench` section of the snapshot (Unavailable markers where something was not measured)."""
    table = table or load_specs()
    rows = table["rows"]
    start = run.start
    devices = [d for d in start.get("devices", []) if isinstance(d, Mapping)]
    machine = machine_gpus(facts, table)
    joined = join_devices(devices, machine, start)
    results: dict[tuple[Any, str], Mapping[str, Any]] = {(r.get("gpu"), str(r.get("test"))): r for r in run.results}

    section: dict[str, Any] = {
        "collected_at": collected_at or datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "mode": run.mode,
        "status": run.status,
        "error": run.error,
        "duration_s": run.duration_s,
    }
    for key in ("torch_version", "cuda_version", "hip_version", "python", "float32_matmul_precision_default"):
        value = start.get(key)
        if key in ("cuda_version", "hip_version") and key in start and value is None:
            section[key] = None  # torch.version.cuda is None in a ROCm or CPU build
            continue
        section[key] = value if isinstance(value, str) else Unavailable("not_found", f"the worker did not report {key}")
    tf32 = start.get("tf32_matmul_default")
    section["tf32_matmul_default"] = tf32 if isinstance(tf32, bool) else Unavailable("not_found", "not reported")

    gpus: list[dict[str, Any]] = []
    for dev in devices:
        idx = dev.get("index")
        if not isinstance(idx, int):
            continue
        local = joined.get(idx)
        spec_id = local.spec_id if local is not None else None
        if spec_id is None:
            memory = dev.get("memory_total_bytes")
            spec_id, _, _ = match_row(rows, None, dev.get("name"), memory if isinstance(memory, int) else None)
        row = rows.get(spec_id) if spec_id else None
        entry: dict[str, Any] = {
            "index": idx,
            "bus_id": normalise_bus_id(dev["bus_id"])
            if isinstance(dev.get("bus_id"), str)
            else (
                local.bus_id
                if local is not None and local.bus_id
                else Unavailable("not_found", "torch gave no PCI bus id")
            ),
            "name": dev.get("name") if isinstance(dev.get("name"), str) else Unavailable("not_found", "no name"),
            "spec_id": spec_id if spec_id else Unavailable("not_found", "not in rules/data/gpu_specs.yaml"),
            "nvml_index": local.index
            if local is not None and local.index is not None
            else Unavailable("not_found", "not joined to an NVML GPU"),
            "compute_capability": dev.get("compute_capability")
            if isinstance(dev.get("compute_capability"), str)
            else Unavailable("not_found", "not reported"),
        }
        if isinstance(dev.get("memory_total_bytes"), int):
            entry["memory_total_bytes"] = dev["memory_total_bytes"]
        if "error" in dev:
            entry["error"] = str(dev["error"])
        for test in GPU_TESTS:
            if test in QUICK_SKIPS and run.mode != "full" and (idx, test) not in results:
                entry[test] = Unavailable("not_supported", "measured by gpudoctor bench --full")
                continue
            metric = metric_from(results.get((idx, test)), run, test)
            if isinstance(metric, dict):
                spec = spec_value(row, test)
                metric["spec"] = spec
                if isinstance(spec, (int, float)) and spec > 0:
                    metric["efficiency_pct"] = _pct(metric["value"], spec)
                else:
                    metric["efficiency_pct"] = spec
            entry[test] = metric
        load = run.loads.get(idx)
        if load:
            entry["under_load"] = {k: v for k, v in load.items() if k != "samples"} | {
                "samples": load.get("samples", 0)
            }
        else:
            why = next((str(n.get("nvml_error")) for n in run.notes if n.get("nvml_error")), "")
            entry["under_load"] = Unavailable(
                "not_found",
                f"no NVML readings under load ({why})"
                if why
                else "no NVML readings under load (pynvml not importable by the target Python, or not an NVIDIA GPU)",
            )
        gpus.append(entry)

    _add_peers(gpus)
    for entry in gpus:
        _add_ratios(entry)
    section["gpus"] = gpus
    section["p2p"] = _links(run, gpus, rows)
    section["allreduce"] = _allreduce(run, gpus)
    return section


def _kind(entry: Mapping[str, Any]) -> Any:
    spec = entry.get("spec_id")
    return spec if isinstance(spec, str) else entry.get("name")


def _add_peers(gpus: list[dict[str, Any]]) -> None:
    """Each metric beside the median of the other GPUs of the same kind (spec row, else name)."""
    for entry in gpus:
        peers = [g for g in gpus if g is not entry and _kind(g) == _kind(entry)]
        for test in GPU_TESTS:
            metric = entry.get(test)
            if not isinstance(metric, dict):
                continue
            values = [g[test]["value"] for g in peers if isinstance(g.get(test), dict)]
            if not values:
                why = "no other GPU of this kind was measured" if not peers else "no other GPU of this kind measured it"
                metric["peer_median"] = Unavailable("not_supported", why)
                metric["vs_peers_pct"] = Unavailable("not_supported", why)
                continue
            mid = statistics.median(values)
            metric["peer_median"] = round(mid, 2)
            metric["vs_peers_pct"] = _pct(metric["value"], mid)


def _add_ratios(entry: dict[str, Any]) -> None:
    fp32 = entry.get("matmul_fp32")
    for name, test in SPEEDUPS.items():
        other = entry.get(test)
        key = f"{name}_speedup_vs_fp32"
        if isinstance(fp32, dict) and isinstance(other, dict) and fp32["value"] > 0:
            entry[key] = round(other["value"] / fp32["value"], 2)
        else:
            entry[key] = Unavailable("not_supported", f"{test} or matmul_fp32 was not measured")
    unaligned, aligned = entry.get("matmul_bf16_unaligned"), entry.get("matmul_bf16")
    if isinstance(unaligned, dict):
        if isinstance(aligned, dict) and aligned["value"] > 0:
            unaligned["vs_aligned_pct"] = _pct(unaligned["value"], aligned["value"])
        else:
            unaligned["vs_aligned_pct"] = Unavailable("not_supported", "matmul_bf16 was not measured")


def _links(run: BenchRun, gpus: list[dict[str, Any]], rows: Mapping[str, Any]) -> Any:
    by_index = {g["index"]: g for g in gpus}
    links = []
    for result in run.results:
        test = str(result.get("test", ""))
        if not test.startswith("p2p_"):
            continue
        try:
            _, src_text, dst_text = test.split("_")
            src, dst = int(src_text), int(dst_text)
        except ValueError:
            continue
        metric = metric_from(result, run, test)
        src_entry = by_index.get(src, {})
        spec_id = src_entry.get("spec_id")
        row = rows.get(spec_id) if isinstance(spec_id, str) else None
        if isinstance(metric, dict):
            if row is None:
                metric["spec"] = Unavailable("not_found", "this GPU is not in rules/data/gpu_specs.yaml")
            elif isinstance(row.get("gpu_link_gbs"), (int, float)):
                # datasheets give both directions together; one copy uses one direction
                metric["spec"] = round(float(row["gpu_link_gbs"]) / 2.0, 1)
            else:
                metric["spec"] = pcie_link_gbs(row.get("pcie_gen"), 16) or Unavailable("not_found", "no link figure")
            spec = metric["spec"]
            metric["efficiency_pct"] = _pct(metric["value"], spec) if isinstance(spec, (int, float)) else spec
        access = result.get("peer_access")
        links.append(
            {
                "src": src,
                "dst": dst,
                "src_bus_id": src_entry.get("bus_id", Unavailable("not_found", "unknown device")),
                "dst_bus_id": by_index.get(dst, {}).get("bus_id", Unavailable("not_found", "unknown device")),
                "peer_access": access if isinstance(access, bool) else Unavailable("not_found", "not reported"),
                "bandwidth": metric,
            }
        )
    if not links and len(gpus) > 1:
        return Unavailable("timeout" if run.status == "timeout" else "error", f"no peer copies measured: {run.error}")
    return links


def _allreduce(run: BenchRun, gpus: list[dict[str, Any]]) -> Any:
    if len(gpus) < 2:
        return Unavailable("not_supported", "an all-reduce needs two or more GPUs")
    result = next((r for r in run.results if r.get("test") == "allreduce"), None)
    metric = metric_from(result, run, "allreduce")
    if isinstance(metric, dict) and result is not None:
        for key in ("algbw_gbs", "gpus"):
            if isinstance(result.get(key), (int, float)):
                metric[key] = round(result[key], 2) if isinstance(result[key], float) else result[key]
    return metric
