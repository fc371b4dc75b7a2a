"""The human report: grouped by area, failures first within an area, the
evidence and the fix under each failure, a summary and a verdict at the end.

Formatting only: no judging, no I/O beyond returning a string. Colour is
applied by the caller's ``style`` function (identity when not a terminal).
Every value from the facts, the findings or a rule pack goes through
gpudoctor.escaping.printable (control characters as visible escapes) where it is
interpolated, so it can neither send the terminal a control sequence nor
start a line of its own.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Callable, Mapping

from ..engine.templates import format_value
from ..escaping import printable
from ..facts import Unavailable
from ..findings import AREAS, Cause, Finding, Report, Severity, Status
from .envelope import host_of, versions_of
from .layout import fix_lines, flow, pack, wrap, wrap_units

Style = Callable[..., str]


def plain(text: str, **_: Any) -> str:
    return text


WIDTH = 100

STATUS_COLOURS: dict[str, dict[str, Any]] = {
    "FAIL": {"fg": "red", "bold": True},
    "warn": {"fg": "yellow", "bold": True},
    "info": {"fg": "cyan"},
    "pass": {"fg": "green"},
    "unknown": {"fg": "magenta"},
    "ERROR": {"fg": "red", "reverse": True},
}


def badge(f: Finding) -> str:
    if f.status is Status.FAIL:
        return {Severity.ERROR: "FAIL", Severity.WARNING: "warn", Severity.INFO: "info"}[f.severity]
    if f.status is Status.ERROR:
        return "ERROR"
    return f.status.value


def _value(v: Any) -> str:
    if isinstance(v, Unavailable):
        return f"unavailable ({v.reason})"
    if isinstance(v, list) and v and all(isinstance(x, int) for x in v) and len(v) > 6:
        from ..model.cpus import format_cpulist

        return f"[{format_cpulist(v)}]"
    text = printable(format_value(v))
    if isinstance(v, str):
        text = f'"{text}"' if text == "" or " " in text else text
    return text if len(text) <= 70 else text[:67] + "..."


def header(facts: Mapping[str, Any]) -> str:
    """One line saying which machine this is about (its values escaped: gpudoctor.escaping.printable);
    the host and the versions are the report envelope's (render/envelope.py)."""
    host, versions = host_of(facts), versions_of(facts)
    bits = []
    first = host["hostname"] or "host"
    sys_bits = ", ".join(x for x in (host["os"], f"kernel {host['kernel']}" if host["kernel"] else None) if x)
    bits.append(f"{first} ({sys_bits})" if sys_bits else first)
    nvml = facts.get("nvml") if isinstance(facts.get("nvml"), Mapping) else {}
    gpus = nvml.get("gpus") if isinstance(nvml, Mapping) else None
    if isinstance(gpus, list) and gpus:
        names: dict[str, int] = {}
        for g in gpus:
            name = g.get("name") if isinstance(g.get("name"), str) else "GPU"
            names[name] = names.get(name, 0) + 1
        bits.append(", ".join(f"{n}× {name}" for name, n in names.items()))
    else:
        pci = facts.get("pci")
        devices = pci.get("devices") if isinstance(pci, Mapping) else None
        accelerators = [d for d in devices if d.get("kind") == "gpu"] if isinstance(devices, list) else []
        # Ascend NPUs (vendor huawei) are named NPUs, as in their subjects' labels
        npus = sum(1 for d in accelerators if d.get("vendor") == "huawei")
        found = [f"{n} {what}(s)" for n, what in ((len(accelerators) - npus, "GPU"), (npus, "NPU")) if n]
        status = nvml.get("status", "unknown") if isinstance(nvml, Mapping) else "unknown"
        bits.append(f"{' and '.join(found)} on PCI" if found else "no GPU found")
        if status != "ok":
            bits.append(f"NVML: {str(status).replace('_', ' ')}")
    if versions["driver"]:
        cuda = versions["cuda"]
        bits.append(f"driver {versions['driver']}" + (f" (CUDA {cuda})" if cuda else ""))
    if versions["torch"]:
        bits.append(f"torch {versions['torch']}")
    return printable(" · ".join(bits))


def not_answered(facts: Mapping[str, Any]) -> list[str]:
    """What did not answer in time (a hung tool, NVML, an interpreter), each said once. Facts that
    are only a consequence (not read after a hang, probes skipped at the deadline) are left out:
    they name the cause themselves."""
    from ..facts import walk

    out: list[str] = []
    for _, leaf in walk(facts):
        if isinstance(leaf, Unavailable) and leaf.reason == "timeout":
            detail = leaf.detail.strip()
            if detail and detail not in out and not detail.startswith(("not read:", "the run's deadline passed")):
                out.append(printable(detail))
    return out


def render(
    report: Report,
    facts: Mapping[str, Any],
    style: Style = plain,
    verbose: bool = False,
    quiet: bool = False,
    width: int = WIDTH,
) -> str:
    """Problems first (failures by severity, then what could not be judged), each with why, what
    was read and the fix; then one line per area for the passes (every pass with `verbose`, none
    with `quiet`); then the summary and the verdict. Prose wraps to `width`, commands never."""
    lines: list[str] = []
    from .. import __version__

    if not quiet:
        lines.extend(flow(style(f"gpudoctor {__version__}", bold=True) + " · " + header(facts), width))
        if report.facts_origin != "live":
            lines.extend(flow(f"facts: {printable(report.facts_origin)}", width))
    late = not_answered(facts)
    if late:
        shown = "; ".join(late[:3]) + (f"; and {len(late) - 3} more" if len(late) > 3 else "")
        lines.extend(style(x, fg="yellow") for x in flow(f"did not answer in time: {shown}", width))
    folded = {} if verbose else _shared_causes(report.findings)
    folded_ids = {id(f) for group in folded.values() for f in group}
    area_rank = {area: i for i, area in enumerate(AREAS)}
    problems = [
        f
        for f in report.findings
        if f.status in (Status.FAIL, Status.UNKNOWN, Status.ERROR) and id(f) not in folded_ids
    ]
    problems.sort(key=lambda f: (PROBLEM_ORDER.get(badge(f), 9), area_rank.get(f.area, 99)))
    merged = [_merged(g) for g in ([[f] for f in problems] if verbose else _identical(problems))]
    failed = [m for m in merged if m[0].status is Status.FAIL]
    unjudged = [m for m in merged if m[0].status is not Status.FAIL]
    if failed:
        lines.append("")
        lines.append(style("Failed", bold=True, underline=True))
        for f, label, evidence in failed:
            lines.extend(_finding_lines(f, label, evidence, style, width))
    if unjudged or folded:
        lines.append("")
        lines.append(style("Could not check", bold=True, underline=True))
        for f, label, evidence in unjudged:
            lines.extend(_finding_lines(f, label, evidence, style, width))
        lines.extend(_folded_lines(folded, style, width))
    if not quiet:
        lines.extend(_passed_lines(report, style, verbose, width))
    lines.append("")
    lines.extend(summary_lines(report, style, width))
    return "\n".join(lines) + "\n"


# Failures by severity, then what could not be judged (a rule that broke before an unknown).
PROBLEM_ORDER = {"FAIL": 0, "warn": 1, "info": 2, "ERROR": 3, "unknown": 4, "pass": 5, "skip": 6}
INDENT = " " * 10


def _finding_lines(f: Finding, label: str, evidence: list[tuple[str, Any]], style: Style, width: int) -> list[str]:
    b = badge(f)
    said = f"{printable(f.rule_id)} · {printable(label)}"
    first, *more = flow(said, width - len(INDENT))
    lines = [f"  {style(f'{b:<7}', **STATUS_COLOURS.get(b, {}))} {first}", *(INDENT + x for x in more)]
    lines.extend(wrap_units(f.message, width, INDENT))
    if f.detail:
        lines.extend(wrap_units(f.detail, width, f"{INDENT}why:  "))
    if evidence:
        read = [f"{printable(p)} = {_value(v)}" for p, v in evidence]
        for line in pack(read, width, f"{INDENT}read: ", sep="; "):
            # a pair kept whole where it fits; one longer than a line wraps at its spaces
            cut = len(INDENT) + len("read: ")
            lines.extend([line] if len(line) <= width else flow(line[cut:], width, line[:cut]))
    if f.fix:
        lines.extend(fix_lines(f.fix, width, f"{INDENT}fix:  ", INDENT + "      "))
    return lines


def _folded_lines(folded: dict[Cause, list[Finding]], style: Style, width: int) -> list[str]:
    lines: list[str] = []
    for cause, group in folded.items():
        status = style(f"{'unknown':<7}", **STATUS_COLOURS["unknown"])
        said = f"{len(group)} checks need {cause.name} facts, which are unavailable ({cause.said})"
        first, *more = wrap(said, width - 10, "")
        lines.append(f"  {status} {first}")
        lines.extend(INDENT + x for x in more)
        detail = max((f.detail for f in group), key=len)
        if detail:
            lines.extend(wrap_units(detail, width, f"{INDENT}why:  "))
        lines.extend(wrap(", ".join(dict.fromkeys(f.rule_id for f in group)), width, f"{INDENT}checks: "))
        lines.extend(wrap(", ".join(dict.fromkeys(f.subject.label for f in group)), width, f"{INDENT}on:   "))
    return lines


# How subjects are counted in a line of passes: (one, several).
KIND_NAMES = {
    "host": ("the host", "the host"),
    "gpu": ("GPU", "GPUs"),
    "npu": ("NPU", "NPUs"),
    "numa_node": ("NUMA node", "NUMA nodes"),
    "nic": ("NIC", "NICs"),
    "pci_port": ("port", "ports"),
    "rdma_port": ("RDMA port", "RDMA ports"),
}


def _subjects(findings: list[Finding]) -> list[str]:
    """['the host,', '2 GPUs', 'and', '2 ports']: the distinct subjects of these findings, by
    kind, in pieces that a line is never broken inside (a count stays with its noun)."""
    kinds: dict[str, set[str]] = {}
    for f in findings:
        # an Ascend NPU is a gpu subject labelled "NPU n (bus id)" (model/gpus.py): counted as an NPU
        npu = f.subject.kind == "gpu" and f.subject.label.startswith("NPU ")
        kinds.setdefault("npu" if npu else f.subject.kind, set()).add(f.subject.label)
    parts = []
    order = list(KIND_NAMES)
    for kind, labels in sorted(kinds.items(), key=lambda kv: order.index(kv[0]) if kv[0] in order else 9):
        one, several = KIND_NAMES.get(kind, ("subject", "subjects"))
        parts.append(one if kind == "host" else f"{len(labels)} {one if len(labels) == 1 else several}")
    if len(parts) == 1:
        return parts
    return [*(p + "," for p in parts[:-2]), parts[-2], "and", parts[-1]]


def _passed_lines(report: Report, style: Style, verbose: bool, width: int) -> list[str]:
    by_area: dict[str, list[Finding]] = {}
    for f in report.findings:
        if f.status is Status.PASS or (verbose and f.status is Status.SKIP):
            by_area.setdefault(f.area, []).append(f)
    if not by_area:
        return []
    lines = ["", style("Passed", bold=True, underline=True)]
    mark = style(f"{'pass':<7}", **STATUS_COLOURS["pass"])
    for area, title in AREAS.items():
        found = by_area.get(area, [])
        if not found:
            continue
        if verbose:
            lines.append(f"  {style(title, bold=True)}")
            for f in found:
                lines.extend(_finding_lines(f, f.subject.label, list(f.evidence), style, width))
            continue
        checks = len({f.rule_id for f in found})
        said = [*f"{title}:".split(" "), f"{checks} check{'s' if checks != 1 else ''}", "passed", "on"]
        first, *more = pack(said + _subjects(found), width - len(INDENT))
        lines.append(f"  {mark} {first}")
        lines.extend(INDENT + x for x in more)
    return lines


def _without(text: str, label: str) -> str:
    return text.replace(label, "\0") if label else text


def _without_index(fix: str, subject: Any) -> str:
    """A fix with the subject's own label and its GPU index in `-i N` (how the rules' commands
    name one GPU) taken out, so that the same fix for GPU 0 and for GPU 1 compares equal."""
    fix = _without(fix, subject.label)
    if subject.index is None:
        return fix
    return re.sub(rf"(-i ){subject.index}(?![\w.])", "\\1\0", fix)


def _identical(findings: list[Finding]) -> list[list[Finding]]:
    """Findings that say the same thing about different subjects, in groups (order kept): one
    rule, one status and severity, the same message, why and fix once the subject's label is
    taken out, the same values read."""
    groups: dict[tuple[Any, ...], list[Finding]] = {}
    for f in findings:
        label = f.subject.label
        key = (
            f.rule_id,
            f.status,
            f.severity,
            f.subject.kind,
            _without(f.message, label),
            _without(f.detail, label),
            _without_index(f.fix, f.subject),
            tuple(_value(v) for _, v in f.evidence),
        )
        groups.setdefault(key, []).append(f)
    return list(groups.values())


def subjects_label(subjects: list[Any]) -> str:
    """'GPU 0-3' or 'GPUs 0, 1, 3' for GPUs with indices; else the labels joined."""
    if len(subjects) == 1:
        return str(subjects[0].label)
    indices = [s.index for s in subjects]
    if all(s.kind == "gpu" for s in subjects) and all(isinstance(i, int) for i in indices):
        ordered = sorted(set(indices))
        if ordered == list(range(ordered[0], ordered[-1] + 1)) and len(ordered) > 2:
            return f"GPU {ordered[0]}-{ordered[-1]}"
        return "GPUs " + ", ".join(str(i) for i in ordered)
    return ", ".join(str(s.label) for s in subjects)


def _merged(group: list[Finding]) -> tuple[Finding, str, list[tuple[str, Any]]]:
    """One finding standing for a group of identical ones: its subject line names them all, and an
    evidence path that differs between them (an index) reads [*]."""
    first = group[0]
    if len(group) == 1:
        return first, first.subject.label, list(first.evidence)
    label = subjects_label([f.subject for f in group])
    evidence = []
    for i, (path, v) in enumerate(first.evidence):
        same = all(len(f.evidence) > i and f.evidence[i][0] == path for f in group)
        evidence.append((path if same else re.sub(r"\[\d+\]", "[*]", path), v))
    old = first.subject.label
    shown = dataclasses.replace(
        first,
        message=first.message.replace(old, label),
        detail=first.detail.replace(old, label),
        fix=first.fix.replace(old, label),
    )
    if any(f.fix != first.fix for f in group):
        # the commands name one GPU (-i N): show the first GPU's, and say so
        shown = dataclasses.replace(
            shown, fix=f"{first.fix.rstrip()}\n(these commands are for {old}; for the others, change -i to their index)"
        )
    return shown, label, evidence


FOLD_AT = 3


def _shared_causes(findings: list[Finding]) -> dict[Cause, list[Finding]]:
    """Unknown findings that share one cause (e.g. NVML not loaded), when there are enough of them
    to drown the report: they are said once, at the end, instead of once per check."""
    groups: dict[Cause, list[Finding]] = {}
    for f in findings:
        if f.status is Status.UNKNOWN and f.cause is not None:
            groups.setdefault(f.cause, []).append(f)
    return {cause: group for cause, group in groups.items() if len(group) >= FOLD_AT}


def summary_lines(report: Report, style: Style = plain, width: int = WIDTH) -> list[str]:
    c = report.counts()
    fails = [f for f in report.findings if f.status is Status.FAIL]
    by_sev = {s: sum(1 for f in fails if f.severity is s) for s in Severity}
    parts = [
        f"{c['pass']} passed",
        f"{c['fail']} failed ({by_sev[Severity.ERROR]} error, {by_sev[Severity.WARNING]} warning, "
        f"{by_sev[Severity.INFO]} info)",
        f"{c['unknown']} unknown",
        f"{c['error']} rule errors",
        f"{c['skip']} not applicable",
    ]
    out = flow("Summary: " + ", ".join(parts), width)
    blocking = report.blocking()
    if blocking:
        verdict = (
            f"Verdict: FAIL — {len(blocking)} check(s) failed at severity {report.fail_on.value} or above "
            f"(exit status {report.exit_code}):"
        )
        out.extend(style(x, fg="red", bold=True) for x in flow(verdict, width))
        same: dict[tuple[str, str, str], list[Finding]] = {}
        for f in blocking:
            same.setdefault((f.rule_id, f.title, f.subject.kind), []).append(f)
        for (rule_id, title, _), group in same.items():
            on = subjects_label([f.subject for f in group])
            out.extend(flow(f"{printable(rule_id)} on {printable(on)}: {printable(title)}", width, "  - ", "    "))
    elif report.nothing_judged():
        what = f"{c['unknown']} unknown" + (f", {c['error']} rule errors" if c["error"] else "")
        verdict = (
            f"Verdict: NOT JUDGED — no check could be judged ({what}); this is not a pass "
            f"(exit status {report.exit_code})"
        )
        out.extend(style(x, fg="magenta", bold=True) for x in flow(verdict, width))
    else:
        verdict = "Verdict: " + ", ".join(["OK", *_verdict_notes(fails, c)])
        verdict += f" — nothing failed at severity {report.fail_on.value} or above"
        out.extend(style(x, fg="green", bold=True) for x in flow(verdict, width))
    told = next((f for f in report.findings if f.status is Status.FAIL), None) or next(
        (f for f in report.findings if f.status in (Status.UNKNOWN, Status.ERROR)), None
    )
    if told is not None:
        out.extend(
            flow(f"More on a check: gpudoctor rules show {printable(told.rule_id)}; every check: docs/rules.md", width)
        )
    return out


def _plural(n: int, one: str, several: str) -> str:
    return f"{n} {one if n == 1 else several}"


def _verdict_notes(fails: list[Finding], c: Mapping[str, int]) -> list[str]:
    """What an OK verdict must not hide: the failures below --fail-on and what was not judged."""
    notes = []
    for sev, one, several in (
        (Severity.ERROR, "error", "errors"),
        (Severity.WARNING, "warning", "warnings"),
        (Severity.INFO, "info", "infos"),
    ):
        n = sum(1 for f in fails if f.severity is sev)
        if n:
            notes.append(_plural(n, one, several))
    if c["unknown"] + c["error"]:
        notes.append(f"{c['unknown'] + c['error']} not judged")
    return notes
