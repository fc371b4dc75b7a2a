"""The tier chart's one definition: what `tiers --plot` draws, whichever the format.

The SVG writer and the matplotlib (PNG) writer in tiers_plot.py both draw this: the title and
subtitle lines, the legend, one bar per card in its tier's band with its value label, the memory
bar and its label, the axis ticks and the source line. Geometry (pixels, inches) is the writer's;
what is shown is decided here once, so the two outputs cannot drift apart. Needs no matplotlib.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..advice.tiers import TierList, TierRow, other_rate

VENDOR_COLOURS = {
    "nvidia": "#76b900",
    "amd": "#e4572e",
    "intel": "#2e86ab",
    "huawei": "#a23b72",
}
OTHER_COLOUR = "#888888"
MEMORY_COLOUR = "#5b6c8f"
TIER_BANDS = {"S": "#fff4d6", "A": "#f1f7e6", "B": "#e8f1fa", "C": "#f5eef8", "D": "#f2f2f2"}
NO_BAND = "#ffffff"
PALE = 0.35  # the opacity of a card that needs several GPUs for the workload, or cannot hold it


@dataclass(frozen=True)
class Bar:
    """One card's row."""

    name: str
    tier: str | None
    first_of_tier: bool  # the row that carries the tier's letter
    band: str  # the tier band's colour
    value: float | None  # None: no figure in the sort metric (label says why)
    colour: str
    pale: bool
    local: bool  # one of this machine's GPUs: outlined, name in bold
    label: str  # beside the bar, or in its place when value is None
    memory_gb: float | None
    memory_label: str


@dataclass(frozen=True)
class Chart:
    title: str
    subtitles: tuple[str, ...]
    legend: tuple[tuple[str, str], ...]  # (label, colour); "this machine" is drawn as an outline
    unit: str
    ticks: tuple[float, ...]  # value axis, from 0; the last is the axis' end
    memory_top: float
    bars: tuple[Bar, ...]
    source: str


def nice_ticks(top: float, count: int = 5) -> list[float]:
    if top <= 0:
        return [0.0]
    raw = top / count
    magnitude = 10 ** math.floor(math.log10(raw))
    step = min((m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw), default=raw)
    ticks = [0.0]
    while ticks[-1] < top * 0.9999:
        ticks.append(ticks[-1] + step)
    return ticks


def label_value(value: float | None) -> str:
    if value is None:
        return "no figure"
    if value >= 100:
        return f"{value:,.0f}"
    return f"{value:,.1f}" if value >= 10 else f"{value:,.2f}"


def _fit_note(r: TierRow) -> str:
    if r.fit is None:
        return ""
    if r.fit.gpus is None:
        return "does not fit in 8"
    return "fits on 1" if r.fit.gpus == 1 else f"needs {r.fit.gpus}"


def _label(tl: TierList, r: TierRow) -> str:
    fit_note = _fit_note(r)
    if r.value is None:
        # a card with a BF16 figure and none in FP16 (Gaudi) says so, rather than "no published figure"
        other = other_rate(tl.sort.name, r.row)
        if other is not None:
            name, value = other
            note = f"no {tl.sort.name.upper()} figure; {name.upper()} {label_value(value)} (--sort {name})"
        else:
            note = "no published figure"
        return f"{note}  ({fit_note})" if fit_note else note
    note = label_value(r.value)
    if fit_note:
        note += f"  ({fit_note})"
    if r.local:
        note += "  ◀ this machine"
    return note


def _legend_name(vendor: str) -> str:
    return vendor.upper() if vendor == "amd" else vendor.capitalize()


def chart(tl: TierList) -> Chart:
    values = [r.value for r in tl.rows if r.value is not None]
    ticks = nice_ticks(max(values) if values else 1.0)
    memories = [float(r.row["memory_gb"]) for r in tl.rows if isinstance(r.row.get("memory_gb"), (int, float))]
    subtitles = [
        "Datasheet peaks; tensor rates dense (not sparse). Tiers halve: S ≥ ½ of the best, A ≥ ¼, B ≥ ⅛, C ≥ 1/16."
    ]
    if tl.estimate is not None:
        subtitles.append(f"Workload: {tl.estimate.workload.describe()} (pale: needs more than 1 GPU)")
    bars: list[Bar] = []
    seen: set[str] = set()
    for r in tl.rows:
        mem = r.row.get("memory_gb")
        memory = float(mem) if isinstance(mem, (int, float)) and not isinstance(mem, bool) else None
        bars.append(
            Bar(
                name=str(r.row.get("name", r.id)),
                tier=r.tier,
                first_of_tier=bool(r.tier) and r.tier not in seen,
                band=TIER_BANDS.get(r.tier or "", NO_BAND),
                value=r.value,
                colour=VENDOR_COLOURS.get(str(r.row.get("vendor")), OTHER_COLOUR),
                pale=r.fit is not None and r.fit.gpus != 1,
                local=bool(r.local),
                label=_label(tl, r),
                memory_gb=memory,
                memory_label=f"{memory:g}" if memory is not None else "",
            )
        )
        if r.tier:
            seen.add(r.tier)
    return Chart(
        title=f"GPU tier list — {tl.sort.title}",
        subtitles=tuple(subtitles),
        legend=tuple((_legend_name(v), c) for v, c in VENDOR_COLOURS.items()),
        unit=tl.sort.unit,
        ticks=tuple(ticks),
        memory_top=max(memories, default=1.0) or 1.0,
        bars=tuple(bars),
        source=f"Source: vendor datasheets (rules/data/gpu_specs.yaml, read {tl.table.get('retrieved', '?')})",
    )
