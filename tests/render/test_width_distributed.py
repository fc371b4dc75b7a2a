"""`gate --distributed` text fits the width (issue 15 item 2) like the other outputs: rank 0's table,
the all-reduce line, the localisation (issue 17 item 3) and the verdict wrap to the command's width
(COLUMNS, else the terminal, else 100); the blocking NO-GO lines stay one line each, as `gate`'s.
Goldens at 60, 80 and 120 columns: eight ranks on four nodes, one rank no-go, node 2 slow."""

from __future__ import annotations

from typing import Any

import pytest

from gpudoctor.preflight.distributed import _rank_row, allreduce_finding
from gpudoctor.preflight.localize import analyse, node_layout
from gpudoctor.preflight.policy import Policy
from gpudoctor.render.gate_distributed import render_table
from tests.helpers.golden import GOLDEN, check
from tests.helpers.width import too_wide
from tests.preflight.helpers import facts, ruleset
from tests.preflight.test_golden import gate_report

WIDTHS = (60, 80, 120)


def _rows(no_go_rank: int | None = None) -> list[dict[str, Any]]:
    """Eight ranks, two on each of four nodes (GROUP_RANK 0..3, one host name as in the fixtures)."""
    go, no_go = gate_report("go-expectations"), gate_report("no-go-expectations")
    rows = []
    for rank in range(8):
        report = no_go if rank == no_go_rank else go
        rows.append(_rank_row(report, rank, rank % 2, ("0000:18:00.0", "0000:9a:00.0")[rank % 2], rank // 2))
    return rows


def _localisation(rows: list[dict[str, Any]]) -> dict[str, Any]:
    intra = {0: 361.2, 1: 358.9, 2: 362.0, 3: 360.4}
    pairs = {(0, 1): 44.1, (2, 3): 12.3, (1, 2): 11.9, (3, 0): 43.7}
    results = [{"round": 1, "kind": "intra-node", "nodes": [n], "busbw_gbps": v} for n, v in intra.items()]
    results += [{"round": 2 + (p[0] % 2), "kind": "pairs", "nodes": list(p), "busbw_gbps": v} for p, v in pairs.items()]
    out = analyse(node_layout(rows), results, 0.8, "")
    out.update(why="the all-reduce is under the minimum", mib=256, iterations=20, seconds=4.2)
    return out


def _plain(text: str, **_: Any) -> str:
    return text


@pytest.mark.parametrize("width", WIDTHS)
def test_distributed_table_golden_at_each_width(width):
    # a rank that is no-go (nothing is measured), then every rank go with the all-reduce under the
    # policy's minimum and the localisation that followed
    slow = {"correct": True, "bytes": 256 << 20, "iterations": 20, "algbw_gbps": 14.1, "busbw_gbps": 24.7}
    policy = Policy(min_busbw_gbps=100.0)
    low = allreduce_finding(ruleset(), facts("healthy-2gpu"), policy, slow, 8)
    rows = _rows()
    parts = [
        render_table(_rows(no_go_rank=5), "nccl", None, _plain, policy, width),
        render_table(rows, "nccl", low, _plain, policy, width, _localisation(rows)),
    ]
    text = "\n".join(parts)
    check(GOLDEN / "width" / f"distributed-{width}.txt", text)
    assert too_wide(text, width, ("NO-GO  ",)) == []
    said = " ".join(parts[1].split())
    assert "→ slow node gpu-node-01#2" in said
    assert "Verdict: NO-GO — all-reduce bandwidth, slow node gpu-node-01#2 (every rank exits 1)" in said
    assert "Verdict: NO-GO — rank 5 on gpu-node-01#2 (every rank exits 1)" in " ".join(parts[0].split())
    assert all(line.startswith("NO-GO  rank 5 (gpu-node-01): ") for line in parts[0].splitlines()[:4])


def test_the_gpu_goes_below_the_row_when_the_columns_leave_it_no_room():
    rows = [{**r, "node": "gpu-node-01.rack-17.cluster.example.com"} for r in _rows()[:2]]
    narrow = render_table(rows, "gloo", None, _plain, Policy(), 60).splitlines()
    at = next(i for i, line in enumerate(narrow) if line.startswith("  0     0 "))
    assert "GPU" not in narrow[at] and narrow[at + 1] == "        GPU 0 (0000:18:00.0) NVIDIA H100 80GB HBM3"
    wide = render_table(rows, "gloo", None, _plain, Policy(), 120).splitlines()
    assert any(line.startswith("  0     0 ") and line.endswith("go       GPU 0 (0000:18:00.0) NVIDIA H100 80GB HBM3")
               for line in wide)
