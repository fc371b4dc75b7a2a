"""`gpudoctor gate --distributed`: the gate as a torchrun entry point, across every rank of a job.

    torchrun --nnodes N --nproc-per-node G ... -m gpudoctor gate --distributed [--min-busbw GB/s]

1. Every rank gates its node with the policy *before* torch is imported (so NVML's forked child
   starts from a clean process), then keeps the findings about the host and about its own GPU
   (CUDA device LOCAL_RANK, matched to NVML by UUID, else by PCI bus id, else by index).
2. The ranks meet through torch.distributed (env:// from torchrun: RANK, WORLD_SIZE, MASTER_ADDR,
   MASTER_PORT) and gather every rank's verdict over a gloo group.
3. When every rank is go and the GPUs use NCCL, an all-reduce is checked for the right sum and
   timed: bus bandwidth = size / time × 2(n−1)/n (nccl-tests' definition for all-reduce). The
   measurement becomes the facts section ``allreduce``, judged by the gate's rule
   gate-allreduce-busbw (rules/gate/gate.yaml): under the policy's
   distributed.min_busbw_gbps (or --min-busbw), or a wrong sum, it is a blocking failure.
   With one rank (torchrun --nproc-per-node 1 on one node) there is nothing to all-reduce with:
   nothing is measured and the table says so. That does not block, unless the policy asks for a
   minimum bus bandwidth: then, like any check that cannot be judged, it blocks when fail-closed
   (a single-GPU job should not carry a multi-GPU bandwidth minimum) and is reported when fail-open.
4. When that bus bandwidth is under the minimum, or with --localize, every rank runs a bounded
   localisation that names the slow node or pair (preflight/localize.py), within the gate's deadline.
5. Rank 0 prints the blocking lines of every rank, one table of every rank, node and GPU, the
   bandwidth and the verdict (render/gate_distributed.py); every rank exits 1 when any rank is
   no-go, so the whole job stops.

A watchdog bounds the whole exchange: a rank that never arrives or a collective that never
returns ends every waiting rank with exit status 1 and a message, never a hung job.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Mapping

from ..findings import Finding, Status
from .api import load_gate_rules, run
from .errors import GateError
from .policy import Policy, whole
from .verdict import GateReport, blocking_lines


def _int_env(name: str) -> int:
    try:
        return int(os.environ[name])
    except (KeyError, ValueError):
        raise GateError(f"--distributed: {name}={os.environ.get(name)!r} is not an integer") from None


def own_gpu(facts: Mapping[str, Any], local_rank: int, torch: Any = None) -> str | None:
    """PCI bus id (NVML's form) of the GPU this rank uses, or None when it cannot be told."""
    from ..model.gpus import gpus_of, match_gpu

    gpus = [g for g in gpus_of(facts) if g.in_nvml is True]
    if torch is not None:
        try:
            props = torch.cuda.get_device_properties(local_rank)
            uuid = str(getattr(props, "uuid", "") or "")
            uuid = uuid if uuid.startswith(("GPU-", "MIG-")) or not uuid else "GPU-" + uuid
            bus, dev = getattr(props, "pci_bus_id", None), getattr(props, "pci_device_id", None)
            bus_id = None
            if isinstance(bus, int) and isinstance(dev, int):
                bus_id = f"{getattr(props, 'pci_domain_id', 0) or 0:04x}:{bus:02x}:{dev:02x}.0"
            found = match_gpu(gpus, uuid=uuid, bus_id=bus_id)
            if found is not None:
                return str(found.bus_id)
        except Exception:
            pass  # fall back to CUDA_VISIBLE_DEVICES / the index
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    index: int | None = local_rank
    if visible is not None:
        entries = [e.strip() for e in visible.split(",")]
        index = None
        if local_rank < len(entries):
            entry = entries[local_rank]
            if entry.isascii() and entry.isdigit():
                index = int(entry)
            elif entry.startswith("GPU-"):
                # CUDA_VISIBLE_DEVICES takes a UUID's unique prefix
                match = [g for g in gpus if isinstance(g.uuid, str) and g.uuid.startswith(entry)]
                if len(match) == 1:
                    return str(match[0].bus_id)
    found = match_gpu(gpus, index=index, index_known=True)
    return str(found.bus_id) if found is not None else None


def _gpu_label(facts: Mapping[str, Any], bus: str | None) -> str:
    from ..model.gpus import gpus_of

    for g in gpus_of(facts):
        if g.bus_id == bus:
            return g.label + (f" {g.name}" if isinstance(g.name, str) else "")
    return "?"


def measure_allreduce(torch: Any, dist: Any, device: Any, world: int, rank: int, policy: Policy) -> dict[str, Any]:
    """Check one all-reduce's sum, then time ``iterations`` all-reduces of ``allreduce_mib`` MiB."""
    check = torch.full((4096,), float(rank + 1), dtype=torch.float32, device=device)
    dist.all_reduce(check)
    want = float(world * (world + 1) // 2)
    correct = bool(torch.all(check == want).item())
    elements = policy.allreduce_mib * (1 << 20) // 4
    buf = torch.zeros(elements, dtype=torch.float32, device=device)  # zeros: the sum never overflows
    for _ in range(3):
        dist.all_reduce(buf)
    torch.cuda.synchronize(device)
    started = time.perf_counter()
    for _ in range(policy.allreduce_iterations):
        dist.all_reduce(buf)
    torch.cuda.synchronize(device)
    elapsed = torch.tensor([time.perf_counter() - started], dtype=torch.float64, device=device)
    dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)  # the slowest rank's time is the collective's
    per_call = float(elapsed.item()) / policy.allreduce_iterations
    size = elements * 4
    algbw = size / per_call / 1e9
    return {
        "correct": correct,
        "bytes": size,
        "iterations": policy.allreduce_iterations,
        "seconds_per_call": per_call,
        "algbw_gbps": round(algbw, 2),
        "busbw_gbps": round(algbw * 2 * (world - 1) / world, 2),
        "min_busbw_gbps": policy.min_busbw_gbps,
    }


def allreduce_facts(measured: Mapping[str, Any], world: int) -> dict[str, Any]:
    """The measured all-reduce as the facts section ``allreduce`` (rules/gate/gate.yaml)."""
    keys = ("correct", "bytes", "iterations", "seconds_per_call", "algbw_gbps", "busbw_gbps")
    out = {k: measured[k] for k in keys if k in measured}
    return {**out, "ranks": world, "mib": whole(measured["bytes"] / (1 << 20))}


def allreduce_finding(
    ruleset: Any, facts: Mapping[str, Any], policy: Policy, measured: Mapping[str, Any], world: int
) -> Finding:
    """The all-reduce judged by the gate's rule gate-allreduce-busbw against the policy's minimum."""
    from ..engine.runner import run_rules

    rule = ruleset.by_id("gate-allreduce-busbw")
    judged = {**facts, "policy": policy.facts(), "allreduce": allreduce_facts(measured, world)}
    finding: Finding = run_rules(ruleset, judged, [rule])[0]
    return finding


ONE_RANK = "one rank: nothing to all-reduce with"


def not_measured(world: int, backend: str, rows: list[dict[str, Any]]) -> str:
    """Why the all-reduce was not measured, in words ("" when nothing stood in its way)."""
    if world < 2:
        return ONE_RANK
    if backend != "nccl":
        return "no NCCL: the ranks have no usable CUDA device, or a node has fewer CUDA devices than ranks"
    if any(r.get("verdict") != "go" for r in rows):
        return "a rank is no-go"
    return ""


def node_count(rows: list[dict[str, Any]]) -> int:
    """How many nodes the ranks are on: torchrun's node ranks where known, else host names."""
    from .localize import node_layout

    return len(node_layout(rows))


def one_rank_blocks(policy: Policy | None, world: int) -> bool:
    """With one rank the policy's minimum bus bandwidth cannot be checked: it blocks when fail-closed."""
    return policy is not None and world < 2 and policy.min_busbw_gbps is not None and policy.fail_closed


def gather_rows(torch: Any, dist: Any, row: dict[str, Any], world: int, group: Any) -> list[dict[str, Any]]:
    """Every rank's row, on every rank: JSON bytes in CPU tensors over gloo (all_gather_object
    pickles, and needs numpy in some torch builds)."""
    data = list(json.dumps(row).encode("utf-8"))
    size = torch.tensor([len(data)], dtype=torch.int64)
    sizes = [torch.zeros(1, dtype=torch.int64) for _ in range(world)]
    dist.all_gather(sizes, size, group=group)
    longest = max(int(s.item()) for s in sizes)
    mine = torch.zeros(longest, dtype=torch.uint8)
    mine[: len(data)] = torch.tensor(data, dtype=torch.uint8)
    bufs = [torch.zeros(longest, dtype=torch.uint8) for _ in range(world)]
    dist.all_gather(bufs, mine, group=group)
    return [json.loads(bytes(b[: int(n.item())].tolist()).decode("utf-8")) for b, n in zip(bufs, sizes)]


def _rank_row(
    report: GateReport, rank: int, local_rank: int, own: str | None, node_rank: int | None = None
) -> dict[str, Any]:
    mine = [f for f in report.blocking if f.subject.kind != "gpu" or own is None or f.subject.bus_id == own]
    lines = blocking_lines(mine)
    row: dict[str, Any] = {
        "rank": rank,
        "local_rank": local_rank,
        "node": report.hostname() if report.hostname() != "unknown" else socket.gethostname(),
        "gpu": _gpu_label(report.facts, own),
        "verdict": "no-go" if lines else "go",
        "blocking": [line.text for line in lines],
        "duration_s": round(report.duration_s, 3),
    }
    if node_rank is not None:
        row["node_rank"] = node_rank  # torchrun's GROUP_RANK: which node this rank is on
    return row


@dataclass
class DistributedOutcome:
    """One rank's part of a distributed gate; rank 0 prints the table (render/gate_distributed.py)."""

    rank: int
    world: int
    backend: str
    report: GateReport
    row: dict[str, Any]
    rows: list[dict[str, Any]] = field(default_factory=list)  # every rank's row; empty when the exchange failed
    allreduce: Finding | None = None
    measured: dict[str, Any] | None = None
    # why this rank could not take part (it could not join the others, the exchange failed)
    problem: str = ""
    # the localisation's result (preflight/localize.py analyse), when it ran
    localisation: dict[str, Any] | None = None

    @property
    def failed(self) -> bool:
        if self.problem:
            return True
        any_no_go = any(r["verdict"] != "go" for r in self.rows)
        if any_no_go or one_rank_blocks(self.report.policy, self.world):
            return True
        if localisation_blocks(self.localisation, self.report.policy):
            return True
        return self.allreduce is not None and self.allreduce.status is Status.FAIL

    @property
    def not_measured(self) -> str:
        """Why there is no all-reduce measurement ("" when there is one)."""
        return "" if self.measured is not None else not_measured(self.world, self.backend, self.rows)

    @property
    def exit_code(self) -> int:
        return 1 if self.failed else 0


def localisation_blocks(localisation: Mapping[str, Any] | None, policy: Policy | None) -> bool:
    """A slow node or pair blocks; a localisation cut short (unknown) blocks when fail-closed; one
    that the test-only delay was set for always blocks (it may hide a slow node: localize.py)."""
    if not localisation:
        return False
    if localisation.get("test_delay"):
        return True
    if localisation["slow_nodes"] or localisation["slow_pairs"]:
        return True
    return localisation["status"] == "unknown" and (policy is None or policy.fail_closed)


def run_distributed(policy: Policy, run_options: dict[str, Any], localize: bool = False) -> DistributedOutcome:
    """Gate this rank, meet the others and return what every rank learnt; exit status 1 on every
    rank when any rank is no-go. With `localize` (or an all-reduce under the minimum) the ranks
    also look for the slow node."""
    missing = [k for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT") if k not in os.environ]
    if missing:
        raise GateError(
            "--distributed runs under torchrun (or a launcher that sets RANK, WORLD_SIZE, MASTER_ADDR and "
            f"MASTER_PORT); not set: {', '.join(missing)}"
        )
    rank, world = _int_env("RANK"), _int_env("WORLD_SIZE")
    local_rank = _int_env("LOCAL_RANK") if "LOCAL_RANK" in os.environ else 0

    report = run(policy, **run_options, deep_devices=[local_rank] if policy.deep else None)

    try:
        import torch
        import torch.distributed as dist
    except Exception as exc:
        raise GateError(f"--distributed needs torch in this interpreter: {type(exc).__name__}: {exc}") from None
    if not dist.is_available():
        raise GateError("--distributed: this torch build has no torch.distributed")
    cuda = bool(torch.cuda.is_available()) and torch.cuda.device_count() > local_rank
    local_world = _int_env("LOCAL_WORLD_SIZE") if "LOCAL_WORLD_SIZE" in os.environ else local_rank + 1
    own = own_gpu(report.facts, local_rank, torch if cuda else None)
    node_rank = _int_env("GROUP_RANK") if "GROUP_RANK" in os.environ else None
    row = _rank_row(report, rank, local_rank, own, node_rank)

    # Bounded: the other ranks' own gates (each under the deadline), start-up skew between nodes,
    # and the timed all-reduce.
    # and, when it may run, the localisation (its own limit: the gate's deadline).
    budget = max(60.0, 2 * policy.deadline_s) + 30.0
    if localize or policy.min_busbw_gbps is not None:
        budget += policy.deadline_s

    def give_up() -> None:
        sys.stderr.write(
            f"NO-GO  gpudoctor gate --distributed: rank {rank} gave up after {budget:.0f} s: a rank did not "
            "arrive or a collective did not return\n"
        )
        sys.stderr.flush()
        os._exit(1)

    watchdog = threading.Timer(budget, give_up)
    watchdog.daemon = True
    watchdog.start()
    # Every rank of a node must pick the same backend (a rank on NCCL waits for one on gloo until the
    # watchdog): NCCL only where the node has a CUDA device for each of its ranks (LOCAL_WORLD_SIZE,
    # set by torchrun), which every rank of the node sees alike. Two ranks on a one-GPU host use gloo.
    enough = cuda and torch.cuda.device_count() >= local_world
    backend = "nccl" if enough and dist.is_nccl_available() else "gloo"
    outcome = DistributedOutcome(rank, world, backend, report, row)
    try:
        from datetime import timedelta

        if backend == "nccl":
            torch.cuda.set_device(local_rank)
        try:
            dist.init_process_group(backend=backend, rank=rank, world_size=world, timeout=timedelta(seconds=budget))
        except Exception as exc:
            outcome.problem = f"NO-GO  rank {rank}: could not join the other ranks: {type(exc).__name__}: {exc}"
            return outcome
        try:
            objects = dist.new_group(backend="gloo") if backend == "nccl" else None
            rows = gather_rows(torch, dist, row, world, objects)
            all_go = world >= 2 and not any(r["verdict"] != "go" for r in rows)
            if backend == "nccl" and all_go:
                measured = measure_allreduce(torch, dist, torch.device("cuda", local_rank), world, rank, policy)
                outcome.measured = measured
                ruleset = load_gate_rules(run_options.get("rule_dirs", ()), run_options.get("builtin_rules", True))
                outcome.allreduce = allreduce_finding(ruleset, report.facts, policy, measured, world)
            low = outcome.allreduce is not None and outcome.allreduce.status is Status.FAIL
            if all_go:
                device = torch.device("cuda", local_rank) if backend == "nccl" else torch.device("cpu")
                outcome.localisation = _localise(torch, dist, device, rank, rows, policy, objects, localize, low)
            outcome.rows = rows
        except Exception as exc:
            outcome.problem = f"NO-GO  rank {rank}: the ranks could not exchange results: {type(exc).__name__}: {exc}"
            outcome.rows = []
            return outcome
        finally:
            dist.destroy_process_group()
    finally:
        watchdog.cancel()

    return outcome


def _localise(
    torch: Any,
    dist: Any,
    device: Any,
    rank: int,
    rows: list[dict[str, Any]],
    policy: Policy,
    group: Any,
    asked: bool,
    low: bool,
) -> dict[str, Any] | None:
    """Every rank's part of the localisation (preflight/localize.py), over the job's backend; None
    when no rank asked for it (--localize) or saw the all-reduce under the minimum. The ranks agree
    first: a wrong sum is seen per rank, and a rank that localised alone would wait for the others."""
    from .localize import Exchange, localise

    world = len(rows)
    ex = Exchange(torch, dist, device, rank, group, policy.allreduce_mib, policy.allreduce_iterations)
    if not ex.any_rank(asked or low):
        return None
    why = "--localize" if asked else "the all-reduce is under the minimum"
    return localise(
        ex, rows, policy.localize_fraction, policy.deadline_s, lambda d: gather_rows(torch, dist, d, world, group), why
    )
