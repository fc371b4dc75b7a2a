"""`gpudoctor tiers --plot`: the tier list as a chart, SVG or PNG.

Both draw the one chart definition of tiers_chart.py (tier bands, subtitle, bars with their value
labels, memory bars with theirs, this machine's GPUs outlined, with a workload the cards that need
several GPUs drawn pale, the source line). SVG is written by hand (no dependency); PNG uses
matplotlib when it is installed (the `plot` extra).
"""

from __future__ import annotations

from typing import Any
from xml.sax.saxutils import escape

from ..advice.tiers import TIER_NAMES, TierList
from .tiers_chart import MEMORY_COLOUR, PALE, Chart, chart


class PlotError(Exception):
    """The chart cannot be written in the requested format."""


def render_svg(tl: TierList) -> str:
    c = chart(tl)
    bars = c.bars
    row_h, left = 24, 300
    top = 78 + 18 * len(c.subtitles)
    bar_w, gap, mem_w = 430, 190, 150
    width = left + bar_w + gap + mem_w + 40
    height = top + row_h * max(len(bars), 1) + 70
    scale_top = c.ticks[-1] if c.ticks[-1] > 0 else 1.0
    mem_x = left + bar_w + gap
    bottom = top + row_h * len(bars)

    out: list[str] = []
    add = out.append
    add(
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="Helvetica, Arial, sans-serif" font-size="12">'
    )
    add(f'<rect x="0" y="0" width="{width}" height="{height}" fill="#ffffff"/>')
    add(f'<text x="20" y="28" font-size="18" font-weight="bold">{escape(c.title)}</text>')
    for i, sub in enumerate(c.subtitles):
        add(f'<text x="20" y="{48 + 18 * i}" fill="#444">{escape(sub)}</text>')
    legend_y = top - 20
    lx = 20
    for label, colour in c.legend:
        add(f'<rect x="{lx}" y="{legend_y - 10}" width="12" height="12" fill="{colour}"/>')
        add(f'<text x="{lx + 16}" y="{legend_y}">{escape(label)}</text>')
        lx += 90
    add(f'<rect x="{lx}" y="{legend_y - 10}" width="12" height="12" fill="none" stroke="#000" stroke-width="2.5"/>')
    add(f'<text x="{lx + 16}" y="{legend_y}">this machine</text>')

    for i, b in enumerate(bars):
        add(f'<rect x="0" y="{top + i * row_h}" width="{width}" height="{row_h}" fill="{b.band}"/>')
    for t in c.ticks:
        x = left + bar_w * t / scale_top
        add(f'<line x1="{x:.1f}" y1="{top - 4}" x2="{x:.1f}" y2="{bottom}" stroke="#cccccc"/>')
        add(f'<text x="{x:.1f}" y="{bottom + 16}" text-anchor="middle" fill="#555">{t:g}</text>')
    add(f'<text x="{left + bar_w / 2}" y="{bottom + 34}" text-anchor="middle" fill="#333">{escape(c.unit)}</text>')
    add(f'<text x="{mem_x}" y="{top - 8}" fill="#333">memory (GB)</text>')

    for i, b in enumerate(bars):
        y = top + i * row_h
        cy = y + row_h / 2 + 4
        if b.first_of_tier:
            add(f'<text x="8" y="{cy}" font-weight="bold" font-size="14">{escape(b.tier or "")}</text>')
        weight = ' font-weight="bold"' if b.local else ""
        add(f'<text x="{left - 8}" y="{cy}" text-anchor="end"{weight}>{escape(b.name)}</text>')
        opacity = str(PALE) if b.pale else "1"
        if b.value is not None:
            w = max(1.0, bar_w * b.value / scale_top)
            stroke = ' stroke="#000000" stroke-width="2.5"' if b.local else ""
            add(
                f'<rect x="{left}" y="{y + 4}" width="{w:.1f}" height="{row_h - 8}" fill="{b.colour}" '
                f'fill-opacity="{opacity}"{stroke}/>'
            )
            add(f'<text x="{left + w + 6:.1f}" y="{cy}" fill="#222">{escape(b.label)}</text>')
        else:
            add(f'<text x="{left + 4}" y="{cy}" fill="#999">{escape(b.label)}</text>')
        if b.memory_gb is not None:
            mw = max(1.0, mem_w * b.memory_gb / c.memory_top)
            add(
                f'<rect x="{mem_x}" y="{y + 6}" width="{mw:.1f}" height="{row_h - 12}" fill="{MEMORY_COLOUR}" '
                f'fill-opacity="{opacity}"/>'
            )
            add(f'<text x="{mem_x + mw + 4:.1f}" y="{cy}" fill="#222">{escape(b.memory_label)}</text>')
    add(f'<text x="20" y="{height - 10}" fill="#777" font-size="10">{escape(c.source)}</text>')
    add("</svg>")
    return "\n".join(out) + "\n"


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise PlotError(
            "writing PNG needs matplotlib: pip install matplotlib (in a gpudoctor checkout: pip install '.[plot]'),"
            " or give a .svg file, which needs nothing"
        ) from None
    return plt


def draw_png(c: Chart, plt: Any) -> Any:
    """The chart as a matplotlib figure (rows top to bottom, as in the SVG)."""
    from matplotlib.patches import Patch

    n = len(c.bars)
    head = 0.45 + 0.22 * len(c.subtitles)  # inches for the title, subtitles and legend
    fig_h = max(3.0, 0.3 * n + 1.2 + head)
    fig, (ax, axm) = plt.subplots(1, 2, figsize=(13, fig_h), gridspec_kw={"width_ratios": [3, 1]}, sharey=True)
    ys = list(range(n))
    scale_top = c.ticks[-1] if c.ticks[-1] > 0 else 1.0
    for y, b in zip(ys, c.bars):
        for axis in (ax, axm):
            axis.axhspan(y - 0.5, y + 0.5, color=b.band, zorder=0, linewidth=0)
        alpha = PALE if b.pale else 1.0
        if b.value is not None:
            ax.barh(y, b.value, color=b.colour, alpha=alpha, zorder=2,
                    edgecolor="black" if b.local else None, linewidth=2.5 if b.local else 0)
            ax.text(b.value, y, " " + b.label, va="center", fontsize=8, zorder=3)
        else:
            ax.text(scale_top * 0.01, y, b.label, va="center", fontsize=8, color="#999999", zorder=3)
        if b.first_of_tier:
            ax.text(-0.005, y, (b.tier or "") + "  ", transform=ax.get_yaxis_transform(), ha="right",
                    va="center", fontweight="bold", fontsize=11)
        if b.memory_gb is not None:
            axm.barh(y, b.memory_gb, color=MEMORY_COLOUR, alpha=alpha, zorder=2)
            axm.text(b.memory_gb, y, " " + b.memory_label, va="center", fontsize=8, zorder=3)
    ax.set_ylim(n - 0.5, -0.5)  # the best card on top
    ax.set_yticks(ys)
    ax.set_yticklabels([b.name for b in c.bars], fontsize=8)
    for tick, b in zip(ax.get_yticklabels(), c.bars):
        tick.set_fontweight("bold" if b.local else "normal")
    ax.tick_params(axis="y", pad=22)  # room for the tier letters
    ax.set_xlim(0, scale_top * 1.32)  # room for the value labels
    ax.set_xticks(list(c.ticks))
    ax.grid(axis="x", color="#cccccc", zorder=1)
    ax.set_xlabel(c.unit)
    axm.set_xlim(0, c.memory_top * 1.3)
    axm.set_xlabel("memory (GB)")
    handles = [Patch(color=colour, label=label) for label, colour in c.legend]
    handles.append(Patch(facecolor="none", edgecolor="black", linewidth=2.5, label="this machine"))
    fig.text(0.01, 1 - 0.3 / fig_h, c.title, fontsize=13, fontweight="bold", va="top")
    for i, sub in enumerate(c.subtitles):
        fig.text(0.01, 1 - (0.58 + 0.22 * i) / fig_h, sub, fontsize=9, color="#444444", va="top")
    fig.legend(handles=handles, loc="upper right", ncol=len(handles), fontsize=8, frameon=False,
               bbox_to_anchor=(0.99, 1 - (0.5 + 0.22 * len(c.subtitles)) / fig_h))
    fig.text(0.01, 0.01, c.source, fontsize=7, color="#777777")
    fig.tight_layout(rect=(0, 0.3 / fig_h, 1, 1 - (head + 0.2) / fig_h))
    return fig


def render_png(tl: TierList, path: str) -> None:
    import io

    from ..outputs import write_file

    plt = _pyplot()
    fig = draw_png(chart(tl), plt)
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
