"""The GPU tier list: spec rows sorted by a metric, grouped into tiers, this machine's GPUs marked,
and (with a workload) how many of each card the workload needs.

Tiers halve: S holds the cards with at least half the best card's value, A at least a quarter,
B an eighth, C a sixteenth, D the rest. So a tier is a factor of two, whatever the metric.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from .gpu_specs import MachineGpu, tensor16
from .workload import GPU_COUNTS, Estimate

TIER_NAMES = ("S", "A", "B", "C", "D")


def _num(row: Mapping[str, Any], key: str) -> float | None:
    value = row.get(key)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _per_watt(row: Mapping[str, Any]) -> float | None:
    rate, watts = tensor16(row), _num(row, "tdp_w")
    return rate / watts if rate is not None and watts else None


def _per_kusd(row: Mapping[str, Any]) -> float | None:
    rate, price = tensor16(row), _num(row, "launch_price_usd")
    return rate / (price / 1000.0) if rate is not None and price else None


@dataclass(frozen=True)
class SortKey:
    name: str
    title: str
    unit: str
    value: Callable[[Mapping[str, Any]], float | None]


SORT_KEYS: dict[str, SortKey] = {
    "fp16": SortKey("fp16", "dense FP16 tensor TFLOPS", "TFLOPS", lambda r: _num(r, "fp16_tflops")),
    "bf16": SortKey("bf16", "dense BF16 tensor TFLOPS", "TFLOPS", lambda r: _num(r, "bf16_tflops")),
    "memory": SortKey("memory", "memory", "GB", lambda r: _num(r, "memory_gb")),
    "bandwidth": SortKey("bandwidth", "memory bandwidth", "GB/s", lambda r: _num(r, "memory_bandwidth_gbs")),
    "perf-per-watt": SortKey(
        "perf-per-watt", "dense 16-bit tensor TFLOPS per watt of TDP (BF16, else FP16)", "TFLOPS/W", _per_watt
    ),
    "perf-per-dollar": SortKey(
        "perf-per-dollar",
        "dense 16-bit tensor TFLOPS per $1000 of launch price (cards with a public price only)",
        "TFLOPS/k$",
        _per_kusd,
    ),
}


@dataclass
class Fit:
    """How many of a card a workload needs."""

    capacity_gib: float
    gpus: int | None  # None: more than the largest count considered
    per_gpu_gib: float  # the need per GPU at that count (at the largest count when it does not fit)
    note: str = ""  # e.g. the card has no tensor math in the workload's precision

    def to_json(self) -> dict[str, Any]:
        return {
            "capacity_gib": round(self.capacity_gib, 1),
            "gpus": self.gpus,
            "per_gpu_gib": round(self.per_gpu_gib, 1),
            "note": self.note or None,
        }

    def words(self) -> str:
        if self.gpus is None:
            text = f"no: >{GPU_COUNTS[-1]} GPUs"
        else:
            need = f"{self.per_gpu_gib:,.0f}/{self.capacity_gib:,.0f} GiB"
            text = f"{self.gpus} GPU{'s' if self.gpus > 1 else ''} ({need})"
        return f"{text}; {self.note}" if self.note else text


# The rate field that says a card computes natively in a workload precision.
PRECISION_FIELD = {"fp8": "fp8_tflops", "bf16": "bf16_tflops", "fp16": "fp16_tflops", "tf32": "tf32_tflops"}


def precision_note(row: Mapping[str, Any], precision: str) -> str:
    """Why a card that holds the workload may still run it poorly: no tensor rate in that precision."""
    field_name = PRECISION_FIELD.get(precision)
    if field_name and _num(row, field_name) is None:
        return f"no {precision.upper()} tensor figure (memory fit only)"
    return ""


# The other 16-bit tensor rate, for a card that has a figure in one and not in the sort's (Gaudi
# publishes BF16 only): the chart names it rather than saying the card has no figure at all.
OTHER_16BIT = {"fp16": "bf16", "bf16": "fp16"}


def other_rate(sort: str, row: Mapping[str, Any]) -> tuple[str, float] | None:
    other = OTHER_16BIT.get(sort)
    value = _num(row, f"{other}_tflops") if other else None
    return (other, value) if other and value is not None else None


@dataclass
class TierRow:
    id: str
    row: dict[str, Any]
    value: float | None
    tier: str | None = None
    local: list[MachineGpu] = field(default_factory=list)
    fit: Fit | None = None


@dataclass
class TierList:
    sort: SortKey
    rows: list[TierRow]
    machine: list[MachineGpu]
    estimate: Estimate | None = None
    hidden: list[TierRow] = field(default_factory=list)  # rows a workload filter left out
    table: dict[str, Any] = field(default_factory=dict)

    @property
    def machine_fit(self) -> dict[str, Any] | None:
        """Whether this machine's GPUs (of the first matched kind, all of them) hold the workload."""
        if self.estimate is None:
            return None
        matched = [g for g in self.machine if g.spec_id]
        if not matched:
            return None
        spec_id = matched[0].spec_id
        count = sum(1 for g in matched if g.spec_id == spec_id)
        row = self.table.get("rows", {}).get(spec_id, {})
        capacity = capacity_gib(row, matched[0])
        counts = tuple(n for n in GPU_COUNTS if n <= count) or (1,)
        need = self.estimate.gpus_needed(capacity, counts)
        return {
            "spec_id": spec_id,
            "gpus_here": count,
            "capacity_gib": round(capacity, 1),
            "fits": need is not None,
            "gpus_needed": need,
            "per_gpu_gib": round(self.estimate.per_gpu_gib(need or counts[-1]), 1),
        }


def capacity_gib(row: Mapping[str, Any], local: MachineGpu | None = None) -> float:
    """Memory one device offers: what NVML reports for a GPU of this machine, else the datasheet size
    (read as GiB: NVML shows 79.6 GiB for an "80 GB" H100) divided among the package's devices."""
    if local is not None and isinstance(local.memory_bytes, int) and local.memory_bytes > 0:
        return local.memory_bytes / float(1 << 30)
    per_package = row.get("devices_per_package") or 1
    return float(row.get("memory_gb") or 0) / float(per_package)


def assign_tiers(rows: list[TierRow]) -> None:
    best = max((r.value for r in rows if r.value is not None and r.value > 0), default=None)
    for r in rows:
        if r.value is None or best is None or r.value <= 0:
            r.tier = None
            continue
        ratio = r.value / best
        r.tier = TIER_NAMES[-1]
        for i, name in enumerate(TIER_NAMES[:-1]):
            if ratio >= 0.5 ** (i + 1):
                r.tier = name
                break


def tier_list(
    table: Mapping[str, Any],
    sort: str = "fp16",
    machine: list[MachineGpu] | None = None,
    estimate: Estimate | None = None,
    show_all: bool = False,
    vendors: tuple[str, ...] = (),
) -> TierList:
    if sort not in SORT_KEYS:
        raise ValueError(f"unknown sort {sort!r}")
    key = SORT_KEYS[sort]
    machine = machine or []
    rows: list[TierRow] = []
    for spec_id, row in table["rows"].items():
        if vendors and row.get("vendor") not in vendors:
            continue
        tier_row = TierRow(spec_id, dict(row), key.value(row))
        tier_row.local = [g for g in machine if g.spec_id == spec_id]
        if estimate is not None:
            local = tier_row.local[0] if tier_row.local else None
            cap = capacity_gib(row, local)
            need = estimate.gpus_needed(cap)
            note = precision_note(row, estimate.workload.precision)
            tier_row.fit = Fit(cap, need, estimate.per_gpu_gib(need or GPU_COUNTS[-1]), note)
        rows.append(tier_row)
    # Unknown values last; ties broken by name so the order is stable.
    rows.sort(key=lambda r: (r.value is None, -(r.value or 0.0), str(r.row.get("name", r.id))))
    assign_tiers(rows)
    hidden: list[TierRow] = []
    if estimate is not None and not show_all:
        hidden = [r for r in rows if r.fit is not None and r.fit.gpus is None and not r.local]
        rows = [r for r in rows if r not in hidden]
    return TierList(key, rows, machine, estimate, hidden, dict(table))
