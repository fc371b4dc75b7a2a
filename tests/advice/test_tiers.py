"""`gpudoctor tiers`: sorting, tiers, the workload memory arithmetic, this machine marked, the plot."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from gpudoctor.advice.gpu_specs import load_specs
from gpudoctor.advice.tiers import SORT_KEYS, TierRow, assign_tiers, tier_list
from gpudoctor.advice.workload import (
    GIB,
    WorkloadError,
    estimate,
    lora_adapter_params,
    make_workload,
    nearest_shape,
    parse_params,
    parse_workload,
)
from gpudoctor.cli.root import run

SNAPSHOT = str(Path(__file__).resolve().parents[1] / "fixtures" / "snapshots" / "h200-x2.json")
TABLE = load_specs()


def line(est, label):
    return next(x for x in est.lines if x.label == label)


# ------------------------------------------------------------------ sorting and tiers


def test_sort_by_fp16_puts_the_fastest_first_and_unknown_figures_last():
    tl = tier_list(TABLE, sort="fp16")
    values = [r.value for r in tl.rows]
    known = [v for v in values if v is not None]
    assert known == sorted(known, reverse=True)
    assert values.index(None) == len(known), "rows without a figure come after every row with one"
    assert tl.rows[0].id == "b200-hgx-180gb"


@pytest.mark.parametrize("sort", sorted(SORT_KEYS))
def test_every_sort_key_orders_descending(sort):
    tl = tier_list(TABLE, sort=sort)
    known = [r.value for r in tl.rows if r.value is not None]
    assert known == sorted(known, reverse=True)
    assert len(known) >= 5


def test_perf_per_watt_and_per_dollar_arithmetic():
    rows = {r.id: r for r in tier_list(TABLE, sort="perf-per-watt").rows}
    assert rows["h100-sxm5-80gb"].value == pytest.approx(989.5 / 700)
    assert rows["t4"].value == pytest.approx(65 / 70), "no BF16 on a T4: its FP16 rate is used"
    rows = {r.id: r for r in tier_list(TABLE, sort="perf-per-dollar").rows}
    assert rows["rtx-4090"].value == pytest.approx(165.2 / 1.599)
    assert rows["h100-sxm5-80gb"].value is None, "no public price, no per-dollar figure"


def test_tiers_halve():
    rows = [TierRow(str(i), {}, v) for i, v in enumerate([100, 50, 49.9, 25, 12.5, 6.25, 6.2, None])]
    assign_tiers(rows)
    assert [r.tier for r in rows] == ["S", "S", "A", "A", "B", "C", "D", None]


def test_vendor_filter():
    tl = tier_list(TABLE, vendors=("amd",))
    assert tl.rows and all(r.row["vendor"] == "amd" for r in tl.rows)


# ------------------------------------------------------------------ workload arithmetic


def test_parse_params_and_workload_names():
    assert parse_params("70B") == 70e9
    assert parse_params("1.5b") == 1.5e9
    assert parse_params("500M") == 500e6
    assert parse_params("7") == 7e9
    w = parse_workload("serve-70b-fp8")
    assert (w.mode, w.params, w.precision, w.context, w.batch) == ("serve", 70e9, "fp8", 8192, 1)
    w = parse_workload("finetune-7b-bf16", context=2048, batch=4)
    assert (w.mode, w.precision, w.context, w.batch) == ("finetune", "bf16", 2048, 4)
    assert parse_workload("qlora-70b").precision == "int4"
    for bad in ("finetune", "serve-lots-fp8", "dance-7b", "serve-7b-fp7", "finetune-7b-int4", "serve-1k"):
        with pytest.raises(WorkloadError):
            parse_workload(bad)


def test_full_finetune_needs_16_bytes_per_parameter_plus_activations():
    est = estimate(parse_workload("finetune-7b-bf16"))
    assert line(est, "weights+grads+Adam").gib == pytest.approx(7e9 * 16 / GIB)
    shape = nearest_shape(7e9)
    assert shape.name == "Llama 3.1 8B"
    s, h, layers = 4096, shape.hidden, shape.layers
    assert line(est, "checkpointed acts").gib == pytest.approx(layers * s * h * 2 / GIB)
    assert line(est, "recomputed layer").gib == pytest.approx(34 * s * h / GIB)
    assert line(est, "logits (fp32)").gib == pytest.approx(s * shape.vocab * 4 / GIB)
    fixed = sum(x.gib for x in est.lines if not x.sharded)
    assert est.per_gpu_gib(1) == pytest.approx((7e9 * 16 / GIB + fixed) * 1.10 + 1.0)
    # sharding divides the model state, not the activations
    assert est.per_gpu_gib(4) == pytest.approx((7e9 * 16 / GIB / 4 + fixed) * 1.10 + 1.0)
    assert est.gpus_needed(80.0) == 2
    assert est.gpus_needed(141.0) == 1
    assert est.gpus_needed(20.0) == 8
    assert est.gpus_needed(16.0) is None


def test_serving_needs_weights_and_kv_cache():
    est = estimate(parse_workload("serve-70b-fp8"))
    assert line(est, "weights").gib == pytest.approx(70e9 / GIB)
    kv = 2 * 80 * 8 * 128 * 2 * 8192
    assert line(est, "KV cache").gib == pytest.approx(kv / GIB)
    est_bf16 = estimate(parse_workload("serve-70b-bf16"))
    assert line(est_bf16, "weights").gib == pytest.approx(2 * 70e9 / GIB)
    longer = estimate(make_workload("serve", "70B", "fp8", context=32768, batch=8))
    assert line(longer, "KV cache").gib == pytest.approx(kv * 4 * 8 / GIB)


def test_lora_keeps_the_base_frozen_and_trains_small_adapters():
    est = estimate(parse_workload("lora-8b-bf16"))
    assert line(est, "base weights").gib == pytest.approx(8e9 * 2 / GIB)
    shape = nearest_shape(8e9)
    adapters = lora_adapter_params(shape, 16)
    d, kv, f = 4096, 8 * 128, 14336
    assert adapters == 32 * 16 * ((d + d) + 2 * (d + kv) + (d + d) + 2 * (d + f) + (f + d))
    assert adapters < 0.01 * 8e9
    assert line(est, "adapters+grads+Adam").gib == pytest.approx(adapters * 16 / GIB)
    q = estimate(parse_workload("qlora-70b"))
    assert line(q, "base weights").gib == pytest.approx(70e9 * 4.127 / 8 / GIB)
    assert q.per_gpu_gib(1) < estimate(parse_workload("lora-70b-bf16")).per_gpu_gib(1) / 3


def test_workload_fit_column_and_filter():
    est = estimate(parse_workload("serve-70b-bf16"))
    tl = tier_list(TABLE, estimate=est)
    fits = {r.id: r.fit for r in tl.rows}
    # 140 GB of bf16 weights + 2.5 GiB KV cache, x 1.1 + 1 GiB: just over one H200
    assert fits["h200-sxm-141gb"].gpus == 2
    assert fits["mi300x"].gpus == 1
    assert fits["h100-sxm5-80gb"].gpus == 2
    assert fits["rtx-4090"].gpus == 8
    assert "t4" not in fits, "16 GB x 8 cannot hold it: left out"
    # a card that cannot hold the model in 8 GPUs is left out unless --all
    tiny = estimate(parse_workload("finetune-70b-bf16"))
    shown = {r.id for r in tier_list(TABLE, estimate=tiny).rows}
    every = {r.id for r in tier_list(TABLE, estimate=tiny, show_all=True).rows}
    assert "t4" not in shown and "t4" in every
    assert "mi325x" in shown


# ------------------------------------------------------------------ the command


def test_tiers_text_marks_this_machine(capsys):
    assert run(["tiers", "--facts", SNAPSHOT, "--no-color"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    at = next(i for i, x in enumerate(lines) if x.split()[1:3] == ["NVIDIA", "H200"] and "SXM" in x)
    # beside its row where it fits the width, else on the line under it
    assert "this machine: GPU 0, 1" in lines[at] or lines[at + 1].strip() == "◀ this machine: GPU 0, 1"
    assert "h200-sxm-141gb (by pci id)" in out
    assert "DENSE" in out


def test_tiers_workload_shows_the_arithmetic_and_this_machines_fit(capsys):
    assert run(["tiers", "--facts", SNAPSHOT, "--workload", "finetune-7b-bf16", "--no-color"]) == 0
    out = capsys.readouterr().out
    assert "7.00e9 params x 16 B" in out
    assert "This machine (h200-sxm-141gb): fits on 1 of its 2 GPU(s)" in out
    assert run(["tiers", "--facts", SNAPSHOT, "--mode", "serve", "--params", "405B", "--precision", "fp8"]) == 0
    out = capsys.readouterr().out
    assert "does not fit on its 2 GPU(s)" in out


def test_tiers_json(capsys):
    assert run(["tiers", "--facts", SNAPSHOT, "--format", "json", "--sort", "bandwidth", "--workload", "serve-8b"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["sort"] == "bandwidth"
    assert [m["spec_id"] for m in doc["machine"]] == ["h200-sxm-141gb"] * 2
    assert doc["machine_fit"]["fits"] is True
    row = next(r for r in doc["rows"] if r["id"] == "h200-sxm-141gb")
    assert row["this_machine"] == [0, 1]
    assert row["source"].startswith("https://")
    assert doc["workload"]["lines"][0]["label"] == "weights"


def test_tiers_plot_svg_is_written_and_readable(tmp_path, capsys):
    target = tmp_path / "tiers.svg"
    assert run(["tiers", "--facts", SNAPSHOT, "--workload", "serve-70b-fp8", "--plot", str(target)]) == 0
    capsys.readouterr()
    text = target.read_text(encoding="utf-8")
    assert len(text) > 2000
    root = ET.fromstring(text)  # well-formed XML
    assert root.tag.endswith("svg")
    labels = [t.text for t in root.iter() if t.tag.endswith("text")]
    assert "NVIDIA H200 SXM 141GB" in labels
    assert any("this machine" in (t or "") for t in labels)
    rects = [r for r in root.iter() if r.tag.endswith("rect")]
    assert len(rects) > 2 * len(TABLE["rows"]) // 2


def test_tiers_plot_png_with_matplotlib(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    target = tmp_path / "tiers.png"
    assert run(["tiers", "--facts", SNAPSHOT, "--plot", str(target)]) == 0
    data = target.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10000


def test_tiers_plot_png_without_matplotlib_says_what_to_install(tmp_path, capsys, monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_matplotlib(name, *args, **kwargs):
        if name == "matplotlib" or name.startswith("matplotlib."):
            raise ImportError("No module named 'matplotlib'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    assert run(["tiers", "--facts", SNAPSHOT, "--plot", str(tmp_path / "x.png")]) == 2
    err = capsys.readouterr().err
    assert "pip install matplotlib" in err and "pip install '.[plot]'" in err and ".svg" in err
    assert not (tmp_path / "x.png").exists()


@pytest.mark.parametrize(
    "args, words",
    [
        (["--plot", "chart.pdf"], ".svg or .png"),
        (["--workload", "serve-lots"], "cannot read workload"),
        (["--mode", "serve"], "--mode and --params go together"),
        (["--precision", "fp8"], "describe a workload"),
        (["--workload", "serve-7b", "--mode", "serve", "--params", "7B"], "not both"),
        (["--vendor", "acme"], "--vendor acme"),
    ],
)
def test_tiers_bad_input_is_a_clear_error(args, words, capsys):
    assert run(["tiers", "--facts", SNAPSHOT, *args]) == 2
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err
