"""The fix list built from findings: groups from the fix-* tags, one item per rule and fix, order."""

from __future__ import annotations

from gpudoctor.advice.fix_list import FIX_GROUPS, collect, fix_group
from gpudoctor.findings import HOST, Finding, Severity, Status, Subject


def finding(rule, status=Status.FAIL, severity=Severity.ERROR, area="pcie", subject=HOST, fix="do it", msg="m"):
    return Finding(rule, f"title of {rule}", area, severity, status, subject, msg, fix=fix)


def gpu(i):
    return Subject("gpu", f"GPU {i} (0000:{i:02x}:00.0)", index=i, bus_id=f"0000:{i:02x}:00.0")


def test_fix_group_takes_the_first_fix_tag_and_defaults_to_other():
    assert fix_group(["pcie", "fix-hardware"]) == "fix-hardware"
    assert fix_group(["fix-reboot", "fix-root"]) == "fix-root"  # FIX_GROUPS order decides
    assert fix_group(["driver"]) == "other" and fix_group([]) == "other"
    assert list(FIX_GROUPS)[-1] == "other"


def test_collect_merges_subjects_with_the_same_fix_and_keeps_only_failures():
    findings = [
        finding("width", subject=gpu(0), msg="GPU 0 at x8"),
        finding("width", subject=gpu(1), msg="GPU 1 at x8"),
        finding("width", subject=gpu(2), fix="another fix"),
        finding("ok-rule", status=Status.PASS),
        finding("cannot", status=Status.UNKNOWN),
        finding("broken", status=Status.ERROR),
    ]
    fixes = collect(findings, {"width": ("pcie", "fix-hardware")})
    assert [(i.rule_id, i.subject_labels) for i in fixes.items] == [
        ("width", ["GPU 0 (0000:00:00.0)", "GPU 1 (0000:01:00.0)"]),
        ("width", ["GPU 2 (0000:02:00.0)"]),
    ]
    assert fixes.items[0].group == "fix-hardware" and fixes.items[0].messages == ["GPU 0 at x8", "GPU 1 at x8"]
    assert fixes.unknown == 1 and fixes.errors == 1


def test_items_are_ordered_by_severity_then_area_and_grouped_cheapest_first():
    findings = [
        finding("info-env", severity=Severity.INFO, area="env"),
        finding("err-pcie", severity=Severity.ERROR, area="pcie"),
        finding("err-driver", severity=Severity.ERROR, area="driver"),
        finding("warn-root", severity=Severity.WARNING, area="kernel"),
    ]
    tags = {
        "info-env": ["fix-config"],
        "err-pcie": ["fix-hardware"],
        "err-driver": ["fix-reboot"],
        "warn-root": ["fix-root"],
    }
    fixes = collect(findings, tags)
    assert [i.rule_id for i in fixes.items] == ["err-driver", "err-pcie", "warn-root", "info-env"]
    assert [g for g, _ in fixes.by_group()] == ["fix-config", "fix-root", "fix-reboot", "fix-hardware"]


def test_a_rule_without_fix_text_points_at_rules_show_and_verify_carries_rule_dirs():
    fixes = collect([finding("bare", fix="")], {}, rule_dirs=["my rules"])
    item = fixes.items[0]
    assert "gpudoctor rules show bare" in item.fix
    assert item.verify_argv == ["gpudoctor", "check", "--only", "bare", "--rules", "my rules"]
