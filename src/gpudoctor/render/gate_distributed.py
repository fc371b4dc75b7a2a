"""`gate --distributed` output: rank 0's table of every rank, node and GPU with the all-reduce
bandwidth and the verdict; the blocking lines other ranks print on stderr; rank 0's JSON report.
Formatting only."""

from __future__ import annotations

from typing import Any

from ..findings import Finding, Status
from .gate_json import dumps, report_json


def render_table(rows: list[dict[str, Any]], backend: str, allreduce: Finding | None, style: Any) -> str:
    out: list[str] = []
    for row in rows:
        for line in row["blocking"]:
            out.append(style("NO-GO", fg="red", bold=True) + f"  rank {row['rank']} ({row['node']}): {line}")
    if allreduce is not None and allreduce.status is Status.FAIL:
        out.append(style("NO-GO", fg="red", bold=True) + f"  {allreduce.rule_id}: {allreduce.message}")
    if out:
        out.append("")
    nodes = list(dict.fromkeys(r["node"] for r in rows))
    out.append(f"gpudoctor gate --distributed · {len(rows)} ranks on {len(nodes)} node(s) · backend {backend}")
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
    elif backend != "nccl":
        out.append("all-reduce: not measured (no NCCL: the ranks have no usable CUDA device)")
    else:
        out.append("all-reduce: not measured (a rank is no-go)")
    bad = [r for r in rows if r["verdict"] != "go"]
    if bad or (allreduce is not None and allreduce.status is Status.FAIL):
        what = [f"rank {r['rank']} on {r['node']}" for r in bad]
        if allreduce is not None and allreduce.status is Status.FAIL:
            what.append("all-reduce bandwidth")
        out.append(style("Verdict: NO-GO — " + ", ".join(what) + " (every rank exits 1)", fg="red", bold=True))
    else:
        out.append(style(f"Verdict: GO — {len(rows)} ranks", fg="green", bold=True))
    return "\n".join(out) + "\n"


def stdout_text(outcome: Any, style: Any) -> str:
    """Rank 0's table (nothing on the other ranks, or when the ranks could not exchange results)."""
    if outcome.rank != 0 or outcome.problem:
        return ""
    return render_table(outcome.rows, outcome.backend, outcome.allreduce, style)


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
    }
    return dumps(data)
