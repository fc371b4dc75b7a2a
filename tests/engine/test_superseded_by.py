"""superseded_by: a failure whose cause another rule names on the same subject is reported once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from gpudoctor.engine.loader import RuleLoadError, RuleSet, load_rule_file, load_rules
from gpudoctor.engine.runner import run_rules
from gpudoctor.findings import Status
from gpudoctor.render.rules import show_text
from gpudoctor.tables import builtin_rules_dir, load_tables

TABLES = load_tables(builtin_rules_dir() / "data")


def rule(rule_id: str, fail_if: str, **fields: Any) -> dict[str, Any]:
    return {
        "id": rule_id, "title": f"rule {rule_id}", "area": "env", "severity": "error", "fail_if": fail_if,
        "message": f"{rule_id} failed", "fix": f"fix {rule_id}", "why": "tested", "refs": ["tests"], **fields,
    }


def ruleset(tmp_path: Path, *rules: dict[str, Any]) -> RuleSet:
    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump(list(rules), sort_keys=False), encoding="utf-8")
    return RuleSet(rules=load_rule_file(path, TABLES), tables=TABLES, sources=[str(path)])


FACTS = {"host": {"cpu_count": 8, "env": {}}}
GENERIC = rule("generic", "host.cpu_count > 4", superseded_by=["precise"])


def by_id(findings: list[Any]) -> dict[str, Any]:
    return {f.rule_id: f for f in findings}


def test_a_failure_stands_aside_where_the_precise_rule_fails_on_the_same_subject(tmp_path):
    found = by_id(run_rules(ruleset(tmp_path, GENERIC, rule("precise", "host.cpu_count == 8")), FACTS))
    assert found["precise"].status is Status.FAIL
    assert found["generic"].status is Status.SKIP
    assert found["generic"].message == "not reported again: precise names the cause"
    assert found["generic"].fix == ""


def test_it_still_fails_where_the_precise_rule_passes_or_is_not_run(tmp_path):
    rules = ruleset(tmp_path, GENERIC, rule("precise", "host.cpu_count == 9"))
    assert by_id(run_rules(rules, FACTS))["generic"].status is Status.FAIL
    only_generic = [r for r in rules.rules if r.id == "generic"]
    assert by_id(run_rules(rules, FACTS, only_generic))["generic"].status is Status.FAIL


def test_only_the_same_subject_counts(tmp_path):
    rules = ruleset(
        tmp_path,
        rule("generic", "True", subject="gpu", superseded_by=["precise"]),
        rule("precise", "gpu.bus_id == '0000:18:00.0'", subject="gpu"),
    )
    facts = {"host": {"cpu_count": 8, "env": {}}, "pci": {"devices": []}, "nvml": {"status": "ok", "gpus": [
        {"index": 0, "bus_id": "0000:18:00.0", "name": "H100"}, {"index": 1, "bus_id": "0000:9a:00.0", "name": "H100"}
    ]}}
    found = [(f.rule_id, f.subject.bus_id, f.status) for f in run_rules(rules, facts)]
    assert ("generic", "0000:18:00.0", Status.SKIP) in found
    assert ("generic", "0000:9a:00.0", Status.FAIL) in found


def test_a_host_failure_covers_each_gpu(tmp_path):
    rules = ruleset(
        tmp_path,
        rule("per-gpu", "True", subject="gpu", superseded_by=["host-cause"]),
        rule("host-cause", "host.cpu_count == 8"),
    )
    facts = {"host": {"cpu_count": 8, "env": {}}, "pci": {"devices": []}, "nvml": {"status": "ok", "gpus": [
        {"index": 0, "bus_id": "0000:18:00.0", "name": "H100"}, {"index": 1, "bus_id": "0000:9a:00.0", "name": "H100"}
    ]}}
    statuses = [f.status for f in run_rules(rules, facts) if f.rule_id == "per-gpu"]
    assert statuses == [Status.SKIP, Status.SKIP]
    facts["host"]["cpu_count"] = 4  # the host cause does not hold: each GPU's own failure is reported
    statuses = [f.status for f in run_rules(rules, facts) if f.rule_id == "per-gpu"]
    assert statuses == [Status.FAIL, Status.FAIL]


def test_a_malformed_list_is_refused_at_load(tmp_path):
    with pytest.raises(RuleLoadError):
        ruleset(tmp_path, rule("generic", "True", superseded_by="precise"))
    with pytest.raises(RuleLoadError):
        ruleset(tmp_path, rule("generic", "True", superseded_by=["Not An Id"]))


def test_every_builtin_superseded_by_names_a_builtin_rule_of_the_same_subject_kind():
    rules = {r.id: r for r in load_rules(gate=True).rules}
    named = [(r, other) for r in rules.values() for other in r.superseded_by]
    assert named, "the builtin rules use superseded_by"
    for r, other in named:
        assert other in rules, f"{r.id}: superseded_by names unknown rule {other}"
        assert rules[other].subject in (r.subject, "host"), f"{r.id}: {other} judges another kind of subject"
        assert other != r.id


def test_rules_show_says_when_a_rule_stands_aside(tmp_path):
    rules = ruleset(tmp_path, GENERIC, rule("precise", "True"))
    assert "Stands aside:  where precise fails on the same subject or the host" in show_text(rules.rules[0])
