"""A rule's let: names: checked at load like conditions, worked out per subject where first read,
and no if/else inside a template."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpudoctor.engine.helpers import registry
from gpudoctor.engine.loader import RuleLoadError, load_rule_file, load_rules
from gpudoctor.engine.runner import run_rules
from gpudoctor.facts import Unavailable
from gpudoctor.findings import Status
from gpudoctor.render.rules import rule_dict, show_text
from gpudoctor.tables import builtin_rules_dir, load_tables
from tests.conftest import probed

TABLES = load_tables(builtin_rules_dir() / "data")
BASE: dict[str, Any] = {
    "id": "let-check",
    "title": "A rule with let",
    "area": "env",
    "severity": "warning",
    "fix": "nothing",
    "why": "because it is tested",
    "refs": ["tests"],
}


def ruleset(tmp_path: Path, **fields: Any) -> Any:
    path = tmp_path / "let.yaml"
    path.write_text(yaml.safe_dump([{**BASE, **fields}], sort_keys=False, width=1 << 20), encoding="utf-8")
    rules = load_rule_file(path, TABLES)
    from gpudoctor.engine.loader import RuleSet

    return RuleSet(rules=rules, tables=TABLES, sources=[str(path)])


def refused(tmp_path: Path, **fields: Any) -> str:
    with pytest.raises(RuleLoadError) as caught:
        ruleset(tmp_path, **fields)
    text = str(caught.value)
    assert "\n" not in text, text
    assert text.startswith(f"{tmp_path / 'let.yaml'}:1: rule let-check: "), text
    return text


def facts(**host: Any) -> dict[str, Any]:
    return {"host": {"cpu_count": 8, "env": {}, **host}}


# --- evaluation -------------------------------------------------------------------------------


def test_a_name_is_read_by_conditions_and_templates(tmp_path):
    rules = ruleset(
        tmp_path,
        let={"cpus": "host.cpu_count", "twice": "cpus * 2"},
        applies="cpus > 0",
        fail_if="twice > 10",
        message="{cpus} CPUs, twice {twice}",
        pass_message="only {twice}",
    )
    (found,) = run_rules(rules, facts(cpu_count=8))
    assert found.status is Status.FAIL and found.message == "8 CPUs, twice 16"
    assert found.evidence == [("host.cpu_count", 8)]
    (found,) = run_rules(rules, facts(cpu_count=4))
    assert found.status is Status.PASS and found.message == "only 8"
    assert rules.rules[0].facts_used == ["host.cpu_count"]


def test_a_name_is_worked_out_where_first_read_and_only_there(tmp_path):
    # Only the message reads `gone`: a pass never touches it, and a skip never reaches fail_if's.
    rules = ruleset(
        tmp_path,
        let={"gone": "host.kernel_release", "big": "host.cpu_count > 4"},
        applies="host.env.RUN == '1'",
        fail_if="big",
        message="kernel {gone}",
    )
    gone = Unavailable("not_found", "no /proc/sys/kernel/osrelease")
    (found,) = run_rules(rules, facts(cpu_count=2, kernel_release=gone, env={"RUN": "1"}))
    assert found.status is Status.PASS
    (found,) = run_rules(rules, facts(cpu_count=8, kernel_release=gone, env={"RUN": "1"}))
    assert found.status is Status.FAIL and found.message == "kernel unknown"  # as a placeholder shows it
    (found,) = run_rules(rules, facts(cpu_count=Unavailable("error", "x"), kernel_release=gone))
    assert found.status is Status.SKIP


def test_an_unavailable_fact_read_through_a_name_makes_the_rule_unknown(tmp_path):
    rules = ruleset(tmp_path, let={"cpus": "host.cpu_count"}, fail_if="cpus > 4", message="m")
    (found,) = run_rules(rules, facts(cpu_count=Unavailable("no_permission", "denied")))
    assert found.status is Status.UNKNOWN and "host.cpu_count is unavailable (no_permission)" in found.message


def test_available_sees_through_a_name(tmp_path):
    rules = ruleset(tmp_path, let={"cpus": "host.cpu_count"}, fail_if="not available(cpus)", message="m")
    (found,) = run_rules(rules, facts(cpu_count=Unavailable("error", "x")))
    assert found.status is Status.FAIL


def test_a_name_is_worked_out_once_per_subject(tmp_path, monkeypatch):
    calls: list[Any] = []

    def counting_lower(text: Any) -> str:
        calls.append(text)
        return str(text).lower()

    monkeypatch.setitem(registry.STATIC, "lower", counting_lower)
    rules = ruleset(
        tmp_path,
        subject="gpu",
        let={"name": "lower(gpu.name)", "index": "gpu.index"},
        fail_if="name == 'x' or name != '' and index + 1 == 2",
        message="{name} {index} {name}",
    )
    found = run_rules(rules, probed("healthy-2gpu"))
    assert [f.status for f in found] == [Status.PASS, Status.FAIL]  # each GPU its own values
    assert found[1].message == "nvidia h100 80gb hbm3 1 nvidia h100 80gb hbm3"
    assert len(calls) == 2  # once per GPU, though read three times by each


def test_the_built_in_rules_read_as_one_idea_per_line():
    for rule in load_rules(include_plugins=False).rules:
        for what, expr in [("applies", rule.applies), ("fail_if", rule.fail_if), *rule.let]:
            if expr is not None:
                assert len(expr.source) <= 200, (rule.id, what, len(expr.source))


# --- refused at load ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "let, needle",
    [
        ({"a": "nothere + 1"}, "let a: unknown name 'nothere'"),
        ({"a": "b + 1", "b": "1"}, "let a: reads b, which is defined below it"),
        ({"a": "a + 1"}, "let a: reads itself"),
        ({"host": "1"}, "let host: host is the name of facts"),
        ({"gpus": "1"}, "let gpus: gpus is the name of facts"),
        ({"gpu": "1"}, "let gpu: gpu is the name of facts"),
        ({"len": "1"}, "let len: len is a helper function"),
        ({"a": "host.cpu_count", "b": "a.x"}, "let b: a is a let: name, not a fact: a.x is not allowed"),
        ({"a": "host.cpu_cuont"}, "let a: unknown fact host.cpu_cuont (did you mean host.cpu_count?)"),
        ({"a": "lookup('nope', 1)"}, "let a: no data table 'nope'"),
        ({"a": "__import__('os')"}, "let a: call of '__import__' is not allowed"),
        ({"if": "1"}, "let if: if is a Python keyword"),
        ({f"n{i}": f"[n{i - 1}]" if i else "[1]" for i in range(30)}, "nested deeper than 24 levels with the let:"),
    ],
)
def test_a_bad_name_is_refused_naming_file_rule_and_line(tmp_path, let, needle):
    assert needle in refused(tmp_path, let=let, fail_if="True", message="m")


def test_a_name_outside_the_schema_is_refused(tmp_path):
    with pytest.raises(RuleLoadError, match="let"):
        ruleset(tmp_path, let={"Bad-Name": "1"}, fail_if="True", message="m")


def test_a_later_rule_does_not_see_another_rules_names(tmp_path):
    assert "unknown name 'cpus'" in refused(tmp_path, fail_if="cpus > 1", message="m")


@pytest.mark.parametrize("key", ["message", "fix", "pass_message"])
def test_a_conditional_in_a_template_is_refused(tmp_path, key):
    fields = {"fail_if": "True", "message": "m", key: "limit {'none' if host.cpu_count == 0 else host.cpu_count}"}
    text = refused(tmp_path, **fields)
    assert f"{key}: in placeholder {{'none' if host.cpu_count == 0 else host.cpu_count}}: no if/else" in text
    assert "let:" in text


def test_a_conditional_in_a_condition_or_a_name_is_allowed(tmp_path):
    rules = ruleset(
        tmp_path,
        let={"shown": "'none' if host.cpu_count == 0 else host.cpu_count"},
        fail_if="(1 if host.cpu_count else 0) == 1",
        message="limit {shown}",
    )
    (found,) = run_rules(rules, facts(cpu_count=3))
    assert found.message == "limit 3"


# --- shown --------------------------------------------------------------------------------------


def test_rules_show_and_json_list_the_names(tmp_path):
    rules = ruleset(tmp_path, let={"cpus": "host.cpu_count"}, fail_if="cpus > 4", message="m")
    rule = rules.rules[0]
    assert "Where:\n  cpus = host.cpu_count\nFails when:    cpus > 4" in show_text(rule)
    assert rule_dict(rule)["let"] == {"cpus": "host.cpu_count"}


def test_names_survive_the_rule_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUDOCTOR_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("GPUDOCTOR_NO_CACHE", raising=False)
    pack = tmp_path / "pack"
    pack.mkdir()
    (pack / "r.yaml").write_text(
        textwrap.dedent(
            """\
            - id: cached-let
              title: A cached rule with let
              area: env
              severity: info
              let:
                cpus: host.cpu_count
                more: cpus + 1
              fail_if: more > 4
              message: "{more}"
              fix: f
              why: because it is cached
              refs: [r]
            """
        )
    )
    load_rules([pack], include_builtin=False, include_plugins=False)
    monkeypatch.setattr("gpudoctor.engine.loader._load_uncached", None)  # a miss would fail
    again = load_rules([pack], include_builtin=False, include_plugins=False)
    assert [(n, e.source) for n, e in again.rules[0].let] == [("cpus", "host.cpu_count"), ("more", "cpus + 1")]
    (found,) = run_rules(again, facts(cpu_count=8))
    assert found.message == "9"
