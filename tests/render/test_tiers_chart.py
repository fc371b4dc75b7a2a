"""The tier chart: one definition (tiers_chart.chart) drawn as SVG and, where matplotlib is
installed, as PNG; both show the tier bands, the subtitle, the memory labels and the source line."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from gpudoctor.advice.gpu_specs import load_specs, machine_gpus
from gpudoctor.advice.tiers import tier_list
from gpudoctor.advice.workload import estimate, parse_workload
from gpudoctor.facts import load_snapshot
from gpudoctor.render.tiers_chart import TIER_BANDS, chart
from gpudoctor.render.tiers_plot import render_svg

SNAPSHOT = str(Path(__file__).resolve().parents[1] / "fixtures" / "snapshots" / "h200-x2.json")
TABLE = load_specs()


def tiers(sort: str = "fp16", workload: str | None = None):
    machine = machine_gpus(load_snapshot(SNAPSHOT), TABLE)
    est = estimate(parse_workload(workload, None, None)) if workload else None
    return tier_list(TABLE, sort=sort, machine=machine, estimate=est)


def test_the_chart_holds_bands_labels_subtitle_memory_and_source():
    c = chart(tiers(workload="serve-70b-fp8"))
    assert c.title == "GPU tier list — dense FP16 tensor TFLOPS"
    assert c.subtitles[0].startswith("Datasheet peaks") and c.subtitles[1].startswith("Workload: serving")
    assert c.source.startswith("Source: vendor datasheets (rules/data/gpu_specs.yaml, read 20")
    h200 = next(b for b in c.bars if b.name == "NVIDIA H200 SXM 141GB")
    assert h200.local and h200.band == TIER_BANDS[h200.tier] and h200.memory_label == "141"
    assert h200.label.startswith("990") and "this machine" in h200.label
    assert [b.tier for b in c.bars if b.first_of_tier] == ["S", "A", "B", "C", "D"]
    assert any(b.pale for b in c.bars) and not h200.pale  # needs several GPUs / fits on one


def test_a_card_with_only_a_bf16_figure_names_it_instead_of_no_figure():
    c = chart(tiers("fp16"))
    gaudi3 = next(b for b in c.bars if b.name == "Intel Gaudi 3")
    assert gaudi3.value is None and gaudi3.tier is None
    assert gaudi3.label == "no FP16 figure; BF16 1,835 (--sort bf16)"
    by_bf16 = next(b for b in chart(tiers("bf16")).bars if b.name == "Intel Gaudi 3")
    assert by_bf16.value == 1835 and by_bf16.tier is not None
    # a sort with no other figure to name keeps the plain words
    assert all("--sort" not in b.label for b in chart(tiers("bandwidth")).bars)


def test_the_svg_draws_the_chart_definition():
    tl = tiers(workload="serve-70b-fp8")
    c = chart(tl)
    root = ET.fromstring(render_svg(tl))
    texts = [t.text or "" for t in root.iter() if t.tag.endswith("text")]
    for wanted in (c.title, *c.subtitles, c.source):
        assert wanted in texts
    assert all(b.label in texts and (b.memory_label in texts or b.memory_gb is None) for b in c.bars)
    fills = [r.get("fill") for r in root.iter() if r.tag.endswith("rect")]
    assert set(TIER_BANDS.values()) <= set(fills)


def test_the_png_draws_the_same_chart_definition():
    pytest.importorskip("matplotlib", reason="matplotlib (the plot extra) is not installed here")
    from matplotlib.colors import to_hex

    from gpudoctor.render.tiers_plot import _pyplot, draw_png

    plt = _pyplot()
    c = chart(tiers(workload="serve-70b-fp8"))
    fig = draw_png(c, plt)
    try:
        texts = [t.get_text() for t in fig.texts]
        for ax in fig.axes:
            texts += [t.get_text().strip() for t in ax.texts]
            texts += [t.get_text() for t in ax.get_yticklabels()]
        for wanted in (c.title, *c.subtitles, c.source):
            assert wanted in texts
        assert all(b.label in texts and b.name in texts for b in c.bars)
        assert all(b.memory_label in texts for b in c.bars if b.memory_gb is not None)
        assert {b.tier for b in c.bars if b.first_of_tier} <= set(texts)
        bands = {to_hex(p.get_facecolor()) for p in fig.axes[0].patches}
        assert set(TIER_BANDS.values()) <= bands
    finally:
        plt.close(fig)
