"""The GPU spec table (rules/data/gpu_specs.yaml) and which of its rows this machine's GPUs are.

A GPU is matched by its PCI vendor:device id first (sysfs, else NVML's combined id), then by the
NVML name, then, where one id covers several variants, by memory size. Facts only: a snapshot or
a fixture root gives the match for that machine.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping

from ..model.gpus import gpus_of
from ..model.spec_match import match_row, pci_id_of

# Dense rate fields, in the order a table shows them.
RATE_FIELDS = ("fp32_tflops", "tf32_tflops", "fp16_tflops", "bf16_tflops", "fp8_tflops")
SPARSE_SUFFIX = "_sparse"

class SpecTableError(Exception):
    """The spec table cannot be read or does not have the expected shape."""


def table_path(name: str) -> Path:
    from ..tables import builtin_rules_dir

    return builtin_rules_dir() / "data" / f"{name}.yaml"


def specs_path() -> Path:
    return table_path("gpu_specs")


@lru_cache(maxsize=8)
def _load(path: str) -> dict[str, Any]:
    from ..inputs import InputError, load_yaml_file
    from ..schemas import validate

    try:
        data = load_yaml_file(Path(path), "data table")
    except InputError as exc:
        raise SpecTableError(str(exc)) from None
    if isinstance(data, dict) and not isinstance(data.get("retrieved"), str) and data.get("retrieved") is not None:
        data["retrieved"] = str(data["retrieved"])
    problem = validate("table", data)
    if problem:
        raise SpecTableError(f"{path}: {problem}")
    rows = {str(k): dict(v) for k, v in data["rows"].items()}
    for key, row in rows.items():
        row["id"] = key
    return {**data, "rows": rows}


def load_specs(path: str | Path | None = None) -> dict[str, Any]:
    """The table: {name, source, retrieved, notes, rows: {id: row (with "id")}}."""
    return _load(str(path or specs_path()))


def row_for(spec_id: str, table: Mapping[str, Any] | None = None) -> dict[str, Any] | None:
    rows = (table or load_specs())["rows"]
    row = rows.get(spec_id)
    return dict(row) if row is not None else None


def tensor16(row: Mapping[str, Any]) -> float | None:
    """The card's dense 16-bit tensor rate: BF16 where it has it, else FP16 (V100, T4)."""
    for key in ("bf16_tflops", "fp16_tflops"):
        value = row.get(key)
        if isinstance(value, (int, float)):
            return float(value)
    return None


def pcie_link_gbs(gen: Any, width: Any = 16) -> float | None:
    """Per-direction ceiling of a PCIe link in GB/s, from rules/data/pcie_gen_speeds.yaml."""
    if not isinstance(gen, int) or not isinstance(width, int) or isinstance(gen, bool):
        return None
    row = _load(str(table_path("pcie_gen_speeds")))["rows"].get(str(gen))
    per_lane = row.get("per_lane_gbps") if isinstance(row, Mapping) else None
    if not isinstance(per_lane, (int, float)):
        return None
    return round(float(per_lane) * width, 1)


@dataclass
class MachineGpu:
    """One GPU of the machine as seen through the facts, and the spec row it matched."""

    label: str
    index: int | None
    bus_id: str | None
    name: str | None
    pci_id: str | None
    memory_bytes: int | None
    spec_id: str | None = None
    matched_by: str = ""
    candidates: list[str] = field(default_factory=list)
    uuid: str | None = None


def pci_name(pci_id: str | None) -> str | None:
    """The product name of an AMD GPU or an Ascend NPU by its "vvvv:dddd" PCI id, from
    rules/data/accelerator_pci_ids.yaml (None: not listed; NVIDIA GPUs are NVML's to name)."""
    if not pci_id:
        return None
    row = _load(str(table_path("accelerator_pci_ids")))["rows"].get(pci_id)
    name = row.get("name") if isinstance(row, Mapping) else None
    return name if isinstance(name, str) else None


def machine_gpus(facts: Mapping[str, Any], table: Mapping[str, Any] | None = None) -> list[MachineGpu]:
    """This machine's GPUs (NVML and sysfs joined by bus id), each matched to a spec row where
    possible. A GPU NVML does not name (AMD, an Ascend NPU) is named by its PCI id."""
    rows = (table or load_specs())["rows"]
    out: list[MachineGpu] = []
    for view in gpus_of(facts):
        pci_id = pci_id_of(view.pci, view.reading("pci_device_id"))
        gpu = MachineGpu(
            label=view.label,
            index=view.index if isinstance(view.index, int) else None,
            bus_id=view.bus_id if isinstance(view.bus_id, str) else None,
            name=view.name if isinstance(view.name, str) else (pci_name(pci_id) if view.vendor != "nvidia" else None),
            pci_id=pci_id,
            memory_bytes=view.memory_total_bytes if isinstance(view.memory_total_bytes, int) else None,
            uuid=view.uuid if isinstance(view.uuid, str) else None,
        )
        gpu.spec_id, gpu.matched_by, gpu.candidates = match_row(rows, gpu.pci_id, gpu.name, gpu.memory_bytes)
        out.append(gpu)
    return out
