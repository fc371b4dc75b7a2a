"""Tests for probes/amdgpu.py and probes/kfd.py: an MI300X node's and a Radeon workstation's amdgpu
sysfs files, and every file of them absent, garbled or unreadable (one fact unavailable, never the GPU)."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import pytest

from gpudoctor.context import ProbeContext
from gpudoctor.facts import Unavailable
from gpudoctor.probes import amdgpu
from tests.helpers.hosts import fixture_module
from tests.helpers.sections import def_keys, section_keys, validate_section
from tests.helpers.tree import deny, write_tree

amd_hosts = fixture_module("make_amd_hosts")
# GPU 0 of the MI300X tree (0000:15:00.0): its PCI device directory
MI300X_GPU0 = "sys/devices/pci0000:13/0000:13:01.0/0000:14:00.0/0000:15:00.0"
W7900 = "sys/devices/pci0000:c1/0000:c1:01.0/0000:c2:00.0/0000:c3:00.0"


def collect(root: Path) -> dict[str, Any]:
    out = amdgpu.collect(ProbeContext(root=root, env={}))
    validate_section("amdgpu", out)
    assert set(out) == section_keys("amdgpu")
    return out


def reason(value: Any) -> str:
    assert isinstance(value, Unavailable), value
    return value.reason


@pytest.fixture
def mi300x(tmp_path: Path) -> Path:
    write_tree(tmp_path, amd_hosts.mi300x("t", "t"))
    return tmp_path


@pytest.fixture
def radeon(tmp_path: Path) -> Path:
    write_tree(tmp_path, amd_hosts.radeon_workstation())
    return tmp_path


def test_mi300x_node(mi300x: Path) -> None:
    out = collect(mi300x)
    gpus = out["gpus"]
    assert [g["bus_id"] for g in gpus] == [f"0000:{b}:00.0" for b in amd_hosts.MI300X_BUSES]
    assert all(set(g) == def_keys("amdgpu_gpu") for g in gpus)
    g = gpus[0]
    assert g["product_name"] == "AMD Instinct MI300X OAM"
    assert (g["temp_junction_c"], g["temp_junction_crit_c"], g["temp_junction_emergency_c"]) == (46, 105, 110)
    assert reason(g["temp_edge_c"]) == "not_found"  # the MI300X has no edge sensor
    assert (g["power_cap_w"], g["power_cap_default_w"]) == (750, 750)
    # table 1.5: the header is read; its throttle status is not, since smu_v13_0_6 always writes 0 there
    assert g["gpu_metrics_version"] == "1.5"
    assert reason(g["indep_throttle_status"]) == "not_supported"
    assert "the driver writes 0 as its throttle status" in g["indep_throttle_status"].detail
    assert g["vram_total_bytes"] == 192 << 30
    assert (g["ras_ue_total"], g["ras_ce_total"], g["bad_pages"]) == (0, 0, 0)
    assert {b["block"] for b in g["ras_blocks"]} == set(amd_hosts.RAS_BLOCKS)
    # bad_page_threshold -1: mainline's one page per 100 MiB of VRAM
    assert (g["bad_page_threshold"], g["bad_page_threshold_from"]) == ((192 << 30) // (100 << 20), "formula")
    assert out["bad_page_threshold_param"] == -1
    assert g["xgmi_hive_id"] == amd_hosts.HIVE and g["xgmi_device_id"] == "0x6a1c3e00"
    assert (g["compute_partition"], g["memory_partition"]) == ("SPX", "NPS1")
    assert [(x["kfd_node"], x["xgmi_links"]) for x in gpus] == [(2 + i, 7) for i in range(8)]


def test_xgmi_links_lost(tmp_path: Path) -> None:
    write_tree(tmp_path, amd_hosts.mi300x("t", "t", down_bus="35"))
    links = {g["bus_id"]: g["xgmi_links"] for g in collect(tmp_path)["gpus"]}
    assert links["0000:35:00.0"] == 5
    assert links["0000:15:00.0"] == links["0000:55:00.0"] == 6
    assert links["0000:75:00.0"] == 7


def test_ras_errors_and_bad_pages(tmp_path: Path) -> None:
    write_tree(tmp_path, amd_hosts.mi300x("t", "t", ras_bus="75"))
    g = collect(tmp_path)["gpus"][3]
    assert (g["ras_ue_total"], g["ras_ce_total"], g["bad_pages"]) == (2, 14, 2)
    assert {"block": "umc", "ue": 2, "ce": 14} in g["ras_blocks"]


def test_radeon_workstation(radeon: Path) -> None:
    (g,) = collect(radeon)["gpus"]
    assert g["bus_id"] == "0000:c3:00.0"
    assert (g["temp_edge_c"], g["temp_mem_crit_c"]) == (38, 108)
    assert (g["power_cap_w"], g["power_cap_default_w"]) == (200, 295)
    assert (g["gpu_metrics_version"], g["indep_throttle_status"]) == ("1.3", 0)
    # no RAS, no XGMI, no partitions on a Radeon: not_supported, which the rules skip
    for key in ("ras_ue_total", "bad_pages", "xgmi_hive_id", "compute_partition"):
        assert reason(g[key]) == "not_supported", key
    assert (g["kfd_node"], g["xgmi_links"]) == (2, 0)


def test_gpu_metrics_v13_throttle_status_at_byte_112(radeon: Path) -> None:
    raw = bytearray(120)
    struct.pack_into("<HBB", raw, 0, 120, 1, 3)
    struct.pack_into("<Q", raw, 112, 1 << 36)  # SMU_THROTTLER_TEMP_HOTSPOT_BIT
    (radeon / W7900 / "gpu_metrics").write_bytes(bytes(raw))
    assert collect(radeon)["gpus"][0]["indep_throttle_status"] == 1 << 36


@pytest.mark.parametrize(
    "content, why",
    [
        (b"\x78\x00", "error"),  # shorter than the header
        (struct.pack("<HBB", 96, 1, 3) + bytes(92), "error"),  # a 1.3 table too short for the field
        (struct.pack("<HBB", 120, 2, 2) + bytes(116), "not_supported"),  # an APU's table
        # an MI300's table 1.4 with bits set where table 1.3 has indep_throttle_status: not read as it
        (struct.pack("<HBB", 280, 1, 4) + bytes(108) + struct.pack("<Q", 1 << 36) + bytes(160), "not_supported"),
    ],
)
def test_gpu_metrics_other_tables(radeon: Path, content: bytes, why: str) -> None:
    (radeon / W7900 / "gpu_metrics").write_bytes(content)
    assert reason(collect(radeon)["gpus"][0]["indep_throttle_status"]) == why


def test_garbled_files_make_only_their_facts_unavailable(mi300x: Path) -> None:
    base = mi300x / MI300X_GPU0
    (base / "ras/umc_err_count").write_text("ue: lots\n")
    (base / "ras/gpu_vram_bad_pages").write_text("0x00000001 : 0x00001000 : R\nnot a page\n")
    (base / "mem_info_vram_total").write_text("\x1b[2J\n")
    (base / "xgmi_device_id").write_text("two words\n")
    (base / "hwmon/hwmon2/temp2_input").write_text("")
    (base / "hwmon/hwmon2/temp3_label").write_text("\x00\xff")  # an unknown label: that sensor is not read
    g = collect(mi300x)["gpus"][0]
    # a block not read may hold errors: the totals are not given short
    assert reason(g["ras_ue_total"]) == reason(g["ras_ce_total"]) == "error"
    assert "umc" not in {b["block"] for b in g["ras_blocks"]}
    assert reason(g["bad_pages"]) == "error"
    assert reason(g["vram_total_bytes"]) == "error"
    assert reason(g["bad_page_threshold"]) == "error"  # the formula needs the VRAM size
    assert reason(g["xgmi_device_id"]) == "error"
    assert reason(g["temp_junction_c"]) == "not_found"
    assert g["temp_junction_crit_c"] == 105
    assert reason(g["temp_mem_c"]) == "not_found"
    assert g["power_cap_w"] == 750 and g["xgmi_links"] == 7


def test_unreadable_and_absent_files(mi300x: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    base = mi300x / MI300X_GPU0
    (base / "gpu_metrics").unlink()
    (base / "hwmon/hwmon2/power1_cap").unlink()
    deny(monkeypatch, [base / "ras", mi300x / "sys/class/kfd/kfd/topology/nodes/2/io_links/3/properties"])
    gpus = collect(mi300x)["gpus"]
    g = gpus[0]
    assert reason(g["gpu_metrics_version"]) == reason(g["power_cap_w"]) == "not_found"
    assert reason(g["ras_ue_total"]) == reason(g["bad_pages"]) == "no_permission"
    # a link that cannot be read may be an XGMI link: that GPU's count is unknown, the others' are not
    assert reason(g["xgmi_links"]) == "no_permission"
    assert gpus[1]["xgmi_links"] == 7


def test_bad_page_threshold_parameter(mi300x: Path) -> None:
    param = mi300x / "sys/module/amdgpu/parameters/bad_page_threshold"
    param.write_text("100\n")
    g = collect(mi300x)["gpus"][0]
    assert (g["bad_page_threshold"], g["bad_page_threshold_from"]) == (100, "module parameter")
    param.write_text("0\n")
    assert reason(collect(mi300x)["gpus"][0]["bad_page_threshold"]) == "not_supported"  # retirement off


def test_cards_not_amdgpu_or_not_pci_are_skipped(tmp_path: Path) -> None:
    spec = amd_hosts.radeon_workstation()
    # a compute partition's extra card (a platform device) and an NVIDIA card beside it
    spec["sys/devices/platform/amdgpu_xcp_1/drm/card9/uevent"] = "MAJOR=226\n"
    spec["sys/class/drm/card9"] = ("link", "../../devices/platform/amdgpu_xcp_1/drm/card9")
    spec["sys/devices/platform/amdgpu_xcp_1/drm/card9/device"] = ("link", "../../../amdgpu_xcp_1")
    nv = "sys/devices/pci0000:00/0000:00:02.0/0000:01:00.0"
    spec[f"{nv}/drm/card1/device"] = ("link", "../..")
    spec[f"{nv}/driver"] = ("link", "../../../../bus/pci/drivers/nvidia")
    spec["sys/class/drm/card1"] = ("link", f"../../../{nv}/drm/card1")
    write_tree(tmp_path, spec)
    assert [g["bus_id"] for g in collect(tmp_path)["gpus"]] == ["0000:c3:00.0"]


def test_no_drm_no_amdgpu(tmp_path: Path) -> None:
    out = collect(tmp_path)
    assert reason(out["gpus"]) == reason(out["bad_page_threshold_param"]) == "not_found"
    (tmp_path / "sys/class/drm").mkdir(parents=True)
    out = collect(tmp_path)
    assert out["gpus"] == []
    assert reason(out["bad_page_threshold_param"]) == "not_supported"
