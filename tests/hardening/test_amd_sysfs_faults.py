"""A hostile amdgpu / KFD sysfs under --root: the amdgpu probe stays bounded, contained and sound.

The files probes/amdgpu.py and probes/kfd.py read (hwmon, gpu_metrics, RAS counts and bad
pages, VRAM, XGMI, partitions, product name, the KFD topology, the bad_page_threshold parameter)
of a copy of the MI300X fixture host, broken every way test_sysfs_faults breaks files, then the
shapes only these files invite: a gpu_metrics of 1 GiB, a FIFO or a device node where a binary
attribute was, links out of the root, counts beyond 64 bits, a topology node that claims to be
any PCI function. What a user depends on: the probe runs to the end within seconds, every fact it
could not read is unavailable with a reason, the snapshot fits its schema, nothing outside the
root reaches the output, and `check` exits 0 or 1.
"""

from __future__ import annotations

import os
import random
import re
import struct
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from gpudoctor.cli.root import run
from gpudoctor.context import make_context
from gpudoctor.facts import Unavailable
from gpudoctor.probes import amdgpu
from tests.conftest import HOSTS
from tests.hardening.roots import climbing, host_copy, replace_with_link
from tests.hardening.test_sysfs_faults import CORRUPTIONS, assert_sound, check_exits_0_or_1, fifo_watchdog, probe

SOURCE = HOSTS / "mi300x-8gpu-healthy"
# Card 0's PCI function (sys/class/drm/card0/device) and its KFD topology node.
GPU0 = "sys/devices/pci0000:13/0000:13:01.0/0000:14:00.0/0000:15:00.0"
TOPOLOGY = "sys/class/kfd/kfd/topology/nodes"
TAG = uuid.uuid4().hex[:12]
# The files the amdgpu probe reads and no other probe does.
AMD_FILE = re.compile(
    r"/(hwmon/hwmon\d+/[^/]+|gpu_metrics|ras/[^/]+|mem_info_vram_\w+|xgmi_device_id|xgmi_hive_info/[^/]+"
    r"|current_(compute|memory)_partition|product_name|parameters/bad_page_threshold)$|/kfd/.*properties$"
)


def amd_files(root: Path) -> list[Path]:
    files = [p for p in root.rglob("*") if p.is_file() and not p.is_symlink()]
    return sorted(p for p in files if AMD_FILE.search("/" + str(p.relative_to(root))))


def gpus(snapshot: dict[str, Any]) -> list[dict[str, Any]]:
    found = snapshot["amdgpu"]["gpus"]
    assert isinstance(found, list), found
    return found


def gpu0(snapshot: dict[str, Any]) -> dict[str, Any]:
    return next(g for g in gpus(snapshot) if g["bus_id"] == "0000:15:00.0")


def fresh(tmp_path: Path) -> Path:
    return host_copy(SOURCE, tmp_path / "host")


def test_the_fixture_reads_before_it_is_broken(tmp_path: Path) -> None:
    # the attacks below are against a probe that reads this tree: eight GPUs, each with its facts
    snapshot = probe(fresh(tmp_path))
    assert len(gpus(snapshot)) == 8 and gpu0(snapshot)["ras_ue_total"] == 0
    assert len(amd_files(SOURCE)) > 100


@pytest.mark.parametrize("mode", list(CORRUPTIONS))
def test_every_amdgpu_file_broken_the_same_way(tmp_path: Path, capsys: pytest.CaptureFixture[str], mode: str) -> None:
    root = fresh(tmp_path)
    rng = random.Random(mode)
    for path in amd_files(root):
        CORRUPTIONS[mode](path, rng)
    snapshot = probe(root)
    assert_sound(snapshot)
    if isinstance(snapshot["amdgpu"]["gpus"], list):
        for gpu in gpus(snapshot):
            # a garbled RAS file is never read as "no errors"
            assert gpu["ras_ue_total"] != 0 or mode in ("missing", "directory", "symlink-loop", "dangling-link")
    check_exits_0_or_1(capsys, root)


@pytest.mark.parametrize("seed", range(3))
def test_random_mix_of_amdgpu_breakage(tmp_path: Path, seed: int) -> None:
    root = fresh(tmp_path)
    rng = random.Random(seed)
    modes = list(CORRUPTIONS)
    for path in amd_files(root):
        if rng.random() < 0.3:
            CORRUPTIONS[rng.choice(modes)](path, rng)
    assert_sound(probe(root))


def test_a_gpu_metrics_of_a_gigabyte_is_read_only_to_its_limit(tmp_path: Path) -> None:
    root = fresh(tmp_path)
    metrics = _emptied(root / GPU0 / "gpu_metrics")
    table = struct.pack("<HBB", amdgpu.METRICS_V13_SIZE, 1, 3).ljust(amdgpu.METRICS_V13_THROTTLE, b"\0")
    with open(metrics, "wb") as out:  # sparse: 1 GiB on paper, a few blocks on disk
        out.write(table + struct.pack("<Q", 1 << 33))  # a temperature throttler bit
        out.truncate(1 << 30)
    started = time.monotonic()
    snapshot = probe(root)
    assert time.monotonic() - started < 10
    assert_sound(snapshot)
    gpu = gpu0(snapshot)
    assert gpu["gpu_metrics_version"] == "1.3" and gpu["indep_throttle_status"] == 1 << 33


def test_fifos_and_device_nodes_are_not_opened(tmp_path: Path) -> None:
    root = fresh(tmp_path)
    os.mkfifo(_emptied(root / GPU0 / "gpu_metrics"))
    os.mkfifo(_emptied(root / GPU0 / "ras/umc_err_count"))
    zero = _emptied(root / GPU0 / "ras/gpu_vram_bad_pages")
    try:
        os.mknod(zero, 0o644 | 0o020000, os.makedev(1, 5))  # this machine's /dev/zero, in the tree
    except OSError:
        pytest.skip("needs root to make a device node")
    # a link to /dev/zero is taken inside the root, where there is none
    replace_with_link(root / GPU0 / "mem_info_vram_total", "/dev/zero")
    started = time.monotonic()
    snapshot = probe(root)
    assert time.monotonic() - started < 10
    assert_sound(snapshot)
    gpu = gpu0(snapshot)
    for key in ("gpu_metrics_version", "ras_ue_total", "bad_pages", "vram_total_bytes"):
        assert isinstance(gpu[key], Unavailable), (key, gpu[key])
    assert "FIFO" in gpu["gpu_metrics_version"].detail and "character device" in gpu["bad_pages"].detail


def _emptied(path: Path) -> Path:
    path.unlink()
    return path


def test_links_out_of_the_root_are_not_followed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = fresh(tmp_path)
    outside = tmp_path / "outside"
    device = outside / "devices/pci0000:13/0000:13:01.0/0000:14:00.0/0000:15:00.0"
    (device / "ras").mkdir(parents=True)
    (device / "driver").symlink_to("amdgpu")  # a "driver" link named like the real one
    (device / "ras/umc_err_count").write_text("ue: 7\nce: 0\n")
    (outside / "product_name").write_text(f"OUTSIDE{TAG}product\n")
    (outside / "properties").write_text(f"gfx_target_version 90402\nlocation_id 21760\nOUTSIDE{TAG} 1\n")
    # card0's whole device, absolute; card1's, climbing; card2's product name; card2's KFD node
    replace_with_link(root / "sys/class/drm/card0", device)
    replace_with_link(root / "sys/class/drm/card1", climbing(root / "sys/class/drm", device))
    card2 = root / "sys/devices/pci0000:53/0000:53:01.0/0000:54:00.0/0000:55:00.0"
    replace_with_link(card2 / "product_name", outside / "product_name")
    replace_with_link(root / TOPOLOGY / "4/properties", climbing(root / TOPOLOGY / "4", outside / "properties"))
    snapshot = probe(root)
    assert_sound(snapshot)
    found = {g["bus_id"]: g for g in gpus(snapshot)}
    assert sorted(found) == [
        "0000:55:00.0",
        "0000:75:00.0",
        "0000:95:00.0",
        "0000:b5:00.0",
        "0000:d5:00.0",
        "0000:f5:00.0",
    ]
    assert isinstance(found["0000:55:00.0"]["product_name"], Unavailable)
    assert isinstance(found["0000:55:00.0"]["kfd_node"], Unavailable)
    with fifo_watchdog(root):
        code = run(["probe", "--root", str(root)])
    out, err = capsys.readouterr()
    assert code == 0 and f"OUTSIDE{TAG}" not in out + err and '"ras_ue_total": 7' not in out


@pytest.mark.parametrize(
    ("text", "ue"),
    [
        ("ue: 18446744073709551615\nce: 0\n", 18446744073709551615),  # the largest u64 the kernel prints
        ("ue: 99999999999999999999\nce: 0\n", "error"),  # more than 64 bits
        ("ue: " + "9" * 5000 + "\nce: 0\n", "error"),
        ("ue: -1\nce: 0\n", "error"),
        ("ue: 1\n" * 10_000 + "ce: 0\n", "error"),  # longer than a RAS count file can be
        ("ce: 0\nue: 3\nde: 9\n", 3),  # newer kernels' deferred count, ignored
    ],
)
def test_ras_counts_beyond_what_the_kernel_prints(tmp_path: Path, text: str, ue: Any) -> None:
    root = fresh(tmp_path)
    path = root / GPU0 / "ras/umc_err_count"
    path.unlink()
    path.write_text(text)
    snapshot = probe(root)
    assert_sound(snapshot)
    got = gpu0(snapshot)["ras_ue_total"]
    if ue == "error":
        assert isinstance(got, Unavailable) and got.reason == "error", got
    else:
        assert got == ue


def test_a_kfd_node_that_claims_every_bus_id(tmp_path: Path) -> None:
    # topology nodes with 20-digit numbers: the bus id they name is garbage, never a GPU's
    root = fresh(tmp_path)
    for number in range(100, 110):
        node = root / TOPOLOGY / str(number)
        node.mkdir()
        (node / "properties").write_text(f"gfx_target_version {'9' * 20}\ndomain {'9' * 20}\nlocation_id {'9' * 20}\n")
    snapshot = probe(root)
    assert_sound(snapshot)
    assert [g["kfd_node"] for g in gpus(snapshot)] == [2, 3, 4, 5, 6, 7, 8, 9]


def test_thousands_of_cards_ras_blocks_and_hwmon_files_keep_the_deadline(tmp_path: Path) -> None:
    root = fresh(tmp_path)
    ras = root / GPU0 / "ras"
    for n in range(2000):
        (ras / f"block{n}_err_count").write_text("ue: 0\nce: 0\n")
    hwmon = next((root / GPU0 / "hwmon").iterdir())
    for n in range(2000):
        (hwmon / f"temp{n % 99}_x{n}").write_text("1\n")
    drm = root / "sys/class/drm"
    for n in range(8, 3000):
        (drm / f"card{n}").symlink_to("card0")
    started = time.monotonic()
    snapshot = collect(root)
    assert time.monotonic() - started < 15
    assert_sound(snapshot)
    assert len(gpus(snapshot)) == 8  # one per bus id, however many cards name it
    assert len(gpu0(snapshot)["ras_blocks"]) == amdgpu.MAX_RAS_BLOCKS


def collect(root: Path) -> dict[str, Any]:
    from gpudoctor.probes import collect_all

    with fifo_watchdog(root):
        return collect_all(make_context(root=str(root), timeout=20.0, nvml_timeout=5.0))
