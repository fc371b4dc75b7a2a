"""How the bench measures, the same for every test and every backend (the bench worker's other
half, gpudoctor/workers/bench.py, which loads this file by path and brings the torch backend).

Method (the same for every test): warm up for a fixed time, size a batch of calls so that one timed
batch lasts tens of milliseconds, time repeated batches with device events (CUDA/HIP events on the
device's stream, so launch gaps on the host do not count), report the median per call and the
spread. Matmuls warm up longer (1 s in --quick): a chip under its power limit starts a burst at
boost clocks and settles lower within a few hundred milliseconds (an H200 at its 700 W cap: from
1980 MHz to about 1500 MHz, about 9 % fewer TFLOP/s), and training runs in that settled state, so
the bench measures it. Inputs are standard normal (torch.randn), as in most benchmarks and real
weights: never zero in practice (zeros would let the hardware save power and overstate what a
real workload gets; in fp8 under 0.1 % of entries round to zero). Matmul sizes fill the chip
(8192 cubed, smaller only where memory is short).

The measuring code talks to a backend (TorchBackend here; tests pass a fake one), so the timing and
arithmetic can be checked without a GPU.

Standard library only, and no import of gpudoctor or of a sibling (see gpudoctor.workers).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, List

GIB = 1 << 30
MIB = 1 << 20

Emit = Callable[[Dict[str, Any]], None]


class Unsupported(Exception):
    """This test does not apply to this GPU or this torch (reported as not_supported)."""


# ----------------------------------------------------------------------------- arithmetic


def median(values: List[float]) -> float:
    ordered = sorted(values)
    if not ordered:
        raise ValueError("median of nothing")
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2.0


def matmul_flops(m: int, n: int, k: int) -> float:
    """A multiply-add counts as two operations: 2 * m * n * k."""
    return 2.0 * m * n * k


def tflops(flops: float, ms: float) -> float:
    return flops / (ms * 1e-3) / 1e12


def gbps(nbytes: float, ms: float) -> float:
    """GB/s with GB = 10^9 bytes, as datasheets count bandwidth."""
    return nbytes / (ms * 1e-3) / 1e9


def spread_pct(samples: List[float]) -> float:
    mid = median(samples)
    return (max(samples) - min(samples)) / mid * 100.0 if mid > 0 else 0.0


# ----------------------------------------------------------------------------- settings


@dataclass(frozen=True)
class Settings:
    matmul_n: int = 8192
    unaligned_n: int = 0  # 0: skip the not-a-multiple-of-8 matmul (bench --full measures it)
    warmup_s: float = 0.25
    matmul_warmup_s: float = 1.0  # long enough for the clocks to settle under the power limit
    repeats: int = 10
    batch_ms: float = 25.0
    copy_bytes: int = 2 * GIB
    host_bytes: int = 1 * GIB
    p2p_bytes: int = 1 * GIB
    allreduce_bytes: int = 256 * MIB
    all_pairs: bool = False


MODES = {
    "quick": Settings(),
    "full": Settings(
        unaligned_n=8191,
        warmup_s=1.0,
        matmul_warmup_s=2.0,
        repeats=30,
        batch_ms=50.0,
        allreduce_bytes=1 * GIB,
        all_pairs=True,
    ),
    # For tests of the whole pipeline on a machine without a GPU (torch on the CPU).
    "cpu-smoke": Settings(
        matmul_n=128,
        unaligned_n=127,
        warmup_s=0.0,
        matmul_warmup_s=0.0,
        repeats=3,
        batch_ms=2.0,
        copy_bytes=4 * MIB,
        host_bytes=1 * MIB,
        p2p_bytes=1 * MIB,
        allreduce_bytes=1 * MIB,
    ),
}

MATMUL_DTYPES = ("fp32", "tf32", "fp16", "bf16", "fp8")


# ----------------------------------------------------------------------------- measuring


def measure(
    backend: Any,
    gpu: int,
    fn: Callable[[], Any],
    settings: Settings,
    clock: Callable[[], float] = time.monotonic,
    during: Callable[[], None] | None = None,
    warmup_s: float | None = None,
) -> Dict[str, Any]:
    """Warm up (`warmup_s`, default the settings'), size the batch, time `repeats` batches;
    per-call median in ms."""
    deadline = clock() + (settings.warmup_s if warmup_s is None else warmup_s)
    calls = 0
    while calls < 2 or (clock() < deadline and calls < 10000):
        backend.time_calls(gpu, fn, 1)
        calls += 1
    one = backend.time_calls(gpu, fn, 1)
    inner = int(max(1, min(10000, math.ceil(settings.batch_ms / max(one, 1e-6)))))
    samples = []
    for r in range(settings.repeats):
        hook = during if r == settings.repeats // 2 else None
        samples.append(backend.time_calls(gpu, fn, inner, during=hook) / inner)
    return {"ms": median(samples), "inner": inner, "repeats": settings.repeats, "spread_pct": spread_pct(samples)}


def _matmul_result(timing: Dict[str, Any], n: int) -> Dict[str, Any]:
    out = dict(timing)
    out.update({"value": tflops(matmul_flops(n, n, n), timing["ms"]), "unit": "TFLOP/s", "n": n})
    return out


def _bytes_result(timing: Dict[str, Any], nbytes: int, moved: int) -> Dict[str, Any]:
    out = dict(timing)
    out.update({"value": gbps(moved, timing["ms"]), "unit": "GB/s", "bytes": nbytes})
    return out


@dataclass
class Step:
    gpu: int | None  # None: a test across GPUs
    test: str
    label: str
    run: Callable[[], Dict[str, Any]]


def plan(backend: Any, devices: List[int], settings: Settings, loads: Dict[int, Dict[str, Any]]) -> List[Step]:
    steps: List[Step] = []

    def sampler(gpu: int) -> Callable[[], None]:
        def sample() -> None:
            reading = backend.sample_load(gpu)
            if reading:
                merge_load(loads.setdefault(gpu, {}), reading)

        return sample

    for gpu in devices:
        for dtype in MATMUL_DTYPES:

            def mm(gpu: int = gpu, dtype: str = dtype) -> Dict[str, Any]:
                n = backend.fit_matmul_n(gpu, settings.matmul_n, dtype)
                with backend.matmul(gpu, dtype, n) as fn:
                    timing = measure(
                        backend, gpu, fn, settings, during=sampler(gpu), warmup_s=settings.matmul_warmup_s
                    )
                    return _matmul_result(timing, n)

            steps.append(Step(gpu, f"matmul_{dtype}", f"GPU {gpu}: {dtype} matmul", mm))
        if settings.unaligned_n:

            def mm_unaligned(gpu: int = gpu) -> Dict[str, Any]:
                n = settings.unaligned_n
                with backend.matmul(gpu, "bf16", n) as fn:
                    return _matmul_result(measure(backend, gpu, fn, settings, warmup_s=settings.matmul_warmup_s), n)

            steps.append(
                Step(gpu, "matmul_bf16_unaligned", f"GPU {gpu}: bf16 matmul {settings.unaligned_n}^3", mm_unaligned)
            )

        def copy(gpu: int = gpu) -> Dict[str, Any]:
            nbytes = backend.fit_copy_bytes(gpu, settings.copy_bytes)
            with backend.device_copy(gpu, nbytes) as fn:
                # a copy reads and writes every byte: counted twice, as STREAM and nvbandwidth do
                return _bytes_result(measure(backend, gpu, fn, settings), nbytes, 2 * nbytes)

        steps.append(Step(gpu, "copy", f"GPU {gpu}: device memory copy", copy))
        for direction in ("h2d", "d2h"):

            def host(gpu: int = gpu, direction: str = direction) -> Dict[str, Any]:
                nbytes = settings.host_bytes
                with backend.host_copy(gpu, nbytes, direction) as fn:
                    return _bytes_result(measure(backend, gpu, fn, settings), nbytes, nbytes)

            word = "host→device" if direction == "h2d" else "device→host"
            steps.append(Step(gpu, direction, f"GPU {gpu}: pinned {word}", host))
    if len(devices) > 1:
        if settings.all_pairs:
            pairs = [(a, b) for a in devices for b in devices if a != b]
        else:  # a ring: every GPU sends once and receives once (both directions with two GPUs)
            pairs = list(dict.fromkeys((devices[i], devices[(i + 1) % len(devices)]) for i in range(len(devices))))
        for src, dst in pairs:

            def p2p(src: int = src, dst: int = dst) -> Dict[str, Any]:
                nbytes = settings.p2p_bytes
                with backend.peer_copy(src, dst, nbytes) as (fn, access):
                    out = _bytes_result(measure(backend, src, fn, settings), nbytes, nbytes)
                out.update({"src": src, "dst": dst, "peer_access": access})
                return out

            steps.append(Step(None, f"p2p_{src}_{dst}", f"GPU {src}→{dst}: peer copy", p2p))

        def allreduce() -> Dict[str, Any]:
            nbytes = settings.allreduce_bytes
            with backend.allreduce(devices, nbytes) as fn:
                timing = measure(backend, devices[0], fn, settings)
            n = len(devices)
            algbw = gbps(nbytes, timing["ms"])
            out = dict(timing)
            # bus bandwidth: what each GPU's links carry in a ring all-reduce (NCCL's definition)
            out.update(
                {
                    "value": algbw * 2.0 * (n - 1) / n,
                    "unit": "GB/s",
                    "algbw_gbs": algbw,
                    "bytes": nbytes,
                    "gpus": n,
                }
            )
            return out

        steps.append(Step(None, "allreduce", f"all-reduce over {len(devices)} GPUs", allreduce))
    return steps


def merge_load(acc: Dict[str, Any], reading: Dict[str, Any]) -> None:
    """Fold one NVML reading taken under load into the per-GPU summary."""
    if isinstance(reading.get("clocks_event_reasons"), int):
        acc["clocks_event_reasons"] = acc.get("clocks_event_reasons", 0) | reading["clocks_event_reasons"]
    for key, pick in (("sm_clock_mhz", min), ("temperature_c", max), ("power_draw_w", max)):
        if isinstance(reading.get(key), (int, float)):
            acc[key] = pick(acc[key], reading[key]) if key in acc else reading[key]
    for key in ("sm_clock_max_mhz", "power_limit_w"):
        if reading.get(key) is not None:
            acc[key] = reading[key]
    acc["samples"] = acc.get("samples", 0) + 1


def run(backend: Any, devices: List[int], mode: str, emit: Emit) -> int:
    settings = MODES[mode]
    loads: Dict[int, Dict[str, Any]] = {}
    steps = plan(backend, devices, settings, loads)
    emit({"event": "plan", "steps": len(steps), "devices": devices, "mode": mode})
    failures = 0
    for i, step in enumerate(steps):
        emit({"event": "step", "done": i, "total": len(steps), "label": step.label})
        result: Dict[str, Any] = {"event": "result", "gpu": step.gpu, "test": step.test}
        try:
            result.update(step.run())
        except Unsupported as exc:
            result["unsupported"] = str(exc)
        except Exception as exc:  # one failing test must not lose the others
            failures += 1
            result["error"] = f"{type(exc).__name__}: {str(exc)[:400]}"
            backend.recover(step.gpu)
        emit(result)
    for gpu in devices:
        if gpu in loads:
            emit({"event": "load", "gpu": gpu, **loads[gpu]})
    emit({"event": "step", "done": len(steps), "total": len(steps), "label": "done"})
    emit({"event": "done", "failures": failures})
    return 0
