"""The per-rule cases of cases.yaml: what they are and how one is applied to a fixture host's facts.

Used by test_rule_cases.py and by scripts/gen_rules_doc.py (the "fails on / passes on" examples
of docs/rules.md).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from gpudoctor.facts import from_jsonable
from gpudoctor.findings import Finding

CASES_FILE = Path(__file__).with_name("cases.yaml")
CASES: dict[str, dict[str, list[dict[str, Any]]]] = yaml.safe_load(CASES_FILE.read_text(encoding="utf-8")) or {}
KINDS = ("fail", "pass", "unknown")


def _steps(path: str) -> list[Any]:
    steps: list[Any] = []
    for part in path.split("."):
        m = re.fullmatch(r"([^\[]+)((?:\[\d+\])*)", part)
        assert m, f"bad path {path}"
        steps.append(m.group(1))
        steps.extend(int(i) for i in re.findall(r"\[(\d+)\]", m.group(2)))
    return steps


def apply(facts: dict[str, Any], case: dict[str, Any]) -> dict[str, Any]:
    """The facts with the case's `set:` overrides and `delete:` removals made."""
    for path, value in (case.get("set") or {}).items():
        steps = _steps(path)
        node: Any = facts
        for step in steps[:-1]:
            node = node[step]
        node[steps[-1]] = from_jsonable(value)
    for path in case.get("delete") or []:
        steps = _steps(path)
        node = facts
        for step in steps[:-1]:
            node = node[step]
        del node[steps[-1]]
    return facts


def matches(finding: Finding, subject: Any) -> bool:
    """Is this the finding the case's `subject:` (a GPU bus id, a NUMA node id, "host") picks?"""
    if subject is None:
        return True
    s = finding.subject
    return subject in (s.bus_id, s.label, s.kind) or (s.index is not None and subject == s.index and s.kind != "gpu")


def comments() -> dict[tuple[str, str, int], str]:
    """What cases.yaml says about each case in comments, by (rule id, kind, index): the comment
    lines just above the case's `- base:` line and the one after it on that line."""
    out: dict[tuple[str, str, int], str] = {}
    rule = kind = ""
    counts: dict[tuple[str, str], int] = {}
    above: list[str] = []
    for line in CASES_FILE.read_text(encoding="utf-8").splitlines():
        stripped = line.strip()
        top = re.fullmatch(r"([a-z0-9-]+):\s*(#.*)?", line)
        if top:
            rule, kind, above = top.group(1), "", []
            continue
        section = re.fullmatch(r"  (fail|pass|unknown):\s*(#.*)?", line)
        if section:
            kind, above = section.group(1), []
            continue
        if stripped.startswith("#"):
            above.append(stripped.lstrip("#").strip())
            continue
        item = re.fullmatch(r"\s*- base: \S+\s*(?:#\s*(.*))?", line)
        if item and rule and kind:
            index = counts.get((rule, kind), 0)
            counts[(rule, kind)] = index + 1
            text = " ".join([*above, item.group(1) or ""]).strip()
            if text:
                out[(rule, kind, index)] = text
        above = []
    return out
