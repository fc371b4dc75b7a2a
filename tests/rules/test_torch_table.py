"""Checks on rules/data/torch_releases.yaml: shape, order, and properties of the real world it must keep.

A newer torch never needs an older Python floor, a CUDA 12 wheel never carries Kepler code, every CUDA
variant has a driver row, the PyPI default never goes back to an older CUDA. A mistyped arch list or a
release in the wrong place fails here.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from packaging.version import Version

from gpudoctor.advice.torch_variants import cuda_of, parse_arch_list, rocm_of

DATA = Path(__file__).resolve().parents[2] / "rules" / "data"
VARIANT_RE = re.compile(r"^(cpu|xpu|cu\d{3}|rocm\d+(\.\d+){1,2})$")
ARCH_RE = re.compile(r"^\d+\.\d(\+PTX)?$")
GFX_RE = re.compile(r"^gfx[0-9a-f]{3,5}$")


def _load(name: str) -> dict:
    with open(DATA / f"{name}.yaml", encoding="utf-8") as fh:
        return yaml.safe_load(fh)


@pytest.fixture(scope="module")
def table() -> dict:
    return _load("torch_releases")


@pytest.fixture(scope="module")
def rows(table) -> list[tuple[str, dict]]:
    return list(table["rows"].items())


def cuda_variants(row: dict) -> dict[str, dict]:
    return {k: v for k, v in row["variants"].items() if cuda_of(k)}


def test_releases_are_2_0_to_newest_in_order_without_gaps(rows):
    keys = [k for k, _ in rows]
    assert keys[0] == "2.0"
    assert keys == sorted(keys, key=Version), "rows must be oldest first"
    minors = [Version(k).minor for k in keys]
    assert minors == list(range(minors[0], minors[0] + len(minors)))
    # The machine this was written on has 2.13/2.14 wheels on disk and PyPI lists 2.15.0.
    assert Version(keys[-1]) >= Version("2.15")


def test_row_fields(rows):
    for key, row in rows:
        assert row["latest"].startswith(key + "."), key
        assert re.match(r"^\d{4}-\d{2}$", row["released"]), key
        assert row["source"], key
        assert "cpu" in row["variants"], key
        for name in row["variants"]:
            assert VARIANT_RE.match(name), f"{key}: {name}"
        assert row["pypi_default"] in cuda_variants(row), f"{key}: PyPI default {row['pypi_default']} not a variant"


def test_release_dates_never_go_back(rows):
    dates = [row["released"] for _, row in rows]
    assert dates == sorted(dates)


def test_pythons_are_contiguous_and_the_window_only_moves_forward(rows):
    previous = None
    for key, row in rows:
        pys = [Version(p) for p in row["python"]]
        assert pys == sorted(pys), key
        assert all(p.major == 3 for p in pys), key
        assert [p.minor for p in pys] == list(range(pys[0].minor, pys[-1].minor + 1)), f"{key}: gap in {pys}"
        for extra in row.get("python_experimental") or []:
            assert Version(extra) > pys[-1], f"{key}: experimental {extra} inside the stable range"
        if previous is not None:
            assert pys[0] >= previous[0] and pys[-1] >= previous[-1], key
        previous = pys


def test_pypi_default_cuda_never_goes_back(rows):
    cudas = [Version(cuda_of(row["pypi_default"])) for _, row in rows]
    assert cudas == sorted(cudas)


def test_every_cuda_variant_has_a_driver_row(rows):
    driver_rows = _load("cuda_driver")["rows"]
    for key, row in rows:
        for name in cuda_variants(row):
            assert cuda_of(name) in driver_rows, f"{key}: {name} has no row in cuda_driver.yaml"


def test_arch_lists_parse_and_are_sorted(rows):
    for key, row in rows:
        for name, spec in cuda_variants(row).items():
            parts = spec["arch"].split(";")
            assert all(ARCH_RE.match(p) for p in parts), f"{key} {name}: {spec['arch']}"
            ccs = [Version(p.replace("+PTX", "")) for p in parts]
            assert ccs == sorted(ccs) and len(set(ccs)) == len(ccs), f"{key} {name}"
            ptx = [p for p in parts if p.endswith("+PTX")]
            assert len(ptx) <= 1 and (not ptx or parts[-1] == ptx[0]), f"{key} {name}: +PTX only on the last"
            archs = parse_arch_list(spec["arch"])
            assert len([a for a in archs if a.startswith("sm_")]) == len(parts)
            assert spec.get("source"), f"{key} {name}"


def test_arch_lists_follow_cuda_support(rows):
    for key, row in rows:
        for name, spec in cuda_variants(row).items():
            cuda = Version(cuda_of(name))
            lowest = Version(spec["arch"].split(";")[0].replace("+PTX", ""))
            highest = Version(spec["arch"].split(";")[-1].replace("+PTX", ""))
            if cuda >= Version("12.0"):
                assert lowest >= Version("5.0"), f"{key} {name}: CUDA 12 dropped Kepler"
            if cuda >= Version("13.0"):
                assert lowest >= Version("7.5"), f"{key} {name}: CUDA 13 dropped Maxwell, Pascal and Volta"
            if cuda < Version("11.8"):
                assert highest < Version("9.0"), f"{key} {name}: Hopper needs CUDA 11.8"
            if cuda < Version("12.8"):
                assert highest < Version("10.0"), f"{key} {name}: Blackwell needs CUDA 12.8"


def test_rocm_variants_have_gfx_lists_or_say_unknown(rows):
    for key, row in rows:
        for name, spec in row["variants"].items():
            if not name.startswith("rocm"):
                continue
            assert rocm_of(name) is not None, f"{key}: {name}"
            gfx = spec.get("gfx")
            assert gfx is None or (gfx and all(GFX_RE.match(g) for g in gfx)), f"{key} {name}"


def test_same_rocm_variant_has_one_gfx_list(rows):
    seen: dict[str, list] = {}
    for key, row in rows:
        for name, spec in row["variants"].items():
            if name.startswith("rocm") and spec.get("gfx") is not None:
                assert seen.setdefault(name, spec["gfx"]) == spec["gfx"], f"{key} {name}"


def test_companion_pins(rows):
    for key, row in rows:
        minor = Version(key).minor
        if row.get("torchvision"):
            # torchvision 0.15 pairs with torch 2.0, 0.16 with 2.1, ... up to 0.29 with 2.14; torch 2.15
            # came with torchvision 0.29.2, a py3-none build that requires torch>=2.14.0 (PyPI)
            expected = minor + 15 if minor <= 14 else 29
            assert Version(row["torchvision"]).minor == expected, key
        if row.get("torchaudio"):
            # from 2.11 torchaudio uses torch's stable ABI: 2.11.x serves every later torch
            assert Version(row["torchaudio"]).release[:2] == (2, min(minor, 11)), key


def test_facts_checked_against_wheels_and_primary_sources(table):
    rows = table["rows"]
    # Scanned from the PyPI wheels' fat binaries: no PTX.
    assert rows["2.14"]["variants"]["cu130"]["arch"] == "7.5;8.0;8.6;9.0;10.0;12.0"
    assert rows["2.15"]["variants"]["cu132"]["arch"] == "7.5;8.0;8.6;9.0;10.0;12.0"
    # Volta left cu128 in 2.11 (pytorch#172352) and is kept by cu126.
    assert "7.0" in rows["2.10"]["variants"]["cu128"]["arch"].split(";")
    assert "7.0" not in rows["2.11"]["variants"]["cu128"]["arch"].split(";")
    assert "7.0" in rows["2.11"]["variants"]["cu126"]["arch"].split(";")
    # 2.8 keeps sm_70 in cu128 (the build script over the release notes).
    assert rows["2.8"]["variants"]["cu128"]["arch"].startswith("7.0;")
    # PyPI defaults read from the wheels' CUDA pins.
    defaults = {k: r["pypi_default"] for k, r in rows.items()}
    assert defaults["2.0"] == "cu117" and defaults["2.1"] == "cu121" and defaults["2.5"] == "cu124"
    assert defaults["2.7"] == "cu126" and defaults["2.8"] == "cu128" and defaults["2.11"] == "cu130"
    assert defaults["2.15"] == "cu132"
    assert rows["2.15"]["python"][0] == "3.11"
    assert "3.13" in rows["2.5"]["python"] and "3.8" not in rows["2.5"]["python"]
