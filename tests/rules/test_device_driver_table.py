"""Checks on rules/data/nvidia_device_driver_support.yaml, the per-device-id driver support table.

A row exists only where a GPU does not follow its architecture's row in gpu_architectures.yaml, so
each test states that: the id lies in a range of nvidia_pci_ids.yaml of the row's architecture, a
last branch is older than the architecture's, a minimum is newer than the architecture's floor.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml
from packaging.version import Version

DATA_DIR = Path(__file__).resolve().parents[2] / "rules" / "data"
DRIVER_RE = re.compile(r"^\d{3}\.\d{2,3}(\.\d{2})?$")  # 570.86.15, 575.64, 580.105.08
FIELDS = {"name", "architecture", "min_driver", "min_driver_flavour", "last_branch", "not_listed_in"}


def load(name: str) -> dict:
    with open(DATA_DIR / f"{name}.yaml", encoding="utf-8") as fh:
        return yaml.safe_load(fh)


ROWS = load("nvidia_device_driver_support")["rows"]
ARCHS = load("gpu_architectures")["rows"]


def architecture_of(device: int) -> str | None:
    for key, row in load("nvidia_pci_ids")["rows"].items():
        low, high = (int(end, 16) for end in key.split("-"))
        if low <= device <= high:
            return str(row["architecture"])
    return None


def test_keys_are_lower_case_device_ids_as_sysfs_writes_them():
    assert ROWS
    for key in ROWS:
        assert re.fullmatch(r"0x[0-9a-f]{4}", key), key


def test_rows_name_their_product_and_the_architecture_of_their_id_range():
    for key, row in ROWS.items():
        assert set(row) <= FIELDS, key
        assert row["name"], key
        assert architecture_of(int(key, 16)) == row["architecture"], key


def test_every_row_departs_from_its_architecture():
    for key, row in ROWS.items():
        arch = ARCHS[row["architecture"]]
        assert ("min_driver" in row) != ("last_branch" in row), key
        if "last_branch" in row:
            # a legacy cutoff of its own: older than the family's last branch
            assert arch["last_driver_branch"] is not None, key
            assert int(row["last_branch"]) < int(arch["last_driver_branch"]), key
        else:
            assert DRIVER_RE.match(row["min_driver"]), key
            assert Version(row["min_driver"]) > Version(arch["min_driver"]), key
            assert row["min_driver_flavour"] in {"any", "open"}, key


def test_flavour_any_only_where_the_open_modules_are_required():
    for key, row in ROWS.items():
        if row.get("min_driver_flavour") == "any":
            arch = ARCHS[row["architecture"]]
            grace_hopper = "GH200" in row["name"]
            assert arch["open_kernel_module"] == "required" or grace_hopper, key


def test_not_listed_in_names_later_releases():
    for key, row in ROWS.items():
        for release in row.get("not_listed_in", []):
            assert DRIVER_RE.match(release), key
            assert Version(release) > Version(row["min_driver"]), key


def test_known_rows():
    assert ROWS["0x2335"]["min_driver"] == "550.90.07"  # H200, open module
    assert ROWS["0x2335"]["min_driver_flavour"] == "open"
    assert ROWS["0x3182"]["min_driver"] == "580.82.07"  # B300
    assert ROWS["0x2901"]["min_driver"] == "570.86.15"  # B200
    assert ROWS["0x0ff2"]["last_branch"] == "367"  # GRID K1
    # the real H200 VM's driver (580.159.04, open module) is new enough for its GPU
    assert Version("580.159.04") >= Version(ROWS["0x2335"]["min_driver"])
