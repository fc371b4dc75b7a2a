"""The gate's own checks as rules (rules/gate/): loaded only by the gate, judging the facts sections
the gate adds (policy, device_test, allreduce), not run where their input is absent."""

from __future__ import annotations

import copy

from gpudoctor.engine.loader import load_rules
from gpudoctor.engine.subjects import gpu_subjects
from gpudoctor.facts import Unavailable
from gpudoctor.findings import Severity, Status
from gpudoctor.preflight.device_facts import device_test_facts
from gpudoctor.preflight.device_test import DeepResult
from gpudoctor.preflight.policy import Policy
from gpudoctor.preflight.verdict import gate_facts, judge
from tests.preflight.helpers import cli, device_events, facts, passing_gpu, ruleset, step_events

GATE_CHECKS = {
    "gate-gpu-count": ("host", "expect"),
    "gate-gpu-model": ("gpu", "expect"),
    "gate-gpu-model-none": ("host", "expect"),
    "gate-free-memory": ("gpu", "expect"),
    "gate-nic-count": ("host", "expect"),
    "gate-nic-rate": ("rdma_port", "expect"),
    "gate-nvlink-links": ("gpu", "expect"),
    "gate-deep-cuda": ("host", "deep"),
    "gate-deep-gpu": ("gpu", "deep"),
    "gate-deep-p2p": ("gpu", "deep"),
    "gate-deep-allreduce": ("host", "deep"),
    "gate-allreduce-busbw": ("host", "distributed"),
}


def deep(events, **state) -> DeepResult:
    result = DeepResult(python="/opt/venv/bin/python3", budget_s=30.0, started=True, returncode=0, duration_s=2.0)
    result.events = copy.deepcopy(events)
    for key, value in state.items():
        setattr(result, key, value)
    return result


def all_passing() -> list[dict]:
    events = device_events(2) + passing_gpu(0) + passing_gpu(1)
    events += step_events(0, "p2p", peer=1, peer_access=True, gbps=40.0)
    events += step_events(1, "p2p", peer=0, peer_access=False, gbps=12.5)
    return events + step_events(None, "allreduce", mib=64)


def test_the_gate_checks_are_rules_only_the_gate_loads():
    gate = {rule.id: rule for rule in load_rules(include_plugins=False, gate=True).rules if rule.area == "gate"}
    assert {rule_id: (rule.subject, rule.tags[0]) for rule_id, rule in gate.items()} == GATE_CHECKS
    assert all(rule.severity is Severity.ERROR and rule.fix.source for rule in gate.values())
    assert not [rule for rule in load_rules(include_plugins=False).rules if rule.area == "gate"]


def test_rules_list_shows_the_gate_checks(capsys):
    code, out, _ = cli(capsys, "rules", "list")
    assert code == 0 and "Gate checks" in out and all(rule_id in out for rule_id in GATE_CHECKS)
    code, out, _ = cli(capsys, "rules", "show", "gate-deep-gpu")
    assert code == 0 and "gpu.device_test.matmul.passed" in out


def test_checks_the_policy_does_not_ask_for_are_not_run():
    report = judge(facts("healthy-2gpu"), ruleset(), Policy())
    assert not [f for f in report.findings if f.area == "gate"]
    report = judge(facts("healthy-2gpu"), ruleset(), Policy(expect_gpus=2))
    assert [(f.rule_id, f.status) for f in report.findings if f.area == "gate"] == [("gate-gpu-count", Status.PASS)]


def test_an_expected_model_on_a_node_without_nvidia_gpus_is_no_go():
    # gate-gpu-model judges each NVIDIA GPU; with none there is nothing for it to judge, and the
    # node must still be no-go (a CPU node placed by mistake, every GPU fallen off the bus)
    data = copy.deepcopy(facts("no-driver"))
    data["pci"]["devices"] = [d for d in data["pci"]["devices"] if d.get("vendor") != "nvidia"]
    report = judge(data, ruleset(), Policy(expect_model="H100"))
    [blocking] = [f for f in report.blocking if f.area == "gate"]
    assert not report.go and blocking.rule_id == "gate-gpu-model-none"
    assert blocking.message == "no NVIDIA GPU found; the policy expects H100"
    # ignoring gate-gpu-model covers it: it carries that id as a tag
    ignored = judge(data, ruleset(), Policy(expect_model="H100", ignore=("gate-gpu-model",)))
    assert not [f for f in ignored.findings if f.rule_id.startswith("gate-gpu-model")]


def test_the_policy_section_holds_only_what_the_policy_sets():
    section = Policy(expect_model="H100", min_free_memory_gib=70.0, min_busbw_gbps=12.5).facts()
    assert section["expect_model"] == "H100" and section["min_free_memory_gib"] == 70
    assert isinstance(section["min_free_memory_gib"], int) and section["min_busbw_gbps"] == 12.5
    assert "expect_gpus" not in section and section["on_cannot_check"] == "fail-closed"


def test_nic_and_nvlink_expectations_judge_the_rdma_and_gpu_facts():
    # rdma-degraded: 9 RDMA ports, mlx5_1 DOWN, mlx5_6 trained to 200 Gb/s, the RoCE storage port
    # mlx5_8 (200 Gb/s) paired with no GPU
    policy = Policy(expect_nics=9, nic_rate_gbps=400.0, nvlink_links=18)
    section = policy.facts()
    assert (section["expect_nics"], section["expect_nic_rate_gbps"], section["expect_nvlink_links"]) == (9, 400, 18)
    report = judge(facts("rdma-degraded"), ruleset(), policy)
    judged = [f for f in report.findings if f.area == "gate" and f.status is not Status.SKIP]
    gate = {(f.rule_id, f.subject.label): f for f in judged}
    count = gate[("gate-nic-count", "host")]
    assert count.status is Status.FAIL and count.message.startswith("8 RDMA port(s) are ACTIVE (mlx5_0:1, mlx5_2:1")
    assert "on 9 RDMA device(s), the policy expects at least 9" in count.message
    assert report.is_blocking(count)
    rates = {label: f.status for (rule, label), f in gate.items() if rule == "gate-nic-rate"}
    assert rates.pop("mlx5_6 port 1") is Status.FAIL
    assert "mlx5_8 port 1" not in rates and "mlx5_1 port 1" not in rates  # no GPU of its own; not ACTIVE
    assert len(rates) == 6 and set(rates.values()) == {Status.PASS}
    low = gate[("gate-nic-rate", "mlx5_6 port 1")]
    assert "runs at 200 Gb/s (InfiniBand), the policy expects at least 400 Gb/s" in low.message
    assert "GPU 5 (0000:9b:00.0)" in low.message
    links = [f for (rule, _), f in gate.items() if rule == "gate-nvlink-links"]
    assert len(links) == 8 and {f.status for f in links} == {Status.PASS}
    # the down port and the slow one still block, through the rdma rules: not through the gate's
    lower = judge(facts("rdma-degraded"), ruleset(), Policy(expect_nics=8, nic_rate_gbps=200.0))
    assert not [f for f in lower.blocking if f.area == "gate"] and len(lower.blocking) == 2


def test_nvlink_expectation_fails_where_nvml_reports_no_link():
    # the real H200 VM: every nvmlDeviceGetNvLinkState NOT_SUPPORTED, recorded as 0 links of 0
    data = copy.deepcopy(facts("healthy-2gpu"))
    for gpu in data["nvml"]["gpus"]:
        gpu["nvlink_links"] = gpu["nvlink_active"] = 0
    report = judge(data, ruleset(), Policy(nvlink_links=18))
    links = [f for f in report.findings if f.rule_id == "gate-nvlink-links"]
    assert [f.status for f in links] == [Status.FAIL, Status.FAIL] and not report.go
    assert "NVML reports no NVLink on this GPU" in links[0].message
    assert judge(data, ruleset(), Policy(nvlink_links=0)).go


def test_nic_expectation_without_rdma_facts_is_unknown_and_blocks_fail_closed():
    data = copy.deepcopy(facts("healthy-2gpu"))
    del data["rdma"]  # a snapshot from before the rdma probe
    report = judge(data, ruleset(), Policy(expect_nics=1))
    count = next(f for f in report.findings if f.rule_id == "gate-nic-count")
    assert count.status is Status.UNKNOWN and report.is_blocking(count)
    assert judge(data, ruleset(), Policy(expect_nics=1, fail_closed=False)).go


def test_a_snapshot_does_not_bring_its_own_gate_sections():
    data = copy.deepcopy(facts("healthy-2gpu"))
    data["policy"] = {"expect_gpus": 8}
    data["allreduce"] = {"correct": False, "busbw_gbps": 1.0}
    judged = gate_facts(data, Policy())
    assert "expect_gpus" not in judged["policy"] and "allreduce" not in judged
    assert judge(data, ruleset(), Policy()).go


def test_each_gpu_gets_its_own_device_test_results():
    data = gate_facts(facts("healthy-2gpu"), Policy(deep=True), deep(all_passing()))
    gpus = gpu_subjects(data)
    assert [g["device_test"]["index"] for g in gpus] == [0, 1]
    assert gpus[0]["device_test"]["matmul"] == {
        "step": "matmul",
        "ran": True,
        "passed": True,
        "error": "",
        "seconds": 0.1,
        "low_dtype": "bfloat16",
    }
    assert gpus[0]["device_test"]["p2p"]["peer_label"] == "GPU 1 (0000:9a:00.0)"
    assert data["device_test"]["allreduce"]["gpus"] == [0, 1]
    # without the device test (or for a GPU it did not test) the results are not_found
    untested = gpu_subjects(facts("healthy-2gpu"))[0]["device_test"]
    assert isinstance(untested, Unavailable) and untested.reason == "not_found"


def test_device_test_matched_by_uuid_when_cuda_numbers_the_gpus_otherwise():
    events = device_events(1, bus_ids=("",))
    events[-1]["uuid"] = facts("healthy-2gpu")["nvml"]["gpus"][1]["uuid"]
    result = deep(events + passing_gpu(0), index_is_nvml=False)
    report = judge(facts("healthy-2gpu"), ruleset(), Policy(deep=True), deep_result=result)
    [gpu] = [f for f in report.findings if f.rule_id == "gate-deep-gpu"]
    assert gpu.status is Status.PASS and gpu.subject.bus_id == "0000:9a:00.0"


def test_peer_copy_messages_name_the_peer_and_the_path():
    report = judge(facts("healthy-2gpu"), ruleset(), Policy(deep=True), deep_result=deep(all_passing()))
    p2p = [f.message for f in report.findings if f.rule_id == "gate-deep-p2p"]
    assert p2p == [
        "copy to GPU 1 (0000:9a:00.0) correct (peer access, 40.0 GB/s)",
        "copy to GPU 0 (0000:18:00.0) correct (no peer access: staged through host memory, 12.5 GB/s)",
    ]
    assert report.go


def test_a_step_running_when_the_test_process_died_failed():
    events = device_events(2) + passing_gpu(0) + step_events(1, "context")
    events += step_events(1, "memory", ok="hang")
    section = device_test_facts(deep(events, returncode=-9, stderr_tail="CUDA error: an illegal memory access"))
    memory = section["gpus"][1]["memory"]
    assert memory["passed"] is False and "killed by signal 9" in memory["error"]
    # the step after it was never begun: no result, and not a failure of its own
    assert section["gpus"][1]["matmul"]["passed"].reason == "not_found"
    assert section["allreduce"]["ran"] is False


def test_a_stopped_test_before_cuda_answered_leaves_cuda_unavailable():
    section = device_test_facts(deep([{"event": "hello"}], timed_out=True, returncode=None))
    assert section["status"] == "timeout" and "gpus" not in section
    assert section["cuda"].reason == "timeout" and "importing torch" in section["cuda"].detail
