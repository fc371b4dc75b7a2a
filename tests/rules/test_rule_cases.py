"""Every rule has a failing, a passing and an unknown case, all driven from cases.yaml.

A case names a fixture host (probed from tests/fixtures/hosts/<base>), optional fact
overrides (`set:` dotted paths, `[i]` for list items; {unavailable: reason} makes a fact
unavailable; `delete:` removes keys) and optionally the subject (a GPU bus id, a NUMA node id,
"host") whose finding must have the expected status.
"""

from __future__ import annotations

import pytest

from gpudoctor.engine.loader import load_rules
from gpudoctor.engine.runner import run_rules
from gpudoctor.findings import Status
from tests.conftest import probed
from tests.rules.cases import CASES, KINDS, apply, matches

RULESET = load_rules(include_plugins=False, gate=True)  # the gate's own rules (rules/gate/) too


def params():
    for rule_id, kinds in CASES.items():
        for kind in KINDS:
            for i, case in enumerate(kinds.get(kind) or []):
                yield pytest.param(rule_id, kind, case, id=f"{rule_id}-{kind}-{i}")


@pytest.mark.parametrize("rule_id, kind, case", list(params()))
def test_rule_case(rule_id, kind, case):
    rule = RULESET.by_id(rule_id)
    assert rule is not None, f"cases.yaml names unknown rule {rule_id}"
    facts = apply(probed(case["base"]), case)
    findings = [f for f in run_rules(RULESET, facts, [rule]) if matches(f, case.get("subject"))]
    assert findings, f"no finding for subject {case.get('subject')}"
    statuses = [f.status for f in findings]
    for f in findings:
        assert f.status is not Status.ERROR, f"{rule_id} broke: {f.message} {f.detail}"
    if kind == "fail":
        failed = [f for f in findings if f.status is Status.FAIL]
        assert failed, statuses
        assert failed[0].message and failed[0].fix, "a failure must say what is wrong and what to do"
        assert "unknown" not in failed[0].fix, failed[0].fix
    elif kind == "pass":
        assert all(s is Status.PASS for s in statuses), [(f.subject.label, f.status, f.message) for f in findings]
    else:
        assert any(s is Status.UNKNOWN for s in statuses), statuses
        assert not any(s is Status.FAIL for s in statuses), statuses


def test_every_rule_has_fail_pass_and_unknown_cases():
    missing = [f"{r.id}: {kind}" for r in RULESET.rules for kind in KINDS if not CASES.get(r.id, {}).get(kind)]
    assert not missing, "rules without cases:\n" + "\n".join(missing)


def test_cases_name_only_existing_rules():
    assert not set(CASES) - {r.id for r in RULESET.rules}


def test_rule_metadata_is_complete():
    for r in RULESET.rules:
        assert r.fix.source.strip(), r.id
        assert len(r.why) > 20, r.id
        assert r.refs, r.id
        assert r.severity.value in ("error", "warning", "info")
