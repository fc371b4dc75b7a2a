"""The GPU spec table (rules/data/gpu_specs.yaml): shape, units, dense versus sparse, sanity.

Each test states something true of real accelerators, so a mistyped figure, a sparse figure in a
dense field or a PCIe figure in an SXM row fails here.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gpudoctor.advice.gpu_specs import RATE_FIELDS, load_specs, machine_gpus
from gpudoctor.engine.loader import read_yaml
from gpudoctor.facts import load_snapshot
from gpudoctor.model.spec_match import match_row
from gpudoctor.schemas import validate

PATH = Path(__file__).resolve().parents[2] / "rules" / "data" / "gpu_specs.yaml"
SNAPSHOT = Path(__file__).resolve().parents[1] / "fixtures" / "snapshots" / "h200-x2.json"
TABLE = load_specs(PATH)
ROWS = TABLE["rows"]
SPARSE = [f"{f}_sparse" for f in RATE_FIELDS if f != "fp32_tflops"]
REQUIRED = {
    "vendor",
    "name",
    "architecture",
    "form_factor",
    "launch_year",
    "memory_gb",
    "memory_type",
    "memory_bandwidth_gbs",
    *RATE_FIELDS,
    "pcie_gen",
    "gpu_link",
    "gpu_link_gbs",
    "tdp_w",
    "launch_price_usd",
    "pci_ids",
    "nvml_names",
    "source",
    "variant",
}
KNOWN = (
    REQUIRED
    | set(SPARSE)
    | {
        "id",
        "compute_capability",
        "gfx_target",
        "fp32_matrix_tflops",
        "devices_per_package",
        "dense_from_sparse",
        "checked_against",
        "unverified",
        "pci_note",
        "nvlink_links",
    }
)


def rows_with(field: str):
    return [(k, r) for k, r in ROWS.items() if isinstance(r.get(field), (int, float))]


def test_table_validates_and_names_its_sources():
    data = read_yaml(PATH)
    data["retrieved"] = str(data["retrieved"])
    assert validate("table", data) is None
    assert data["name"] == "gpu_specs"
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", TABLE["retrieved"])


def test_duplicate_row_ids_are_refused_by_the_loader(tmp_path):
    # YAML would silently keep the last of two equal keys; gpudoctor's loader refuses them.
    from gpudoctor.engine.loader import RuleLoadError

    text = PATH.read_text(encoding="utf-8")
    start = text.index("  t4:\n")
    end = text.index("  # ---", start)
    doubled = text[:end] + text[start:end] + text[end:]
    bad = tmp_path / "gpu_specs.yaml"
    bad.write_text(doubled, encoding="utf-8")
    with pytest.raises(RuleLoadError, match="duplicate key 't4'"):
        read_yaml(bad)


def test_at_least_25_accelerators_from_several_vendors_including_the_asked_for_ones():
    assert len(ROWS) >= 25
    vendors = {r["vendor"] for r in ROWS.values()}
    assert {"nvidia", "amd"} <= vendors and len(vendors) >= 3
    names = " | ".join(r["name"] for r in ROWS.values())
    for wanted in (
        "RTX 3090",
        "RTX 4090",
        "RTX 5090",
        "A100 SXM4 40GB",
        "A100 SXM4 80GB",
        "H100 SXM5",
        "H100 PCIe",
        "H200",
        "B200",
        "L40S",
        "NVIDIA L4",
        "T4",
        "V100",
        "NVIDIA A10",
        "MI250X",
        "MI300X",
        "Ascend 910B",
    ):
        assert wanted in names, wanted


@pytest.mark.parametrize("spec_id", sorted(ROWS))
def test_row_shape_and_units(spec_id):
    row = ROWS[spec_id]
    assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", spec_id), "ids are stable kebab-case"
    assert set(row) >= REQUIRED, REQUIRED - set(row)
    assert set(row) <= KNOWN, set(row) - KNOWN
    assert row["vendor"] in ("nvidia", "amd", "intel", "huawei")
    assert str(row["source"]).startswith("https://")
    for url in row.get("checked_against", []):
        assert url.startswith("https://")
    assert 2015 <= row["launch_year"] <= 2026
    assert 8 <= row["memory_gb"] <= 512, "GB per card"
    bw = row["memory_bandwidth_gbs"]
    assert bw is None or 100 <= bw <= 20000, "GB/s, not TB/s"
    for field in (*RATE_FIELDS, *SPARSE, "fp32_matrix_tflops"):
        value = row.get(field)
        assert value is None or (isinstance(value, (int, float)) and 1 <= value <= 20000), (field, value)
    assert row["pcie_gen"] in (3, 4, 5, 6)
    assert row["tdp_w"] is None or 50 <= row["tdp_w"] <= 1500
    price = row["launch_price_usd"]
    assert price is None or 100 <= price <= 100000
    assert row["gpu_link_gbs"] is None or row["gpu_link"], "a link speed needs a link name"
    for pci in row["pci_ids"]:
        assert re.fullmatch(r"[0-9a-f]{4}:[0-9a-f]{4}", pci), pci
    if row["vendor"] == "nvidia":
        assert re.fullmatch(r"\d+\.\d", row["compute_capability"])
        assert row["nvml_names"], "NVIDIA rows say how NVML names the card"
        assert all(p.startswith("10de:") for p in row["pci_ids"])
    if row["vendor"] == "amd":
        assert re.fullmatch(r"gfx[0-9a-f]+", row["gfx_target"])
        assert all(p.startswith("1002:") for p in row["pci_ids"])
    for listed in ("dense_from_sparse", "unverified"):
        for field in row.get(listed, []):
            assert field in row, f"{listed} names {field}, which the row does not have"


@pytest.mark.parametrize("dense", [f for f in RATE_FIELDS if f != "fp32_tflops"])
def test_no_sparse_figure_in_a_dense_field(dense):
    """Sparse (2:4) rates are exactly twice the dense ones; a dense field holding the sparse
    figure would equal it, and a sparse field holding the dense figure would be half."""
    sparse = f"{dense}_sparse"
    for spec_id, row in ROWS.items():
        d, s = row.get(dense), row.get(sparse)
        if s is not None:
            assert d is not None, f"{spec_id}: {sparse} without {dense}"
            assert d <= s, f"{spec_id}: dense {d} > sparse {s}"
            assert abs(s / d - 2.0) < 0.02, f"{spec_id}: {sparse} {s} is not twice {dense} {d}"


def test_rates_are_in_the_order_hardware_has_them():
    for spec_id, row in ROWS.items():
        fp32, tf32, fp16, bf16, fp8 = (row.get(f) for f in RATE_FIELDS)
        if fp16 is not None and fp32 is not None:
            assert fp16 >= fp32, f"{spec_id}: FP16 tensor below FP32"
        if bf16 is not None and fp16 is not None:
            assert bf16 <= fp16 * 1.001, f"{spec_id}: BF16 above FP16"
        if tf32 is not None:
            assert fp32 is None or tf32 >= fp32 * 0.999, f"{spec_id}: TF32 below FP32"
            assert fp16 is None or tf32 <= fp16 * 0.51, f"{spec_id}: TF32 is half the FP16 rate or less"
        if fp8 is not None:
            assert fp8 >= (bf16 or fp16 or 0) * 0.999, f"{spec_id}: FP8 below 16-bit"
        if row.get("fp32_matrix_tflops") is not None:
            assert row["fp32_matrix_tflops"] >= fp32


def test_variants_differ_where_their_datasheets_do():
    # SXM and PCIe boards of one GPU: same memory size, the SXM faster and hungrier
    assert ROWS["h100-sxm5-80gb"]["bf16_tflops"] > ROWS["h100-pcie-80gb"]["bf16_tflops"]
    assert ROWS["h100-sxm5-80gb"]["memory_bandwidth_gbs"] > ROWS["h100-pcie-80gb"]["memory_bandwidth_gbs"]
    assert ROWS["a100-sxm4-80gb"]["memory_bandwidth_gbs"] > ROWS["a100-pcie-80gb"]["memory_bandwidth_gbs"]
    # H200 is H100's compute with more and faster memory
    for field in RATE_FIELDS:
        assert ROWS["h200-sxm-141gb"][field] == ROWS["h100-sxm5-80gb"][field]
    assert ROWS["h200-sxm-141gb"]["memory_gb"] > ROWS["h100-sxm5-80gb"]["memory_gb"]
    # the headline H100 SXM number (1,979 BF16 TFLOPS) is the sparse one
    assert ROWS["h100-sxm5-80gb"]["bf16_tflops"] == pytest.approx(989.5)


def test_ids_pci_ids_and_nvml_names_are_unique():
    seen_pci: dict[str, str] = {}
    seen_names: dict[str, str] = {}
    for spec_id, row in ROWS.items():
        for pci in row["pci_ids"]:
            assert pci not in seen_pci, f"{pci} in {seen_pci.get(pci)} and {spec_id}"
            seen_pci[pci] = spec_id
        for name in row["nvml_names"]:
            assert name.lower() not in seen_names, f"{name} in {seen_names.get(name.lower())} and {spec_id}"
            seen_names[name.lower()] = spec_id


def test_prices_are_only_given_for_cards_with_a_public_price():
    priced = {k for k, r in ROWS.items() if r["launch_price_usd"] is not None}
    assert {"rtx-3090", "rtx-4090", "rtx-5090"} <= priced
    assert not priced & {"h100-sxm5-80gb", "h200-sxm-141gb", "b200-hgx-180gb", "mi300x"}


def test_matching_this_machine_by_pci_id_then_name_then_memory():
    facts = load_snapshot(SNAPSHOT)
    gpus = machine_gpus(facts, TABLE)
    assert [(g.index, g.spec_id, g.matched_by) for g in gpus] == [
        (0, "h200-sxm-141gb", "pci id"),
        (1, "h200-sxm-141gb", "pci id"),
    ]
    assert match_row(ROWS, None, "NVIDIA GeForce RTX 4090", None)[0] == "rtx-4090"
    assert match_row(ROWS, "10de:2330", None, None)[0] == "h100-sxm5-80gb"
    assert match_row(ROWS, "dead:beef", "Some New GPU", None)[0] is None
    # one name for two rows: the memory size decides
    rows = {
        "a-40": {"nvml_names": ["X"], "pci_ids": [], "memory_gb": 40},
        "a-80": {"nvml_names": ["X"], "pci_ids": [], "memory_gb": 80},
    }
    assert match_row(rows, None, "X", 79 << 30)[0] == "a-80"
    assert match_row(rows, None, "X", None)[0] is None
