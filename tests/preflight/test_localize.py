"""Naming the slow node of `gate --distributed` (issue 17 item 3): the schedule every rank computes
alike, the arithmetic that names a node or a pair, the time limit, and (with torch) four processes
over gloo standing in for four nodes, one of them slowed by the test-only delay."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from typing import Any

import pytest

from gpudoctor.preflight.distributed import localisation_blocks
from gpudoctor.preflight.localize import (
    TEST_DELAY,
    TEST_SWITCH,
    Exchange,
    Node,
    analyse,
    delay_for_tests,
    node_layout,
    run_rounds,
    schedule,
)
from gpudoctor.preflight.policy import Policy
from gpudoctor.render.gate_distributed import render_table
from tests.preflight.helpers import HEALTHY

needs_torch = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed here")


def _nodes(count: int, per_node: int = 1) -> list[Node]:
    return [Node(i, f"n{i}", tuple(range(i * per_node, (i + 1) * per_node))) for i in range(count)]


@pytest.mark.parametrize("count", range(3, 10))
def test_every_node_is_in_two_pairs_and_a_round_never_uses_a_node_twice(count):
    rounds = schedule(_nodes(count))
    assert len(rounds) <= 3  # bounded, whatever the size of the job
    seen: dict[int, int] = {}
    for kind, groups in rounds:
        assert kind == "pairs"
        used = [n for g in groups for n in g]
        assert len(used) == len(set(used))  # disjoint: the pairs of a round run at once
        for n in used:
            seen[n] = seen.get(n, 0) + 1
    assert seen == {n: 2 for n in range(count)}


def test_nodes_with_several_ranks_are_timed_alone_first_and_two_nodes_make_one_pair():
    assert schedule(_nodes(2, 2)) == [("intra-node", [(0,), (1,)]), ("pairs", [(0, 1)])]
    assert schedule(_nodes(1)) == []


def test_layout_comes_from_node_ranks_and_names_stand_ins_apart():
    rows = [{"rank": r, "node": "host", "node_rank": r // 2} for r in (3, 0, 2, 1)]
    assert node_layout(rows) == [Node(0, "host#0", (0, 1)), Node(1, "host#1", (2, 3))]
    # without GROUP_RANK the host name is the node
    rows = [{"rank": 0, "node": "a"}, {"rank": 1, "node": "b"}, {"rank": 2, "node": "a"}]
    assert node_layout(rows) == [Node(0, "a", (0, 2)), Node(1, "b", (1,))]


def _pairs(figures: dict[tuple[int, int], float], intra: dict[int, float] | None = None) -> list[dict[str, Any]]:
    out = [{"round": 1, "kind": "intra-node", "nodes": [n], "busbw_gbps": v} for n, v in (intra or {}).items()]
    return out + [{"round": 2, "kind": "pairs", "nodes": list(p), "busbw_gbps": v} for p, v in figures.items()]


def test_a_node_slow_in_both_its_pairs_is_named_and_its_partners_are_not():
    figures = {(0, 1): 40.0, (2, 3): 9.0, (1, 2): 10.0, (3, 0): 38.0}
    result = analyse(_nodes(4), _pairs(figures), 0.8, "")
    assert result["status"] == "slow" and result["slow_nodes"] == ["n2"] and result["slow_pairs"] == []
    assert [n["slow"] for n in result["nodes"]] == [False, False, True, False]
    assert result["nodes"][2]["pairs"] == [{"with": "n3", "busbw_gbps": 9.0}, {"with": "n1", "busbw_gbps": 10.0}]
    assert localisation_blocks(result, Policy())


def test_a_slow_pair_of_healthy_nodes_is_named_as_the_link():
    figures = {(0, 1): 40.0, (2, 3): 10.0, (1, 2): 39.0, (3, 0): 41.0}
    result = analyse(_nodes(4), _pairs(figures), 0.8, "")
    assert result["slow_nodes"] == [] and result["slow_pairs"] == [["n2", "n3"]]
    result.update(why="--localize", mib=256, iterations=20, seconds=1.5)
    text = render_table(_rows(4), "nccl", None, lambda s, **_: s, Policy(), 80, result)
    assert "slow pair n2 – n3 (the link between them)" in text
    assert "Verdict: NO-GO — slow pair n2 – n3 (every rank exits 1)" in text


def test_a_node_slow_on_its_own_ranks_is_named():
    result = analyse(_nodes(2, 2), _pairs({(0, 1): 30.0}, {0: 300.0, 1: 120.0}), 0.8, "")
    assert result["slow_nodes"] == ["n1"] and result["nodes"][1]["intra_busbw_gbps"] == 120.0


def test_even_figures_go_and_one_figure_of_each_kind_is_inconclusive():
    even = analyse(_nodes(4), _pairs({(0, 1): 40.0, (2, 3): 36.0, (1, 2): 39.0, (3, 0): 41.0}), 0.8, "")
    assert even["status"] == "even" and not localisation_blocks(even, Policy())
    lone = analyse(_nodes(2), _pairs({(0, 1): 40.0}), 0.8, "")
    assert lone["status"] == "inconclusive" and not localisation_blocks(lone, Policy())


def test_a_round_cut_short_is_unknown_and_blocks_only_when_fail_closed():
    result = analyse(_nodes(4), _pairs({(0, 1): 40.0, (2, 3): 40.0}), 0.8, "round 2 (pairs) did not finish: x")
    assert result["status"] == "unknown" and result["unknown_because"].startswith("round 2")
    assert localisation_blocks(result, Policy()) and not localisation_blocks(result, Policy(fail_closed=False))


class _Group:
    def __init__(self, ranks):
        self.ranks = ranks


class _FakeDist:
    """new_group for one process standing in for rank 0; collectives are the Exchange's."""

    def __init__(self):
        self.groups = []

    def new_group(self, ranks, timeout):
        self.groups.append(list(ranks))
        return _Group(ranks)


class _FakeExchange(Exchange):
    def __init__(self, per_call: float | Exception):
        super().__init__(None, _FakeDist(), None, 0, None, 1, 3)
        self.per_call = per_call
        self.asked: list[bool] = []

    def any_rank(self, flag):
        self.asked.append(flag)
        return flag

    def time_group(self, group, delay, deadline):
        if isinstance(self.per_call, Exception):
            raise self.per_call
        return self.per_call, self.iterations


def _gather_own(mine):
    return [dict(mine)]


def test_every_rank_creates_every_group_of_a_round_and_a_timed_out_collective_is_unknown():
    ex = _FakeExchange(RuntimeError("Timed out waiting 5000ms for recv operation to complete"))
    results, stopped = run_rounds(ex, _nodes(4), 30.0, _gather_own)
    assert ex.dist.groups == [[0, 1], [2, 3]]  # rank 0 created the pair it is not in too
    assert stopped.startswith("round 1 (pairs) did not finish: RuntimeError: Timed out")
    assert analyse(_nodes(4), results, 0.8, stopped)["status"] == "unknown"


def test_no_round_starts_past_the_time_limit():
    ex = _FakeExchange(0.001)
    results, stopped = run_rounds(ex, _nodes(4), 0.0, _gather_own)
    assert results == [] and ex.dist.groups == [] and ex.asked == [True]
    assert stopped == "the time limit (0 s) ran out before round 1 (pairs)"
    results, stopped = run_rounds(ex, _nodes(4), 30.0, _gather_own)
    assert stopped == "" and [r["nodes"] for r in results] == [[0, 1], [3, 0]]  # rank 0's groups


def test_the_delay_for_tests_needs_its_switch(monkeypatch):
    monkeypatch.setenv(TEST_DELAY, "0.5")
    monkeypatch.delenv(TEST_SWITCH, raising=False)
    assert delay_for_tests() == 0.0
    monkeypatch.setenv(TEST_SWITCH, "1")
    assert delay_for_tests() == 0.5
    monkeypatch.setenv(TEST_DELAY, "nan")
    assert delay_for_tests() == 0.0


def _rows(count: int) -> list[dict[str, Any]]:
    return [
        {"rank": i, "local_rank": 0, "node": f"n{i}", "gpu": "GPU 0 (0000:18:00.0)", "verdict": "go", "blocking": []}
        for i in range(count)
    ]


def test_localize_needs_distributed(capsys):
    from tests.preflight.helpers import cli

    code, _, err = cli(capsys, "gate", "--root", HEALTHY, "--localize")
    assert code == 2 and "--localize goes with --distributed" in err


@pytest.mark.gloo
@needs_torch
def test_four_stand_in_nodes_over_gloo_name_the_slowed_one(tmp_path):
    # four processes, one rank each, GROUP_RANK 0..3 as torchrun sets it on four nodes; node 2
    # sleeps 0.2 s before each timed all-reduce (the test-only delay), which makes its pairs 10-50x
    # slower than the others. The fraction 0.1 leaves room for the noise of four processes timing
    # 1 MiB on a loaded, shared CPU (a healthy pair measured 3.4x under the best once at 0.3).
    from tests.preflight.test_distributed import _free_port

    policy = tmp_path / "policy.yaml"
    policy.write_text("distributed: {allreduce_mib: 1, iterations: 5, localize_fraction: 0.1}\n")
    report = tmp_path / "dist.json"
    port = str(_free_port())
    logs = [tmp_path / f"rank{rank}.out" for rank in range(4)]  # files: a full pipe would stall a rank
    args = ["gate", "--distributed", "--localize", "--root", HEALTHY, "--policy", str(policy), "--json", str(report)]
    procs = []
    for rank in range(4):
        env = dict(os.environ, RANK=str(rank), LOCAL_RANK="0", GROUP_RANK=str(rank), WORLD_SIZE="4")
        env.update(LOCAL_WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=port, COLUMNS="80")
        env.update({TEST_SWITCH: "1", TEST_DELAY: "0.2" if rank == 2 else "0"})
        # no GPU for the stand-ins: on a GPU host each "node" would pick NCCL on the same one GPU
        # (NCCL refuses: "Duplicate GPU detected"), as four real nodes never would
        env["CUDA_VISIBLE_DEVICES"] = ""
        with logs[rank].open("w") as out, logs[rank].with_suffix(".err").open("w") as err:
            procs.append(subprocess.Popen([sys.executable, "-m", "gpudoctor", *args], env=env, stdout=out, stderr=err))
    codes = [proc.wait(timeout=180) for proc in procs]
    texts = [log.read_text() for log in logs]
    assert codes == [1, 1, 1, 1], [log.with_suffix(".err").read_text() for log in logs]
    assert texts[1:] == ["", "", ""]  # rank 0 prints the table
    text = texts[0]
    assert "4 ranks on 4 node(s) · backend gloo" in text
    assert "  → slow node gpu-node-01#2\n" in text, text
    assert "Verdict: NO-GO — slow node gpu-node-01#2 (every rank exits 1)" in text
    assert max(len(line) for line in text.splitlines()) <= 80
    import jsonschema

    from gpudoctor.schemas import load_schema

    data = json.loads(report.read_text())
    jsonschema.validate(data, load_schema("gate-report"))
    found = data["distributed"]["localize"]
    assert found["slow_nodes"] == ["gpu-node-01#2"] and found["status"] == "slow" and found["rounds_run"] == 2
    assert [len(n["pairs"]) for n in found["nodes"]] == [2, 2, 2, 2]
    assert data["verdict"] == "no-go" and [r["node_rank"] for r in data["distributed"]["ranks"]] == [0, 1, 2, 3]


def test_the_json_report_lists_the_slow_node_and_each_nodes_figures():
    # without torch too: the report's distributed.localize as rank 0 writes it, against the schema
    from gpudoctor.preflight.distributed import DistributedOutcome, _rank_row
    from gpudoctor.render.gate_distributed import distributed_json
    from gpudoctor.schemas import validate
    from tests.preflight.test_golden import gate_report

    go = gate_report("go-expectations")
    rows = [_rank_row(go, rank, 0, "0000:18:00.0", rank) for rank in range(4)]
    found = analyse(node_layout(rows), _pairs({(0, 1): 40.0, (2, 3): 9.0, (1, 2): 10.0, (3, 0): 38.0}), 0.8, "")
    found.update(why="--localize", mib=256, iterations=20, seconds=1.5)
    outcome = DistributedOutcome(0, 4, "nccl", go, rows[0], rows=rows, localisation=found)
    data = json.loads(distributed_json(outcome))
    assert validate("gate-report", data) is None
    assert data["verdict"] == "no-go" and data["exit_code"] == 1
    assert data["distributed"]["localize"]["slow_nodes"] == ["gpu-node-01#2"]
    assert data["distributed"]["localize"]["nodes"][2]["pairs"][0] == {"with": "gpu-node-01#3", "busbw_gbps": 9.0}
    assert validate("gate-report", {**data, "distributed": {**data["distributed"], "localize": {"status": "x"}}})
