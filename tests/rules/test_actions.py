"""Every rule says what its failure asks of a scheduler (action:, a closed set), and findings carry it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from gpudoctor.engine.loader import RuleLoadError, load_rules
from gpudoctor.findings import ACTIONS, Finding, Severity, Status, Subject, first_to_act_on
from gpudoctor.schemas import load_schema
from gpudoctor.tables import builtin_rules_dir
from tests.engine.test_loader import GOOD, write


def _builtin_rule_files() -> list[Path]:
    root = builtin_rules_dir()
    return sorted(root.glob("*.yaml")) + sorted((root / "gate").glob("*.yaml"))


def _raw_rules() -> list[dict]:
    return [rule for path in _builtin_rule_files() for rule in yaml.safe_load(path.read_text())]


def test_the_schema_and_the_code_know_the_same_actions_in_the_same_order():
    # the order is the ranking first_to_act_on relies on, so the schema lists them least drastic first
    assert load_schema("rules")["items"]["properties"]["action"]["enum"] == list(ACTIONS)
    for name in ("report", "gate-report"):
        props = load_schema(name)["properties"]["findings"]["items"]["properties"]
        assert props["recommended_action"]["enum"] == list(ACTIONS), name


def test_every_builtin_rule_sets_its_action_in_the_file():
    # the loader's default (none) is for rule packs; a built-in rule says it, so none is a choice
    rules = _raw_rules()
    assert len(rules) >= 130
    missing = [r["id"] for r in rules if "action" not in r]
    assert not missing, missing
    assert {r["action"] for r in rules} == set(ACTIONS)  # every action is used by some rule


def test_actions_agree_with_severity():
    # an info finding is advice: it never asks to act on the node; an error always says what to do
    rules = _raw_rules()
    assert [r["id"] for r in rules if r["severity"] == "info" and r["action"] != "none"] == []
    assert [r["id"] for r in rules if r["severity"] == "error" and r["action"] == "none"] == []


@pytest.mark.parametrize(
    "rule_id, action",
    [
        ("gpu-missing-from-nvml", "drain-and-inspect-hardware"),  # Xid 79: fallen off the bus
        ("remapped-rows-pending", "reset-gpu"),
        ("remapped-rows-failed", "drain-and-inspect-hardware"),  # no spare rows left: RMA
        ("gpu-recovery-reset", "reset-gpu"),  # NVML's own recovery action
        ("gpu-recovery-reboot", "reboot-node"),
        ("xid-fatal-in-kernel-log", "reboot-node"),  # the log line clears only at a reboot
        ("xid-in-kernel-log", "restart-job"),  # NVIDIA's catalog: RESTART_APP
        ("ascend-torch-npu-torch-mismatch", "fix-software"),
        ("torch-no-kernel-for-gpu", "fix-software"),
        ("pcie-width-degraded", "drain-and-inspect-hardware"),
        ("nvml-driver-library-mismatch", "reboot-node"),
        ("gate-free-memory", "restart-job"),
        ("omp-num-threads-unset", "none"),
    ],
)
def test_considered_actions(rule_id, action):
    rule = load_rules(include_plugins=False, gate=True).by_id(rule_id)
    assert rule is not None and rule.action == action


def test_a_rule_pack_may_leave_the_action_out_and_recommends_none(tmp_path):
    d = write(tmp_path, GOOD)
    assert load_rules([d], include_builtin=False, include_plugins=False).by_id("my-check").action == "none"
    d = write(tmp_path, GOOD.replace("  severity: warning\n", "  severity: warning\n  action: reboot-node\n"))
    assert load_rules([d], include_builtin=False, include_plugins=False).by_id("my-check").action == "reboot-node"


def test_an_action_outside_the_set_is_refused_with_file_and_line(tmp_path):
    d = write(tmp_path, GOOD.replace("  severity: warning\n", "  severity: warning\n  action: format-disk\n"))
    with pytest.raises(RuleLoadError) as exc:
        load_rules([d], include_builtin=False, include_plugins=False)
    assert exc.value.path.endswith("custom.yaml") and exc.value.line == 1 and "action" in str(exc.value)


def _finding(rule_id: str, status: Status, action: str) -> Finding:
    return Finding(rule_id, rule_id, "health", Severity.ERROR, status, Subject("gpu", "GPU 0"), "m", action=action)


def test_only_failed_findings_recommend_an_action_in_json():
    assert _finding("a", Status.FAIL, "reset-gpu").to_json()["recommended_action"] == "reset-gpu"
    for status in (Status.PASS, Status.UNKNOWN, Status.ERROR, Status.SKIP):
        assert "recommended_action" not in _finding("a", status, "reset-gpu").to_json()


def test_first_to_act_on_names_the_most_drastic_failure():
    unknown = _finding("u", Status.UNKNOWN, "drain-and-inspect-hardware")
    reset = _finding("r", Status.FAIL, "reset-gpu")
    reboot = _finding("b", Status.FAIL, "reboot-node")
    later_reboot = _finding("c", Status.FAIL, "reboot-node")
    assert first_to_act_on([unknown, reset, reboot, later_reboot]) is reboot
    assert first_to_act_on([unknown]) is unknown
    assert first_to_act_on([]) is None


def test_check_json_carries_the_action_on_each_failed_finding(capsys):
    from tests.preflight.helpers import DEGRADED, cli

    code, out, _ = cli(capsys, "check", "--root", DEGRADED, "--format", "json")
    data = json.loads(out)
    failed = {f["rule"]: f["recommended_action"] for f in data["findings"] if f["status"] == "fail"}
    assert failed == {"pcie-width-degraded": "drain-and-inspect-hardware"}
    assert all("recommended_action" not in f for f in data["findings"] if f["status"] != "fail")
