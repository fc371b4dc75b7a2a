"""The gate report as Markdown, to paste into a bug report or a pull request. Formatting only."""

from __future__ import annotations

from typing import Any

from ..escaping import printable
from ..findings import Status
from .text import badge, header

GIB = 1 << 30


def _cell(text: Any) -> str:
    """Table cell text: one line, pipes escaped, other control characters as visible escapes."""
    value = "" if text is None else str(text)
    value = value.replace("\\", "\\\\").replace("|", "\\|").replace("\r", " ").replace("\n", "<br>").strip()
    return printable(value)


def _table(head: list[str], rows: list[list[Any]]) -> list[str]:
    out = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    out += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return out


def render(report: Any) -> str:
    from .. import __version__
    from .gate_text import policy_line

    verdict = "GO" if report.go else "NO-GO"
    lines = [f"## gpudoctor gate: {verdict}", ""]
    lines.append(f"- **Machine:** {_cell(header(report.facts))}")
    lines.append(f"- **Facts:** {_cell(report.facts_origin)} · gpudoctor {__version__} · {report.generated_at}")
    lines.append(f"- **Policy:** {_cell(policy_line(report)[len('policy: ') :])}")
    c = report.counts()
    lines.append(
        f"- **Result:** {c['pass']} passed, {c['fail']} failed, {c['unknown']} unknown, {c['error']} rule errors, "
        f"{c['skip']} not applicable in {report.duration_s:.2f} s"
    )
    if not report.go:
        lines += ["", f"### Blocking ({len(report.lines)})", ""]
        lines += _table(
            ["check", "subject", "what", "fix"],
            [
                [
                    f"`{line.rule}`" + (f" (+{line.count - 1})" if line.count > 1 else ""),
                    line.subject.label,
                    line.what,
                    line.fix,
                ]
                for line in report.lines
            ],
        )
    others = [f for f in report.findings if f.status not in (Status.PASS, Status.SKIP) and not report.is_blocking(f)]
    if others:
        lines += ["", f"### Not passing, not blocking ({len(others)})", ""]
        lines += _table(
            ["status", "check", "subject", "message"],
            [[badge(f), f"`{f.rule_id}`", f.subject.label, f.message] for f in others],
        )
    gpus = report.gpus()
    if gpus:
        lines += ["", "### GPUs", ""]
        rows = []
        for g in gpus:
            total, used = g["memory_total_bytes"], g["memory_used_bytes"]
            memory = (
                f"{(total - used) / GIB:.1f} / {total / GIB:.1f} GiB" if total is not None and used is not None else "?"
            )
            rows.append(
                [
                    "" if g["index"] is None else g["index"],
                    g["bus_id"] or "?",
                    g["name"] or "?",
                    memory,
                    ", ".join(f"`{c}`" for c in g["failed_checks"]) or "none",
                ]
            )
        lines += _table(["index", "bus id", "name", "free / total", "failed checks"], rows)
    passes = [f for f in report.findings if f.status is Status.PASS]
    if passes:
        lines += ["", f"<details><summary>{len(passes)} passed checks</summary>", ""]
        lines += _table(
            ["check", "subject", "reading"], [[f"`{f.rule_id}`", f.subject.label, f.message] for f in passes]
        )
        lines += ["", "</details>"]
    return "\n".join(lines) + "\n"
