"""Rule behaviour that cases.yaml cannot state (it knows only fail, pass and unknown): when a rule
must stand aside, and the fix-kind tag every rule carries for `gpudoctor fix`."""

from __future__ import annotations

from typing import Any

import pytest

from gpudoctor.engine.loader import load_rules
from gpudoctor.engine.runner import run_rules
from gpudoctor.facts import Unavailable
from gpudoctor.findings import Status
from tests.conftest import probed

RULESET = load_rules(include_plugins=False)
FIX_KINDS = {"fix-config", "fix-root", "fix-reboot", "fix-hardware"}
GPU1 = "0000:9a:00.0"


def status(rule_id: str, facts: dict[str, Any], bus_id: str | None = None) -> Status:
    rule = RULESET.by_id(rule_id)
    assert rule is not None, rule_id
    found = [f for f in run_rules(RULESET, facts, [rule]) if bus_id is None or f.subject.bus_id == bus_id]
    assert len(found) == 1, found
    return found[0].status


def test_every_rule_has_exactly_one_fix_kind() -> None:
    wrong = {r.id: sorted(FIX_KINDS & set(r.tags)) for r in RULESET.rules if len(FIX_KINDS & set(r.tags)) != 1}
    assert not wrong, wrong


@pytest.mark.parametrize(
    "pstate, reasons, gen, expected",
    [
        (0, 0x1, 1, Status.SKIP),  # P0 but idle and trained down to Gen1: power saving, not a fault
        (8, 0x1, 1, Status.SKIP),  # P8 at idle
        (8, 0x0, 3, Status.SKIP),  # not at full performance: generation says nothing
        (0, 0x1, 5, Status.PASS),  # idle at full speed: nothing downshifted
        (0, 0x0, 4, Status.FAIL),  # busy in P0 at Gen4 of Gen5
    ],
)
def test_idle_pcie_downshift_is_never_a_fault(pstate: int, reasons: int, gen: int, expected: Status) -> None:
    facts = probed("healthy-2gpu")
    gpu = facts["nvml"]["gpus"][1]
    gpu.update({"pstate": pstate, "clocks_event_reasons": reasons, "pcie_gen": gen})
    assert status("pcie-gen-below-max-at-p0", facts, GPU1) is expected


def test_xid_rules_stand_aside_where_no_kernel_log_exists() -> None:
    # The real H200 capture has no kernel log (a container): not applicable, not unknown.
    facts = probed("h200-x2-real")
    for rule_id in ("xid-fatal-in-kernel-log", "xid-in-kernel-log"):
        assert status(rule_id, facts, "0000:00:06.0") is Status.SKIP


def test_xid_rules_are_unknown_for_an_old_snapshot_without_the_section() -> None:
    facts = probed("healthy-2gpu")
    del facts["kernel_log"]
    assert status("xid-fatal-in-kernel-log", facts, GPU1) is Status.UNKNOWN


def test_xids_of_another_gpu_do_not_count() -> None:
    facts = probed("healthy-2gpu")
    facts["kernel_log"] = {
        "source": "/dev/kmsg",
        "xids": [{"bus_id": "0000:18:00.0", "code": 79, "count": 1, "message": "GPU has fallen off the bus."}],
    }
    assert status("xid-fatal-in-kernel-log", facts, "0000:18:00.0") is Status.FAIL
    assert status("xid-fatal-in-kernel-log", facts, GPU1) is Status.PASS


def test_features_a_gpu_lacks_skip() -> None:
    # H200s report retired pages as not supported (they remap rows instead): skipped, not unknown.
    facts = probed("h200-x2-real")
    for rule_id in ("retired-pages-pending", "retired-pages-limit"):
        assert status(rule_id, facts, "0000:00:06.0") is Status.SKIP


def test_device_files_on_a_host_with_working_nvml_are_not_an_error() -> None:
    # On a host NVML creates missing device files itself (nvidia-modprobe); only in a container, or
    # with NVML failing, are missing files the cause of trouble.
    facts = probed("h200-x2-real")
    facts["host"]["in_container"] = False
    facts["modules"]["nvidia_uvm_present"] = False
    assert status("nvidia-device-nodes-missing", facts) is Status.PASS
    facts["host"]["in_container"] = True
    assert status("nvidia-device-nodes-missing", facts) is Status.FAIL


def test_nvlink_partial_bridges_are_judged_against_peers() -> None:
    # PCIe cards joined by NVLink bridges use 12 of 18 links each: no alarm while all agree.
    facts = probed("healthy-2gpu")
    for gpu in facts["nvml"]["gpus"]:
        gpu["nvlink_active"] = 12
    assert status("nvlink-inactive-links", facts, GPU1) is Status.PASS
    facts["nvml"]["gpus"][1]["nvlink_active"] = 8
    assert status("nvlink-inactive-links", facts, GPU1) is Status.FAIL


def test_gpu_without_nvlink_skips() -> None:
    facts = probed("healthy-2gpu")
    for gpu in facts["nvml"]["gpus"]:
        gpu["nvlink_links"] = 0
        gpu["nvlink_active"] = 0
    assert status("nvlink-inactive-links", facts, GPU1) is Status.SKIP
    assert status("nccl-p2p-disabled", facts) is Status.SKIP


def test_nvlink_spec_count_stands_aside_for_pcie_cards_and_single_gpus() -> None:
    # An H100 PCIe (10de:2331) has no link count in the spec table: its bridge may use none.
    facts = probed("healthy-2gpu")
    for gpu in facts["nvml"]["gpus"]:
        gpu.update({"nvlink_active": 0, "name": "NVIDIA H100 PCIe", "pci_device_id": "0x233110de"})
    for dev in facts["pci"]["devices"]:
        if dev.get("device_id") == "0x2330":
            dev["device_id"] = "0x2331"
    assert status("nvlink-links-below-spec", facts, GPU1) is Status.SKIP
    # One SXM GPU left (a 1-GPU VM of an HGX board): no peer to reach over NVLink.
    facts = probed("healthy-2gpu")
    facts["nvml"]["gpus"] = facts["nvml"]["gpus"][:1]
    facts["nvml"]["gpus"][0]["nvlink_active"] = 0
    facts["nvml"]["device_count"] = 1
    facts["pci"]["devices"] = [d for d in facts["pci"]["devices"] if d.get("bus_id") != GPU1]
    assert status("nvlink-links-below-spec", facts, "0000:18:00.0") is Status.SKIP


def test_nvlink_rules_stand_aside_where_nvml_reports_no_link() -> None:
    # What the real 2 x H200 SXM VM answered on 2026-12-01 (driver 580.159.04): every
    # nvmlDeviceGetNvLinkState(0..17) NOT_SUPPORTED, so the probe counts no link and asks no counter.
    facts = probed("h200-x2-real")
    for gpu in facts["nvml"]["gpus"]:
        gpu.update({"nvlink_links": 0, "nvlink_active": 0, "nvlink_peers": []})
        gpu["nvlink_errors"] = Unavailable("not_supported", "the GPU has no NVLink links")
    for rule_id in ("nvlink-links-below-spec", "nvlink-error-counters", "nvlink-inactive-links"):
        assert status(rule_id, facts, "0000:00:06.0") is Status.SKIP, rule_id


def _failed(rule_id: str, facts: dict[str, Any], bus_id: str) -> Any:
    rule = RULESET.by_id(rule_id)
    assert rule is not None, rule_id
    found = [f for f in run_rules(RULESET, facts, [rule]) if f.subject.bus_id == bus_id]
    assert [f.status for f in found] == [Status.FAIL], found
    return found[0]


def test_gpu_numa_node_unknown_names_the_tool_of_the_gpus_vendor() -> None:
    # NVIDIA: NVML's CPU list; AMD: what the AMD SMI reports; never the other vendor's tool
    nvidia = probed("healthy-2gpu")
    nvidia["pci"]["devices"][2]["numa_node"] = -1
    nvidia["nvml"]["gpus"][1]["memory_affinity"] = Unavailable("not_supported", "not on this GPU")
    fix = _failed("gpu-numa-node-unknown", nvidia, GPU1).fix
    assert "nvidia-smi topo -m" in fix and "amd-smi" not in fix
    amd = probed("mi300x-8gpu-healthy")
    amd["pci"]["devices"][2]["numa_node"] = -1
    fix = _failed("gpu-numa-node-unknown", amd, "0000:35:00.0").fix
    assert "amd-smi static --numa" in fix and "rocm-smi --showtoponuma" in fix
    assert "nvidia-smi" not in fix and "NVML" not in fix
