"""Naming the slow node of a distributed gate (`gate --distributed`, issue 17 item 3).

One all-reduce figure across the job says that something is slow, not what. When that figure is
under the policy's minimum (or with --localize), every rank runs a bounded localisation:

1. each node's own ranks all-reduce among themselves (every node at once; a node with one rank
   has nothing to all-reduce with and is not measured there);
2. nodes in pairs, all ranks of both nodes, disjoint pairs at once: neighbours (0,1) (2,3) …, then
   the pairs shifted by one (1,2) (3,4) … (N-1,0), so every node is measured in two different
   pairs (with three or any odd number of nodes one more round closes the ring).

A measurement below `fraction` (policy distributed.localize_fraction, default 0.8) of the best of
its kind is slow. A node is slow when its intra-node figure is, or when every pair it is in is
slow and it is in two or more (its second pair is the retest that clears a neighbour); a slow pair
that no slow node explains is named as a pair (the link between them). Two nodes make one pair,
which has nothing to be compared with: only their intra-node figures can name one.

The schedule comes from the world layout alone (each rank's node, gathered with the verdicts), so
every rank builds the same sub-groups (torch.distributed.new_group, called by every rank in the
same order) without another exchange. Before each round the ranks agree (a MAX all-reduce over the
gloo group) whether time is left: the whole localisation stays within the gate's deadline, and a
round that is not run or whose collective times out leaves the result unknown, never even.

Test-only: with GPUDOCTOR_TEST_ONLY=1, GPUDOCTOR_TEST_ONLY_ALLREDUCE_DELAY_S makes this rank
sleep that long before each timed all-reduce of the localisation (the tests slow one stand-in
node down with it). Adding time alone could still hide a slow node: the same delay on every rank
makes every figure the delay's, and a slow node's figure then looks like the others'. So a
measurement a delayed rank took in says so, and a localisation with one is never "even" or
"inconclusive" (it is "unknown", and ``test_delay`` says why) and always blocks, fail-open or
not (preflight/distributed.localisation_blocks): the delay can make a gate no-go, never go.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

FRACTION = 0.8
TEST_SWITCH = "GPUDOCTOR_TEST_ONLY"
TEST_DELAY = "GPUDOCTOR_TEST_ONLY_ALLREDUCE_DELAY_S"


@dataclass(frozen=True)
class Node:
    """One node of the job: its position in the schedule, its label and its ranks."""

    index: int
    label: str
    ranks: tuple[int, ...]


def node_layout(rows: Sequence[dict[str, Any]]) -> list[Node]:
    """The job's nodes from every rank's row: keyed by torchrun's GROUP_RANK (``node_rank``) where
    it is known, else by host name; ordered by their lowest rank. Host names that two node ranks
    share (stand-in nodes on one machine) are told apart by the node rank."""
    keys: dict[Any, list[int]] = {}
    names: dict[Any, str] = {}
    for row in sorted(rows, key=lambda r: int(r["rank"])):
        key = row.get("node_rank")
        key = ("rank", key) if isinstance(key, int) else ("host", row["node"])
        keys.setdefault(key, []).append(int(row["rank"]))
        names.setdefault(key, str(row["node"]))
    shared = {n for n in names.values() if list(names.values()).count(n) > 1}
    out = []
    for i, (key, ranks) in enumerate(keys.items()):
        label = names[key] if names[key] not in shared else f"{names[key]}#{key[1]}"
        out.append(Node(i, label, tuple(ranks)))
    return out


def node_labels(rows: Sequence[dict[str, Any]]) -> dict[int, str]:
    """Each rank's node as node_layout names it."""
    return {rank: n.label for n in node_layout(rows) for rank in n.ranks}


def schedule(nodes: Sequence[Node]) -> list[tuple[str, list[tuple[int, ...]]]]:
    """The rounds, each a kind ("intra-node" or "pairs") and its groups of node indices; groups of
    one round are disjoint and run at once."""
    rounds: list[tuple[str, list[tuple[int, ...]]]] = []
    intra: list[tuple[int, ...]] = [(n.index,) for n in nodes if len(n.ranks) >= 2]
    if intra:
        rounds.append(("intra-node", intra))
    count = len(nodes)
    neighbours: list[tuple[int, ...]] = [(a, a + 1) for a in range(0, count - 1, 2)]
    shifted: list[tuple[int, ...]] = [(a, a + 1) for a in range(1, count - 1, 2)]
    if count > 2 and count % 2 == 0:
        shifted.append((count - 1, 0))  # the ring closes in the shifted round
    closing: list[tuple[int, ...]] = [(count - 1, 0)] if count > 2 and count % 2 else []  # odd: node N-1 sat out above
    rounds.extend(("pairs", pairs) for pairs in (neighbours, shifted, closing) if pairs)
    return rounds


def delay_for_tests() -> float:
    """The test-only delay before each timed all-reduce (0 unless the test-only switch is set)."""
    if os.environ.get(TEST_SWITCH) != "1":
        return 0.0
    try:
        delay = float(os.environ.get(TEST_DELAY, "0"))
    except ValueError:
        return 0.0
    return min(max(delay, 0.0), 10.0) if delay == delay else 0.0


@dataclass
class Exchange:
    """What the localisation needs from torch.distributed, so the arithmetic is testable alone."""

    torch: Any
    dist: Any
    device: Any
    rank: int
    agree: Any  # the gloo group for the agreement all-reduces (None: the default group)
    mib: int
    iterations: int

    def sync(self) -> None:
        if getattr(self.device, "type", "cpu") == "cuda":
            self.torch.cuda.synchronize(self.device)

    def any_rank(self, flag: bool) -> bool:
        """Whether any rank of the job says yes (a MAX all-reduce over the gloo group)."""
        t = self.torch.tensor([1 if flag else 0], dtype=self.torch.int64)
        self.dist.all_reduce(t, op=self.dist.ReduceOp.MAX, group=self.agree)
        return bool(int(t.item()))

    def time_group(self, group: Any, delay: float, deadline: float) -> tuple[float, int]:
        """Seconds per all-reduce in `group` (the median of the iterations, so one stall of a shared
        host does not make a node slow; the slowest member's) and how many iterations ran: the
        members agree before each one that time is left (a tiny MAX all-reduce, not timed), so a
        round stops at the limit instead of running all its iterations past it."""
        torch, dist = self.torch, self.dist
        buf = torch.zeros(self.mib * (1 << 20) // 4, dtype=torch.float32, device=self.device)
        dist.all_reduce(buf, group=group)  # warm-up: the group's connections
        self.sync()
        times: list[float] = []
        late = torch.zeros(1, dtype=torch.int64, device=self.device)
        for _ in range(self.iterations):
            late.fill_(1 if time.monotonic() >= deadline else 0)
            dist.all_reduce(late, op=dist.ReduceOp.MAX, group=group)
            if int(late.item()):
                break
            started = time.perf_counter()
            if delay:
                time.sleep(delay)
            dist.all_reduce(buf, group=group)
            self.sync()
            times.append(time.perf_counter() - started)
        median = sorted(times)[len(times) // 2] if times else 0.0
        elapsed = torch.tensor([median], dtype=torch.float64, device=self.device)
        dist.all_reduce(elapsed, op=dist.ReduceOp.MAX, group=group)
        return float(elapsed.item()), len(times)


def busbw(size_bytes: int, per_call: float, ranks: int) -> float:
    """nccl-tests' all-reduce bus bandwidth in GB/s: size / time × 2(n−1)/n."""
    if per_call <= 0:
        return 0.0
    return float(f"{size_bytes / per_call / 1e9 * 2 * (ranks - 1) / ranks:.4g}")  # 4 significant digits


def run_rounds(
    ex: Exchange,
    nodes: Sequence[Node],
    limit_s: float,
    gather: Callable[[dict[str, Any]], list[dict[str, Any]]],
) -> tuple[list[dict[str, Any]], str]:
    """Run the schedule within `limit_s`; every group's measurement on every rank, and why the
    localisation stopped short ("" when every round ran). `gather` all-gathers one dict per rank."""
    from datetime import timedelta

    deadline = time.monotonic() + limit_s
    delay = delay_for_tests()
    size = ex.mib * (1 << 20) // 4 * 4
    results: list[dict[str, Any]] = []
    stopped, longest = "", 0.0
    for number, (kind, groups) in enumerate(schedule(nodes)):
        left = deadline - time.monotonic()
        if ex.any_rank(left < max(longest, 0.05)):
            stopped = f"the time limit ({limit_s:g} s) ran out before round {number + 1} ({kind})"
            break
        began = time.monotonic()
        mine: dict[str, Any] = {}
        # every rank creates every group of the round, in the same order (torch.distributed
        # requires it), before any group starts: then the groups run at once
        made = []
        for group_nodes in groups:
            ranks = sorted(r for i in group_nodes for r in nodes[i].ranks)
            made.append((group_nodes, ranks, ex.dist.new_group(ranks=ranks, timeout=timedelta(seconds=max(left, 1.0)))))
        for group_nodes, ranks, group in made:
            if ex.rank not in ranks:
                continue
            mine = {"round": number + 1, "kind": kind, "nodes": list(group_nodes), "ranks": len(ranks)}
            if ex.rank == ranks[0]:
                mine["lead"] = True
            if delay:
                mine["delayed"] = True
            try:
                per_call, done = ex.time_group(group, delay, deadline)
                if done:
                    mine["busbw_gbps"] = busbw(size, per_call, len(ranks))
                if done < ex.iterations:
                    ran = f"{done} of {ex.iterations} iterations"
                    mine["problem"] = f"the time limit ({limit_s:g} s) ran out after {ran}"
            except Exception as exc:  # a collective that timed out: this group is unknown
                first = str(exc).splitlines()[0][:200] if str(exc) else ""
                mine["problem"] = f"{type(exc).__name__}: {first}"
        rows = gather(mine)
        # a group's figure is its slowest member's: delayed when any member was
        delayed = {(r["round"], tuple(r["nodes"])) for r in rows if r.pop("delayed", False)}
        for row in rows:
            if row.pop("lead", False):
                results.append({**row, "delayed": True} if (row["round"], tuple(row["nodes"])) in delayed else row)
        if any("problem" in r for r in results):
            stopped = f"round {number + 1} ({kind}) did not finish: " + next(
                r["problem"] for r in results if "problem" in r
            )
            break
        longest = max(longest, time.monotonic() - began)
    return results, stopped


def analyse(nodes: Sequence[Node], results: Sequence[dict[str, Any]], fraction: float, stopped: str) -> dict[str, Any]:
    """The verdict of the localisation: each node's figures, the slow nodes and pairs, and whether
    it is complete: "slow", "even", "unknown" (a round cut short: blocks when fail-closed) or
    "inconclusive" (nothing to compare a figure with)."""
    label = [n.label for n in nodes]
    intra = {r["nodes"][0]: r.get("busbw_gbps") for r in results if r["kind"] == "intra-node"}
    pairs = [r for r in results if r["kind"] == "pairs"]

    def slow_of(values: list[float]) -> Callable[[float | None], bool]:
        best = max(values) if len(values) >= 2 else None
        return lambda v: best is not None and v is not None and v < fraction * best

    intra_slow = slow_of([v for v in intra.values() if v is not None])
    pair_slow = slow_of([r["busbw_gbps"] for r in pairs if r.get("busbw_gbps") is not None])
    slow_nodes = [n.index for n in nodes if intra_slow(intra.get(n.index))]
    for n in nodes:
        mine = [r for r in pairs if n.index in r["nodes"] and r.get("busbw_gbps") is not None]
        if len(mine) >= 2 and all(pair_slow(r["busbw_gbps"]) for r in mine) and n.index not in slow_nodes:
            slow_nodes.append(n.index)
    slow_pairs = [
        r["nodes"] for r in pairs if pair_slow(r.get("busbw_gbps")) and not set(r["nodes"]) & set(slow_nodes)
    ]
    rows = []
    for n in nodes:
        rows.append(
            {
                "node": n.label,
                "ranks": list(n.ranks),
                "intra_busbw_gbps": intra.get(n.index),
                "pairs": [
                    {"with": label[next(i for i in r["nodes"] if i != n.index)], "busbw_gbps": r.get("busbw_gbps")}
                    for r in pairs
                    if n.index in r["nodes"]
                ],
                "slow": n.index in slow_nodes,
            }
        )
    # with nothing to compare (two nodes of one rank each: one pair) no figure can be called slow
    compared = len([v for v in intra.values() if v is not None]) >= 2 or len(pairs) >= 2
    status = "unknown" if stopped else ("slow" if slow_nodes or slow_pairs else "even" if compared else "inconclusive")
    delayed = any(r.get("delayed") for r in results)
    if status in ("even", "inconclusive") and delayed:
        status = "unknown"
        stopped = f"the test-only delay ({TEST_DELAY}) was set: the figures measure it, not the network"
    return {
        "status": status,
        "fraction": fraction,
        "slow_nodes": [label[i] for i in sorted(slow_nodes)],
        "slow_pairs": [[label[i] for i in p] for p in slow_pairs],
        "nodes": rows,
        "best_intra_busbw_gbps": max((v for v in intra.values() if v is not None), default=None),
        "best_pair_busbw_gbps": max((r["busbw_gbps"] for r in pairs if r.get("busbw_gbps") is not None), default=None),
        "rounds_run": len({r["round"] for r in results}),
        "rounds_planned": len(schedule(nodes)),
        "unknown_because": stopped or None,
        "test_delay": delayed,
    }


def localise(
    ex: Exchange,
    rows: Sequence[dict[str, Any]],
    fraction: float,
    limit_s: float,
    gather: Callable[[dict[str, Any]], list[dict[str, Any]]],
    why: str,
) -> dict[str, Any]:
    """The whole localisation on this rank; every rank returns the same result."""
    nodes = node_layout(rows)
    started = time.monotonic()
    results, stopped = run_rounds(ex, nodes, limit_s, gather)
    out = analyse(nodes, results, fraction, stopped)
    out.update(why=why, mib=ex.mib, iterations=ex.iterations, seconds=round(time.monotonic() - started, 3))
    return out
