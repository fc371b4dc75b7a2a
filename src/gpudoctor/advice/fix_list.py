"""The fix list: every failed check's fix, grouped by what applying it takes.

Built from findings (the same rules `gpudoctor check` runs) and the rules' tags: each rule carries
at most one of the FIX_TAGS, which says whether its fix is a configuration change or reinstall a
user can make, needs root, needs a reboot, or needs BIOS / hardware work; a rule without one is
"other". A rule that failed for several subjects with the same fix is one item naming them all.
Each item says what to check afterwards, as argv words. Nothing here runs a fix, and nothing here
formats one: render/fix_list.py writes the list as text, JSON or a script.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

from ..findings import AREAS, Finding, Severity, Status

# Group tag → heading, in the order a person would work through them (cheapest first).
FIX_GROUPS: dict[str, str] = {
    "fix-config": "Configuration and reinstalls (as your user)",
    "fix-root": "Needs root",
    "fix-reboot": "Needs a reboot",
    "fix-hardware": "BIOS, cabling or hardware",
    "other": "Other fixes",
}
FIX_TAGS = tuple(t for t in FIX_GROUPS if t != "other")

_AREA_ORDER = {area: i for i, area in enumerate(AREAS)}


def fix_group(tags: Iterable[str]) -> str:
    """The group of a rule from its tags: the first fix-* tag in FIX_GROUPS order, else "other"."""
    present = set(tags)
    for tag in FIX_TAGS:
        if tag in present:
            return tag
    return "other"


@dataclass
class FixItem:
    group: str
    rule_id: str
    title: str
    area: str
    severity: Severity
    fix: str
    verify_argv: list[str]  # the check to run after the fix, as words
    subjects: list[dict[str, Any]] = field(default_factory=list)
    messages: list[str] = field(default_factory=list)

    @property
    def subject_labels(self) -> list[str]:
        return [str(s.get("label")) for s in self.subjects]


@dataclass
class FixList:
    items: list[FixItem]
    unknown: int = 0  # checks that could not be judged
    errors: int = 0  # rules that broke
    origin: str = "live"

    def by_group(self) -> list[tuple[str, list[FixItem]]]:
        return [
            (g, [i for i in self.items if i.group == g]) for g in FIX_GROUPS if any(i.group == g for i in self.items)
        ]


def verify_argv(rule_id: str, rule_dirs: Sequence[str] = ()) -> list[str]:
    """The check to run after a fix, as words."""
    argv = ["gpudoctor", "check", "--only", rule_id]
    for d in rule_dirs:
        argv += ["--rules", d]
    return argv


def collect(
    findings: Sequence[Finding],
    rule_tags: Mapping[str, Sequence[str]],
    rule_dirs: Sequence[str] = (),
    origin: str = "live",
) -> FixList:
    """Fix items for the failed findings; rule_tags maps a rule id to its tags."""
    items: dict[tuple[str, str], FixItem] = {}
    for f in findings:
        if f.status is not Status.FAIL:
            continue
        fix = f.fix.strip() or f"No fix text in the rule; see `gpudoctor rules show {f.rule_id}`."
        key = (f.rule_id, fix)
        item = items.get(key)
        if item is None:
            item = FixItem(
                group=fix_group(rule_tags.get(f.rule_id, ())),
                rule_id=f.rule_id,
                title=f.title,
                area=f.area,
                severity=f.severity,
                fix=fix,
                verify_argv=verify_argv(f.rule_id, rule_dirs),
            )
            items[key] = item
        item.subjects.append(f.subject.to_json())
        item.messages.append(f.message)
    ordered = sorted(
        items.values(),
        key=lambda i: (-i.severity.rank, _AREA_ORDER.get(i.area, len(_AREA_ORDER)), i.rule_id),
    )
    return FixList(
        items=ordered,
        unknown=sum(1 for f in findings if f.status is Status.UNKNOWN),
        errors=sum(1 for f in findings if f.status is Status.ERROR),
        origin=origin,
    )
