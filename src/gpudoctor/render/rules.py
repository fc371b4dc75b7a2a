"""Rule catalogue views: `gpudoctor rules list` and `gpudoctor rules show`.

A rule pack (--rules DIR) is outside content: its text is shown through gpudoctor.escaping (control
characters as visible escapes; the newlines of a multi-line expression or paragraph kept)."""

from __future__ import annotations

import json
from typing import Any

from ..engine.loader import Rule, RuleSet
from ..escaping import printable, printable_lines
from ..findings import AREAS
from .layout import fix_lines, wrap


def rule_dict(rule: Rule) -> dict[str, Any]:
    return {
        "id": rule.id,
        "title": rule.title,
        "area": rule.area,
        "severity": rule.severity.value,
        "action": rule.action,
        "subject": rule.subject,
        "tags": list(rule.tags),
        "let": {name: expr.source for name, expr in rule.let},
        "applies": rule.applies.source if rule.applies else None,
        "fail_if": rule.fail_if.source,
        "facts": rule.facts_used,
        "message": rule.message.source,
        "fix": rule.fix.source,
        "why": rule.why,
        "refs": list(rule.refs),
        "docs": rule.docs,
        "source": f"{rule.source}:{rule.line}",
    }


def list_json(ruleset: RuleSet) -> str:
    return json.dumps([rule_dict(r) for r in ruleset.rules], indent=2, ensure_ascii=False) + "\n"


def list_text(ruleset: RuleSet, width: int = 100) -> str:
    """One line per rule, grouped by area; a title that does not fit `width` wraps under itself,
    and where the id, severity and subject columns leave under 20 columns for the title, each
    rule is its id on a line, then its severity, subject and title under it."""
    id_width = max([len(printable(r.id)) for r in ruleset.rules] + [4])
    lines = []
    for area, heading in AREAS.items():
        rules = [r for r in ruleset.rules if r.area == area]
        if not rules:
            continue
        lines.append(f"{heading}")
        for r in rules:
            lead = f"  {printable(r.id):<{id_width}}  {r.severity.value:<7}  {printable(r.subject):<9}  "
            if width - len(lead) >= 20:
                lines.extend(wrap(printable(r.title), width, lead))
            else:  # no room for columns: the id alone, then severity, subject and title under it
                lines.append(f"  {printable(r.id)}")
                lines.extend(
                    wrap(f"{r.severity.value} · {printable(r.subject)} · {printable(r.title)}", width, "      ")
                )
    lines.append("")
    lines.extend(wrap(f"{len(ruleset.rules)} rules. `gpudoctor rules show ID` explains one.", width))
    return "\n".join(lines) + "\n"


def show_text(rule: Rule, width: int = 100) -> str:
    def block(label: str, text: str) -> list[str]:
        out = [f"{label}:"]
        # a margin of 4 columns, as the 96 of before at the default 100; commands never wrapped
        out.extend(fix_lines(text.strip(), width - 4, "  ", "  "))
        return out

    lines = [
        *wrap(f"{printable(rule.id)}: {printable(rule.title)}", width),
        *wrap(
            f"area: {printable(AREAS.get(rule.area, rule.area))} · severity: {rule.severity.value} · "
            f"subject: {printable(rule.subject)}"
            + (f" · tags: {printable(', '.join(rule.tags))}" if rule.tags else ""),
            width,
        ),
        "",
        *block("Why it matters", rule.why),
        "",
    ]
    if rule.let:
        lines.append("Where:")
        lines.extend(f"  {printable(name)} = {printable_lines(expr.source)}" for name, expr in rule.let)
    if rule.applies:
        lines.append(f"Applies when:  {printable_lines(rule.applies.source)}")
    lines.append(f"Fails when:    {printable_lines(rule.fail_if.source)}")
    lines.extend(wrap(printable(", ".join(rule.facts_used)) or "-", width, "Reads:         "))
    lines.append(f"On failure:    recommends {rule.action}")
    if rule.superseded_by:
        named = printable(", ".join(rule.superseded_by))
        lines.extend(wrap(f"where {named} fails on the same subject or the host", width, "Stands aside:  "))
    lines.append("")
    lines.extend(block("Message", rule.message.source))
    lines.append("")
    if rule.unknown_message is not None:
        lines.extend(block("When it cannot judge", rule.unknown_message.source))
        lines.append("")
    lines.extend(block("Fix", rule.fix.source))
    lines.append("")
    lines.append("References:")
    for ref in rule.refs:
        lines.extend(wrap(printable(ref), width, "  - "))
    if rule.docs:
        lines.append(f"Docs: {printable(rule.docs)}")
    lines.append(f"Defined in {printable(rule.source)}:{rule.line}")
    return "\n".join(lines) + "\n"
