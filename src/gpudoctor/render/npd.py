"""The gate's verdict as a Kubernetes Node Problem Detector custom plugin answers
(``gpudoctor gate --npd``): an exit status and one line on stdout.

NPD's custom plugin monitor runs the plugin every ``invoke_interval``, kills it after ``timeout``,
reads at most 4 KiB of its stdout, trims the whitespace around it and keeps the first
``max_output_length`` bytes (80 unless configured) as the node condition's message; the exit
status says the condition: 0 OK, 1 NonOK (the problem is there), anything else Unknown (NPD uses
2). Stderr is only logged. Source: kubernetes/node-problem-detector,
pkg/custompluginmonitor/plugin/plugin.go (run, readFromReader) and types/types.go (Status),
types/config.go (the defaults), read 2026-12-02. The sample monitor configuration is
scripts/k8s/npd-gpudoctor-monitor.json.

So the line puts what a person needs first (the check, the subject, the recommended action, how
many more), then the finding's message; it is ASCII (NPD cuts bytes, which could split a
character), one line, escaped, and at most :data:`MAX_REASON_CHARS` long. Formatting only.
"""

from __future__ import annotations

from typing import Any

from ..escaping import printable_flow
from ..findings import first_to_act_on

NPD_OK = 0
NPD_PROBLEM = 1
NPD_UNKNOWN = 2

# Longer than NPD's default max_output_length (80) on purpose: the sample configuration raises it
# to this, and with the default NPD keeps the head, which carries the check, subject and action.
MAX_REASON_CHARS = 256


def one_line(text: str, limit: int = MAX_REASON_CHARS) -> str:
    """``text`` as one ASCII line of at most ``limit`` characters: control characters escaped,
    runs of whitespace one space, other characters as \\u escapes, cut with "..." at the end."""
    flat = " ".join(printable_flow(text).split())
    flat = flat.encode("ascii", "backslashreplace").decode("ascii")
    return flat if len(flat) <= limit else flat[: limit - 3].rstrip() + "..."


def render(report: Any) -> tuple[int, str]:
    """The exit status and the line for a gate report: OK on go; a problem when a blocking check
    failed; unknown when what blocks is only checks that could not be judged (their facts were
    unavailable, a source did not answer) — the node may be fine, gpudoctor cannot say."""
    counts = report.counts()
    if report.go:
        not_judged = f", {counts['not_judged']} not judged" if counts["not_judged"] else ""
        return NPD_OK, one_line(f"go: {counts['pass']} checks passed{not_judged}")
    more = _more(len(report.lines) - 1)  # the other lines gate prints (unjudged checks folded)
    failed = [f for f in report.blocking if not report.cannot_check(f)]
    if not failed:
        return NPD_UNKNOWN, one_line(f"cannot judge{more}: {report.lines[0].text}")
    worst = first_to_act_on(failed) or failed[0]
    # most messages start with their subject; the others get it said
    where = "" if worst.message.startswith(worst.subject.label) else f" on {worst.subject.label}"
    return NPD_PROBLEM, one_line(f"no-go: {worst.rule_id}{where}, action {worst.action}{more}: {worst.message}")


def _more(n: int) -> str:
    return f" (+{n} more blocking)" if n > 0 else ""


def could_not_run(message: str) -> tuple[int, str]:
    """The answer when the gate could not run (a bad policy, an unreadable snapshot): unknown."""
    return NPD_UNKNOWN, one_line(f"could not run: {message}")
