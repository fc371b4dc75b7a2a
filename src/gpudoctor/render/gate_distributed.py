"""`gate --distributed` output: rank 0's table of every rank, node and GPU with the all-reduce
bandwidth and the verdict; the blocking lines other ranks print on stderr; rank 0's JSON report.
Formatting only."""

from __future__ import annotations

from typing import Any

from ..escaping import printable
from ..findings import Finding, Status
from .gate_json import dumps, report_json
from .layout import flow, pack, wrap

# The table's columns before the GPU; a GPU column starting later than `width - GPU_ROOM` goes on
# a line of its own below the row.
GPU_ROOM = 24
BELOW = "        "


def _no_go_lines(
    rows: list[dict[str, Any]], allreduce: Finding | None, style: Any, minimum: str, blocks: bool
) -> list[str]:
    """The blocking lines of every rank, one line each at any width (as `gate`'s: job logs are
    grepped for them; a line that runs long beats a finding cut in two)."""
    mark = style("NO-GO", fg="red", bold=True) + "  "
    out = [mark + printable(f"rank {r['rank']} ({r['node']}): {line}") for r in rows for line in r["blocking"]]
    if allreduce is not None and allreduce.status is Status.FAIL:
        out.append(mark + printable(f"{allreduce.rule_id}: {allreduce.message}"))
    if blocks:
        out.append(
            mark + "gate-allreduce-busbw: one rank has nothing to all-reduce with, "
            f"so the policy's minimum bus bandwidth ({minimum}) cannot be checked (fail-closed) — fix: run with "
            "two or more ranks, or leave distributed.min_busbw_gbps / --min-busbw out for a single-GPU job"
        )
    return out


def _rank_lines(rows: list[dict[str, Any]], style: Any, width: int) -> list[str]:
    """The table of ranks: rank, local rank, node and verdict in columns, the GPU after them (or
    below when the columns leave it too little room), the first blocking finding's what below."""
    from ..preflight.localize import node_labels

    names = node_labels(rows)
    node_w = max([len(printable(names[r["rank"]])) for r in rows] + [4])
    def head(rank: Any, local: Any, node: str, verdict: str) -> str:
        return f"  {rank!s:<5} {local!s:<5} {node:<{node_w}}  {verdict:<7}  "
    lead = head("rank", "local", "node", "verdict")
    below = len(lead) + GPU_ROOM > width
    out = [(lead + ("" if below else "GPU")).rstrip()]
    for r in rows:
        plain = r["verdict"].upper() if r["verdict"] != "go" else "go"
        cols = head(r["rank"], r["local_rank"], printable(names[r["rank"]]), plain)
        at = len(cols) - 9  # where the verdict starts: coloured after the layout is done
        gpu = printable(r["gpu"])
        lines = [cols.rstrip(), *flow(gpu, width, BELOW)] if below else flow(gpu, width, cols, " " * len(cols))
        colour = "red" if r["verdict"] != "go" else "green"
        lines[0] = lines[0][:at] + style(plain, fg=colour) + lines[0][at + len(plain) :]
        if r["blocking"]:
            what = r["blocking"][0].split(" — fix: ")[0]
            lines.extend(wrap(what, width, BELOW + "first: ", BELOW + "       "))
        out.extend(lines)
    return out


def _localise_lines(loc: dict[str, Any], width: int) -> list[str]:
    """Each node's bus bandwidth (its own ranks, then with each node it was paired with) and what
    the localisation found."""
    gb = lambda v: "—" if v is None else f"{v:.3g} GB/s"  # noqa: E731
    said = (
        f"localisation ({loc['why']}): {loc['mib']} MiB × {loc['iterations']} per group; slow: under "
        f"{loc['fraction']:g} × the best of its kind; {loc['rounds_run']} of {loc['rounds_planned']} rounds "
        f"in {loc['seconds']:g} s"
    )
    out = wrap(said, width, "", "  ")
    for n in loc["nodes"]:
        ranks = n["ranks"]
        bits = [f"{printable(n['node'])} (rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))})"]
        if len(ranks) > 1:
            bits.append("own ranks " + gb(n["intra_busbw_gbps"]))
        bits.extend(f"with {printable(p['with'])} {gb(p['busbw_gbps'])}" for p in n["pairs"])
        if n["slow"]:
            bits.append("SLOW")
        # the separator ends its piece, so a line that breaks after it still fits
        out.extend(pack([f"{b} ·" for b in bits[:-1]] + bits[-1:], width, "  ", "    "))
    found = [f"slow node {printable(x)}" for x in loc["slow_nodes"]]
    found += [f"slow pair {printable(a)} – {printable(b)} (the link between them)" for a, b in loc["slow_pairs"]]
    if loc["status"] == "unknown":
        found.append(f"unknown: {printable(loc['unknown_because'])}")
    elif loc["status"] == "even":
        found.append("no node or pair is slow")
    elif loc["status"] == "inconclusive":
        found.append("inconclusive: one figure of each kind, nothing to compare it with")
    out.extend(wrap("; ".join(found), width, "  → ", "    "))
    return out


def render_table(
    rows: list[dict[str, Any]],
    backend: str,
    allreduce: Finding | None,
    style: Any,
    policy: Any = None,
    width: int = 100,
    localisation: dict[str, Any] | None = None,
) -> str:
    """Rank 0's table; ``policy`` (the ranks' policy) says whether an unmeasured all-reduce blocks."""
    from ..preflight.distributed import localisation_blocks, node_count, not_measured, one_rank_blocks
    from ..preflight.localize import node_labels

    unmeasured_blocks = allreduce is None and one_rank_blocks(policy, len(rows))
    minimum = f"{policy.min_busbw_gbps:g} GB/s" if policy is not None and policy.min_busbw_gbps is not None else ""
    out = _no_go_lines(rows, allreduce, style, minimum, unmeasured_blocks)
    if out:
        out.append("")
    ranks = f"{len(rows)} rank" + ("" if len(rows) == 1 else "s")
    title = ["gpudoctor gate --distributed", f"{ranks} on {node_count(rows)} node(s)", f"backend {backend}"]
    out.extend(pack(title, width, "", "  ", " · "))
    out.extend(_rank_lines(rows, style, width))
    if allreduce is not None:
        said = f"all-reduce: {allreduce.message}: {'pass' if allreduce.status is Status.PASS else 'FAIL'}"
    else:
        why = not_measured(len(rows), backend, rows)
        if unmeasured_blocks:
            why += f"; the policy's minimum {minimum} is not checked: blocking (fail-closed)"
        elif minimum and len(rows) < 2:
            why += f"; the policy's minimum {minimum} is not checked (fail-open)"
        said = "all-reduce: not measured" + (f" ({why})" if why else "")
    out.extend(wrap(said, width, "", "  "))
    if localisation:
        out.extend(_localise_lines(localisation, width))
    names = node_labels(rows)
    what = [f"rank {r['rank']} on {names[r['rank']]}" for r in rows if r["verdict"] != "go"]
    if allreduce is not None and allreduce.status is Status.FAIL:
        what.append("all-reduce bandwidth")
    if unmeasured_blocks:
        what.append("all-reduce bandwidth not measured with one rank")
    if localisation_blocks(localisation, policy):
        what += [f"slow node {x}" for x in localisation["slow_nodes"]] if localisation else []
        what += [f"slow pair {a} – {b}" for a, b in localisation["slow_pairs"]] if localisation else []
        if localisation and localisation["status"] == "unknown":
            why = "the test-only delay was set" if localisation.get("test_delay") else "fail-closed"
            what.append(f"localisation unknown ({why})")
    if what:
        words = printable("Verdict: NO-GO — " + ", ".join(what)).split(" ")
        verdict = pack([*words, "(every rank exits 1)"], width, "", "  ")
        out.extend(style(line, fg="red", bold=True) for line in verdict)
    else:
        out.extend(style(line, fg="green", bold=True) for line in wrap(f"Verdict: GO — {ranks}", width))
    return "\n".join(out) + "\n"


def stdout_text(outcome: Any, style: Any, width: int = 100) -> str:
    """Rank 0's table (nothing on the other ranks, or when the ranks could not exchange results)."""
    if outcome.rank != 0 or outcome.problem:
        return ""
    policy = outcome.report.policy
    return render_table(outcome.rows, outcome.backend, outcome.allreduce, style, policy, width, outcome.localisation)


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
        "localize": outcome.localisation,
    }
    return dumps(data)
