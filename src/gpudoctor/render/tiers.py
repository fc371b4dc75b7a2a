"""`gpudoctor tiers` output: the tier list as an aligned table or as JSON. Formatting only.

In the text, names from the facts (this machine's GPUs), the table and the command line go
through gpudoctor.escaping.printable."""

from __future__ import annotations

import json
from typing import Any, Callable

from ..advice.gpu_specs import RATE_FIELDS
from ..advice.tiers import TierList, TierRow
from ..escaping import printable
from .layout import fit_columns, left_out_note, wrap

Style = Callable[..., str]


def _plain(text: str, **_: Any) -> str:
    return text


def _fmt(value: Any, digits: int = 0) -> str:
    """Numbers as a table shows them: no decimals from 100 up, `digits` below (at least one under 10)."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return "—"
    if abs(value) >= 100 or (digits == 0 and abs(value) >= 10):
        return f"{value:,.0f}"
    return f"{value:,.{max(digits, 1)}f}" if abs(value) < 10 else f"{value:,.{digits}f}"


def _link(row: dict[str, Any]) -> str:
    name, gbs = row.get("gpu_link"), row.get("gpu_link_gbs")
    pcie = f"PCIe{row['pcie_gen']}" if isinstance(row.get("pcie_gen"), int) else "PCIe?"
    if not name:
        return pcie
    short = printable(name).replace(" bridge", "").replace("Infinity Fabric", "IF").replace("NVLink ", "NVLink")
    return f"{pcie} {short} {_fmt(gbs)}" if gbs else f"{pcie} {short}"


def _mark(r: TierRow) -> str:
    if not r.local:
        return ""
    if all(g.label.startswith("NPU ") for g in r.local):
        # Ascend NPUs, labelled "NPU n (bus id)" (model/gpus.py): their numbers
        return f"◀ this machine: NPU {', '.join(printable(g.label[4:].split(' ', 1)[0]) for g in r.local)}"
    idx = [str(g.index) if g.index is not None else printable(g.bus_id or "?") for g in r.local]
    return f"◀ this machine: GPU {', '.join(idx)}"


COLUMNS = (
    # header, width, align
    ("tier", 4, "<"),
    ("card", 30, "<"),
    ("memory", 12, "<"),
    ("BW GB/s", 8, ">"),
    ("FP32", 6, ">"),
    ("TF32", 6, ">"),
    ("FP16", 6, ">"),
    ("BF16", 6, ">"),
    ("FP8", 6, ">"),
    ("link GB/s", 24, "<"),
    ("TDP W", 6, ">"),
    ("launch $", 8, ">"),
)


def _cells(r: TierRow, extra: str | None) -> list[str]:
    row = r.row
    memory = f"{_fmt(row.get('memory_gb'))} {printable(row.get('memory_type') or '')}".strip()
    per_package = row.get("devices_per_package")
    if per_package and per_package > 1:
        memory += f" /{per_package}"
    cells = [
        printable(r.tier or "—"),
        printable(row.get("name", r.id))[:30],
        memory,
        _fmt(row.get("memory_bandwidth_gbs")),
        *[_fmt(row.get(k), 1) for k in RATE_FIELDS],
        _link(row),
        _fmt(row.get("tdp_w")),
        _fmt(row.get("launch_price_usd")),
    ]
    if extra is not None:
        cells.append(extra)
    return cells


# Columns left out, first to last, while the table is wider than the output: the price and power
# (few rows have them), the non-tensor and TF32 rates, the link, bandwidth, FP8, BF16, memory.
# What remains at the narrowest is the tier, the card, FP16 and the sort's own column.
DROP_ORDER = ("launch $", "TDP W", "TF32", "FP32", "link GB/s", "BW GB/s", "FP8", "BF16", "memory")


_SORT_COLUMN = {"fp16": "FP16", "bf16": "BF16", "memory": "memory", "bandwidth": "BW GB/s"}


def render_text(tl: TierList, style: Style = _plain, origin: str = "", width: int = 100) -> str:
    """The tier list at `width` columns: prose wraps, the table leaves out columns (DROP_ORDER)
    until it fits, and the mark of this machine's rows goes on a line of its own where it would
    not fit beside its row."""
    lines: list[str] = []
    table = tl.table
    lines.extend(
        style(line, bold=True) for line in wrap(f"GPU tier list — sorted by {printable(tl.sort.title)}", width)
    )
    lines.extend(
        wrap(
            "Datasheet peaks. Tensor rates are DENSE (vendors' 'with sparsity' figures are 2x and kept apart); "
            "FP32 is the non-tensor rate.",
            width,
        )
    )
    lines.extend(wrap("Tiers halve: S >= 1/2 of the best card, A >= 1/4, B >= 1/8, C >= 1/16, D below.", width))
    columns = list(COLUMNS)
    extra_header = None
    if tl.sort.name in ("perf-per-watt", "perf-per-dollar"):
        extra_header = tl.sort.unit
    if tl.estimate is not None:
        extra_header = "fits on"
    if extra_header:
        columns.append((extra_header, 18, "<"))

    if tl.estimate is not None:
        est = tl.estimate
        lines.append("")
        lines.extend(
            style(line, bold=True) for line in wrap(printable(est.workload.describe()), width, "Workload: ", "  ")
        )
        lines.extend(wrap(printable(est.shape.describe()), width, "  assumed shape: ", "    "))
        for text in est.arithmetic():  # "label     formula": a continuation lines up with the formula
            lines.extend(wrap(printable(text), width, "  ", " " * 12))
        fit = tl.machine_fit
        if fit is not None:
            verdict = (
                f"fits on {fit['gpus_needed']} of its {fit['gpus_here']} GPU(s) ({fit['per_gpu_gib']:,.0f} of "
                f"{fit['capacity_gib']:,.0f} GiB each)"
                if fit["fits"]
                else f"does not fit on its {fit['gpus_here']} GPU(s) ({fit['per_gpu_gib']:,.0f} GiB needed per GPU, "
                f"{fit['capacity_gib']:,.0f} GiB each)"
            )
            lines.extend(
                style(line, bold=True)
                for line in wrap(f"This machine ({printable(fit['spec_id'])}): {verdict}", width, "  ", "    ")
            )
    lines.append("")

    rows: list[tuple[TierRow, list[str]]] = []
    for r in tl.rows:
        extra = None
        if tl.estimate is not None and r.fit is not None:
            extra = r.fit.words()
        elif extra_header:
            extra = _fmt(r.value, 1)
        rows.append((r, _cells(r, extra)))
    # a column is as wide as its widest cell (a long link name or workload fit is never cut)
    # (the workload or per-watt column last stays as declared: its text wraps under itself)
    columns = [
        (header, size if i == 12 else max([size] + [len(cells[i]) for _, cells in rows if i < len(cells)]), align)
        for i, (header, size, align) in enumerate(columns)
    ]
    shown = fit_columns(columns, width, DROP_ORDER, _SORT_COLUMN.get(tl.sort.name, ""))

    def fmt_row(cells: list[str]) -> str:
        parts = [f"{cells[i]:{columns[i][2]}{columns[i][1]}}" for i in shown]
        return "  ".join(parts).rstrip()

    lines.append(style(fmt_row([c[0] for c in columns]), bold=True))
    for r, cells in rows:
        text = fmt_row(cells)
        if len(text) > width and extra_header:
            lead = fmt_row(cells[:12] + [""]) if len(shown) > 1 else ""
            lead += " " * (sum(columns[i][1] + 2 for i in shown[:-1]) - len(lead))
            *above, text = wrap(cells[12], width, lead)
            lines.extend(above)
        mark = _mark(r)
        if mark and len(text) + 2 + len(mark) <= width:
            text = style(f"{text}  {mark}", bold=True, fg="green")
        elif mark:
            lines.append(style(text, bold=True, fg="green"))
            text = style(f"      {mark}", bold=True, fg="green")
        lines.append(text)
    left_out = [columns[i][0] for i in range(len(columns)) if i not in shown]
    lines.extend(left_out_note(left_out, width, "COLUMNS=200 or --format json"))
    if tl.hidden:
        names = ", ".join(printable(r.row.get("name", r.id)) for r in tl.hidden)
        lines.append("")
        lines.extend(
            wrap(f"Left out ({len(tl.hidden)}), more than 8 would be needed: {names} (--all shows them)", width)
        )
    unmatched = [g for g in tl.machine if not g.spec_id]
    matched = [g for g in tl.machine if g.spec_id]
    lines.append("")
    if matched:
        described = [
            printable(f"{g.label} {g.name or ''}") + f" → {printable(g.spec_id)} (by {printable(g.matched_by)})"
            for g in matched
        ]
        lines.extend(wrap("This machine: " + ", ".join(described), width))
    for g in unmatched:
        why = f"candidates {printable(', '.join(g.candidates))}" if g.candidates else "no row has its PCI id or name"
        lines.extend(
            wrap(
                f"This machine: {printable(g.label)} {printable(g.name or g.pci_id or '')} is not in the table ({why})",
                width,
            )
        )
    if not tl.machine:
        lines.extend(wrap(f"This machine: no GPUs found{f' ({printable(origin)})' if origin else ''}", width))
    sources = table.get("source")
    lines.extend(
        wrap(
            f"Figures from the vendors' datasheets (each row's source: --format json), "
            f"read {printable(table.get('retrieved', '?'))}; "
            f"table: rules/data/gpu_specs.yaml" + (f" ({len(sources)} sources)" if isinstance(sources, list) else ""),
            width,
        )
    )
    return "\n".join(lines) + "\n"


def render_json(tl: TierList, origin: str = "") -> str:
    rows = []
    for r in tl.rows + tl.hidden:
        item = dict(r.row)
        item["tier"] = r.tier
        item["sort_value"] = r.value
        item["this_machine"] = [g.index if g.index is not None else g.bus_id for g in r.local]
        item["fit"] = r.fit.to_json() if r.fit else None
        item["shown"] = r not in tl.hidden
        rows.append(item)
    doc = {
        "sort": tl.sort.name,
        "sort_title": tl.sort.title,
        "unit": tl.sort.unit,
        "table": {"source": tl.table.get("source"), "retrieved": tl.table.get("retrieved")},
        "facts_origin": origin,
        "machine": [
            {
                "index": g.index,
                "bus_id": g.bus_id,
                "name": g.name,
                "pci_id": g.pci_id,
                "memory_bytes": g.memory_bytes,
                "spec_id": g.spec_id,
                "matched_by": g.matched_by or None,
            }
            for g in tl.machine
        ],
        "workload": tl.estimate.to_json() if tl.estimate else None,
        "machine_fit": tl.machine_fit,
        "rows": rows,
    }
    return json.dumps(doc, indent=2) + "\n"
