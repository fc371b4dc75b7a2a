"""Run rules over the facts: every rule × every subject → one Finding.

A rule whose inputs are unavailable is "unknown" (never pass or fail); a
rule that raises is an "error" finding and the other rules still run.

Cost: the subjects, the view of the ``gpus`` list and the function table are built once per
run, and what a rule computes independently of its subject is computed once per run
(evaluator.RunCache), so a run is linear in the number of GPUs for the built-in rules.

Deadline: ``run_rules(..., deadline=t)`` (a ``time.monotonic()`` value) stops judging at ``t``:
every rule and subject not judged by then, including one cut off mid-evaluation, is an
"unknown" finding with cause ``engine: timeout`` (findings.TIMEOUT_CAUSE). The default,
``deadline=None``, is no limit.

Size: what findings hold is bounded as findings.py's docstring says (4 KiB per message, fix and
detail; 64 evidence facts; 16384 subjects per rule; 64 Mi characters for a whole run).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from ..findings import (
    LIMIT_CAUSE,
    MAX_SUBJECTS_PER_RULE,
    MAX_TEXT_CHARS,
    TIMEOUT_CAUSE,
    Cause,
    Finding,
    ReportBudget,
    Status,
    Subject,
    cut_text,
)
from . import collector
from .evaluator import DeadlineExceeded, Expression, LetValue, RunCache
from .factpaths import SECTIONS
from .helpers.registry import bind
from .loader import Rule, RuleSet
from .subjects import SUBJECT_VARIABLE, gpu_subjects, subjects_for
from .templates import Template
from .views import FactUnavailable, section_views, wrap


def chosen(keys: Iterable[str], only: Iterable[str] = (), skip: Iterable[str] = ()) -> bool:
    """Whether a check with these keys (its id, area and tags) is run under --only / --skip:
    the one test for rules and for the node profile's checks (model/profile_facts.py)."""
    names, only_set = set(keys), set(only)
    return (not only_set or bool(names & only_set)) and not names & set(skip)


def select(rules: Iterable[Rule], only: Iterable[str] = (), skip: Iterable[str] = ()) -> list[Rule]:
    """Filter by area, tag or rule id (--only / --skip)."""
    only, skip = tuple(only), tuple(skip)
    return [r for r in rules if chosen({r.id, r.area, *r.tags}, only, skip)]


def unknown_selectors(ruleset: RuleSet, selectors: Iterable[str]) -> list[str]:
    """The selectors that name no rule, area or tag, nor a node profile's check."""
    from ..model.profile_facts import FACTS

    known: set[str] = set()
    for r in ruleset.rules:
        known |= {r.id, r.area, *r.tags}
    for fact in FACTS:
        known |= fact.keys
    return [s for s in selectors if s not in known]


_GPU_NVML_FIELDS: frozenset[str] | None = None


def source_of(path: str) -> str:
    """Which probe a fact path comes from: gpu.pcie_width → nvml, gpu.pci.driver → pci, torch.x → torch,
    gpu.device_test.x → deep (the gate's device test)."""
    global _GPU_NVML_FIELDS
    head, _, rest = path.partition(".")
    if head == "gpu":
        if _GPU_NVML_FIELDS is None:
            from .factpaths import _def

            _GPU_NVML_FIELDS = frozenset(_def("nvml_gpu")["properties"]) | {"in_nvml"}
        field = rest.split(".", 1)[0]
        if field in ("pci", "bench"):
            return field
        if field == "device_test":
            return "deep"
        return "nvml" if field in _GPU_NVML_FIELDS else "topology"
    if head in ("node", "nic", "bridge", "port"):
        return {"node": "numa", "nic": "pci", "bridge": "pci", "port": "rdma"}[head]
    # the gate's device test (device_test, gpu.device_test): its causes name "the device test"
    return "deep" if head == "device_test" else head


def _dedup(reads: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
    seen: dict[str, Any] = {}
    for path, value in reads:
        if path not in seen:
            seen[path] = value
    return list(seen.items())


def _describe(exc: BaseException) -> str:
    """str(exc), bounded, and never raising itself (an exception's text can be anything)."""
    try:
        text = str(exc)
    except Exception:  # noqa: BLE001 - e.g. a message holding an int past int_max_str_digits
        text = f"{type(exc).__name__} (its message could not be shown)"
    return cut_text(text, MAX_TEXT_CHARS // 2)  # room left for where the rule is defined


TIMEOUT_MESSAGE = "cannot check: timeout (the run's time limit was reached)"
TIMEOUT_DETAIL = "the run's deadline passed before this rule was judged for this subject"


def _engine_finding(
    rule: Rule,
    subject: Subject,
    status: Status,
    message: str,
    detail: str = "",
    cause: Cause | None = None,
    *,
    fix: str = "",
    evidence: list[tuple[str, Any]] | None = None,
) -> Finding:
    """A finding of ``rule`` on ``subject``: the rule's own verdict, or one the engine gives it
    (it timed out, broke, or had too many subjects)."""
    return Finding(
        rule_id=rule.id,
        title=rule.title,
        area=rule.area,
        severity=rule.severity,
        status=status,
        subject=subject,
        message=message,
        evidence=evidence if evidence is not None else [],
        fix=fix,
        docs=_docs_of(rule),
        refs=_bounded_refs(rule.refs),
        detail=detail,
        cause=cause,
        action=rule.action,
    )


# what a finding repeats of its rule's references (a rule pack may list many, or long ones)
MAX_REFS = 8
MAX_REF_CHARS = 400


@functools.lru_cache(maxsize=1024)
def _bounded_refs(refs: tuple[str, ...]) -> tuple[str, ...]:
    """A rule's references as its findings repeat them; one tuple per rule, not one per finding."""
    return tuple(cut_text(ref, MAX_REF_CHARS) for ref in refs[:MAX_REFS])


def _docs_of(rule: Rule) -> str:
    """Where a finding's rule is explained: the rule's own docs: link, else for a built-in rule its
    section of docs/rules.md (every built-in rule has one, generated); a rule pack's rule without
    docs: has only `gpudoctor rules show ID`."""
    if rule.docs:
        return rule.docs
    return f"docs/rules.md#{rule.id}" if _is_builtin(rule.source) else ""


@functools.lru_cache(maxsize=256)
def _is_builtin(source: str) -> bool:
    """Whether a rule file is one of gpudoctor's own (under builtin_rules_dir): asked once per
    file, not once per finding (10 000 rules on 8 GPUs are 80 000 findings)."""
    from ..tables import builtin_rules_dir

    try:
        return Path(source).resolve().is_relative_to(builtin_rules_dir().resolve())
    except (OSError, ValueError):
        return False


def _unknown_message(rule: Rule, render: Callable[..., str], path: str, reason: str) -> str:
    """The rule's own words for a check it cannot judge, or the engine's, which name the fact;
    the rule's words too may read only what is there (else the engine's are used)."""
    if rule.unknown_message is not None:
        # a template that reads an unavailable fact, or breaks, leaves the engine's words
        with contextlib.suppress(Exception):
            return render(rule.unknown_message, strict=True)
    return f"cannot check: {path} is unavailable ({reason})"


def _timeout_finding(rule: Rule, subject: Subject) -> Finding:
    return _engine_finding(rule, subject, Status.UNKNOWN, TIMEOUT_MESSAGE, TIMEOUT_DETAIL, TIMEOUT_CAUSE)


def prepare(rules: Iterable[Rule], deadline: float | None = None) -> int:
    """Compile, before the run, what every run of these rules reads first: each rule's applies, or
    its fail_if where it has none (a rule from the rule cache compiles each field where first read:
    rule._Parts). The run would compile the same, so nothing is compiled twice or in vain; `check`
    does it while NVML's child may still be answering. Stops at ``deadline`` (time.monotonic());
    a field its checks refuse is left for the run to report. How many rules it prepared."""
    done = 0
    for rule in rules:
        if deadline is not None and time.monotonic() > deadline:
            break
        with contextlib.suppress(Exception):
            if rule.applies is None:
                rule.fail_if  # noqa: B018 - compiled where first read
        done += 1
    return done


def _needs(compiled: Expression | Template) -> tuple[tuple[str, ...], bool]:
    """The facts sections an expression or template reads (in SECTIONS order), and whether it reads
    ``gpus`` (found while it was compiled): only those are wrapped, most rules read one or two."""
    if isinstance(compiled, Template):
        used: frozenset[str] = frozenset().union(*(e.names_read() for _, e, _ in compiled.parts if e is not None))
    else:
        used = compiled.names_read()
    return tuple(s for s in SECTIONS if s in used), "gpus" in used


class _Run:
    """What one run_rules call builds once and every evaluation shares."""

    def __init__(self, ruleset: RuleSet, facts: Mapping[str, Any], deadline: float | None) -> None:
        self.facts = facts
        self.functions = bind(ruleset.tables)
        self.gpus = gpu_subjects(facts)
        self.cache = RunCache(deadline)
        self._gpu_views: list[Any] | None = None
        self._subjects: dict[str, list[tuple[Subject, dict[str, Any] | None]]] = {}
        self._needs: dict[int, tuple[Any, tuple[tuple[str, ...], bool]]] = {}

    def gpu_views(self) -> list[Any]:
        """The gpus list as rules see it, made once: reads through it are not evidence."""
        if self._gpu_views is None:
            discard = self.cache.discard()
            views = [wrap(g, f"gpus[{i}]", discard) for i, g in enumerate(self.gpus)]
            self._gpu_views = self.cache.share(views)
        return self._gpu_views

    def needs(self, compiled: Expression | Template) -> tuple[tuple[str, ...], bool]:
        """_needs, once per expression or template in a run (rules share them: rule._memoised)."""
        hit = self._needs.get(id(compiled))
        if hit is not None and hit[0] is compiled:
            return hit[1]
        found = _needs(compiled)
        self._needs[id(compiled)] = (compiled, found)
        return found

    def subjects(self, kind: str) -> list[tuple[Subject, dict[str, Any] | None]]:
        if kind not in self._subjects:
            self._subjects[kind] = subjects_for(kind, self.facts, self.gpus)
        return self._subjects[kind]


def evaluate_rule(
    rule: Rule,
    subject: Subject,
    data: Mapping[str, Any] | None,
    facts: Mapping[str, Any],
    gpus: list[dict[str, Any]],
    functions: Mapping[str, Any],
    run: Any = None,
) -> Finding:
    """One rule on one subject. ``run`` (internal to run_rules) shares work between evaluations.

    What the expressions and templates read is bound to their names as each is about to be used
    (``bind``): the applies condition's first, the fail_if's next, a message's only when it is
    rendered; so a rule from the rule cache compiles only what it uses (rule._Parts)."""
    reads: list[tuple[str, Any]] = []
    cache: RunCache | None = run.cache if run is not None else None
    if cache is not None:
        cache.reads = reads
    names: dict[str, Any] = {}
    variable = SUBJECT_VARIABLE[rule.subject]
    if variable and data is not None:
        names[variable] = wrap(data, variable, reads)
    unbound_lets = [rule.parts]  # emptied when the rule's let: names are bound

    def bind(compiled: Any) -> Any:
        """``compiled`` (an expression or template), once the names it reads are in ``names``."""
        sections, uses_gpus = run.needs(compiled) if run is not None else _needs(compiled)
        missing = [section for section in sections if section not in names]
        if missing:
            names.update(section_views(facts, missing, reads))
        if uses_gpus and "gpus" not in names:
            if run is not None:
                names["gpus"] = run.gpu_views()
            else:
                gpu_reads: list[tuple[str, Any]] = []  # reads through the gpus list are not evidence of this rule
                names["gpus"] = [wrap(g, f"gpus[{i}]", gpu_reads) for i, g in enumerate(gpus)]
        # the let: names, once compiled (for the first text that reads one): each worked out where
        # first read (see LetValue)
        lets = unbound_lets[0].lets if unbound_lets else None
        if lets is not None:
            unbound_lets.clear()
            for name, expression in lets.items():
                names[name] = LetValue(expression)
        return compiled

    evidence_end: list[int] = []

    def finding(
        status: Status, message: str, fix: str = "", detail: str = "", cause: Cause | None = None
    ) -> Finding:
        # Evidence is what the conditions read, not what the message template read afterwards.
        end = evidence_end[0] if evidence_end else len(reads)
        return _engine_finding(rule, subject, status, message, detail, cause, fix=fix, evidence=_dedup(reads[:end]))

    def render(template: Any, strict: bool = False) -> str:
        text: str = bind(template).render(names, functions, cache, strict=strict)
        return text

    try:
        applies = rule.applies
        if applies is not None and not bind(applies).evaluate(names, functions, cache):
            return finding(Status.SKIP, "does not apply")
        failed = bool(bind(rule.fail_if).evaluate(names, functions, cache))
        evidence_end.append(len(reads))
    except FactUnavailable as exc:
        u = exc.unavailable
        evidence_end.append(len(reads))
        return finding(
            Status.UNKNOWN,
            _unknown_message(rule, render, exc.path, u.reason),
            detail=u.detail,
            cause=Cause(source_of(exc.path), u.reason),
        )
    except DeadlineExceeded:
        return finding(Status.UNKNOWN, TIMEOUT_MESSAGE, detail=TIMEOUT_DETAIL, cause=TIMEOUT_CAUSE)
    except Exception as exc:  # a broken rule must not stop the others
        return finding(
            Status.ERROR,
            f"rule {rule.id} broke: {type(exc).__name__}",
            detail=f"{_describe(exc)} (rule defined at {rule.source}:{rule.line})",
        )
    try:
        if failed:
            return finding(Status.FAIL, render(rule.message), render(rule.fix))
        message = render(rule.pass_message) if rule.pass_message else rule.title
        return finding(Status.PASS, message)
    except DeadlineExceeded:
        return finding(Status.UNKNOWN, TIMEOUT_MESSAGE, detail=TIMEOUT_DETAIL, cause=TIMEOUT_CAUSE)
    except Exception as exc:
        return finding(
            Status.ERROR,
            f"rule {rule.id} broke rendering its message: {type(exc).__name__}",
            detail=f"{_describe(exc)} (rule defined at {rule.source}:{rule.line})",
        )


def _broken(rule: Rule, subject: Subject, exc: BaseException) -> Finding:
    """The finding for a rule whose evaluation failed outside the guarded expressions."""
    detail = f"{_describe(exc)} (rule defined at {rule.source}:{rule.line})"
    return _engine_finding(rule, subject, Status.ERROR, f"rule {rule.id} broke: {type(exc).__name__}", detail)


def _left_out(rule: Rule, kind: str, count: int) -> Finding:
    return _engine_finding(
        rule,
        Subject(kind, f"{count} more {kind} subjects"),
        Status.UNKNOWN,
        f"cannot check: {count} more subjects than the {MAX_SUBJECTS_PER_RULE} a rule judges in one run",
        f"a rule judges at most {MAX_SUBJECTS_PER_RULE} subjects per run; these were left out",
        LIMIT_CAUSE,
    )


# Rules take milliseconds; a run whose probes used its whole budget (a hung NVML, a slow tool)
# still gets this long to judge what was read, so that PCIe and NUMA are not left unknown. Only
# a rule set or snapshot built to be slow meets the engine's deadline.
JUDGING_GRACE_S = 1.0


def judging_deadline(run_deadline: float) -> float:
    """The engine's deadline for a run that had until ``run_deadline`` (time.monotonic())."""
    return max(run_deadline, time.monotonic() + JUDGING_GRACE_S)


@collector.paused()  # the findings and what the run shares live on: collections would only walk them
def run_rules(
    ruleset: RuleSet,
    facts: Mapping[str, Any],
    rules: Iterable[Rule] | None = None,
    *,
    deadline: float | None = None,
) -> list[Finding]:
    """Every rule on every subject of its kind, one finding each, in rule order.

    ``deadline``: a ``time.monotonic()`` value; a rule and subject not judged by then is
    "unknown" with cause ``engine: timeout``. None (the default): no time limit.
    A rule that breaks, however, is an "error" finding; it never stops the run."""
    run = _Run(ruleset, facts, deadline)
    budget = ReportBudget()
    findings: list[Finding] = []
    chosen = list(rules) if rules is not None else ruleset.rules
    for rule in chosen:
        try:
            subjects = run.subjects(rule.subject)
        except Exception as exc:  # noqa: BLE001 - a subject kind the facts cannot give
            findings.append(budget.admit(_broken(rule, Subject(rule.subject, rule.subject), exc)))
            continue
        # what a rule judged once (a host rule) computes is never asked for again: not remembered
        run.cache.remember = len(subjects) > 1
        for subject, data in subjects[:MAX_SUBJECTS_PER_RULE]:
            if deadline is not None and time.monotonic() > deadline:
                finding = _timeout_finding(rule, subject)
            else:
                try:
                    finding = evaluate_rule(rule, subject, data, facts, run.gpus, run.functions, run)
                except DeadlineExceeded:
                    finding = _timeout_finding(rule, subject)
                except Exception as exc:  # noqa: BLE001 - a rule breaking must never end the run
                    finding = _broken(rule, subject, exc)
            findings.append(budget.admit(finding))
        if len(subjects) > MAX_SUBJECTS_PER_RULE:
            findings.append(budget.admit(_left_out(rule, rule.subject, len(subjects) - MAX_SUBJECTS_PER_RULE)))
    return _supersede(findings, chosen)


def _supersede(findings: list[Finding], rules: Iterable[Rule]) -> list[Finding]:
    """One cause, one failure: a failed finding whose rule lists, in superseded_by, a rule that also
    failed on the same subject, or on the host (a host's cause covers each of its GPUs), becomes
    not applicable, naming that rule (a generic "GPU missing from NVML" stands aside for "the
    driver dropped this GPU's architecture"; each GPU's unfinished fabric registration for "the
    fabric manager is not running")."""
    superseded = {rule.id: rule.superseded_by for rule in rules if rule.superseded_by}
    if not superseded:
        return findings
    failed = {(f.rule_id, f.subject.kind, f.subject.label) for f in findings if f.status is Status.FAIL}
    out = []
    for finding in findings:
        by = superseded.get(finding.rule_id, ())
        if finding.status is Status.FAIL and by:
            said = next(
                (
                    i
                    for i in by
                    if (i, finding.subject.kind, finding.subject.label) in failed or (i, "host", "host") in failed
                ),
                None,
            )
            if said is not None:
                finding = dataclasses.replace(
                    finding, status=Status.SKIP, message=f"not reported again: {said} names the cause", fix=""
                )
        out.append(finding)
    return out


__all__ = ["run_rules", "select", "evaluate_rule"]
