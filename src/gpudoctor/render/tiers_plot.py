"""`gpudoctor tiers --plot`: the tier list as a chart.

SVG is written by hand (no dependency): one bar per card for the sort metric, tiers as bands, a
second bar for memory, vendor colours, this machine's GPUs outlined, and with a workload the cards
that need several GPUs (or cannot hold it) drawn pale with the count written on them. PNG uses
matplotlib when it is installed (the `plot` extra).
"""

from __future__ import annotations

import math
from typing import Any
from xml.sax.saxutils import escape

from ..advice.tiers import TIER_NAMES, TierList, TierRow

VENDOR_COLOURS = {
    "nvidia": "#76b900",
    "amd": "#e4572e",
    "intel": "#2e86ab",
    "huawei": "#a23b72",
}
OTHER_COLOUR = "#888888"
TIER_BANDS = {"S": "#fff4d6", "A": "#f1f7e6", "B": "#e8f1fa", "C": "#f5eef8", "D": "#f2f2f2"}


class PlotError(Exception):
    """The chart cannot be written in the requested format."""


def _colour(row: dict[str, Any]) -> str:
    return VENDOR_COLOURS.get(str(row.get("vendor")), OTHER_COLOUR)


def _nice_ticks(top: float, count: int = 5) -> list[float]:
    if top <= 0:
        return [0.0]
    raw = top / count
    magnitude = 10 ** math.floor(math.log10(raw))
    step = min((m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw), default=raw)
    ticks = [0.0]
    while ticks[-1] < top * 0.9999:
        ticks.append(ticks[-1] + step)
    return ticks


def _label_value(value: float | None) -> str:
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


def render_svg(tl: TierList) -> str:
    rows = tl.rows
    row_h, top, left = 24, 96, 300
    bar_w, gap, mem_w = 430, 190, 150
    width = left + bar_w + gap + mem_w + 40
    height = top + row_h * max(len(rows), 1) + 70
    values = [r.value for r in rows if r.value is not None]
    top_value = max(values) if values else 1.0
    ticks = _nice_ticks(top_value)
    scale_top = ticks[-1] if ticks[-1] > 0 else 1.0
    mem_top = max((float(r.row.get("memory_gb") or 0) for r in rows), default=1.0) or 1.0
    mem_x = left + bar_w + gap

    out: list[str] = []
    add = out.append
    add(
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="Helvetica, Arial, sans-serif" font-size="12">'
    )
    add(f'<rect x="0" y="0" width="{width}" height="{height}" fill="#ffffff"/>')
    title = f"GPU tier list — {tl.sort.title}"
    add(f'<text x="20" y="28" font-size="18" font-weight="bold">{escape(title)}</text>')
    sub = "Datasheet peaks; tensor rates dense (not sparse). Tiers halve: S ≥ ½ of the best, A ≥ ¼, B ≥ ⅛, C ≥ 1/16."
    add(f'<text x="20" y="48" fill="#444">{escape(sub)}</text>')
    if tl.estimate is not None:
        add(f'<text x="20" y="66" fill="#444">{escape("Workload: " + tl.estimate.workload.describe())}</text>')
    # legend
    lx = 20
    for vendor, colour in VENDOR_COLOURS.items():
        add(f'<rect x="{lx}" y="76" width="12" height="12" fill="{colour}"/>')
        add(f'<text x="{lx + 16}" y="86">{vendor.upper() if vendor in ("amd",) else vendor.capitalize()}</text>')
        lx += 90
    add(f'<rect x="{lx}" y="76" width="12" height="12" fill="none" stroke="#000" stroke-width="2.5"/>')
    add(f'<text x="{lx + 16}" y="86">this machine</text>')

    # tier bands
    for i, r in enumerate(rows):
        y = top + i * row_h
        band = TIER_BANDS.get(r.tier or "", "#ffffff")
        add(f'<rect x="0" y="{y}" width="{width}" height="{row_h}" fill="{band}"/>')
    # grid and axis labels
    for t in ticks:
        x = left + bar_w * t / scale_top
        add(f'<line x1="{x:.1f}" y1="{top - 4}" x2="{x:.1f}" y2="{top + row_h * len(rows)}" stroke="#cccccc"/>')
        add(f'<text x="{x:.1f}" y="{top + row_h * len(rows) + 16}" text-anchor="middle" fill="#555">{t:g}</text>')
    add(
        f'<text x="{left + bar_w / 2}" y="{top + row_h * len(rows) + 34}" text-anchor="middle" fill="#333">'
        f"{escape(tl.sort.unit)}</text>"
    )
    add(f'<text x="{mem_x}" y="{top - 8}" fill="#333">memory (GB)</text>')

    seen_tiers: set[str] = set()
    for i, r in enumerate(rows):
        y = top + i * row_h
        cy = y + row_h / 2 + 4
        row = r.row
        if r.tier and r.tier not in seen_tiers:
            seen_tiers.add(r.tier)
            add(f'<text x="8" y="{cy}" font-weight="bold" font-size="14">{r.tier}</text>')
        name = str(row.get("name", r.id))
        weight = ' font-weight="bold"' if r.local else ""
        add(f'<text x="{left - 8}" y="{cy}" text-anchor="end"{weight}>{escape(name)}</text>')
        pale = r.fit is not None and r.fit.gpus != 1
        opacity = "0.35" if pale else "1"
        colour = _colour(row)
        if r.value is not None:
            w = max(1.0, bar_w * r.value / scale_top)
            stroke = ' stroke="#000000" stroke-width="2.5"' if r.local else ""
            add(
                f'<rect x="{left}" y="{y + 4}" width="{w:.1f}" height="{row_h - 8}" fill="{colour}" '
                f'fill-opacity="{opacity}"{stroke}/>'
            )
            note = _label_value(r.value)
            fit_note = _fit_note(r)
            if fit_note:
                note += f"  ({fit_note})"
            if r.local:
                note += "  ◀ this machine"
            add(f'<text x="{left + w + 6:.1f}" y="{cy}" fill="#222">{escape(note)}</text>')
        else:
            add(f'<text x="{left + 4}" y="{cy}" fill="#999">no published figure</text>')
        mem = row.get("memory_gb")
        if isinstance(mem, (int, float)):
            mw = max(1.0, mem_w * float(mem) / mem_top)
            add(
                f'<rect x="{mem_x}" y="{y + 6}" width="{mw:.1f}" height="{row_h - 12}" fill="#5b6c8f" '
                f'fill-opacity="{opacity}"/>'
            )
            add(f'<text x="{mem_x + mw + 4:.1f}" y="{cy}" fill="#222">{mem:g}</text>')
    foot = "Source: vendor datasheets (rules/data/gpu_specs.yaml, read " + str(tl.table.get("retrieved", "?")) + ")"
    add(f'<text x="20" y="{height - 10}" fill="#777" font-size="10">{escape(foot)}</text>')
    add("</svg>")
    return "\n".join(out) + "\n"


def render_png(tl: TierList, path: str) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise PlotError(
            "writing PNG needs matplotlib: pip install matplotlib (in a gpudoctor checkout: pip install '.[plot]'),"
            " or give a .svg file, which needs nothing"
        ) from None
    rows = tl.rows
    names = [str(r.row.get("name", r.id)) for r in rows][::-1]
    values = [r.value or 0.0 for r in rows][::-1]
    colours = [_colour(r.row) for r in rows][::-1]
    alphas = [0.35 if (r.fit is not None and r.fit.gpus != 1) else 1.0 for r in rows][::-1]
    fig_h = max(3.0, 0.3 * len(rows) + 1.5)
    fig, (ax, axm) = plt.subplots(1, 2, figsize=(13, fig_h), gridspec_kw={"width_ratios": [3, 1]}, sharey=True)
    bars = ax.barh(range(len(rows)), values, color=colours)
    for bar, alpha, r in zip(bars, alphas, rows[::-1]):
        bar.set_alpha(alpha)
        if r.local:
            bar.set_edgecolor("black")
            bar.set_linewidth(2.5)
        label = _label_value(r.value) + (f" ({_fit_note(r)})" if _fit_note(r) else "")
        label += "  ◀ this machine" if r.local else ""
        ax.text(bar.get_width(), bar.get_y() + bar.get_height() / 2, " " + label, va="center", fontsize=8)
    ax.set_xlim(0, max(values + [1.0]) * 1.32)  # room for the value labels and the tier letters
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels(names, fontsize=8)
    ax.set_xlabel(tl.sort.unit)
    ax.set_title(f"GPU tier list — {tl.sort.title}", loc="left", fontsize=11)
    axm.barh(range(len(rows)), [float(r.row.get("memory_gb") or 0) for r in rows][::-1], color="#5b6c8f")
    axm.set_xlabel("memory (GB)")
    reversed_rows = rows[::-1]
    for i, r in enumerate(reversed_rows):
        if i and r.tier != reversed_rows[i - 1].tier:
            ax.axhline(i - 0.5, color="#999999", linewidth=0.6)
        if r.tier and (i + 1 == len(reversed_rows) or reversed_rows[i + 1].tier != r.tier):
            ax.text(0.995, i, r.tier, transform=ax.get_yaxis_transform(), ha="right", va="center", fontweight="bold")
    from matplotlib.patches import Patch

    handles = [Patch(color=c, label=v.upper() if v == "amd" else v.capitalize()) for v, c in VENDOR_COLOURS.items()]
    handles.append(Patch(facecolor="none", edgecolor="black", linewidth=2.5, label="this machine"))
    ax.legend(handles=handles, loc="lower right", fontsize=8)
    if tl.estimate is not None:
        ax.set_title(
            f"GPU tier list — {tl.sort.title}\nworkload: {tl.estimate.workload.describe()} (pale: needs >1 GPU)",
            loc="left",
            fontsize=10,
        )
    fig.tight_layout()
    import io

    from ..outputs import write_file

    buffer = io.BytesIO()
    try:
        fig.savefig(buffer, dpi=130, format="png")
    finally:
        plt.close(fig)
    write_file(path, buffer.getvalue())  # the one output writer, as for every other output


def write_plot(tl: TierList, path: str) -> None:
    """Write the chart to path; the format follows the extension (.svg or .png). Through
    gpudoctor.outputs.write_file: OutputError when the path cannot be written."""
    lower = path.lower()
    if lower.endswith(".svg"):
        from ..escaping import terminal_safe
        from ..outputs import write_file

        write_file(path, terminal_safe(render_svg(tl)))  # no control character is valid XML
    elif lower.endswith(".png"):
        render_png(tl, path)
    else:
        raise PlotError(f"--plot {path}: give a .svg or .png file name")


__all__ = ["write_plot", "render_svg", "render_png", "PlotError", "TIER_NAMES"]
