"""Run rules over the facts: every rule × every subject → one Finding.

A rule whose inputs are unavailable is "unknown" (never pass or fail); a
rule that raises is an "error" finding and the other rules still run.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from ..findings import Finding, Severity, Status, Subject
from .expressions import FactUnavailable, format_value, section_views, wrap
from .factpaths import SECTIONS
from .helpers import bind
from .loader import Rule, RuleSet
from .subjects import SUBJECT_VARIABLE, gpu_subjects, subjects_for


def select(rules: Iterable[Rule], only: Iterable[str] = (), skip: Iterable[str] = ()) -> list[Rule]:
    """Filter by area, tag or rule id (--only / --skip)."""
    only_set, skip_set = set(only), set(skip)

    def keys(rule: Rule) -> set[str]:
        return {rule.id, rule.area, *rule.tags}

    out = [r for r in rules if not only_set or keys(r) & only_set]
    return [r for r in out if not keys(r) & skip_set]


def unknown_selectors(ruleset: RuleSet, selectors: Iterable[str]) -> list[str]:
    known: set[str] = set()
    for r in ruleset.rules:
        known |= {r.id, r.area, *r.tags}
    return [s for s in selectors if s not in known]


_GPU_NVML_FIELDS: frozenset[str] | None = None


def source_of(path: str) -> str:
    """Which probe a fact path comes from: gpu.pcie_width → nvml, gpu.pci.driver → pci, torch.x → torch."""
    global _GPU_NVML_FIELDS
    head, _, rest = path.partition(".")
    if head == "gpu":
        if _GPU_NVML_FIELDS is None:
            from .factpaths import _def

            _GPU_NVML_FIELDS = frozenset(_def("nvml_gpu")["properties"]) | {"in_nvml"}
        field = rest.split(".", 1)[0]
        if field in ("pci", "bench"):
            return field
        return "nvml" if field in _GPU_NVML_FIELDS else "topology"
    if head in ("node", "nic"):
        return "numa" if head == "node" else "pci"
    return head


def _dedup(reads: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
    seen: dict[str, Any] = {}
    for path, value in reads:
        if path not in seen:
            seen[path] = value
    return list(seen.items())


def evaluate_rule(
    rule: Rule,
    subject: Subject,
    data: Mapping[str, Any] | None,
    facts: Mapping[str, Any],
    gpus: list[dict[str, Any]],
    functions: Mapping[str, Any],
) -> Finding:
    reads: list[tuple[str, Any]] = []
    used = rule.names_used  # only what the rule refers to is wrapped: most rules read one or two sections
    names = section_views(facts, [s for s in SECTIONS if s in used], reads)
    if "gpus" in used:
        gpu_reads: list[tuple[str, Any]] = []  # reads through the gpus list are not evidence of this rule
        names["gpus"] = [wrap(g, f"gpus[{i}]", gpu_reads) for i, g in enumerate(gpus)]
    variable = SUBJECT_VARIABLE[rule.subject]
    if variable and data is not None:
        names[variable] = wrap(data, variable, reads)

    evidence_end: list[int] = []

    def finding(status: Status, message: str, fix: str = "", detail: str = "", cause: str = "") -> Finding:
        # Evidence is what the conditions read, not what the message template read afterwards.
        end = evidence_end[0] if evidence_end else len(reads)
        return Finding(
            rule_id=rule.id,
            title=rule.title,
            area=rule.area,
            severity=rule.severity,
            status=status,
            subject=subject,
            message=message,
            evidence=_dedup(reads[:end]),
            fix=fix,
            docs=rule.docs,
            detail=detail,
            cause=cause,
        )

    try:
        if rule.applies is not None and not rule.applies.evaluate(names, functions):
            return finding(Status.SKIP, "does not apply")
        failed = bool(rule.fail_if.evaluate(names, functions))
        evidence_end.append(len(reads))
    except FactUnavailable as exc:
        u = exc.unavailable
        return finding(
            Status.UNKNOWN,
            f"cannot check: {exc.path} is unavailable ({u.reason})",
            detail=u.detail,
            cause=f"{source_of(exc.path)}: {u.reason}",
        )
    except Exception as exc:  # a broken rule must not stop the others
        return finding(
            Status.ERROR,
            f"rule {rule.id} broke: {type(exc).__name__}",
            detail=f"{exc} (rule defined at {rule.source}:{rule.line})",
        )
    try:
        if failed:
            return finding(Status.FAIL, rule.message.render(names, functions), rule.fix.render(names, functions))
        message = rule.pass_message.render(names, functions) if rule.pass_message else rule.title
        return finding(Status.PASS, message)
    except Exception as exc:
        return finding(
            Status.ERROR,
            f"rule {rule.id} broke rendering its message: {type(exc).__name__}",
            detail=f"{exc} (rule defined at {rule.source}:{rule.line})",
        )


def run_rules(ruleset: RuleSet, facts: Mapping[str, Any], rules: Iterable[Rule] | None = None) -> list[Finding]:
    functions = bind(ruleset.tables)
    gpus = gpu_subjects(facts)
    findings: list[Finding] = []
    for rule in rules if rules is not None else ruleset.rules:
        for subject, data in subjects_for(rule.subject, facts, gpus):
            findings.append(evaluate_rule(rule, subject, data, facts, gpus, functions))
    return findings


def severity_from(text: str) -> Severity:
    return Severity(text)


__all__ = ["run_rules", "select", "evaluate_rule", "format_value"]
