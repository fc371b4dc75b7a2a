"""Golden outputs of the gate: text (plain and verbose), JSON, JUnit, Prometheus and NFD for a few
fixture hosts and policies, the device test from canned events, and the distributed table,
compared byte for byte with tests/golden/gate/.

Regenerate after an intended change with:  GPUDOCTOR_UPDATE_GOLDEN=1 python -m pytest tests/gate/test_golden.py
then read the diff (git diff tests/golden/gate) before committing it.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from gpudoctor.facts import Unavailable
from gpudoctor.preflight.device_test import DeepResult
from gpudoctor.preflight.distributed import DistributedOutcome, _rank_row, allreduce_finding
from gpudoctor.preflight.policy import Policy
from gpudoctor.preflight.verdict import judge
from gpudoctor.render import gate_json, gate_text, junit, nfd, prometheus
from gpudoctor.render.gate_distributed import distributed_json, render_table, stderr_lines
from tests.helpers.golden import EPOCH, check
from tests.preflight.helpers import device_events, facts, passing_gpu, ruleset, step_events

GOLDEN = Path(__file__).resolve().parent.parent / "golden" / "gate"
PYTHON = "/opt/venv/bin/python3"


def _unknown_width() -> dict[str, Any]:
    data = facts("healthy-2gpu")
    data["nvml"]["gpus"][1]["pcie_width"] = Unavailable("error", "nvmlDeviceGetCurrPcieLinkWidth: Unknown Error")
    return data


def _deep(events: list[dict[str, Any]], **state: Any) -> DeepResult:
    result = DeepResult(python=PYTHON, budget_s=30.0, started=True, duration_s=2.5, returncode=0)
    result.events = copy.deepcopy(events)
    for key, value in state.items():
        setattr(result, key, value)
    return result


def _all_passing() -> list[dict[str, Any]]:
    events = device_events(2) + passing_gpu(0) + passing_gpu(1)
    events += step_events(0, "p2p", peer=1, peer_access=True, gbps=40.0)
    events += step_events(1, "p2p", peer=0, peer_access=True, gbps=40.0)
    events += step_events(None, "allreduce", mib=64)
    return events + [{"event": "done", "ok": True}]


def _hung() -> list[dict[str, Any]]:
    return device_events(2) + passing_gpu(0) + step_events(1, "context") + step_events(1, "matmul", ok="hang")


def _failed_memory() -> list[dict[str, Any]]:
    events = device_events(2) + passing_gpu(0) + step_events(1, "context")
    events += step_events(1, "memory", ok=False, error="checksum mismatch: got 1 and 2, want 3 and 4")
    return events + [{"event": "done", "ok": False}]


EXPECT_GOOD = {"expect_gpus": 2, "expect_model": "H100", "min_free_memory_gib": 70.0}
EXPECT_BAD = {"expect_gpus": 4, "expect_model": "A100", "min_free_memory_gib": 80.0}
# An 8-GPU HGX node with one NDR HCA per GPU and a RoCE storage NIC: 9 RDMA ports
EXPECT_FABRIC = {"expect_gpus": 8, "expect_nics": 9, "nic_rate_gbps": 400.0, "nvlink_links": 18}

# name -> (facts, policy values, device test result or None)
CASES: dict[str, Any] = {
    "go-expectations": (lambda: facts("healthy-2gpu"), EXPECT_GOOD, None),
    "no-go-expectations": (lambda: facts("pcie-degraded"), EXPECT_BAD, None),
    "no-go-no-driver": (lambda: facts("no-driver"), EXPECT_GOOD, None),
    "go-no-driver-fail-open": (lambda: facts("no-driver"), {**EXPECT_GOOD, "fail_closed": False}, None),
    "go-unknown-fail-open": (_unknown_width, {"fail_closed": False}, None),
    "no-go-unknown-required": (_unknown_width, {"fail_closed": False, "required": ("pcie",)}, None),
    "go-warnings": (lambda: facts("thermal-slowdown"), {"ignore": ("hw-slowdown-active",)}, None),
    "go-fabric-expectations": (lambda: facts("rdma-8nic"), EXPECT_FABRIC, None),
    "no-go-fabric-rdma-degraded": (lambda: facts("rdma-degraded"), EXPECT_FABRIC, None),
    # numa-dgx-8gpu has 5 RDMA ports (4 NDR HCAs, one RoCE NIC): a policy written for it
    "no-go-fabric-nvlink-down": (lambda: facts("nvlink-down-8gpu"), {**EXPECT_FABRIC, "expect_nics": 5}, None),
    "go-deep": (lambda: facts("healthy-2gpu"), {"deep": True}, lambda: _deep(_all_passing())),
    "no-go-deep-hung": (
        lambda: facts("healthy-2gpu"),
        {"deep": True},
        lambda: _deep(_hung(), timed_out=True, returncode=None, duration_s=30.0),
    ),
    "go-deep-hung-fail-open": (
        lambda: facts("healthy-2gpu"),
        {"deep": True, "fail_closed": False},
        lambda: _deep(_hung(), timed_out=True, returncode=None, duration_s=30.0),
    ),
    "no-go-deep-failed": (lambda: facts("healthy-2gpu"), {"deep": True}, lambda: _deep(_failed_memory(), returncode=1)),
    "no-go-deep-no-torch": (
        lambda: facts("healthy-2gpu"),
        {"deep": True},
        lambda: _deep(
            [{"event": "hello"}, {"event": "torch_error", "error": "ModuleNotFoundError: No module named 'torch'"}]
        ),
    ),
}


def gate_report(name: str) -> Any:
    make_facts, values, make_deep = CASES[name]
    report = judge(
        make_facts(),
        ruleset(),
        Policy(source=f"golden {name}", **values),
        deep_result=make_deep() if make_deep else None,
        facts_origin=f"fixture {name}",
        duration_s=1.25,
    )
    report.generated_epoch = EPOCH
    return report


@pytest.mark.parametrize("name", sorted(CASES))
def test_gate_golden_outputs(name):
    report = gate_report(name)
    check(GOLDEN / f"{name}.txt", gate_text.render(report))
    check(GOLDEN / f"{name}.verbose.txt", gate_text.render(report, verbose=True))
    check(GOLDEN / f"{name}.json", gate_json.render(report))
    check(GOLDEN / f"{name}.junit.xml", junit.render(report))
    check(GOLDEN / f"{name}.prom", prometheus.render(report))
    check(GOLDEN / f"{name}.nfd", nfd.render(report, 900))


def _plain(text: str, **_: Any) -> str:
    return text


MEASURED = {
    "correct": True,
    "bytes": 256 << 20,
    "iterations": 20,
    "seconds_per_call": 0.0049,
    "algbw_gbps": 54.78,
    "busbw_gbps": 82.17,
    "min_busbw_gbps": 100.0,
}


def bandwidth(measured: dict[str, Any]) -> Any:
    """The all-reduce judged by gate-allreduce-busbw, the policy's minimum as the measurement says."""
    policy = Policy(min_busbw_gbps=measured["min_busbw_gbps"])
    return allreduce_finding(ruleset(), facts("healthy-2gpu"), policy, measured, 2)


def test_distributed_golden_table():
    go = gate_report("go-expectations")
    no_go = gate_report("no-go-expectations")
    rows = [_rank_row(go, 0, 0, "0000:18:00.0"), _rank_row(go, 1, 1, "0000:9a:00.0")]
    rows += [_rank_row(no_go, 2, 0, "0000:18:00.0"), _rank_row(no_go, 3, 1, "0000:9a:00.0")]
    parts = [
        render_table(rows, "nccl", None, _plain),
        render_table(rows[:2], "nccl", bandwidth(MEASURED), _plain),
        render_table(rows[:2], "nccl", bandwidth({**MEASURED, "min_busbw_gbps": 50.0}), _plain),
        render_table(rows[:2], "nccl", bandwidth({**MEASURED, "min_busbw_gbps": None}), _plain),
        render_table(rows[:2], "nccl", bandwidth({**MEASURED, "correct": False}), _plain),
        render_table(rows[:2], "gloo", None, _plain),
        # one rank (torchrun --nproc-per-node 1): nothing to all-reduce with; blocks only when the
        # policy asks for a minimum and is fail-closed
        render_table(rows[:1], "nccl", None, _plain, Policy()),
        render_table(rows[:1], "nccl", None, _plain, Policy(min_busbw_gbps=100.0)),
        render_table(rows[:1], "nccl", None, _plain, Policy(min_busbw_gbps=100.0, fail_closed=False)),
    ]
    check(GOLDEN / "distributed.txt", "\n".join(parts))
    check(GOLDEN / "distributed.rows.json", json.dumps(rows, indent=2, ensure_ascii=False) + "\n")


def test_distributed_golden_json_and_stderr():
    no_go = gate_report("no-go-expectations")
    rows = [_rank_row(no_go, 0, 0, "0000:18:00.0"), _rank_row(no_go, 1, 1, "0000:9a:00.0")]
    rank0 = DistributedOutcome(0, 2, "nccl", no_go, rows[0], rows=rows)
    check(GOLDEN / "distributed.json", distributed_json(rank0))
    go = gate_report("go-expectations")
    rows = [_rank_row(go, 0, 0, "0000:18:00.0"), _rank_row(go, 1, 1, "0000:9a:00.0")]
    measured = DistributedOutcome(0, 2, "nccl", go, rows[0], rows=rows, measured=MEASURED)
    measured.allreduce = bandwidth(MEASURED)
    check(GOLDEN / "distributed.allreduce.json", distributed_json(measured))
    rank1 = DistributedOutcome(1, 2, "nccl", no_go, _rank_row(no_go, 1, 1, "0000:9a:00.0"), rows=rows)
    lost = DistributedOutcome(1, 2, "gloo", no_go, rank1.row, problem="NO-GO  rank 1: could not join the others: x")
    check(GOLDEN / "distributed.stderr.txt", "\n".join(stderr_lines(rank1) + stderr_lines(lost)) + "\n")
