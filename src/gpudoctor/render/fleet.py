"""The fleet summary of `gpudoctor report merge` for people: no-go nodes, failures per check, per
GPU model (the caller passes strings from reports through gpudoctor.escaping.printable); and the
drift of `report merge --drift` (escaped here). Formatting only."""

from __future__ import annotations

from typing import Any

from ..escaping import printable
from ..model.profile_facts import FACTS
from .layout import wrap


def _figures(values: list[Any]) -> str:
    return ", ".join(f"{v:g}" if isinstance(v, (int, float)) else "?" for v in values)


def localized_lines(nodes: Any, width: int, drifting: dict[str, list[str]] | None = None) -> list[str]:
    """What each gate --distributed report's localisation named (fleet.merge.localized), one entry
    per slow node or pair; with ``drifting`` (node -> the facts it differs on) whether a slow node
    also drifts. Strings from the reports are escaped here (layout.wrap)."""
    lines: list[str] = []
    for n in nodes:
        found = n.localized
        if found is None:
            continue
        job = f"in the gate --distributed of {n.node} ({len(found['nodes'])} nodes, {found['world_size']} ranks)"
        best = found["best_pair_busbw_gbps"]
        for slow in found["slow_nodes"]:
            said = f"slow {job}: its pairs {_figures(found['slow_node_pairs'].get(slow, []))} GB/s"
            said += f", the best pair {best:g} GB/s" if isinstance(best, (int, float)) else ""
            if drifting is not None:
                facts = drifting.get(slow, [])
                said += f"; it also differs on {', '.join(facts)}" if facts else "; it differs on no profile fact"
            lines += wrap(said, width, f"  {slow}  ", "    ")
        for a, b in found["slow_pairs"]:
            lines += wrap(f"slow pair (the link between them) {job}", width, f"  {a} – {b}  ", "    ")
        if not found["slow_nodes"] and not found["slow_pairs"]:
            lines += wrap(f"no node named {job}: localisation {found['status']}", width, "  ")
    return (["", "Named by gate --distributed (its localisation)"] + lines) if lines else []


def render_text(fleet: Any, width: int = 100) -> str:
    data = fleet.to_json()
    t = data["totals"]
    lines = [f"gpudoctor fleet: {t['nodes']} node(s) · {t['go']} go · {t['no_go']} no-go"]
    for node, source, why in fleet.replaced:
        lines.append(f"  ({why} for {node} was left out: {source})")
    bad = [n for n in fleet.nodes if n.verdict != "go"]
    if bad:
        lines += ["", "No-go nodes"]
        name_width = max(len(n.node) for n in bad)
        for n in bad:
            first = n.blocking[0] if n.blocking else ", ".join(n.failed) or "?"
            more = f" (+{len(n.blocking) - 1} more)" if len(n.blocking) > 1 else ""
            lines.append(f"  {n.node:<{name_width}}  {first}{more}")
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
    lines += localized_lines(fleet.nodes, width)
    return "\n".join(lines) + "\n"


# Blocking facts the head names, at most; each is also listed below it with its nodes.
HEAD_NAMES = 8


def _within(f: Any) -> str:
    """The nodes within a fact's tolerance of the majority value, with their values."""
    values = ", ".join(f"{printable(node)} {f.fact.shown(value)}" for node, value in f.within)
    return f"within the tolerance ({f.fact.tolerance_of('that value')}), so not drift: {values}"


def render_drift(drift: Any, width: int = 100) -> str:
    """`report merge --drift` for people: the facts nodes differ on, each with the majority value
    and the differing nodes and their values; then what agrees and which facts block. Every
    string from the reports (node names, values, NIC names) is escaped here (layout.wrap, printable)."""
    total = len(drift.nodes)
    drifting = drift.drifting
    head = f"gpudoctor fleet drift: {total} node(s) · {len(drifting)} fact(s) differ"
    if drift.blocking:
        # the first few, so that the head stays a line or two when a node differs on everything
        named = [f.name for f in drift.blocking[:HEAD_NAMES]]
        more = len(drift.blocking) - len(named)
        head += f" · blocking: {', '.join(named)}{f' and {more} more' if more else ''} (exit status 1)"
    lines = wrap(head, width, "", "  ")
    if drift.without:
        lines += wrap(
            "no profile facts in the reports of (made by a gpudoctor before them): " + ", ".join(drift.without),
            width,
            "  ",
        )
    for f in drifting:
        tag = " (blocking)" if f.fact.blocking else ""
        lines.append("")
        said = f"{f.name}{tag}: {f.fact.shown(f.majority)} on {f.majority_nodes} of {total} node(s)"
        lines += wrap(said, width, "  ")
        name_width = max(len(printable(node)) for node, _ in f.differs)
        for node, value in f.differs:
            lines += wrap(f.fact.shown(value), width, f"    {printable(node):<{name_width}}  ")
        if f.within:
            lines += wrap(_within(f), width, "    ")
    tolerated = [f for f in drift.facts if f.within and not f.differs]
    for f in tolerated:
        lines.append("")
        said = f"{f.name}: {f.fact.shown(f.majority)} on {f.majority_nodes} of {total} node(s); {_within(f)}"
        lines += wrap(said, width, "  ", "    ")
    differs: dict[str, list[str]] = {}
    for f in drifting:
        for node, _ in f.differs:
            differs.setdefault(node, []).append(f.name)
    lines += localized_lines(drift.localized, width, differs)
    agree = len(drift.facts) - len(drifting) - len(tolerated)
    close = f"; {len(tolerated)} within a tolerance" if tolerated else ""
    lines += ["", f"{agree} fact(s) agree on every node{close}."]
    blocking = sorted({f.key for f in FACTS if f.blocking}, key=[f.key for f in FACTS].index)
    lines += wrap("Blocking facts (a node that differs makes the exit status 1): " + ", ".join(blocking), width)
    return "\n".join(lines) + "\n"
