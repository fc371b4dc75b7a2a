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
import textwrap
from typing import Any, Callable, Mapping

from ..engine.templates import format_value
from ..escaping import printable, printable_flow
from ..facts import Unavailable
from ..findings import AREAS, Cause, Finding, Report, Severity, Status
from .envelope import host_of, versions_of

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

ORDER = {"ERROR": 0, "FAIL": 1, "warn": 2, "unknown": 3, "info": 4, "pass": 5}


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
        count = sum(1 for d in devices if d.get("kind") == "gpu") if isinstance(devices, list) else 0
        status = nvml.get("status", "unknown") if isinstance(nvml, Mapping) else "unknown"
        bits.append(f"{count} GPU(s) on PCI" if count else "no GPU found")
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


def render(report: Report, facts: Mapping[str, Any], style: Style = plain, verbose: bool = False) -> str:
    lines: list[str] = []
    from .. import __version__

    lines.append(style(f"gpudoctor {__version__}", bold=True) + " · " + header(facts))
    if report.facts_origin != "live":
        lines.append(f"facts: {printable(report.facts_origin)}")
    late = not_answered(facts)
    if late:
        shown = "; ".join(late[:3]) + (f"; and {len(late) - 3} more" if len(late) > 3 else "")
        lines.append(style(f"did not answer in time: {shown}", fg="yellow"))
    by_area: dict[str, list[Finding]] = {}
    for f in report.findings:
        by_area.setdefault(f.area, []).append(f)
    rule_width = max([len(printable(f.rule_id)) for f in report.findings] + [10])
    subject_width = max([len(printable(f.subject.label)) for f in report.findings if f.status is not Status.SKIP] + [4])
    subject_width = min(subject_width, 24)
    folded = {} if verbose else _shared_causes(report.findings)
    folded_ids = {id(f) for group in folded.values() for f in group}
    for area, title in AREAS.items():
        findings = [
            f for f in by_area.get(area, []) if (f.status is not Status.SKIP or verbose) and id(f) not in folded_ids
        ]
        if not findings:
            continue
        lines.append("")
        lines.append(style(title, bold=True, underline=True))
        for row in _rows(findings, verbose):
            f, label = row
            b = badge(f)
            status = style(f"{b:<7}", **STATUS_COLOURS.get(b, {}))
            lines.append(
                f"  {status} {printable(f.rule_id):<{rule_width}}  {printable(label):<{subject_width}}  "
                f"{printable(f.message)}"
            )
            if f.status in (Status.FAIL, Status.UNKNOWN, Status.ERROR) or verbose:
                indent = " " * 10
                if f.detail:
                    lines.extend(
                        textwrap.wrap(
                            printable_flow(f.detail),
                            WIDTH,
                            initial_indent=f"{indent}why:  ",
                            subsequent_indent=indent + "      ",
                        )
                    )
                if f.evidence:
                    read = "; ".join(f"{printable(p)} = {_value(v)}" for p, v in f.evidence)
                    lines.extend(
                        textwrap.wrap(
                            read, WIDTH, initial_indent=f"{indent}read: ", subsequent_indent=indent + "      "
                        )
                    )
                if f.fix:
                    for i, para in enumerate(f.fix.strip().splitlines()):
                        lines.extend(
                            textwrap.wrap(
                                printable_flow(para),
                                WIDTH,
                                initial_indent=indent + ("fix:  " if i == 0 else "      "),
                                subsequent_indent=indent + "      ",
                            )
                            or [indent]
                        )
    if folded:
        lines.append("")
        lines.append(style("Could not check", bold=True, underline=True))
        indent = " " * 10
        for cause, group in folded.items():
            status = style(f"{'unknown':<7}", **STATUS_COLOURS["unknown"])
            lines.append(
                f"  {status} {len(group)} checks need {printable(cause.name)} facts, which are unavailable "
                f"({printable(cause.said)})"
            )
            detail = max((f.detail for f in group), key=len)
            if detail:
                lines.extend(
                    textwrap.wrap(
                        printable_flow(detail),
                        WIDTH,
                        initial_indent=f"{indent}why:  ",
                        subsequent_indent=indent + "      ",
                    )
                )
            ids = ", ".join(dict.fromkeys(printable(f.rule_id) for f in group))
            lines.extend(
                textwrap.wrap(
                    ids,
                    WIDTH,
                    initial_indent=f"{indent}checks: ",
                    subsequent_indent=indent + "        ",
                    break_on_hyphens=False,
                )
            )
            subjects = ", ".join(dict.fromkeys(printable(f.subject.label) for f in group))
            lines.extend(
                textwrap.wrap(subjects, WIDTH, initial_indent=f"{indent}on:   ", subsequent_indent=indent + "      ")
            )
    lines.append("")
    lines.extend(summary_lines(report, style))
    return "\n".join(lines) + "\n"


FOLD_AT = 3


def _shared_causes(findings: list[Finding]) -> dict[Cause, list[Finding]]:
    """Unknown findings that share one cause (e.g. NVML not loaded), when there are enough of them
    to drown the report: they are said once, at the end, instead of once per check."""
    groups: dict[Cause, list[Finding]] = {}
    for f in findings:
        if f.status is Status.UNKNOWN and f.cause is not None:
            groups.setdefault(f.cause, []).append(f)
    return {cause: group for cause, group in groups.items() if len(group) >= FOLD_AT}


def _rows(findings: list[Finding], verbose: bool) -> list[tuple[Finding, str]]:
    """One row per non-passing finding; passes of one rule folded into one row."""
    rows: list[tuple[Finding, str]] = []
    by_rule: dict[str, list[Finding]] = {}
    for f in findings:
        by_rule.setdefault(f.rule_id, []).append(f)
    for rule_findings in by_rule.values():
        passes = [f for f in rule_findings if f.status is Status.PASS]
        for f in rule_findings:
            if f.status is not Status.PASS or verbose:
                rows.append((f, f.subject.label))
        if passes and not verbose:
            first = passes[0]
            if len(passes) == 1:
                label = first.subject.label
            else:
                kinds = {
                    "gpu": "GPUs",
                    "numa_node": "nodes",
                    "nic": "NICs",
                    "pci_port": "ports",
                    "rdma_port": "RDMA ports",
                }
                label = f"{len(passes)} {kinds.get(first.subject.kind, 'subjects')}"
                if len(passes) < len(rule_findings):
                    label = f"other {label}"
                if len({p.message for p in passes}) > 1:
                    # the values differ per subject: show one, and say the others passed too
                    others = len(passes) - 1
                    first = dataclasses.replace(
                        first, message=f"{first.message} on {first.subject.label}; {others} more pass"
                    )
            rows.append((first, label))
    rows.sort(key=lambda r: ORDER.get(badge(r[0]), 9))
    return rows


def summary_lines(report: Report, style: Style = plain) -> list[str]:
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
    out = ["Summary: " + ", ".join(parts)]
    blocking = report.blocking()
    if blocking:
        out.append(
            style(
                f"Verdict: FAIL — {len(blocking)} check(s) failed at severity {report.fail_on.value} or above "
                "(exit status 1):",
                fg="red",
                bold=True,
            )
        )
        for f in blocking:
            out.append(f"  - {printable(f.rule_id)} on {printable(f.subject.label)}: {printable(f.title)}")
    else:
        note = ""
        if c["unknown"] or c["error"]:
            note = f"; {c['unknown'] + c['error']} check(s) could not be judged, see above"
        out.append(
            style(
                f"Verdict: OK — nothing failed at severity {report.fail_on.value} or above{note}", fg="green", bold=True
            )
        )
    told = next((f for f in report.findings if f.status is Status.FAIL), None) or next(
        (f for f in report.findings if f.status in (Status.UNKNOWN, Status.ERROR)), None
    )
    if told is not None:
        out.append(f"More on a check: gpudoctor rules show {printable(told.rule_id)}; every check: docs/rules.md")
    return out
