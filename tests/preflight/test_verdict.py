"""Go/no-go on fixture snapshots: what blocks, what does not, and the one-line reasons."""

from __future__ import annotations

import copy

import pytest

from gpudoctor.facts import Unavailable
from gpudoctor.findings import Cause, Severity, Status
from gpudoctor.preflight.policy import Policy
from gpudoctor.preflight.verdict import judge
from tests.preflight.helpers import facts, ruleset


def gate_of(name_or_facts, **policy):
    data = facts(name_or_facts) if isinstance(name_or_facts, str) else name_or_facts
    return judge(data, ruleset(), Policy(**policy))


def test_healthy_host_is_go():
    report = gate_of("healthy-2gpu")
    assert report.go and report.exit_code == 0 and report.verdict == "go"
    assert not report.blocking and not report.lines


def test_degraded_link_is_no_go_and_the_line_names_gpu_what_and_fix():
    report = gate_of("pcie-degraded")
    assert not report.go and report.exit_code == 1
    [line] = report.lines
    assert line.rule == "pcie-width-degraded" and line.subject.bus_id == "0000:9a:00.0"
    assert line.text.startswith("pcie-width-degraded: GPU 1 (0000:9a:00.0)")
    assert "x8 of x16" in line.text and "— fix: Reseat the card" in line.text
    assert "\n" not in line.text


def test_fail_on_decides_whether_warnings_block():
    # thermal-slowdown: one error (hw slowdown) and two warnings on GPU 0
    assert [f.rule_id for f in gate_of("thermal-slowdown").blocking] == ["hw-slowdown-active"]
    warned = gate_of("thermal-slowdown", ignore=("hw-slowdown-active",))
    assert warned.go and {f.rule_id for f in warned.findings if f.status is Status.FAIL} == {
        "sw-thermal-slowdown",
        "temperature-near-slowdown",
    }
    strict = gate_of("thermal-slowdown", ignore=("hw-slowdown-active",), fail_on=Severity.WARNING)
    assert {f.rule_id for f in strict.blocking} == {"sw-thermal-slowdown", "temperature-near-slowdown"}


def test_ignored_checks_are_not_run():
    report = gate_of("pcie-degraded", ignore=("pcie",))
    assert report.go and not [f for f in report.findings if f.area == "pcie"]


def _with_unavailable(field: str, gpu: int = 1, reason: str = "error"):
    data = copy.deepcopy(facts("healthy-2gpu"))
    data["nvml"]["gpus"][gpu][field] = Unavailable(reason, f"{field} could not be read")
    return data


def test_unknown_error_check_blocks_fail_closed_and_not_fail_open():
    data = _with_unavailable("pcie_width")
    closed = gate_of(data)
    assert [(f.rule_id, f.status) for f in closed.blocking] == [("pcie-width-degraded", Status.UNKNOWN)]
    assert "pcie-width-degraded" in closed.lines[0].text and "GPU 1" in closed.lines[0].text
    opened = gate_of(data, fail_closed=False)
    assert opened.go and [f.rule_id for f in opened.not_judged] == ["pcie-width-degraded"]


@pytest.mark.parametrize("reason", ["no_permission", "not_supported"])
def test_facts_this_process_may_not_read_or_the_gpu_lacks_do_not_block(reason):
    data = _with_unavailable("pcie_width", reason=reason)
    report = gate_of(data)  # fail-closed
    assert report.go and [f.rule_id for f in report.not_judged] == ["pcie-width-degraded"]
    # unless the policy requires the check to be judged
    required = gate_of(data, required=("pcie-width-degraded",))
    assert not required.go and required.blocking[0].status is Status.UNKNOWN


@pytest.mark.parametrize("reason", ["timeout", "error", "driver_not_loaded", "not_found"])
def test_facts_that_did_not_answer_or_are_missing_block_fail_closed(reason):
    assert not gate_of(_with_unavailable("pcie_width", reason=reason)).go


def test_kernel_log_out_of_reach_of_a_user_does_not_block(tmp_path):
    """Ubuntu's dmesg_restrict: a job script without root cannot read the Xids."""
    data = copy.deepcopy(facts("healthy-2gpu"))
    data["kernel_log"] = Unavailable("no_permission", "/dev/kmsg: permission denied")
    report = gate_of(data)
    xid = [f for f in report.findings if f.rule_id == "xid-fatal-in-kernel-log"]
    assert xid and all(f.status is Status.UNKNOWN for f in xid)
    assert report.go


def test_required_checks_must_be_judged_even_fail_open():
    data = _with_unavailable("pcie_width")
    report = gate_of(data, fail_closed=False, required=("pcie-width-degraded",))
    assert not report.go and report.blocking[0].status is Status.UNKNOWN
    # required by area works the same way
    assert not gate_of(data, fail_closed=False, required=("pcie",)).go


def test_required_warning_blocks_when_it_fails_although_below_fail_on():
    report = gate_of("thermal-slowdown", ignore=("hw-slowdown-active",), required=("sw-thermal-slowdown",))
    assert [f.rule_id for f in report.blocking] == ["sw-thermal-slowdown"]


def test_unknown_below_fail_on_never_blocks():
    data = _with_unavailable("temperature_c")  # temperature-near-slowdown is a warning
    report = gate_of(data)
    assert report.go
    assert any(f.rule_id == "temperature-near-slowdown" and f.status is Status.UNKNOWN for f in report.not_judged)


def test_a_rule_that_breaks_blocks_fail_closed(tmp_path):
    from gpudoctor.engine.loader import load_rules

    (tmp_path / "broken.yaml").write_text(
        "- id: site-kernel-floor\n  title: kernel new enough\n  area: kernel\n  severity: error\n"
        '  fail_if: version("not a version") < version("6.1")\n  message: old\n  fix: upgrade\n'
        "  why: site rule\n  refs: [site]\n"
    )
    rules = load_rules([str(tmp_path)])
    closed = judge(facts("healthy-2gpu"), rules, Policy())
    assert [(f.rule_id, f.status) for f in closed.blocking] == [("site-kernel-floor", Status.ERROR)]
    assert "broke" in closed.lines[0].text
    assert judge(facts("healthy-2gpu"), rules, Policy(fail_closed=False)).go


def test_unknowns_with_one_cause_are_folded_into_one_line_naming_it():
    report = gate_of("no-driver")
    folded = [line for line in report.lines if line.count > 1]
    assert len(folded) == 1 and "could not be judged" in folded[0].text
    assert "driver" in folded[0].text.lower() and folded[0].grouped
    fails = [line.rule for line in report.lines if line.status is Status.FAIL]
    assert fails == ["nvidia-driver-not-loaded", "nouveau-bound-to-gpu", "nouveau-loaded"]
    # fail-open: the real failures still block, the unknowns do not
    opened = gate_of("no-driver", fail_closed=False)
    assert [line.rule for line in opened.lines] == fails


def test_gpu_count_expectation():
    assert gate_of("healthy-2gpu", expect_gpus=2).go
    report = gate_of("healthy-2gpu", expect_gpus=3)
    [f] = report.blocking
    assert f.rule_id == "gate-gpu-count" and "NVML lists 2" in f.message and "expects 3" in f.message
    assert "lspci" in f.fix


def test_gpu_count_names_gpus_missing_from_nvml():
    data = copy.deepcopy(facts("healthy-2gpu"))
    data["nvml"]["gpus"] = data["nvml"]["gpus"][:1]  # GPU 1 fell off NVML, still on the bus
    report = gate_of(data, expect_gpus=2)
    count = next(f for f in report.blocking if f.rule_id == "gate-gpu-count")
    assert "0000:9a:00.0" in count.message


def test_gpu_model_expectation_is_checked_per_gpu():
    assert gate_of("healthy-2gpu", expect_model="h100").go  # case-insensitive
    report = gate_of("healthy-2gpu", expect_model="A100")
    assert [(f.rule_id, f.subject.index) for f in report.blocking] == [("gate-gpu-model", 0), ("gate-gpu-model", 1)]


def test_free_memory_expectation():
    assert gate_of("healthy-2gpu", min_free_memory_gib=70).go
    data = copy.deepcopy(facts("healthy-2gpu"))
    gpu = data["nvml"]["gpus"][1]
    gpu["memory_used_bytes"] = gpu["memory_total_bytes"] - 10 * (1 << 30)
    gpu["processes"] = 2
    report = gate_of(data, min_free_memory_gib=70)
    [f] = report.blocking
    assert f.rule_id == "gate-free-memory" and f.subject.index == 1
    assert "10.0 GiB free" in f.message and "70 GiB" in f.message and "2 process" in f.message


def test_expectations_are_unknown_when_nvml_did_not_answer():
    report = gate_of("no-driver", expect_gpus=1, min_free_memory_gib=1, expect_model="H100")
    count = next(f for f in report.findings if f.rule_id == "gate-gpu-count")
    assert count.status is Status.UNKNOWN and count.cause == Cause("nvml", "driver_not_loaded")
    assert report.is_blocking(count)


def test_expectation_checks_can_be_ignored_by_id_or_area():
    assert gate_of("healthy-2gpu", expect_gpus=3, ignore=("gate-gpu-count",)).go
    assert gate_of("healthy-2gpu", expect_gpus=3, ignore=("expect",)).go


@pytest.mark.parametrize("name", ["healthy-2gpu", "pcie-degraded", "thermal-slowdown", "no-driver", "nvml-mismatch"])
def test_every_blocking_finding_is_said_in_exactly_one_line(name):
    report = gate_of(name)
    said = sum(line.count for line in report.lines)
    assert said == len(report.blocking)
    assert report.go == (not report.lines)
