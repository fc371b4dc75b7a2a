"""The gate's report for people and job logs: on no-go the blocking lines first, then what else
did not pass, a summary and the verdict. Formatting only; every value from the facts, the findings
and the policy goes through gpudoctor.escaping.printable (or render/layout, which escapes).

Lines fit `width` (from the command; 100 for pipes and files): prose wraps under its first line,
a check's message wraps under the message column (or, when the columns leave it too little room,
on lines of its own below the row), and commands in a fix are never broken (layout.wrap_units).
The blocking NO-GO lines at the top stay one line each (see blocking_text)."""

from __future__ import annotations

from typing import Any

from ..escaping import printable
from ..findings import Cause, Finding, Status
from ..preflight.verdict import not_visible
from .layout import pack, wrap, wrap_units
from .text import STATUS_COLOURS, Style, badge, header, plain

WIDTH = 100
# The message column of a check's row starts here; with fewer columns than MESSAGE_ROOM left for
# the message it goes on lines of its own, indented by MESSAGE_INDENT.
MESSAGE_ROOM = 24
MESSAGE_INDENT = "          "


def blocking_text(report: Any, style: Style = plain) -> list[str]:
    """One line per blocking finding (or group of findings that could not be judged for one cause).
    Never wrapped, at any width: the README promises one line each, and job logs are grepped for
    them (a line that runs long beats a finding cut in two)."""
    return [style("NO-GO", fg="red", bold=True) + "  " + printable(line.text) for line in report.lines]


def policy_line(report: Any) -> str:
    return " · ".join(policy_bits(report))


def policy_bits(report: Any) -> list[str]:
    """The policy in short, one piece per setting (escaped)."""
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
    if p.profile is not None:
        bits.append(f"node profile {printable(p.profile.source)}")
    if p.required:
        bits.append("required: " + printable(", ".join(p.required)))
    if p.ignore:
        bits.append("ignored: " + printable(", ".join(p.ignore)))
    if p.deep:
        bits.append("deep")
    return bits


FOLD_AT = 3


def _why_not_judged(report: Any, f: Finding) -> str:
    """Why an unjudged check did not block: the policy said fail-open, or gpudoctor may not look."""
    if not_visible(f) and f.cause is not None:
        return printable(f.cause.reason.replace("_", " "))
    return str(report.policy.on_cannot_check)


def _row(f: Finding, style: Style, width: int, note: str = "") -> list[str]:
    """A check's row: status, rule id, subject, then its message wrapped under the message column
    (or below the row when that column would be narrower than MESSAGE_ROOM)."""
    b = badge(f)
    status = style(f"{b:<7}", **STATUS_COLOURS.get(b, {}))
    plain_lead = f"  {b:<7} {printable(f.rule_id):<34} {printable(f.subject.label):<22} "
    if width - len(plain_lead) >= MESSAGE_ROOM:
        rest = " " * len(plain_lead)
        lines = wrap_units(f.message, width, plain_lead, rest)
    else:
        rest = MESSAGE_INDENT
        head = [plain_lead.rstrip()]
        if len(head[0]) > width:  # too narrow for the columns: rule id and subject flow, unpadded
            head = wrap(f"{f.rule_id} {f.subject.label}", width, f"  {b:<7} ", rest)
        lines = [*head, *wrap_units(f.message, width, rest)]
    if note:  # the note ("[blocking]") follows the message, on a line of its own if it must
        fits = len(lines[-1]) + len(note) <= width
        lines[-1:] = [lines[-1] + note] if fits else [lines[-1], rest + note.strip()]
    return [f"  {status} " + lines[0][10:], *lines[1:]]


def _styled(text: str, width: int, style: Style, **how: Any) -> list[str]:
    """`text` wrapped to `width` (continuations indented two spaces), each line styled with `how`."""
    return [style(line, **how) for line in wrap(text, width, "", "  ")]


def render(report: Any, style: Style = plain, verbose: bool = False, width: int = WIDTH) -> str:
    from .. import __version__

    lines: list[str] = []
    if not report.go:
        lines.extend(blocking_text(report, style))
        lines.append("")
    title = f"gpudoctor gate {__version__}"
    first, *more = wrap(f"{title} · {header(report.facts)}", width, "", "  ")
    lines.append(style(title, bold=True) + first[len(title) :])
    lines.extend(more)
    if report.facts_origin != "live":
        lines.extend(wrap(f"facts: {report.facts_origin}", width, "", "  "))
    # a setting ("deadline 30 s") is never cut: the line breaks between settings
    lines.extend(pack(policy_bits(report), width, "", "  ", " · "))

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
            said = f"{len(group)} checks could not be judged: {cause.words()}{note}"
            first, *more = wrap(said, width, f"  {'unknown':<7} ", MESSAGE_INDENT)
            lines.extend([f"  {status} " + first[10:], *more])
        for f in shown:
            note = ""
            if report.is_blocking(f):
                note = "  [blocking]"
            elif id(f) in not_judged and report.cannot_check(f) and f.severity.rank >= report.policy.fail_on.rank:
                note = f"  [not judged: {_why_not_judged(report, f)}]"
            lines.extend(_row(f, style, width, note))
            if verbose and f.detail and f.status is not Status.PASS:
                lines.extend(wrap_units(f.detail, width, f"{MESSAGE_INDENT}why:  "))

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
        lines.extend(wrap("device test: " + " · ".join(bits), width, "", "  "))

    c = report.counts()
    lines.append("")
    lines.extend(
        wrap(
            f"Summary: {c['pass']} passed, {c['fail']} failed, {c['unknown']} unknown, {c['error']} rule errors, "
            f"{c['skip']} not applicable · {report.duration_s:.2f} s",
            width,
            "",
            "  ",
        )
    )
    if report.go:
        note = ""
        if report.not_judged:
            judged_out = [f for f in report.not_judged if f.severity.rank >= report.policy.fail_on.rank]
            if judged_out:
                why = ", ".join(dict.fromkeys(_why_not_judged(report, f) for f in judged_out))
                note = f" — {len(judged_out)} check(s) could not be judged ({why})"
        lines.extend(_styled(f"Verdict: GO{note}", width, style, fg="green", bold=True))
    else:
        verdict = (
            f"Verdict: NO-GO — {len(report.blocking)} blocking finding(s), in the {len(report.lines)} "
            "line(s) at the top (exit status 1)"
        )
        lines.extend(_styled(verdict, width, style, fg="red", bold=True))
    return "\n".join(lines) + "\n"
