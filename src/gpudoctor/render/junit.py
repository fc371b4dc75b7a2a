"""The gate report as JUnit XML for CI systems: one test case per check and subject.

A blocking failed check is a ``<failure>``; a blocking check that could not be judged is an
``<error>``; a check that could not be judged and did not block (fail-open, or below fail_on) is
``<skipped>``; a failed check below fail_on passes, with the finding in ``<system-out>``, so the
CI result agrees with the gate's verdict. Checks that do not apply are left out. Formatting only.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from typing import Any

from ..findings import Finding, Status
from ..lazy_re import LazyPattern

# XML 1.0 allows no control characters besides tab, newline and carriage return, and no lone
# surrogate (which no encoding can write either). The file is written as rendered, without the
# output writer's escaping pass, and CI logs and terminals show it, so
# carriage return, DEL, the C1 controls (``\x9b`` is an 8-bit CSI) and the bidirectional
# embedding/override/isolate characters go too: each becomes a visible escape, as
# gpudoctor.gpudoctor.escaping writes them (``\x1b``, ``\u009b``, ``\u202e``).
_NOT_SHOWN = LazyPattern("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff\ufffe\uffff]")


def _visible(match: re.Match[str]) -> str:
    code = ord(match.group())
    return "\\r" if code == 0x0D else f"\\x{code:02x}" if code < 0x20 else f"\\u{code:04x}"


def _clean(text: str) -> str:
    return _NOT_SHOWN.sub(_visible, text)


def _body(f: Finding) -> str:
    parts = [f.message]
    if f.detail:
        parts.append(f"why: {f.detail}")
    if f.evidence:
        from .text import _value

        parts.append("read: " + "; ".join(f"{p} = {_value(v)}" for p, v in f.evidence))
    if f.fix:
        parts.append("fix: " + f.fix.strip())
    return _clean("\n".join(parts))


def render(report: Any) -> str:
    findings = [f for f in report.findings if f.status is not Status.SKIP]
    not_judged = {id(f) for f in report.not_judged}
    failures = errors = skipped = 0
    cases = []
    for f in findings:
        case = ET.Element(
            "testcase",
            {
                "classname": _clean(f"gpudoctor.{f.area}"),
                "name": _clean(f"{f.rule_id} [{f.subject.label}]"),
                "time": "0",
            },
        )
        if report.is_blocking(f):
            if not report.cannot_check(f):
                failures += 1
                element = ET.SubElement(case, "failure", {"message": _clean(f.message), "type": f.severity.value})
            else:
                errors += 1
                element = ET.SubElement(case, "error", {"message": _clean(f.message), "type": "cannot-check"})
            element.text = _body(f)
        elif id(f) in not_judged and report.cannot_check(f):
            skipped += 1
            ET.SubElement(case, "skipped", {"message": _clean(f"could not be judged: {f.message}")})
        elif f.status is not Status.PASS:
            out = ET.SubElement(case, "system-out")
            out.text = _clean(f"{f.status.value} ({f.severity.value}, not blocking): ") + _body(f)
        cases.append(case)

    attrs = {
        "tests": str(len(cases)),
        "failures": str(failures),
        "errors": str(errors),
        "skipped": str(skipped),
        "time": f"{report.duration_s:.3f}",
    }
    # Jenkins' junit-10.xsd (xUnit plugin) allows no ``skipped`` on ``<testsuites>``, only on
    # ``<testsuite>``: the whole file fails its check with it (tests/render/test_junit_schema.py).
    totals = {key: value for key, value in attrs.items() if key != "skipped"}
    suites = ET.Element("testsuites", {"name": "gpudoctor gate", **totals})
    suite = ET.SubElement(
        suites,
        "testsuite",
        {
            "name": _clean(f"gpudoctor gate on {report.hostname()}"),
            "hostname": _clean(report.hostname()),
            "timestamp": report.generated_at.rstrip("Z"),
            **attrs,
        },
    )
    props = ET.SubElement(suite, "properties")
    for name, value in (
        ("verdict", report.verdict),
        ("policy", report.policy.source),
        ("fail_on", report.policy.fail_on.value),
        ("on_cannot_check", report.policy.on_cannot_check),
        ("facts_origin", report.facts_origin),
    ):
        ET.SubElement(props, "property", {"name": name, "value": _clean(str(value))})
    suite.extend(cases)
    if not report.go:
        out = ET.SubElement(suite, "system-err")
        out.text = _clean("\n".join(line.text for line in report.lines))
    if hasattr(ET, "indent"):  # Python 3.9+
        ET.indent(suites)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suites, encoding="unicode") + "\n"
