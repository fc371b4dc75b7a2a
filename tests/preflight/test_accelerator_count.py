"""gate --expect-gpus on nodes without NVIDIA GPUs (rules/gate/gate.yaml, gate-gpu-count): the
Ascend NPUs' device files or the AMD GPUs amdgpu drives are counted, each beside the PCI bus;
a node with any NVIDIA GPU is judged by NVML's list as before (the gate goldens hold that)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from gpudoctor.context import make_context
from gpudoctor.facts import Unavailable
from gpudoctor.findings import Status
from gpudoctor.preflight.policy import Policy
from gpudoctor.preflight.verdict import judge
from gpudoctor.probes import collect_all
from tests.helpers.amd_pci import MI300X, amd_root
from tests.preflight.helpers import cli, facts, ruleset


def _count(data: dict[str, Any], expect: int) -> Any:
    report = judge(data, ruleset(), Policy(expect_gpus=expect))
    [finding] = [f for f in report.findings if f.rule_id == "gate-gpu-count"]
    return finding


def _amd(tmp_path: Path, drivers: tuple[str, ...]) -> dict[str, Any]:
    root = amd_root(tmp_path / "amd", [(MI300X, d) for d in drivers])
    return collect_all(make_context(root=str(root), timeout=20.0, nvml_timeout=5.0))


def test_an_ascend_node_counts_its_npus_device_files():
    data = facts("ascend-910b-healthy")
    passed = _count(data, 8)
    assert passed.status is Status.PASS
    assert passed.message == "8 Ascend NPU device file(s) (/dev/davinci<N>), as expected"
    failed = _count(data, 16)
    assert failed.status is Status.FAIL and failed.message.startswith("8 Ascend NPU device file(s)")
    assert "the policy expects 16" in failed.message and "npu-smi info" in failed.fix


def test_a_container_given_fewer_npus_than_the_bus_shows_says_both():
    data = facts("ascend-910b-healthy")
    data["ascend"]["devices"] = data["ascend"]["devices"][:4]
    assert _count(data, 4).status is Status.PASS
    failed = _count(data, 8)
    assert failed.status is Status.FAIL
    assert failed.message.endswith("the policy expects 8; the PCI bus shows 8")
    assert failed.message.startswith("4 Ascend NPU device file(s)")


def test_npus_whose_device_files_cannot_be_listed_are_unknown_and_block():
    data = facts("ascend-910b-healthy")
    data["ascend"]["devices"] = Unavailable("error", "cannot list /dev: I/O error")
    report = judge(data, ruleset(), Policy(expect_gpus=8))
    [finding] = [f for f in report.findings if f.rule_id == "gate-gpu-count"]
    assert finding.status is Status.UNKNOWN
    assert finding.message == "cannot count the Ascend NPUs: the /dev/davinci<N> files could not be listed"
    assert finding in report.blocking and not report.go


def test_an_amd_node_counts_the_gpus_bound_to_amdgpu(tmp_path):
    data = _amd(tmp_path, ("amdgpu", "amdgpu", "vfio-pci"))
    assert _count(data, 2).message == "2 AMD GPU(s) bound to amdgpu, as expected"
    failed = _count(data, 3)
    assert failed.status is Status.FAIL
    assert failed.message == (
        "2 AMD GPU(s) bound to amdgpu, the policy expects 3; on the PCI bus but not bound to amdgpu: 0000:62:00.0"
    )
    assert "amd-smi list" in failed.fix and "nvidia-smi" not in failed.fix


def test_a_node_with_an_nvidia_gpu_is_counted_by_nvml_whatever_else_is_on_the_bus():
    data = copy.deepcopy(facts("healthy-2gpu"))
    for i in range(3):  # more AMD GPUs than NVIDIA ones: NVIDIA is still what is counted
        data["pci"]["devices"].append(
            {"bus_id": f"0000:c{i}:00.0", "kind": "gpu", "vendor": "amd", "driver": "amdgpu", "class_code": "0x030000"}
        )
    finding = _count(data, 2)
    assert finding.status is Status.PASS and finding.message == "NVML lists 2 GPU(s), as expected"
    assert [e[0] for e in finding.evidence] == ["policy.expect_gpus"]


def test_the_gate_command_on_an_ascend_host(capsys):
    from tests.conftest import HOSTS

    code, out, _ = cli(capsys, "gate", "--root", str(HOSTS / "ascend-910b-healthy"), "--expect-gpus", "9",
                       "--format", "json")
    assert code == 1 and "8 Ascend NPU device file(s) (/dev/davinci<N>), the policy expects 9" in out


def test_the_checks_title_names_no_one_vendors_library(capsys):
    # it counts NVML's GPUs, amdgpu's or the Ascend NPUs' device files: its title says none of them
    # alone (it said "NVML lists ..." on nodes where NVML counts nothing)
    data = facts("ascend-910b-healthy")
    failed = _count(data, 16)
    assert "NVML" not in failed.title and "NPU" in failed.title
    code, shown, _ = cli(capsys, "rules", "show", "gate-gpu-count")
    assert code == 0 and shown.startswith(f"gate-gpu-count: {failed.title}\n")
