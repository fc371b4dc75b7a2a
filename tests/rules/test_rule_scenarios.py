"""End to end: every built-in rule over every fixture host, probed from its files.

Each scenario must fail exactly the rules its name promises (by rule id and subject), no rule may
break, the healthy-hardware scenarios must leave nothing unknown, and where NVML is down every
unknown must be explained by that fault. A surprise here means a rule or a fixture is wrong.
"""

from __future__ import annotations

from typing import Any

import pytest

from gpudoctor.engine.loader import load_rules
from gpudoctor.engine.runner import run_rules
from gpudoctor.findings import Status
from tests.conftest import HOSTS, probed

RULESET = load_rules(include_plugins=False)

GPU0, GPU1 = "0000:18:00.0", "0000:9a:00.0"  # the two H100s of healthy-2gpu and its variants
HOST = "host"
# The eight H100 SXM5 of the numa-dgx-8gpu HGX board (and the hosts built on it).
HGX_GPUS = (
    "0000:18:00.0", "0000:19:00.0", "0000:3a:00.0", "0000:3b:00.0",
    "0000:9a:00.0", "0000:9b:00.0", "0000:ba:00.0", "0000:bb:00.0",
)

# (rule id, subject) pairs that FAIL; the subject is a GPU's or a port's bus id, or "host".
EXPECTED_FAILURES: dict[str, set[tuple[str, str]]] = {
    "healthy-2gpu": set(),
    # 8 x Ascend 910B, driver, CANN and torch_npu in place: nothing fails; with torch upgraded under
    # torch_npu, the one mismatch (no NVIDIA rule fires on a host without NVIDIA GPUs).
    "ascend-910b-healthy": set(),
    "ascend-torch-npu-mismatch": {("ascend-torch-npu-torch-mismatch", HOST)},
    # 8 x MI300X (amdgpu's sysfs, no NVML): healthy, nothing fails; one GPU with uncorrectable UMC errors;
    # 0000:35:00.0 cut off from 0000:15:00.0 and 0000:55:00.0 (all three have fewer XGMI links than the
    # other five); one GPU's junction 2 °C under its critical limit. A Radeon PRO W7900 capped at 200 W.
    "mi300x-8gpu-healthy": set(),
    "mi300x-ras-uncorrectable": {("amd-ras-uncorrectable-errors", "0000:75:00.0")},
    "mi300x-xgmi-down": {("amd-xgmi-links-down", bus) for bus in ("0000:15:00.0", "0000:35:00.0", "0000:55:00.0")},
    "mi300x-thermal-throttle": {("amd-junction-near-critical", "0000:b5:00.0")},
    "radeon-workstation": {("amd-power-cap-below-default", "0000:c3:00.0")},
    # A real capture from a healthy 2 x H200 (NVLink) VM host, UUIDs and serials scrubbed: nothing may fail.
    "h200-x2-real": set(),
    # GPU 1 trained at x8 of x16, still Gen5 in P0: only the width rule.
    "pcie-degraded": {("pcie-width-degraded", GPU1)},
    # GPU 0 at 91 °C (slowdown 89 °C) with clocks event reasons 0x60 = HwThermal | SwThermal.
    "thermal-slowdown": {
        ("hw-slowdown-active", GPU0),
        ("sw-thermal-slowdown", GPU0),
        ("temperature-near-slowdown", GPU0),
    },
    # Module 550.54.15 loaded, libraries 550.90.07: NVML refuses with a version mismatch. The file-based
    # skew rule stands aside when NVML already reports the mismatch, so the fault is reported once.
    "nvml-mismatch": {("nvml-driver-library-mismatch", HOST)},
    # A fresh install: RTX 3090 on the bus and taken by nouveau, no nvidia module. nouveau-not-blacklisted
    # does not apply while nouveau is loaded (nouveau-loaded says it all).
    "no-driver": {
        ("nvidia-driver-not-loaded", HOST),
        ("nouveau-loaded", HOST),
        ("nouveau-bound-to-gpu", "0000:01:00.0"),
    },
    # NUMA fixture hosts (tests/fixtures/make_numa_hosts.py). Healthy hardware on each:
    # 64 CPUs, 4 GPUs and no OMP_NUM_THREADS in the environment: the info-level omp-num-threads-unset.
    "numa-1socket-4ccx": {("omp-num-threads-unset", HOST)},
    # healthy-2gpu with GPU 1 moved under GPU 0's root port and ACS request + completion redirect on
    # the three switch downstream ports above the two GPUs and the NIC; the root port is not judged.
    "acs-redirect": {("pcie-acs-redirect", f"0000:17:0{port}.0") for port in (1, 2, 3)},
    "numa-dgx-8gpu": set(),
    # numa-dgx-8gpu with one NDR HCA per GPU (mlx5_0..7): healthy.
    "rdma-8nic": set(),
    # rdma-8nic with mlx5_1 (0000:3c:00.0) down, mlx5_6 (0000:ac:00.0) at 200 of 400 Gb/s and link errors
    # counted on mlx5_3 (0000:bc:00.0), the last as information.
    "rdma-degraded": {
        ("rdma-port-not-active", "0000:3c:00.0"),
        ("rdma-port-rate-below-peers", "0000:ac:00.0"),
        ("rdma-port-error-counters", "0000:bc:00.0"),
    },
    # Every NVML answer healthy, but the driver's recovery action for GPU 1 is a GPU reset.
    "gpu-reset-required": {("gpu-recovery-reset", "0000:9a:00.0")},
    # The same HGX board with every NVLink down: each H100 SXM5 has 0 of its 18 links up. The GPUs agree
    # with each other, so only the comparison with the spec (nvlink-links-below-spec) sees it.
    "nvlink-down-8gpu": {("nvlink-links-below-spec", bus) for bus in HGX_GPUS},
    # numa-dgx-8gpu with its 4 NVSwitches and nv-fabricmanager running: healthy; without the process,
    # only the fabric manager rule.
    "nvswitch-8gpu": set(),
    "fabric-manager-stopped": {("nvswitch-fabric-manager-not-running", HOST)},
    # nvswitch-8gpu whose kernel log has a fatal SXid and non-fatal ones (the info-level rule).
    "nvswitch-sxid-fatal": {("nvswitch-sxid-fatal", HOST), ("nvswitch-sxid-nonfatal", HOST)},
    # numa-dgx-8gpu whose kernel log has an NVRM API mismatch of another client (NVML and
    # libnvidia-ml match the module, so only the kernel log tells).
    "kmsg-api-mismatch": {("driver-api-mismatch-in-kernel-log", HOST)},
    # numa-dgx-8gpu whose GPU 0000:bb:00.0 failed RmInitAdapter: on the bus, not in NVML.
    # (gpu-missing-from-nvml stands aside: superseded_by names the RmInitAdapter rule)
    "rm-init-adapter-failed": {("gpu-rm-init-adapter-failed", "0000:bb:00.0")},
    # Booted into a new kernel without an nvidia module for it (DKMS's build failed; the headers are
    # there / never installed): one finding each, with the exact step; nvidia-driver-not-loaded stands
    # aside, since its "install a driver" is the wrong advice here.
    "kernel-upgrade-no-module": {("nvidia-module-missing-for-running-kernel", HOST)},
    "dkms-headers-missing": {("nvidia-dkms-headers-missing", HOST)},
    # The fabric manager package a driver release behind: it refused to start, so it is not running
    # and no GPU's fabric registration started; one finding names the cause (the others stand aside:
    # superseded_by).
    "fabric-manager-mismatch": {("fabric-manager-version-mismatch", HOST)},
    # The fabric manager running at the driver's version, every GPU's registration still in progress.
    "fabric-in-progress": {("fabric-state-not-completed", bus) for bus in HGX_GPUS},
    # GPUs 0000:00:05.0-08.0 have numa_node -1 on a 2-node VM and NVML spans both nodes.
    "numa-vm-2node": {("gpu-numa-node-unknown", f"0000:00:0{slot}.0") for slot in (5, 6, 7, 8)},
    # A container given 0000:31:00.0 (node 0) and 0000:b1:00.0 (node 1) with cpuset 2-9 (node 0): b1:00.0
    # has no allowed CPU near it. The other findings are about the host GPUs 0000:17:00.0 and 0000:ca:00.0
    # that sysfs shows but the container was not given: false alarms of rules that do not yet know which
    # GPUs a container has (its /proc/driver/nvidia/gpus and dev/nvidia<N> list only its own).
    "numa-container-limited": {
        ("allowed-cpus-exclude-gpu", "0000:b1:00.0"),
        ("allowed-cpus-exclude-gpu", "0000:ca:00.0"),
        ("gpu-missing-from-nvml", "0000:17:00.0"),
        ("gpu-missing-from-nvml", "0000:ca:00.0"),
    },
}

# Driver 590.44.01 installed on a node of two Tesla P100s: R590 dropped Pascal, the module refused
# both and did not load (NVML down); the installed release is read from libnvidia-ml.
EXPECTED_FAILURES["pascal-dropped-unloaded"] = {
    ("nvidia-driver-not-loaded", HOST),
    ("driver-dropped-gpu-architecture", GPU0),
    ("driver-dropped-gpu-architecture", GPU1),
}
# The open module 590.44.01 drives the H100 (GPU 0) and leaves the P100 (GPU 1) alone: R590 dropped
# Pascal, and the open modules never supported it; NVML does not list the P100.
EXPECTED_FAILURES["pascal-dropped-refused"] = {
    ("driver-dropped-gpu-architecture", GPU1),
    ("open-kernel-module-unsupported", GPU1),
}
# Two B300s under driver 575.64.05 (module not loaded): above the Blackwell floor, below B300's own
# first release (580.82.07) from the device-id table.
EXPECTED_FAILURES["b300-below-device-min"] = {
    ("nvidia-driver-not-loaded", HOST),
    ("gpu-newer-than-driver", GPU0),
    ("gpu-newer-than-driver", GPU1),
}

# Scenarios whose faults leave every fact readable: nothing may be unknown there.
FULLY_KNOWN = (
    "healthy-2gpu", "pcie-degraded", "thermal-slowdown", "h200-x2-real", "acs-redirect",
    "numa-1socket-4ccx", "numa-dgx-8gpu", "numa-vm-2node", "rdma-8nic", "rdma-degraded",
    "nvlink-down-8gpu", "gpu-reset-required", "nvswitch-8gpu", "fabric-manager-stopped",
    "nvswitch-sxid-fatal", "kmsg-api-mismatch", "fabric-manager-mismatch", "fabric-in-progress",
)

# Scenarios where NVML cannot initialise: every unknown must trace back to that NVML error.
NVML_DOWN = {
    "no-driver": "NVML_ERROR_DRIVER_NOT_LOADED",
    "nvml-mismatch": "NVML_ERROR_LIB_RM_VERSION_MISMATCH",
    "pascal-dropped-unloaded": "NVML_ERROR_DRIVER_NOT_LOADED",
    "b300-below-device-min": "NVML_ERROR_DRIVER_NOT_LOADED",
    "kernel-upgrade-no-module": "NVML_ERROR_DRIVER_NOT_LOADED",
    "dkms-headers-missing": "NVML_ERROR_DRIVER_NOT_LOADED",
}

_FINDINGS: dict[str, list[Any]] = {}


def findings(scenario: str) -> list[Any]:
    if scenario not in _FINDINGS:
        _FINDINGS[scenario] = run_rules(RULESET, probed(scenario))
    return _FINDINGS[scenario]


def where(finding: Any) -> str:
    return finding.subject.bus_id or finding.subject.kind


def describe(items: list[Any]) -> str:
    return "\n".join(f"  {f.status.value} {f.rule_id} [{f.subject.label}]: {f.message} {f.detail}" for f in items)


def test_every_fixture_host_has_a_scenario():
    assert {p.name for p in HOSTS.iterdir() if p.is_dir()} == set(EXPECTED_FAILURES)


@pytest.mark.parametrize("scenario", sorted(EXPECTED_FAILURES))
def test_scenario_fails_exactly_the_expected_rules(scenario):
    results = findings(scenario)
    broken = [f for f in results if f.status is Status.ERROR]
    assert not broken, f"rules broke on {scenario}:\n{describe(broken)}"
    failed = [f for f in results if f.status is Status.FAIL]
    assert {(f.rule_id, where(f)) for f in failed} == EXPECTED_FAILURES[scenario], describe(failed)
    for f in failed:
        assert f.message and f.fix and "unknown" not in f.fix, describe([f])


@pytest.mark.parametrize("scenario", FULLY_KNOWN)
def test_scenario_leaves_nothing_unknown(scenario):
    unknown = [f for f in findings(scenario) if f.status is Status.UNKNOWN]
    assert not unknown, describe(unknown)


@pytest.mark.parametrize("scenario, nvml_error", sorted(NVML_DOWN.items()))
def test_unknowns_come_from_the_nvml_failure(scenario, nvml_error):
    unknown = [f for f in findings(scenario) if f.status is Status.UNKNOWN]
    assert unknown, f"NVML is down on {scenario}: the rules that need it must say unknown"
    unexplained = [f for f in unknown if nvml_error not in f.detail]
    assert not unexplained, describe(unexplained)
