"""The verdict: the facts the gate's rules judge, which findings block, the printed lines of a no-go,
the gate's report model, and GateFailed (the no-go as an exception, for job scripts)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from ..facts import Unavailable
from ..findings import Cause, Finding, Status, Subject, epoch_stamp, hostname_of
from ..model.gpus import gpu_rows
from .checks import hang_rules, rule_keys
from .device_facts import device_test_facts
from .policy import Policy


@dataclass(frozen=True)
class BlockingLine:
    """One printed line of a no-go: a blocking finding, or unjudged checks folded by their shared cause."""

    rule: str
    subject: Subject
    status: Status
    what: str
    fix: str
    count: int = 1
    # a line for one finding starts with its rule id; a folded group lists its rules at the end
    grouped: bool = False

    @property
    def text(self) -> str:
        head = self.what if self.grouped else f"{self.rule}: {self.what}"
        return head + (f" — fix: {self.fix}" if self.fix else "")

    def to_json(self) -> dict[str, Any]:
        return {
            "rule": self.rule,
            "subject": self.subject.to_json(),
            "status": self.status.value,
            "line": self.text,
            "fix": self.fix,
            "count": self.count,
        }


def _first_line(text: str) -> str:
    """The fix's first instruction; one that ends in a colon keeps the command that follows it."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    if not lines:
        return ""
    if lines[0].endswith(":") and len(lines) > 1:
        return f"{lines[0]} {lines[1]}"
    return lines[0]


def _said(f: Finding) -> str:
    """The finding's message with its subject named once."""
    message = f.message.strip()
    if f.subject.kind == "host" or f.subject.label in message or (f.subject.bus_id and f.subject.bus_id in message):
        return message
    return f"{f.subject.label}: {message}"


def blocking_lines(blocking: Sequence[Finding]) -> list[BlockingLine]:
    lines: list[BlockingLine] = []
    groups: dict[Cause, list[Finding]] = {}
    for f in blocking:
        if f.status is Status.FAIL:
            lines.append(BlockingLine(f.rule_id, f.subject, f.status, _said(f), _first_line(f.fix)))
        elif f.status is Status.UNKNOWN and f.cause is not None:
            groups.setdefault(f.cause, []).append(f)
        else:
            how = "broke" if f.status is Status.ERROR else "could not be checked"
            detail = f" ({f.detail})" if f.detail else ""
            lines.append(
                BlockingLine(f.rule_id, f.subject, f.status, f"{f.subject.label}: {how}: {f.message}{detail}", "")
            )
    for cause, group in groups.items():
        first = group[0]
        if len(group) == 1:
            detail = f" ({first.detail})" if first.detail and first.detail not in first.message else ""
            lines.append(BlockingLine(first.rule_id, first.subject, first.status, _said(first) + detail, ""))
            continue
        subjects = list(dict.fromkeys(f.subject.label for f in group))
        where = ", ".join(subjects) if len(subjects) <= 3 else f"{len(subjects)} subjects"
        detail = max((f.detail for f in group), key=len)
        rules = list(dict.fromkeys(f.rule_id for f in group))
        shown = ", ".join(rules[:4]) + (f" and {len(rules) - 4} more" if len(rules) > 4 else "")
        text = f"{where}: {len(group)} checks could not be judged: {detail or cause.words()}"
        text += f" [{shown}]"
        lines.append(BlockingLine(rules[0], first.subject, Status.UNKNOWN, text, "", count=len(group), grouped=True))
    return lines


@dataclass
class GateReport:
    policy: Policy
    findings: list[Finding]
    blocking: list[Finding]
    not_judged: list[Finding]
    lines: list[BlockingLine]
    facts: Mapping[str, Any]
    facts_origin: str = "live"
    duration_s: float = 0.0
    generated_epoch: float = field(default_factory=time.time)
    deep: Any = None  # deep.DeepResult when the device test ran
    # rules whose failure means a source did not answer (tag `hang`): could not check, not failed
    hang_rules: frozenset[str] = frozenset()

    def cannot_check(self, f: Finding) -> bool:
        """The check could not be judged: inputs unavailable, the rule broke, or a source did not answer."""
        return f.status in (Status.UNKNOWN, Status.ERROR) or (f.status is Status.FAIL and f.rule_id in self.hang_rules)

    @property
    def generated_at(self) -> str:
        return epoch_stamp(self.generated_epoch)

    @property
    def go(self) -> bool:
        return not self.blocking

    @property
    def verdict(self) -> str:
        return "go" if self.go else "no-go"

    @property
    def exit_code(self) -> int:
        return 0 if self.go else 1

    def is_blocking(self, f: Finding) -> bool:
        return any(f is b for b in self.blocking)

    def counts(self) -> dict[str, int]:
        out = {s.value: 0 for s in Status}
        for f in self.findings:
            out[f.status.value] += 1
        out["blocking"] = len(self.blocking)
        out["not_judged"] = len(self.not_judged)
        return out

    def hostname(self) -> str:
        return hostname_of(self.facts)

    def gpus(self) -> list[dict[str, Any]]:
        """One row per GPU: identity, memory, and which checks failed on it."""
        return gpu_rows(self.facts, self.findings, self.is_blocking)


class GateFailed(Exception):
    """The gate said no-go. ``findings`` are the blocking findings, ``report`` the whole report."""

    def __init__(self, report: GateReport) -> None:
        self.report = report
        self.findings = list(report.blocking)
        lines = [line.text for line in report.lines]
        super().__init__("gpudoctor gate: no-go: " + "; ".join(lines))


# Reasons that say "gpudoctor may not look here" or "there is nothing to look at", not "the machine
# did not answer": such a check is not judged and blocks only when required.
NOT_VISIBLE_REASONS = ("no_permission", "not_supported")


def not_visible(f: Finding) -> bool:
    """An unknown finding whose facts are unavailable for lack of permission or of the feature."""
    return f.status is Status.UNKNOWN and f.cause is not None and f.cause.reason in NOT_VISIBLE_REASONS


def gate_facts(facts: Mapping[str, Any], policy: Policy, deep_result: Any = None) -> dict[str, Any]:
    """The facts with what the gate's rules (rules/gate/) judge besides them: the policy's
    expectations (section policy) and the device test's result (section device_test). Those
    sections come from this run only, never from a snapshot that brings its own."""
    from ..engine.factpaths import GATE_SECTIONS

    out = {key: value for key, value in facts.items() if key not in GATE_SECTIONS}
    out["policy"] = policy.facts()
    if deep_result is not None:
        out["device_test"] = device_test_facts(deep_result)
    return out


def _gate_input(path: str) -> bool:
    from ..engine.factpaths import GATE_SECTIONS

    return path.split(".", 1)[0] in GATE_SECTIONS or path.startswith("gpu.device_test")


def asked_for(f: Finding) -> bool:
    """False for a gate rule (area gate) that skipped because the gate has no input for it: the
    policy sets no such expectation, the device test did not run or did not reach this GPU, no
    all-reduce was measured. Such a check was not asked for and is left out of the report; one
    that skipped for a reason of its own (a step not run after another failed) is reported."""
    if f.area != "gate" or f.status is not Status.SKIP:
        return True
    return not any(
        isinstance(value, Unavailable) and value.reason == "not_found" and _gate_input(path)
        for path, value in f.evidence
    )


def judge(
    facts: Mapping[str, Any],
    ruleset: Any,
    policy: Policy,
    *,
    deep_result: Any = None,
    facts_origin: str = "live",
    duration_s: float = 0.0,
    deadline: float | None = None,
) -> GateReport:
    """Run the policy's checks over the facts and decide. Pure: reads nothing but its arguments
    (and the clock, against ``deadline``: rules not judged by then are unknown, cause timeout).
    ``ruleset`` holds the gate's own rules too (load_rules(..., gate=True))."""
    from ..engine.runner import run_rules, select

    keys = rule_keys(ruleset)
    rules = select(ruleset.rules, (), policy.ignore)
    judged = gate_facts(facts, policy, deep_result)
    findings = [f for f in run_rules(ruleset, judged, rules, deadline=deadline) if asked_for(f)]
    if policy.profile is not None:
        from ..fleet.profile import check as check_profile

        findings += check_profile(facts, policy.profile, skip=policy.ignore)

    hang = hang_rules(ruleset)
    required = set(policy.required)
    blocking: list[Finding] = []
    not_judged: list[Finding] = []
    for f in findings:
        if f.status in (Status.PASS, Status.SKIP):
            continue
        is_required = bool(keys.get(f.rule_id, {f.rule_id}) & required)
        can_block = is_required or f.severity.rank >= policy.fail_on.rank
        cannot_check = f.status in (Status.UNKNOWN, Status.ERROR) or (f.status is Status.FAIL and f.rule_id in hang)
        if not cannot_check:
            if can_block:
                blocking.append(f)
        elif can_block and (is_required or (policy.fail_closed and not not_visible(f))):
            blocking.append(f)
        else:
            not_judged.append(f)
    return GateReport(
        policy=policy,
        findings=findings,
        blocking=blocking,
        not_judged=not_judged,
        lines=blocking_lines(blocking),
        facts=facts,
        facts_origin=facts_origin,
        duration_s=duration_s,
        deep=deep_result,
        hang_rules=frozenset(hang),
    )
