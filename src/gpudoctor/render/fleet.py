"""The fleet summary of `gpudoctor report merge` for people: no-go nodes, failures per check, per
GPU model. Formatting only; the caller passes strings from reports through gpudoctor.escaping.printable."""

from __future__ import annotations

from typing import Any


def render_text(fleet: Any) -> str:
    data = fleet.to_json()
    t = data["totals"]
    lines = [f"gpudoctor fleet: {t['nodes']} node(s) · {t['go']} go · {t['no_go']} no-go"]
    for node, source, why in fleet.replaced:
        lines.append(f"  ({why} for {node} was left out: {source})")
    bad = [n for n in fleet.nodes if n.verdict != "go"]
    if bad:
        lines += ["", "No-go nodes"]
        width = max(len(n.node) for n in bad)
        for n in bad:
            first = n.blocking[0] if n.blocking else ", ".join(n.failed) or "?"
            more = f" (+{len(n.blocking) - 1} more)" if len(n.blocking) > 1 else ""
            lines.append(f"  {n.node:<{width}}  {first}{more}")
    checks = data["checks"]
    if checks:
        lines += ["", f"  {'check':<40} {'failed on':>9} {'subjects':>8} {'unjudged on':>11}  nodes"]
        for rule, c in checks.items():
            where = c["failed_nodes"] or c["unjudged_nodes"]
            shown = ", ".join(where[:5]) + (f" and {len(where) - 5} more" if len(where) > 5 else "")
            failed, unjudged = len(c["failed_nodes"]), len(c["unjudged_nodes"])
            lines.append(f"  {rule:<40} {failed:>9} {c['failed_subjects']:>8} {unjudged:>11}  {shown}")
    models = data["gpu_models"]
    if models:
        lines += ["", f"  {'GPU model':<32} {'nodes':>5} {'GPUs':>5} {'no-go nodes':>11} {'failed GPUs':>11}"]
        for model, m in models.items():
            lines.append(f"  {model:<32} {m['nodes']:>5} {m['gpus']:>5} {m['no_go_nodes']:>11} {m['failed_gpus']:>11}")
    return "\n".join(lines) + "\n"
