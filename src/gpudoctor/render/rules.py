"""Rule catalogue views: `gpudoctor rules list` and `gpudoctor rules show`.

A rule pack (--rules DIR) is outside content: its text is shown through gpudoctor.escaping (control
characters as visible escapes; the newlines of a multi-line expression or paragraph kept)."""

from __future__ import annotations

import json
from typing import Any

from ..engine.loader import Rule, RuleSet
from ..escaping import printable, printable_lines
from ..findings import AREAS
from ..model.profile_facts import FACTS, PROFILE_AREA, PROFILE_FIX, ProfileFact
from .layout import fix_lines, wrap

# What `rules list`, `rules show` and docs/rules.md say of a node profile's check (a profile-* id,
# judged by fleet/profile.py against the profile's values, not by an expression; its severity is
# the fact's, ProfileFact.severity).
PROFILE_JUDGED = "the node's value differs from the node profile's (check --profile FILE, the policy's profile:)"


def profile_judged(fact: ProfileFact) -> str:
    """``fail_if`` of a profile check in words, with the fact's tolerance where it has one."""
    return f"{PROFILE_JUDGED}, {fact.tolerance_words}" if fact.tolerance_words else PROFILE_JUDGED


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


def profile_check_dict(fact: ProfileFact) -> dict[str, Any]:
    """A node profile's check in the shape of rule_dict: no expression; ``fail_if`` says in words
    what it compares, ``facts`` the profile fact it reads."""
    return {
        "id": fact.rule_id,
        "title": fact.check_title,
        "area": PROFILE_AREA,
        "severity": fact.severity.value,
        "action": fact.action,
        "subject": fact.subject,
        "tags": sorted(fact.keys - {fact.rule_id, PROFILE_AREA}),
        "let": {},
        "applies": "the node profile names this fact",
        "fail_if": profile_judged(fact),
        "facts": [f"{fact.scope}.{fact.key}"],
        "message": f"{fact.title} is <value>; the profile (<file>) expects <expected>",
        "fix": PROFILE_FIX,
        "why": fact.why,
        "refs": [],
        "docs": f"docs/rules.md#{fact.rule_id}",
        "source": "src/gpudoctor/model/profile_facts.py",
    }


def list_json(ruleset: RuleSet) -> str:
    rows = [rule_dict(r) for r in ruleset.rules] + [profile_check_dict(f) for f in FACTS]
    return json.dumps(rows, indent=2, ensure_ascii=False) + "\n"


def list_text(ruleset: RuleSet, width: int = 100) -> str:
    """One line per rule, grouped by area; a title that does not fit `width` wraps under itself,
    and where the id, severity and subject columns leave under 20 columns for the title, each
    rule is its id on a line, then its severity, subject and title under it."""
    # (area, id, severity, subject, title): the rules, then the node profile's checks
    rows = [(r.area, r.id, r.severity.value, r.subject, r.title) for r in ruleset.rules]
    rows += [(PROFILE_AREA, f.rule_id, f.severity.value, f.subject, f.check_title) for f in FACTS]
    id_width = max([len(printable(row[1])) for row in rows] + [4])
    lines = []
    for area, heading in AREAS.items():
        chosen = [row for row in rows if row[0] == area]
        if not chosen:
            continue
        lines.append(f"{heading}")
        for _, rule_id, severity, subject, title in chosen:
            lead = f"  {printable(rule_id):<{id_width}}  {severity:<7}  {printable(subject):<9}  "
            if width - len(lead) >= 20:
                lines.extend(wrap(printable(title), width, lead))
            else:  # no room for columns: the id alone, then severity, subject and title under it
                lines.append(f"  {printable(rule_id)}")
                lines.extend(wrap(f"{severity} · {printable(subject)} · {printable(title)}", width, "      "))
    lines.append("")
    lines.extend(
        wrap(
            f"{len(ruleset.rules)} rules and {len(FACTS)} node profile checks (judged with check --profile "
            "or the policy's profile:). `gpudoctor rules show ID` explains one.",
            width,
        )
    )
    return "\n".join(lines) + "\n"


def _block(label: str, text: str, width: int) -> list[str]:
    out = [f"{label}:"]
    # a margin of 4 columns, as the 96 of before at the default 100; commands never wrapped
    out.extend(fix_lines(text.strip(), width - 4, "  ", "  "))
    return out


def show_profile_text(fact: ProfileFact, width: int = 100) -> str:
    """`rules show profile-...`: a node profile's check, in the layout of show_text."""
    tags = ", ".join(sorted(fact.keys - {fact.rule_id, PROFILE_AREA}))
    lines = [
        *wrap(f"{fact.rule_id}: {fact.check_title}", width),
        *wrap(
            f"area: {AREAS[PROFILE_AREA]} · severity: {fact.severity.value} · subject: {fact.subject}"
            + (f" · tags: {tags}" if tags else ""),
            width,
        ),
        "",
        *_block("Why it matters", fact.why, width),
        "",
        *wrap(
            "the node profile names this fact (check --profile FILE, the gate policy's profile:)",
            width,
            "Applies when:  ",
        ),
        *wrap(
            f"the node's {fact.title} is not the profile's value (one of its set, inside its range)"
            + (f", {fact.tolerance_words}" if fact.tolerance_words else ""),
            width,
            "Fails when:    ",
        ),
        *wrap(
            f"{fact.scope}.{fact.key} of the node's profile facts (model/profile_facts.py)", width, "Reads:         "
        ),
        f"On failure:    recommends {fact.action}",
        "",
        *_block("Message", f"{fact.title} is <value>; the profile (<file>) expects <expected>", width),
        "",
        *_block("Fix", PROFILE_FIX, width),
        "",
        f"Docs: docs/rules.md#{fact.rule_id}",
        *wrap("Defined in src/gpudoctor/model/profile_facts.py, judged by src/gpudoctor/fleet/profile.py", width),
    ]
    return "\n".join(lines) + "\n"


def show_text(rule: Rule, width: int = 100) -> str:
    def block(label: str, text: str) -> list[str]:
        return _block(label, text, width)

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
