"""The gate's JUnit XML against Jenkins' own schema (junit-10.xsd of the xUnit plugin, copied with
its MIT licence into tests/fixtures/schemas/): a file Jenkins rejects is a CI run with no results.

Every element and attribute is checked against the schema's declarations with the standard library
(always); the full validation runs where the ``xmlschema`` package (test extras) is installed.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from gpudoctor.render import junit
from tests.render.test_gate_outputs import report_of, unknown_report

XSD = Path(__file__).resolve().parents[1] / "fixtures" / "schemas" / "junit-10.xsd"
GOLDEN = sorted((Path(__file__).resolve().parents[1] / "golden" / "gate").glob("*.junit.xml"))
XS = "{http://www.w3.org/2001/XMLSchema}"


def _declarations() -> dict[str, tuple[set[str], set[str], set[str]]]:
    """Element name -> (allowed attributes, required attributes, allowed child elements)."""
    out = {}
    for element in ET.parse(XSD).getroot().findall(f"{XS}element"):
        kind = element.find(f"{XS}complexType")
        named_type = element.get("type")
        if kind is None and named_type not in (None, "xs:string"):
            kind = next(t for t in ET.parse(XSD).getroot().findall(f"{XS}complexType") if t.get("name") == named_type)
        attributes = [] if kind is None else kind.iter(f"{XS}attribute")
        allowed, required = set(), set()
        for attribute in attributes:
            allowed.add(attribute.get("name"))
            if attribute.get("use") == "required":
                required.add(attribute.get("name"))
        children = set() if kind is None else {ref.get("ref") or ref.get("name") for ref in kind.iter(f"{XS}element")}
        out[element.get("name")] = (allowed, required, children)
    return out


def _problems(xml_text: str) -> list[str]:
    declared = _declarations()
    problems = []
    for node in ET.fromstring(xml_text.encode()).iter():
        if node.tag not in declared:
            problems.append(f"<{node.tag}> is not declared")
            continue
        allowed, required, children = declared[node.tag]
        problems += [f"<{node.tag}> has undeclared attribute {a}" for a in sorted(set(node.attrib) - allowed)]
        problems += [f"<{node.tag}> lacks required attribute {a}" for a in sorted(required - set(node.attrib))]
        problems += [f"<{node.tag}> may not hold <{c.tag}>" for c in node if c.tag not in children]
    return problems


def _outputs() -> list[tuple[str, str]]:
    rendered = [
        ("go", junit.render(report_of("healthy-2gpu"))),
        ("no-go", junit.render(report_of("pcie-degraded"))),
        ("warnings below fail_on", junit.render(report_of("thermal-slowdown", ignore=("hw-slowdown-active",)))),
        ("cannot check, fail-closed (error)", junit.render(unknown_report(True))),
        ("cannot check, fail-open (skipped)", junit.render(unknown_report(False))),
    ]
    return rendered + [(path.name, path.read_text()) for path in GOLDEN]


def test_the_schema_declares_what_jenkins_reads():
    # Guards the declaration reader itself: were it to read nothing, every output would pass.
    allowed, _, children = _declarations()["testsuites"]
    assert "skipped" not in allowed and {"tests", "failures", "errors"} <= allowed and children == {"testsuite"}
    assert _problems('<testsuites skipped="0"><testsuite name="x" tests="0" failures="0" errors="0"/></testsuites>')


@pytest.mark.parametrize("case,text", _outputs(), ids=[name for name, _ in _outputs()])
def test_junit_uses_only_what_junit_10_declares(case, text):
    assert _problems(text) == [], case


@pytest.mark.parametrize("case,text", _outputs(), ids=[name for name, _ in _outputs()])
def test_junit_validates_against_junit_10(case, text):
    xmlschema = pytest.importorskip("xmlschema", reason="full XSD validation needs the xmlschema package (test extras)")
    xmlschema.XMLSchema(str(XSD)).validate(text)
