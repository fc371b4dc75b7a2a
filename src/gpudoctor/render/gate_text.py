"""The gate's report for people and job logs: on no-go the blocking lines first, then what else
did not pass, a summary and the verdict. Formatting only; every value from the facts, the findings
and the policy goes through gpudoctor.escaping.printable."""

from __future__ import annotations

from typing import Any

from ..escaping import printable
from ..findings import Cause, Finding, Status
from ..preflight.verdict import not_visible
from .text import STATUS_COLOURS, Style, badge, header, plain

WIDTH = 100


def blocking_text(report: Any, style: Style = plain) -> list[str]:
    """One line per blocking finding (or group of findings that could not be judged for one cause)."""
    return [style("NO-GO", fg="red", bold=True) + "  " + printable(line.text) for line in report.lines]


def policy_line(report: Any) -> str:
    p = report.policy
    bits = [
        f"policy: {printable(p.source)}",
        f"fail on {p.fail_on.value}",
        printable(p.on_cannot_check),
        f"deadline {p.deadline_s:g} s",
    ]
    expect = []
    if p.expect_gpus is not None:
        expect.append(f"{p.expect_gpus} GPU(s)")
    if p.expect_model is not None:
        expect.append(f"model {printable(p.expect_model)}")
    if p.min_free_memory_gib is not None:
        expect.append(f"{p.min_free_memory_gib:g} GiB free per GPU")
    if p.expect_nics is not None:
        expect.append(f"{p.expect_nics} active RDMA port(s)")
    if p.nic_rate_gbps is not None:
        expect.append(f"{p.nic_rate_gbps:g} Gb/s per RDMA port")
    if p.nvlink_links is not None:
        expect.append(f"{p.nvlink_links} NVLink link(s) per GPU")
    if expect:
        bits.append("expect " + ", ".join(expect))
    if p.required:
        bits.append("required: " + printable(", ".join(p.required)))
    if p.ignore:
        bits.append("ignored: " + printable(", ".join(p.ignore)))
    if p.deep:
        bits.append("deep")
    return " · ".join(bits)


FOLD_AT = 3


def _why_not_judged(report: Any, f: Finding) -> str:
    """Why an unjudged check did not block: the policy said fail-open, or gpudoctor may not look."""
    if not_visible(f) and f.cause is not None:
        return printable(f.cause.reason.replace("_", " "))
    return str(report.policy.on_cannot_check)


def _row(f: Finding, style: Style, note: str = "") -> str:
    b = badge(f)
    status = style(f"{b:<7}", **STATUS_COLOURS.get(b, {}))
    return f"  {status} {printable(f.rule_id):<34} {printable(f.subject.label):<22} {printable(f.message)}{note}"


def render(report: Any, style: Style = plain, verbose: bool = False) -> str:
    from .. import __version__

    lines: list[str] = []
    if not report.go:
        lines.extend(blocking_text(report, style))
        lines.append("")
    lines.append(style(f"gpudoctor gate {__version__}", bold=True) + " · " + header(report.facts))
    if report.facts_origin != "live":
        lines.append(f"facts: {printable(report.facts_origin)}")
    lines.append(policy_line(report))

    shown = [
        f
        for f in report.findings
        if f.status is not Status.SKIP and (verbose or (f.status is not Status.PASS and not report.is_blocking(f)))
    ]
    folded: dict[Cause, list[Finding]] = {}
    if not verbose:
        # many checks that could not run for one cause (NVML not answering) are said once
        for f in shown:
            if f.status is Status.UNKNOWN and f.cause is not None:
                folded.setdefault(f.cause, []).append(f)
        folded = {cause: group for cause, group in folded.items() if len(group) >= FOLD_AT}
        folded_ids = {id(f) for group in folded.values() for f in group}
        shown = [f for f in shown if id(f) not in folded_ids]
    if shown or folded:
        lines.append("")
        title = "Checks" if verbose else "Did not pass, not blocking"
        lines.append(style(title, bold=True, underline=True))
        not_judged = {id(f) for f in report.not_judged}
        for cause, group in folded.items():
            status = style(f"{'unknown':<7}", **STATUS_COLOURS["unknown"])
            would = [f for f in group if f.severity.rank >= report.policy.fail_on.rank]
            note = f"  [{len(would)} not judged: {_why_not_judged(report, would[0])}]" if would else ""
            lines.append(f"  {status} {len(group)} checks could not be judged: {printable(cause.words())}{note}")
        for f in shown:
            note = ""
            if report.is_blocking(f):
                note = "  [blocking]"
            elif id(f) in not_judged and report.cannot_check(f) and f.severity.rank >= report.policy.fail_on.rank:
                note = f"  [not judged: {_why_not_judged(report, f)}]"
            lines.append(_row(f, style, note))
            if verbose and f.detail and f.status is not Status.PASS:
                lines.append(f"          why:  {printable(f.detail)}")

    deep = report.deep
    if deep is not None:
        info = deep.to_json()
        bits = [f"torch {printable(info['torch_version'])}" if info["torch_version"] else "torch not imported"]
        if info["devices"] is not None:
            bits.append(f"{info['devices']} CUDA device(s)")
        bits.append(f"{info['duration_s']:.2f} s")
        if info["import_s"] is not None:
            bits.append(f"import {info['import_s']:.2f} s")
        if info["timed_out"]:
            bits.append("stopped at the deadline")
        lines.append("")
        lines.append("device test: " + " · ".join(bits))

    c = report.counts()
    lines.append("")
    lines.append(
        f"Summary: {c['pass']} passed, {c['fail']} failed, {c['unknown']} unknown, {c['error']} rule errors, "
        f"{c['skip']} not applicable · {report.duration_s:.2f} s"
    )
    if report.go:
        note = ""
        if report.not_judged:
            judged_out = [f for f in report.not_judged if f.severity.rank >= report.policy.fail_on.rank]
            if judged_out:
                why = ", ".join(dict.fromkeys(_why_not_judged(report, f) for f in judged_out))
                note = f" — {len(judged_out)} check(s) could not be judged ({why})"
        lines.append(style(f"Verdict: GO{note}", fg="green", bold=True))
    else:
        lines.append(
            style(
                f"Verdict: NO-GO — {len(report.blocking)} blocking finding(s), in the {len(report.lines)} "
                "line(s) at the top (exit status 1)",
                fg="red",
                bold=True,
            )
        )
    return "\n".join(lines) + "\n"
