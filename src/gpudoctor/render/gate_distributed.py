"""`gate --distributed` output: rank 0's table of every rank, node and GPU with the all-reduce
bandwidth and the verdict; the blocking lines other ranks print on stderr; rank 0's JSON report.
Formatting only."""

from __future__ import annotations

from typing import Any

from ..findings import Finding, Status
from .gate_json import dumps, report_json


def render_table(
    rows: list[dict[str, Any]], backend: str, allreduce: Finding | None, style: Any, policy: Any = None
) -> str:
    """Rank 0's table; ``policy`` (the ranks' policy) says whether an unmeasured all-reduce blocks."""
    from ..preflight.distributed import not_measured, one_rank_blocks

    out: list[str] = []
    for row in rows:
        for line in row["blocking"]:
            out.append(style("NO-GO", fg="red", bold=True) + f"  rank {row['rank']} ({row['node']}): {line}")
    if allreduce is not None and allreduce.status is Status.FAIL:
        out.append(style("NO-GO", fg="red", bold=True) + f"  {allreduce.rule_id}: {allreduce.message}")
    unmeasured_blocks = allreduce is None and one_rank_blocks(policy, len(rows))
    minimum = f"{policy.min_busbw_gbps:g} GB/s" if policy is not None and policy.min_busbw_gbps is not None else ""
    if unmeasured_blocks:
        out.append(
            style("NO-GO", fg="red", bold=True) + "  gate-allreduce-busbw: one rank has nothing to all-reduce with, "
            f"so the policy's minimum bus bandwidth ({minimum}) cannot be checked (fail-closed) — fix: run with "
            "two or more ranks, or leave distributed.min_busbw_gbps / --min-busbw out for a single-GPU job"
        )
    if out:
        out.append("")
    nodes = list(dict.fromkeys(r["node"] for r in rows))
    ranks = f"{len(rows)} rank" + ("" if len(rows) == 1 else "s")
    out.append(f"gpudoctor gate --distributed · {ranks} on {len(nodes)} node(s) · backend {backend}")
    widths = {
        "node": max([len(r["node"]) for r in rows] + [4]),
        "gpu": min(max([len(r["gpu"]) for r in rows] + [3]), 48),
    }
    out.append(
        f"  {'rank':<5} {'local':<5} {'node':<{widths['node']}}  {'GPU':<{widths['gpu']}}  verdict  first blocking"
    )
    for r in rows:
        first = r["blocking"][0] if r["blocking"] else ""
        first = first if len(first) <= 90 else first[:87] + "..."
        verdict = style(
            f"{r['verdict'].upper() if r['verdict'] != 'go' else 'go':<7}",
            fg="red" if r["verdict"] != "go" else "green",
        )
        gpu = r["gpu"][: widths["gpu"]]
        out.append(
            f"  {r['rank']:<5} {r['local_rank']:<5} {r['node']:<{widths['node']}}  {gpu:<{widths['gpu']}}  "
            f"{verdict}  {first}".rstrip()
        )
    if allreduce is not None:
        out.append(f"all-reduce: {allreduce.message}: {'pass' if allreduce.status is Status.PASS else 'FAIL'}")
    else:
        why = not_measured(len(rows), backend, rows)
        if unmeasured_blocks:
            why += f"; the policy's minimum {minimum} is not checked: blocking (fail-closed)"
        elif minimum and len(rows) < 2:
            why += f"; the policy's minimum {minimum} is not checked (fail-open)"
        out.append("all-reduce: not measured" + (f" ({why})" if why else ""))
    bad = [r for r in rows if r["verdict"] != "go"]
    if bad or unmeasured_blocks or (allreduce is not None and allreduce.status is Status.FAIL):
        what = [f"rank {r['rank']} on {r['node']}" for r in bad]
        if allreduce is not None and allreduce.status is Status.FAIL:
            what.append("all-reduce bandwidth")
        if unmeasured_blocks:
            what.append("all-reduce bandwidth not measured with one rank")
        out.append(style("Verdict: NO-GO — " + ", ".join(what) + " (every rank exits 1)", fg="red", bold=True))
    else:
        out.append(style(f"Verdict: GO — {ranks}", fg="green", bold=True))
    return "\n".join(out) + "\n"


def stdout_text(outcome: Any, style: Any) -> str:
    """Rank 0's table (nothing on the other ranks, or when the ranks could not exchange results)."""
    if outcome.rank != 0 or outcome.problem:
        return ""
    return render_table(outcome.rows, outcome.backend, outcome.allreduce, style, outcome.report.policy)


def stderr_lines(outcome: Any) -> list[str]:
    """Why this rank could not take part, or (ranks other than 0) its own blocking lines."""
    if outcome.problem:
        return [outcome.problem]
    if outcome.rank == 0:
        return []
    return [f"NO-GO  rank {outcome.rank}: {line}" for line in outcome.row["blocking"]]


def distributed_json(outcome: Any) -> str:
    """Rank 0's report: its own gate report, the verdict of the whole job, every rank's row."""
    data = report_json(outcome.report)
    data["verdict"] = "no-go" if outcome.failed else "go"
    data["exit_code"] = outcome.exit_code
    data["distributed"] = {
        "world_size": outcome.world,
        "backend": outcome.backend,
        "ranks": outcome.rows,
        "allreduce": outcome.measured,
        "allreduce_not_measured": outcome.not_measured or None,
    }
    return dumps(data)
