"""`gpudoctor gate --distributed`: the gate as a torchrun entry point, across every rank of a job.

    torchrun --nnodes N --nproc-per-node G ... -m gpudoctor gate --distributed [--min-busbw GB/s]

1. Every rank gates its node with the policy *before* torch is imported (so NVML's forked child
   starts from a clean process), then keeps the findings about the host and about its own GPU
   (CUDA device LOCAL_RANK, matched to NVML by UUID, else by PCI bus id, else by index).
2. The ranks meet through torch.distributed (env:// from torchrun: RANK, WORLD_SIZE, MASTER_ADDR,
   MASTER_PORT) and gather every rank's verdict over a gloo group.
3. When every rank is go and the GPUs use NCCL, an all-reduce is checked for the right sum and
   timed: bus bandwidth = size / time × 2(n−1)/n (nccl-tests' definition for all-reduce); under the
   policy's distributed.min_busbw_gbps (or --min-busbw) it is a blocking failure
   (gate-allreduce-busbw).
4. Rank 0 prints the blocking lines of every rank, one table of every rank, node and GPU, the
   bandwidth and the verdict; every rank exits 1 when any rank is no-go, so the whole job stops.

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
from typing import Any, Mapping

from .findings import HOST, Finding, Status
from .gate import GateError, GateReport, Policy, blocking_lines, run


def _int_env(name: str) -> int:
    try:
        return int(os.environ[name])
    except (KeyError, ValueError):
        raise GateError(f"--distributed: {name}={os.environ.get(name)!r} is not an integer") from None


def own_gpu(facts: Mapping[str, Any], local_rank: int, torch: Any = None) -> str | None:
    """PCI bus id (NVML's form) of the GPU this rank uses, or None when it cannot be told."""
    from .engine.subjects import gpu_subjects, normalise_bus_id

    gpus = [g for g in gpu_subjects(facts) if g.get("in_nvml") is True]
    if torch is not None:
        try:
            props = torch.cuda.get_device_properties(local_rank)
            uuid = str(getattr(props, "uuid", "") or "")
            uuid = uuid if uuid.startswith(("GPU-", "MIG-")) or not uuid else "GPU-" + uuid
            for g in gpus:
                if isinstance(g.get("uuid"), str) and g["uuid"].lower() == uuid.lower():
                    return str(g["bus_id"])
            bus, dev = getattr(props, "pci_bus_id", None), getattr(props, "pci_device_id", None)
            if isinstance(bus, int) and isinstance(dev, int):
                wanted = normalise_bus_id(f"{getattr(props, 'pci_domain_id', 0) or 0:04x}:{bus:02x}:{dev:02x}.0")
                for g in gpus:
                    if g.get("bus_id") == wanted:
                        return wanted
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
                match = [g for g in gpus if isinstance(g.get("uuid"), str) and g["uuid"].startswith(entry)]
                if len(match) == 1:
                    return str(match[0]["bus_id"])
    for g in gpus:
        if index is not None and g.get("index") == index:
            return str(g["bus_id"])
    return None


def _gpu_label(facts: Mapping[str, Any], bus: str | None) -> str:
    from .engine.subjects import gpu_subjects

    for g in gpu_subjects(facts):
        if g.get("bus_id") == bus:
            name = g.get("name")
            return f"{g.get('label')}" + (f" {name}" if isinstance(name, str) else "")
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


def bandwidth_finding(result: dict[str, Any], world: int) -> Finding:
    from .gate import _finding

    size_mib = result["bytes"] / (1 << 20)
    said = (
        f"all-reduce bus bandwidth {result['busbw_gbps']:.1f} GB/s across {world} ranks "
        f"({size_mib:g} MiB × {result['iterations']}, algorithm bandwidth {result['algbw_gbps']:.1f} GB/s)"
    )
    minimum = result.get("min_busbw_gbps")
    if not result["correct"]:
        return _finding("gate-allreduce-busbw", HOST, Status.FAIL, "all-reduce returned a wrong sum on some rank")
    if minimum is not None and result["busbw_gbps"] < minimum:
        return _finding(
            "gate-allreduce-busbw", HOST, Status.FAIL, f"{said}, under the policy's minimum {minimum:g} GB/s"
        )
    return _finding(
        "gate-allreduce-busbw",
        HOST,
        Status.PASS,
        said + (f" (policy minimum {minimum:g} GB/s)" if minimum is not None else " (no policy minimum)"),
    )


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


def _rank_row(report: GateReport, rank: int, local_rank: int, own: str | None) -> dict[str, Any]:
    mine = [f for f in report.blocking if f.subject.kind != "gpu" or own is None or f.subject.bus_id == own]
    lines = blocking_lines(mine)
    return {
        "rank": rank,
        "local_rank": local_rank,
        "node": report.hostname() if report.hostname() != "unknown" else socket.gethostname(),
        "gpu": _gpu_label(report.facts, own),
        "verdict": "no-go" if lines else "go",
        "blocking": [line.text for line in lines],
        "duration_s": round(report.duration_s, 3),
    }


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


def run_distributed(
    policy: Policy, run_options: dict[str, Any], *, json_path: str | None = None, style: Any = None
) -> int:
    """Gate this rank, meet the others, print (rank 0) and return the exit status for every rank."""
    from .render.text import plain

    style = style or plain
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
    own = own_gpu(report.facts, local_rank, torch if cuda else None)
    row = _rank_row(report, rank, local_rank, own)

    # Bounded: the other ranks' own gates (each under the deadline), start-up skew between nodes,
    # and the timed all-reduce.
    budget = max(60.0, 2 * policy.deadline_s) + 30.0

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
    backend = "nccl" if cuda and dist.is_nccl_available() else "gloo"
    allreduce: Finding | None = None
    measured: dict[str, Any] | None = None
    try:
        from datetime import timedelta

        if backend == "nccl":
            torch.cuda.set_device(local_rank)
        try:
            dist.init_process_group(backend=backend, rank=rank, world_size=world, timeout=timedelta(seconds=budget))
        except Exception as exc:
            sys.stderr.write(f"NO-GO  rank {rank}: could not join the other ranks: {type(exc).__name__}: {exc}\n")
            return 1
        try:
            objects = dist.new_group(backend="gloo") if backend == "nccl" else None
            rows = gather_rows(torch, dist, row, world, objects)
            any_no_go = any(r["verdict"] != "go" for r in rows)
            if backend == "nccl" and world >= 2 and not any_no_go:
                measured = measure_allreduce(torch, dist, torch.device("cuda", local_rank), world, rank, policy)
                allreduce = bandwidth_finding(measured, world)
        except Exception as exc:
            sys.stderr.write(f"NO-GO  rank {rank}: the ranks could not exchange results: {type(exc).__name__}: {exc}\n")
            return 1
        finally:
            dist.destroy_process_group()
    finally:
        watchdog.cancel()

    failed = any_no_go or (allreduce is not None and allreduce.status is Status.FAIL)
    if rank == 0:
        sys.stdout.write(render_table(rows, backend, allreduce, style))
        sys.stdout.flush()
        if json_path:
            from .outputs import OutputError, write_file

            data = report.to_dict()
            data["verdict"] = "no-go" if failed else "go"
            data["exit_code"] = 1 if failed else 0
            data["distributed"] = {"world_size": world, "backend": backend, "ranks": rows, "allreduce": measured}
            try:
                write_file(json_path, json.dumps(data, indent=2, ensure_ascii=False) + "\n")
            except OutputError as exc:
                raise GateError(f"cannot write {json_path}: {exc.why}") from None
    elif row["blocking"]:
        for line in row["blocking"]:
            sys.stderr.write(f"NO-GO  rank {rank}: {line}\n")
    return 1 if failed else 0
