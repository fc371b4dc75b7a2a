"""Checks on the data tables under rules/data.

Each test states a property of the real world the table must keep (a newer CUDA never needs an older
driver, an NVML reason is one bit, ...), so a mistyped number or a misplaced row fails here.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
import yaml
from packaging.version import Version

from gpudoctor.schemas import validate

DATA_DIR = Path(__file__).resolve().parents[2] / "rules" / "data"
TABLE_FILES = sorted(DATA_DIR.glob("*.yaml"))

DRIVER_RE = re.compile(r"^\d{3}\.\d{2,3}(\.\d{2})?$")  # 450.51.05, 455.23, 570.124.06
CUDA_RE = re.compile(r"^(\d+)\.(\d+)$")


def load(name: str) -> dict:
    with open(DATA_DIR / f"{name}.yaml", encoding="utf-8") as fh:
        return yaml.safe_load(fh)


def cuda_key(key: str) -> tuple[int, int]:
    m = CUDA_RE.match(key)
    assert m, f"CUDA key {key!r} is not MAJOR.MINOR"
    return int(m.group(1)), int(m.group(2))


# ---------------------------------------------------------------- every table


def test_there_are_tables():
    names = {p.stem for p in TABLE_FILES}
    assert {"cuda_driver", "clock_event_reasons", "gpu_architectures", "pcie_gen_speeds", "xid_errors"} <= names
    assert {"nvidia_pci_ids", "memory_error_limits", "pcie_replay_rates", "rocm_os_support", "amdgpu_userspace"} <= (
        names
    )


@pytest.mark.parametrize("path", TABLE_FILES, ids=lambda p: p.stem)
def test_table_validates_against_schema(path):
    with open(path, encoding="utf-8") as fh:
        data = yaml.safe_load(fh)
    assert validate("table", data) is None, validate("table", data)


@pytest.mark.parametrize("path", TABLE_FILES, ids=lambda p: p.stem)
def test_table_name_is_file_stem(path):
    with open(path, encoding="utf-8") as fh:
        data = yaml.safe_load(fh)
    assert data["name"] == path.stem


@pytest.mark.parametrize("path", TABLE_FILES, ids=lambda p: p.stem)
def test_retrieved_is_a_quoted_date_and_keys_are_strings(path):
    with open(path, encoding="utf-8") as fh:
        data = yaml.safe_load(fh)
    assert isinstance(data["retrieved"], str), "quote the date so YAML keeps it a string"
    assert all(isinstance(k, str) for k in data["rows"]), 'quote row keys ("12.4", "0x8")'


@pytest.mark.parametrize("path", TABLE_FILES, ids=lambda p: p.stem)
def test_sources_are_urls(path):
    with open(path, encoding="utf-8") as fh:
        data = yaml.safe_load(fh)
    sources = data["source"] if isinstance(data["source"], list) else [data["source"]]
    for s in sources:
        assert s.startswith("https://"), s


# ---------------------------------------------------------------- cuda_driver


@pytest.fixture(scope="module")
def cuda_rows() -> list[tuple[str, dict]]:
    rows = load("cuda_driver")["rows"]
    return sorted(rows.items(), key=lambda kv: cuda_key(kv[0]))


def test_cuda_keys_cover_11_0_to_newest_without_gaps(cuda_rows):
    keys = [cuda_key(k) for k, _ in cuda_rows]
    newest = max(keys)
    expected = [(11, m) for m in range(0, 9)] + [(12, m) for m in range(0, 10) if m != 7]
    expected += [(13, m) for m in range(0, newest[1] + 1)] if newest[0] == 13 else []
    assert keys[: len(expected)] == expected
    assert (12, 7) not in keys, "CUDA 12.7 was never released"
    assert newest >= (13, 2)


def test_cuda_driver_strings_look_like_driver_versions(cuda_rows):
    for key, row in cuda_rows:
        for value in [row["min_driver"], row["mvc_floor"], *row["updates"].values()]:
            if value is None:
                continue
            assert isinstance(value, str) and DRIVER_RE.match(value), f"{key}: {value!r}"
        for value in [row.get("windows_min_driver"), *row.get("windows_updates", {}).values()]:
            if value is not None:
                assert DRIVER_RE.match(value), f"{key}: windows {value!r}"


def test_cuda_min_driver_never_decreases(cuda_rows):
    previous = None
    for key, row in cuda_rows:
        if row["min_driver"] is None:
            continue
        current = Version(row["min_driver"])
        if previous is not None:
            assert current >= previous[1], f"{key} needs {current}, older {previous[0]} needed {previous[1]}"
        previous = (key, current)


def test_cuda_null_min_driver_only_where_driver_not_bundled(cuda_rows):
    for key, row in cuda_rows:
        if row["min_driver"] is None:
            assert row.get("driver_bundled") is False, key
            assert cuda_key(key) >= (13, 4), key


def test_cuda_updates_raise_the_floor(cuda_rows):
    for key, row in cuda_rows:
        floor = Version(row["min_driver"]) if row["min_driver"] else None
        for label in sorted(row["updates"], key=lambda u: int(u.split()[-1])):
            assert re.match(r"^Update \d+$", label), f"{key}: {label!r}"
            value = Version(row["updates"][label])
            if floor is not None:
                assert value > floor, f"{key} {label} {value} does not raise {floor}"
            floor = value


def test_cuda_mvc_floor_is_one_value_per_major(cuda_rows):
    per_major: dict[int, set[str]] = {}
    for key, row in cuda_rows:
        per_major.setdefault(cuda_key(key)[0], set()).add(row["mvc_floor"])
    assert per_major[11] == {"450.80.02"}
    assert per_major[12] == {"525.60.13"}
    assert len(per_major[13]) == 1 and Version(per_major[13].pop()) >= Version("580")


# NVIDIA's footnote: CUDA 11.0 shipped with a driver older than the 11.x minor-version-compatibility floor.
MVC_ABOVE_GA_DRIVER = {"11.0"}


def test_cuda_mvc_floor_not_above_release_driver(cuda_rows):
    for key, row in cuda_rows:
        if row["min_driver"] is None:
            continue
        if key in MVC_ABOVE_GA_DRIVER:
            assert Version(row["mvc_floor"]) > Version(row["min_driver"]), f"{key} exception no longer holds"
        else:
            assert Version(row["mvc_floor"]) <= Version(row["min_driver"]), key


def test_cuda_mvc_floor_is_the_first_release_driver_of_12_and_13(cuda_rows):
    rows = dict(cuda_rows)
    assert rows["12.0"]["mvc_floor"] == rows["12.0"]["min_driver"]
    assert rows["13.0"]["mvc_floor"] == rows["13.0"]["min_driver"]


def test_cuda_driver_branch_matches_major(cuda_rows):
    # 11.x drivers are R450..R520, 12.x R525..R575, 13.x R580 and later.
    bounds = {11: (450, 525), 12: (525, 580), 13: (580, 10_000)}
    for key, row in cuda_rows:
        low, high = bounds[cuda_key(key)[0]]
        for value in [row["min_driver"], *row["updates"].values()]:
            if value is not None:
                assert low <= Version(value).major < high, f"{key}: {value}"


# ---------------------------------------------------------------- clock_event_reasons

VERDICTS = {"normal", "info", "warning", "error"}


def test_clock_reason_keys_are_single_bits():
    rows = load("clock_event_reasons")["rows"]
    seen = 0
    for key, row in rows.items():
        assert re.match(r"^0x[0-9a-f]+$", key), key
        bit = int(key, 16)
        assert bit > 0 and bit & (bit - 1) == 0, f"{key} is not a single bit"
        assert not seen & bit
        seen |= bit
        assert row["verdict"] in VERDICTS
        assert row["name"] and row["meaning"]
    assert seen & 0x1FF == 0x1FF, "bits 0x1..0x100 must all be present"


def test_clock_reason_dcgm_mask_is_0xe8():
    rows = load("clock_event_reasons")["rows"]
    mask = 0
    for key, row in rows.items():
        if row["dcgm_failure"]:
            mask |= int(key, 16)
    assert mask == 0xE8


def test_clock_reason_names():
    rows = load("clock_event_reasons")["rows"]
    assert rows["0x8"]["name"] == "HwSlowdown"
    assert rows["0x40"]["name"] == "HwThermalSlowdown"
    assert rows["0x80"]["name"] == "HwPowerBrakeSlowdown"
    assert rows["0x1"]["verdict"] == "normal"


# ---------------------------------------------------------------- gpu_architectures

ARCH_ORDER = ["kepler", "maxwell", "pascal", "volta", "turing", "ampere", "ada", "hopper", "blackwell"]


def test_architectures_present_in_order():
    rows = load("gpu_architectures")["rows"]
    assert list(rows) == ARCH_ORDER


def test_compute_capabilities_increase_across_architectures():
    rows = load("gpu_architectures")["rows"]
    flat = []
    for arch in rows:
        ccs = rows[arch]["compute_capabilities"]
        assert ccs and all(isinstance(c, str) and re.match(r"^\d+\.\d$", c) for c in ccs), arch
        flat.extend(Version(c) for c in ccs)
    assert flat == sorted(flat) and len(set(flat)) == len(flat)


def test_architecture_fields():
    rows = load("gpu_architectures")["rows"]
    ids = [row["nvml_arch_id"] for row in rows.values()]
    assert ids == list(range(2, 2 + len(ids)))
    for arch, row in rows.items():
        assert row["open_kernel_module"] in {"required", "supported", "unsupported"}, arch
        assert row["last_driver_branch"] is None or re.match(r"^\d{3}$", row["last_driver_branch"]), arch
        assert row["cuda_last_major"] in {None, "11", "12"}, arch
        assert row["min_driver"] is None or DRIVER_RE.match(row["min_driver"]), arch
        assert row["data_center_examples"], arch
    # Open modules need the GSP, first in Turing; Blackwell needs them.
    before_turing = ARCH_ORDER[: ARCH_ORDER.index("turing")]
    assert all(rows[a]["open_kernel_module"] == "unsupported" for a in before_turing)
    assert rows["blackwell"]["open_kernel_module"] == "required"
    # An architecture whose driver branch ended also lost CUDA support, and vice versa.
    for arch, row in rows.items():
        assert (row["last_driver_branch"] is None) == (row["cuda_last_major"] is None), arch
    assert rows["kepler"]["last_driver_branch"] == "470"
    assert {rows[a]["last_driver_branch"] for a in ("maxwell", "pascal", "volta")} == {"580"}


def test_architecture_min_driver_increases_and_matches_cuda_table():
    arch_rows = load("gpu_architectures")["rows"]
    cuda_rows = load("cuda_driver")["rows"]
    known = [Version(r["min_driver"]) for r in arch_rows.values() if r["min_driver"]]
    assert known == sorted(known)
    # Each one is the GA driver of a CUDA release (the first toolkit for that architecture).
    ga_drivers = {r["min_driver"] for r in cuda_rows.values() if r["min_driver"]}
    for arch, row in arch_rows.items():
        if row["min_driver"]:
            assert row["min_driver"] in ga_drivers, arch


# ---------------------------------------------------------------- pcie_gen_speeds


def test_pcie_generations_match_encoding_and_double():
    rows = load("pcie_gen_speeds")["rows"]
    assert list(rows) == [str(g) for g in range(1, 7)]
    efficiency = {"8b/10b": 8 / 10, "128b/130b": 128 / 130, "PAM4 FLIT (242B/256B)": 242 / 256}
    previous = None
    for gen, row in rows.items():
        expected = row["gts"] * efficiency[row["encoding"]] / 8
        assert row["per_lane_gbps"] == pytest.approx(expected, abs=0.001), gen
        if previous is not None:
            # Each generation roughly doubles usable bandwidth (Gen3 did it with 8 GT/s + 128b/130b).
            assert row["gts"] > previous["gts"], gen
            assert 1.9 <= row["per_lane_gbps"] / previous["per_lane_gbps"] <= 2.0, gen
        previous = row


# ---------------------------------------------------------------- xid_errors

SEVERITIES = {"error", "warning", "info"}
TOOLS = {"k8s_device_plugin", "aznhc", "dcgm_health"}
REQUIRED_XIDS = {13, 31, 43, 45, 48, 61, 62, 63, 64, 68, 69, 74, 79, 92, 94, 95, 119, 120, 140}
K8S_IGNORED = {13, 31, 43, 45, 68, 109}
AZNHC_FATAL = {48, 56, 57, 58, 62, 63, 64, 65, 68, 69, 73, 74, 79, 80, 81, 92, 119, 120}


def test_xid_rows():
    rows = load("xid_errors")["rows"]
    assert {int(k) for k in rows} >= REQUIRED_XIDS
    for key, row in rows.items():
        assert key.isdigit(), key
        assert row["severity"] in SEVERITIES, key
        assert row["mnemonic"] and row["name"] and row["action"], key
        assert set(row["fatal_in"]) <= TOOLS, key


def test_xid_tool_columns_match_tool_lists():
    rows = load("xid_errors")["rows"]
    for key, row in rows.items():
        xid = int(key)
        assert ("k8s_device_plugin" in row["fatal_in"]) == (xid not in K8S_IGNORED), key
        assert ("aznhc" in row["fatal_in"]) == (xid in AZNHC_FATAL), key
        assert ("dcgm_health" in row["fatal_in"]) == (xid == 95), key


def test_xid_severity_follows_nvidia_reset_buckets():
    rows = load("xid_errors")["rows"]
    for key, row in rows.items():
        if row["nvidia_immediate"] in {"RESET_GPU", "RESTART_BM"}:
            assert row["severity"] == "error", key
    assert rows["79"]["severity"] == "error"
    assert rows["43"]["severity"] == "info"


# ---------------------------------------------------------------- nvidia_pci_ids


def _pci_ranges() -> list[tuple[int, int, str]]:
    rows = load("nvidia_pci_ids")["rows"]
    out = []
    for key, row in rows.items():
        m = re.fullmatch(r"0x([0-9a-f]{4})-0x([0-9a-f]{4})", key)
        assert m, f"range key {key!r} is not 0xLOW-0xHIGH in lower-case hex"
        out.append((int(m.group(1), 16), int(m.group(2), 16), row["architecture"]))
    return out


def test_pci_ranges_are_ordered_disjoint_and_name_known_architectures():
    ranges = _pci_ranges()
    assert ranges == sorted(ranges)
    for (lo, hi, arch), nxt in zip(ranges, ranges[1:] + [None]):
        assert lo <= hi
        assert arch in ARCH_ORDER
        if nxt is not None:
            assert hi < nxt[0], f"{lo:#x}-{hi:#x} overlaps {nxt[0]:#x}"


@pytest.mark.parametrize(
    "device, arch",
    [
        ("0x102d", "kepler"),  # Tesla K80
        ("0x13f2", "maxwell"),  # Tesla M60
        ("0x15f8", "pascal"),  # Tesla P100 PCIe 16GB
        ("0x1b06", "pascal"),  # GeForce GTX 1080 Ti
        ("0x1db5", "volta"),  # V100 SXM2 32GB
        ("0x1eb8", "turing"),  # T4
        ("0x20b2", "ampere"),  # A100 SXM4 80GB
        ("0x2204", "ampere"),  # GeForce RTX 3090
        ("0x26b9", "ada"),  # L40S
        ("0x27b8", "ada"),  # L4
        ("0x2330", "hopper"),  # H100 SXM5 80GB
        ("0x2335", "hopper"),  # H200 (the real fixture host)
        ("0x2342", "hopper"),  # GH200
        ("0x2901", "blackwell"),  # B200
        ("0x2b85", "blackwell"),  # GeForce RTX 5090
        ("0x3182", "blackwell"),  # B300
    ],
)
def test_known_devices_map_to_their_architecture(device, arch):
    number = int(device, 16)
    found = [a for lo, hi, a in _pci_ranges() if lo <= number <= hi]
    assert found == [arch]


def test_unknown_device_ids_fall_in_no_range():
    numbers = [0x1040, 0x1180 - 1, 0x3340]  # Fermi GF119, a gap, GB120 (architecture not stated)
    for number in numbers:
        assert not [a for lo, hi, a in _pci_ranges() if lo <= number <= hi], hex(number)


def test_pci_table_architectures_cover_the_open_module_requirements():
    archs = {a for _, _, a in _pci_ranges()}
    assert archs == set(ARCH_ORDER)


# ---------------------------------------------------------------- memory_error_limits / pcie_replay_rates


def test_memory_error_limits_follow_dcgm():
    rows = load("memory_error_limits")["rows"]
    assert rows["retired_pages_total"]["limit"] == 63  # DCGM_LIMIT_MAX_RETIRED_PAGES
    assert rows["retired_pages_dbe_soft"]["limit"] == 15
    for key, row in rows.items():
        assert row["compare"] in {">", ">="}, key
        assert row["verdict"] in {"error", "warning", "info"}, key
        assert isinstance(row["limit"], int) and row["limit"] > 0, key


def test_pcie_replay_rates_are_the_ber_limit_of_each_generation():
    rates = load("pcie_replay_rates")["rows"]
    speeds = load("pcie_gen_speeds")["rows"]
    assert set(rates) == set(speeds)
    for gen, row in rates.items():
        # BER 1e-12 at the raw transfer rate, per minute: GT/s x 1e9 x 1e-12 x 60.
        assert row["per_lane_per_min"] == pytest.approx(speeds[gen]["gts"] * 60 / 1000), gen
    assert math.ceil(rates["5"]["per_lane_per_min"] * 16) == 31  # DCGM: 31 per minute for Gen5 x16
    assert math.ceil(rates["4"]["per_lane_per_min"] * 16) == 16


# ---------------------------------------------------------------- ROCm tables

OS_KEY = re.compile(r"^(ubuntu|rhel|sles|ol|debian|centos|azurelinux) \d+(\.\d+)?$")


def test_rocm_os_support_rows():
    rows = load("rocm_os_support")["rows"]
    assert list(rows) == sorted(rows, key=lambda k: tuple(int(p) for p in k.split(".")))
    for release, row in rows.items():
        assert re.fullmatch(r"\d+\.\d+", release), release
        assert row["os"], release
        for os_key, kernels in row["os"].items():
            assert OS_KEY.match(os_key), f"{release}: {os_key!r}"
            for kernel in kernels:
                assert re.fullmatch(r"\d+\.\d+", kernel), f"{release} {os_key}: {kernel!r}"
    # Ubuntu 24.04 first appears with ROCm 6.2; CentOS 7 and Ubuntu 20.04 were dropped in 6.2.
    assert "ubuntu 24.04" not in rows["6.1"]["os"] and "ubuntu 24.04" in rows["6.2"]["os"]
    assert "centos 7" in rows["6.1"]["os"] and "centos 7" not in rows["6.2"]["os"]
    assert "ubuntu 20.04" not in rows["6.2"]["os"]


def test_amdgpu_userspace_rows():
    rows = load("amdgpu_userspace")["rows"]
    releases = []
    for module, row in rows.items():
        assert re.fullmatch(r"\d+\.\d+", module), module
        assert row["rocm"] in row["user_space"], f"{module}: a driver supports its own ROCm release"
        assert row["user_space"] == sorted(row["user_space"], key=lambda v: tuple(map(int, v.split(".")))), module
        releases.append(tuple(map(int, row["rocm"].split("."))))
    assert releases == sorted(releases), "newer amdgpu modules come with newer ROCm releases"
