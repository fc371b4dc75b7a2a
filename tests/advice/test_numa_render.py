"""What `fix --numa` prints (shell and JSON), its standalone entry, and the NUMA fixture generator."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys

import pytest

from gpudoctor.advice import numa_render
from gpudoctor.advice.numa_render import render_numa_plan
from tests.conftest import HOSTS, REPO, probed
from tests.helpers.tree import diff_tree


def test_shell_plan_has_one_runnable_numactl_line_per_gpu():
    text = render_numa_plan(probed("numa-dgx-8gpu"), "node", "shell", False, None)
    commands = [line for line in text.splitlines() if not line.startswith("#")]
    assert commands == ["numactl --cpunodebind=0 --preferred=0"] * 4 + ["numactl --cpunodebind=1 --preferred=1"] * 4
    for line in commands:
        assert shlex.split(line)[0] == "numactl"
    assert "# cuda:4 = GPU 4 · 0000:9a:00.0 · NVIDIA H100 80GB HBM3 · GPU-d9000004" in text
    assert "nearest RDMA NIC: mlx5_2 (0000:9c:00.0, same PCIe switch)" in text
    assert "torchrun --nproc-per-node 8 --no-python -- gpudoctor run --numa -- python train.py" in text


def test_shell_plan_says_why_a_gpu_gets_no_line():
    text = render_numa_plan(probed("numa-container-limited"), "exclusive", "text", False, None)
    commands = [line for line in text.splitlines() if not line.startswith("#")]
    assert commands == ["numactl --physcpubind=2-9 --preferred=0"]
    assert "#   WARNING: GPU 1 (0000:b1:00.0) is on NUMA node 1" in text
    assert "#   (no binding for this GPU)" in text
    assert "--strategy exclusive -- python train.py" in text
    assert "CPUs this process may use: 2-9 (8 of 32" in text


def test_json_plan_carries_argv_sources_and_warnings():
    data = json.loads(render_numa_plan(probed("h200-x2-real"), "core-complex", "json", True, "1"))
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
        render_numa_plan(probed("h200-x2-real"), "node", "yaml", False, None)


def test_standalone_entry_plans_a_snapshot(capsys):
    snapshot = str(REPO / "tests" / "fixtures" / "snapshots" / "h200-x2.json")
    assert numa_render.main(["--facts", snapshot, "--strategy", "exclusive"]) == 0
    out = capsys.readouterr().out
    assert [line for line in out.splitlines() if not line.startswith("#")] == [
        "numactl --physcpubind=0-15 --preferred=0",
        "numactl --physcpubind=16-31 --preferred=0",
    ]


def test_standalone_entry_bad_input_exits_2_with_one_line(capsys, tmp_path):
    assert numa_render.main(["--facts", str(tmp_path / "missing.json")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no such file" in err
    assert numa_render.main(["--root", str(HOSTS / "numa-dgx-8gpu"), "--strategy", "nearest"]) == 2


def test_standalone_entry_runs_as_a_module():
    proc = subprocess.run(
        [sys.executable, "-m", "gpudoctor.advice.numa_render", "--root", str(HOSTS / "numa-1socket-4ccx"),
         "--strategy", "core-complex", "--format", "json"],
        capture_output=True, text=True, timeout=60, cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr
    assert [g["cpus"] for g in json.loads(proc.stdout)["gpus"]] == ["0-7,32-39", "8-15,40-47", "16-23,48-55",
                                                                    "24-31,56-63"]


def test_numa_fixture_hosts_match_their_generator():
    from tests.fixtures.make_numa_hosts import SCENARIOS

    for name, build in SCENARIOS.items():
        problems = diff_tree(HOSTS / name, build())
        assert not problems, f"run tests/fixtures/make_numa_hosts.py: {problems[:5]}"
