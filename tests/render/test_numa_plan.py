"""What `fix --numa` prints: the NUMA binding plan as a script and as JSON."""

from __future__ import annotations

import json
import shlex

import pytest

from gpudoctor.advice.numa_plan import plan_numa
from gpudoctor.render.numa_plan import render_numa_plan
from tests.conftest import probed


def render(host: str, strategy: str, fmt: str, membind: bool = False, visible: str | None = None) -> str:
    facts = probed(host)
    return render_numa_plan(plan_numa(facts, strategy=strategy, membind=membind, visible=visible), facts, fmt)


def test_shell_plan_has_one_runnable_numactl_line_per_gpu():
    text = render("numa-dgx-8gpu", "node", "shell")
    commands = [line for line in text.splitlines() if not line.startswith("#")]
    assert commands == ["numactl --cpunodebind=0 --preferred=0"] * 4 + ["numactl --cpunodebind=1 --preferred=1"] * 4
    for line in commands:
        assert shlex.split(line)[0] == "numactl"
    assert "# cuda:4 = GPU 4 · 0000:9a:00.0 · NVIDIA H100 80GB HBM3 · GPU-d9000004" in text
    assert "nearest RDMA NIC: mlx5_2 (0000:9c:00.0, same PCIe switch)" in text
    assert "torchrun --nproc-per-node 8 --no-python -- gpudoctor run --numa -- python train.py" in text


def test_shell_plan_says_why_a_gpu_gets_no_line():
    text = render("numa-container-limited", "exclusive", "text")
    commands = [line for line in text.splitlines() if not line.startswith("#")]
    assert commands == ["numactl --physcpubind=2-9 --preferred=0"]
    assert "#   WARNING: GPU 1 (0000:b1:00.0) is on NUMA node 1" in text
    assert "#   (no binding for this GPU)" in text
    assert "--strategy exclusive -- python train.py" in text
    assert "CPUs this process may use: 2-9 (8 of 32" in text


def test_json_plan_carries_argv_sources_and_warnings():
    data = json.loads(render("h200-x2-real", "core-complex", "json", True, "1"))
    assert data["format"] == 1 and data["ok"] is True
    assert (data["strategy"], data["membind"], data["cuda_visible_devices"]) == ("core-complex", True, "1")
    (gpu,) = data["gpus"]
    assert (gpu["cuda_index"], gpu["index"], gpu["bus_id"]) == (0, 1, "0000:00:07.0")
    assert gpu["numa_node_source"] == "NVML memory affinity; sysfs numa_node is -1"
    assert gpu["argv"] == ["numactl", "--physcpubind=0-31", "--membind=0"]
    assert gpu["memory_policy"] == "membind" and gpu["memory_node"] == 0
    assert any("adds up to 6 GiB" in w for w in gpu["warnings"])


def test_unknown_format_is_refused():
    with pytest.raises(ValueError, match="unknown format"):
        render("h200-x2-real", "node", "yaml")
