"""`topo` text fits the width (issue 15 item 2): the head lines and a device's parts flow onto
indented lines (in the tree under the device, the tree's lines carried on); the GPU table takes
short headers, then becomes one short list per GPU, where a row would not fit. Goldens at 60, 80
and 120 columns of three 8-GPU fixture hosts, the real two-H200 VM and the MI300X host with XGMI
links down."""

from __future__ import annotations

import pytest

from tests.conftest import HOSTS
from tests.helpers.golden import GOLDEN, check
from tests.helpers.width import run_at, too_wide

HOSTS_SHOWN = ("numa-dgx-8gpu", "nvswitch-8gpu", "rdma-8nic", "h200-x2-real", "mi300x-xgmi-down")


@pytest.mark.parametrize("width", (60, 80, 120))
@pytest.mark.parametrize("host", HOSTS_SHOWN)
def test_topo_golden_at_each_width(capsys, monkeypatch, width, host):
    out = run_at(capsys, monkeypatch, width, "topo", "--root", str(HOSTS / host))
    check(GOLDEN / "width" / f"topo-{host}-{width}.txt", out)
    assert max(len(line) for line in out.splitlines()) <= width
    assert too_wide(out, width) == []


def test_the_gpu_table_shortens_its_headers_then_becomes_a_list(capsys, monkeypatch):
    def at(width: int) -> list[str]:
        return run_at(capsys, monkeypatch, width, "topo", "--root", str(HOSTS / "numa-dgx-8gpu")).splitlines()

    wide = at(120)
    assert "GPU  bus id        NUMA node  local CPUs (allowed)  NVLink  nearest RDMA NIC" in wide
    assert "0    0000:18:00.0  0          0-55,112-167          18/18   mlx5_0 (same PCIe switch)" in wide
    assert "GPU  bus id        node  CPUs            NVLink  NIC" in at(80)
    narrow = at(60)
    assert not any(line.startswith("GPU  bus id") for line in narrow)
    at_gpu0 = narrow.index("GPU 0  0000:18:00.0  node 0  CPUs 0-55,112-167  NVLink 18/18")
    assert narrow[at_gpu0 + 1] == "    NIC mlx5_0 (same PCIe switch)"


def test_a_device_that_does_not_fit_continues_under_itself_in_the_tree(capsys, monkeypatch):
    lines = run_at(capsys, monkeypatch, 60, "topo", "--root", str(HOSTS / "numa-dgx-8gpu")).splitlines()
    at = lines.index("│   │   ├── GPU 0  0000:18:00.0  NVIDIA H100 80GB HBM3")
    assert lines[at + 1] == "│   │   │     Gen5 x16  NVLink 18/18  → mlx5_0"
    assert lines[at + 4] == "│   │   └── NIC mlx5_0  0000:1a:00.0  ibp26s0"
    assert lines[at + 5] == "│   │         port 1 ACTIVE 400 Gb/s InfiniBand"
