"""`bench` text fits the width (issue 15 item 2): each GPU's table leaves columns out in the
documented order (render/bench.DROP_ORDER) and says so; prose wraps; commands never break.
Goldens at 60, 80 and 120 columns of a two-H200 run with one slow GPU (a warning and its fix)."""

from __future__ import annotations

import pytest

from gpudoctor.bench import analysis
from gpudoctor.cli.commands.bench import _judge
from gpudoctor.facts import load_snapshot
from gpudoctor.render import layout
from gpudoctor.render.bench import render_text
from tests.bench.test_bench import SNAPSHOT, bench_run, healthy_events
from tests.helpers.golden import GOLDEN, check
from tests.helpers.width import too_wide


def _bench(width: int, style=None) -> tuple[str, list]:
    facts = load_snapshot(SNAPSHOT)
    section = analysis.build_section(bench_run(healthy_events(slow_gpu=1)), facts)
    findings = _judge({**facts, "bench": section})
    kw = {"style": style} if style else {}
    return render_text(section, findings, snapshot_path="/var/tmp/host+bench.json", width=width, **kw), findings


@pytest.mark.parametrize("width", (60, 80, 120))
def test_bench_golden_at_each_width(width):
    out, findings = _bench(width)
    check(GOLDEN / "width" / f"bench-h200-x2-{width}.txt", out)
    commands = {c for f in findings for c in layout.commands(f.fix)}
    assert "sudo dmesg -T | grep -i xid" in commands
    for command in commands:
        assert any(command in line for line in out.splitlines()), command
    rest = "\n".join(line for line in out.splitlines() if not any(c in line for c in commands))
    assert too_wide(rest, width) == []


def test_bench_table_leaves_columns_out_in_the_documented_order():
    def header(width: int) -> list[str]:
        return next(line for line in _bench(width)[0].splitlines() if line.startswith("  test ")).split()

    assert header(120) == ["test", "size", "measured", "datasheet", "eff.", "others", "vs", "spread"]
    assert header(80) == ["test", "size", "measured", "datasheet", "eff.", "others", "vs"]
    assert header(60) == ["test", "size", "measured", "eff.", "vs"]
    assert header(40) == ["test", "measured", "eff.", "vs"]
    narrow = " ".join(_bench(60)[0].split())
    assert "Columns left out to fit 60 columns: datasheet, others, spread" in narrow
    assert "Columns left out" not in _bench(120)[0]


def test_coloured_bench_is_laid_out_as_the_plain_one():
    import re

    import click

    coloured = _bench(60, click.style)[0]
    assert "\x1b[" in coloured
    assert re.sub("\x1b\\[[0-9;]*m", "", coloured) == _bench(60)[0]
