"""gpudoctor bench worker: run with the target interpreter, `python bench.py CONFIG_JSON`.

Standalone on purpose (no gpudoctor import, see gpudoctor.workers): the target Python may be a
job's venv that has torch but not gpudoctor. It prints one event per line in gpudoctor's line
protocol (:func:`emit`) as soon as it is known, so a run killed at its deadline still leaves what
it measured:

  {"event": "start", torch and device facts}      {"event": "plan", "steps": N}
  {"event": "step", "done": i, "label": "..."}    {"event": "result", "gpu": i, "test": ..., ...}
  {"event": "done"}

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
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
import traceback
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


# ----------------------------------------------------------------------------- torch backend


class _Ctx:
    """A tiny context manager holding prepared tensors; frees them on exit."""

    def __init__(self, value: Any, cleanup: Callable[[], None]) -> None:
        self.value = value
        self.cleanup = cleanup

    def __enter__(self) -> Any:
        return self.value

    def __exit__(self, *exc: Any) -> None:
        self.cleanup()


class TorchBackend:
    """Measurements with torch on CUDA/ROCm devices (or on the CPU for smoke tests)."""

    def __init__(self, torch: Any, device_type: str = "cuda", pynvml_file: str | None = None) -> None:
        self.torch = torch
        self.device_type = device_type
        self.pynvml_file = pynvml_file
        self.hip = bool(getattr(torch.version, "hip", None))
        self._pinned: Dict[str, Any] = {}
        self._nvml: Any = None
        self._nvml_handles: Dict[int, Any] = {}
        self._nvml_error = ""

    # -- devices

    def dev(self, gpu: int | None) -> Any:
        if self.device_type == "cpu":
            return self.torch.device("cpu")
        return self.torch.device(self.device_type, gpu if gpu is not None else 0)

    def devices(self) -> List[int]:
        if self.device_type == "cpu":
            return [0]
        return list(range(self.torch.cuda.device_count()))

    def describe_device(self, gpu: int) -> Dict[str, Any]:
        if self.device_type == "cpu":
            return {"index": gpu, "name": "cpu", "bus_id": None, "device_type": "cpu"}
        props = self.torch.cuda.get_device_properties(gpu)
        bus = None
        if all(hasattr(props, a) for a in ("pci_domain_id", "pci_bus_id", "pci_device_id")):
            bus = f"{props.pci_domain_id:04x}:{props.pci_bus_id:02x}:{props.pci_device_id:02x}.0"
        return {
            "index": gpu,
            "name": props.name,
            "bus_id": bus,
            "uuid": str(getattr(props, "uuid", "")) or None,
            "compute_capability": f"{props.major}.{props.minor}",
            "gcn_arch": getattr(props, "gcnArchName", None),
            "memory_total_bytes": int(props.total_memory),
            "multiprocessors": int(props.multi_processor_count),
        }

    def sync(self, gpu: int | None) -> None:
        if self.device_type != "cpu":
            self.torch.cuda.synchronize(self.dev(gpu))

    def recover(self, gpu: int | None) -> None:
        """After a failed test: drop cached memory so the next test starts clean."""
        if self.device_type == "cpu":
            return
        try:
            self.torch.cuda.synchronize()
            self.torch.cuda.empty_cache()
        except Exception:
            pass

    # -- timing

    def time_calls(self, gpu: int | None, fn: Callable[[], Any], count: int, during: Any = None) -> float:
        """Milliseconds for `count` back-to-back calls, timed with device events."""
        if self.device_type == "cpu":
            t0 = time.perf_counter()
            for _ in range(count):
                fn()
            if during:
                during()
            return (time.perf_counter() - t0) * 1e3
        torch = self.torch
        with torch.cuda.device(gpu):
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(count):
                fn()
            if during:
                during()  # on the host, while the queued calls run on the device
            end.record()
            end.synchronize()
            return float(start.elapsed_time(end))

    # -- tensors

    def _random(self, shape: Any, dtype: Any, gpu: int | None) -> Any:
        torch = self.torch
        return torch.randn(shape, device=self.dev(gpu), dtype=torch.float32).to(dtype)

    def free_bytes(self, gpu: int) -> int:
        if self.device_type == "cpu":
            return 1 << 40
        free, _total = self.torch.cuda.mem_get_info(gpu)
        return int(free)

    def fit_matmul_n(self, gpu: int, n: int, dtype: str) -> int:
        # three n x n operands in fp32 while they are made, at most 60 % of free memory
        while n > 1024 and 3 * n * n * 4 * 2 > 0.6 * self.free_bytes(gpu):
            n //= 2
        return n

    def fit_copy_bytes(self, gpu: int, nbytes: int) -> int:
        while nbytes > 64 * MIB and 2 * nbytes > 0.5 * self.free_bytes(gpu):
            nbytes //= 2
        return nbytes

    # -- tests

    def _set_tf32(self, enabled: bool) -> None:
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self.torch.set_float32_matmul_precision("high" if enabled else "highest")

    def matmul(self, gpu: int, dtype: str, n: int) -> _Ctx:
        torch = self.torch
        if self.device_type == "cpu" and dtype in ("tf32", "fp8"):
            raise Unsupported(f"{dtype} is a GPU tensor-core format")
        if dtype == "fp8":
            return self._fp8_matmul(gpu, n)
        if dtype == "bf16" and self.device_type != "cpu" and not self.hip:
            cc = torch.cuda.get_device_capability(gpu)
            if cc < (8, 0):
                raise Unsupported(f"no bf16 tensor cores below compute capability 8.0 (this GPU: {cc[0]}.{cc[1]})")
        tdtype = {"fp32": torch.float32, "tf32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[dtype]
        self._set_tf32(dtype == "tf32")
        a = self._random((n, n), tdtype, gpu)
        b = self._random((n, n), tdtype, gpu)

        def fn() -> None:
            # `a @ b` as a training step writes it (a new output from torch's caching allocator,
            # the same block every call): `out=` can take another library path
            torch.matmul(a, b)

        fn()
        self.sync(gpu)

        def cleanup() -> None:
            nonlocal a, b
            del a, b
            self._set_tf32(False)

        return _Ctx(fn, cleanup)

    def _fp8_matmul(self, gpu: int, n: int) -> _Ctx:
        torch = self.torch
        if not hasattr(torch, "_scaled_mm"):
            raise Unsupported(f"torch {torch.__version__} has no torch._scaled_mm")
        if self.hip:
            arch = str(getattr(torch.cuda.get_device_properties(gpu), "gcnArchName", ""))
            if not arch.startswith(("gfx94", "gfx95", "gfx12")):
                raise Unsupported(f"no FP8 matrix cores on {arch or 'this GPU'}")
            f8 = getattr(torch, "float8_e4m3fnuz" if arch.startswith("gfx94") else "float8_e4m3fn", None)
        else:
            cc = torch.cuda.get_device_capability(gpu)
            if cc < (8, 9):
                raise Unsupported(f"FP8 tensor cores need compute capability 8.9 or newer (this GPU: {cc[0]}.{cc[1]})")
            f8 = getattr(torch, "float8_e4m3fn", None)
        if f8 is None:
            raise Unsupported(f"torch {torch.__version__} has no float8 e4m3 dtype")
        a = self._random((n, n), torch.float32, gpu).to(f8)
        b = self._random((n, n), torch.float32, gpu).to(f8).t()  # _scaled_mm wants mat2 column-major
        scale = torch.ones((), device=self.dev(gpu), dtype=torch.float32)

        def fn() -> None:
            torch._scaled_mm(a, b, scale_a=scale, scale_b=scale, out_dtype=torch.bfloat16)

        try:
            fn()
            self.sync(gpu)
        except RuntimeError as exc:
            raise Unsupported(f"torch._scaled_mm failed here: {str(exc).splitlines()[0][:200]}") from None

        def cleanup() -> None:
            nonlocal a, b, scale
            del a, b, scale

        return _Ctx(fn, cleanup)

    def device_copy(self, gpu: int, nbytes: int) -> _Ctx:
        torch = self.torch
        count = nbytes // 4
        src = self._random((count,), torch.float32, gpu)
        dst = torch.empty_like(src)

        def fn() -> None:
            dst.copy_(src)

        def cleanup() -> None:
            nonlocal src, dst
            del src, dst

        return _Ctx(fn, cleanup)

    def _pinned_buffer(self, nbytes: int) -> Any:
        key = str(nbytes)
        if key not in self._pinned:
            buf = self.torch.empty((nbytes,), dtype=self.torch.uint8, pin_memory=True)
            self._pinned[key] = buf
        return self._pinned[key]

    def host_copy(self, gpu: int, nbytes: int, direction: str) -> _Ctx:
        torch = self.torch
        if self.device_type == "cpu":
            raise Unsupported("no device: host and device memory are the same")
        host = self._pinned_buffer(nbytes)
        dev = self._random((nbytes // 4,), torch.float32, gpu).view(torch.uint8)
        host.copy_(dev)  # the host buffer holds random data too (and the first D2H warms the path)
        self.sync(gpu)
        if direction == "h2d":

            def fn() -> None:
                dev.copy_(host, non_blocking=True)

        else:

            def fn() -> None:
                host.copy_(dev, non_blocking=True)

        def cleanup() -> None:
            nonlocal dev
            del dev

        return _Ctx(fn, cleanup)

    def peer_copy(self, src: int, dst: int, nbytes: int) -> _Ctx:
        torch = self.torch
        if self.device_type == "cpu":
            raise Unsupported("one CPU device")
        access = bool(torch.cuda.can_device_access_peer(src, dst))
        a = self._random((nbytes // 4,), torch.float32, src)
        b = torch.empty((nbytes // 4,), device=self.dev(dst), dtype=torch.float32)

        def fn() -> None:
            # torch copies between devices on the source device's current stream
            b.copy_(a, non_blocking=True)

        fn()
        self.sync(src)
        self.sync(dst)

        def cleanup() -> None:
            nonlocal a, b
            del a, b

        return _Ctx((fn, access), cleanup)

    def allreduce(self, devices: List[int], nbytes: int) -> _Ctx:
        torch = self.torch
        if self.device_type == "cpu":
            raise Unsupported("one CPU device")
        try:
            import torch.cuda.nccl as nccl  # single-process, multi-GPU collectives (NCCL / RCCL)
        except ImportError:
            raise Unsupported("this torch has no torch.cuda.nccl") from None
        tensors = [self._random((nbytes // 4,), torch.float32, g) for g in devices]
        if not nccl.is_available(tensors):
            raise Unsupported("NCCL is not available in this torch build")

        def fn() -> None:
            # in place, as nccl-tests does; growing sums do not change the time a sum takes
            nccl.all_reduce(tensors)

        fn()  # the first call creates the NCCL communicators (seconds); not timed
        for g in devices:
            self.sync(g)

        def cleanup() -> None:
            nonlocal tensors
            for g in devices:
                self.sync(g)
            del tensors

        return _Ctx(fn, cleanup)

    # -- NVML readings under load

    def _nvml_handle(self, gpu: int) -> Any:
        if gpu in self._nvml_handles:
            return self._nvml_handles[gpu]
        handle = None
        if self._nvml is None and not self._nvml_error:
            try:
                try:
                    import pynvml
                except ImportError:
                    pynvml = _load_module_file("pynvml", self.pynvml_file)
                pynvml.nvmlInit()
                self._nvml = pynvml
            except Exception as exc:
                self._nvml_error = f"{type(exc).__name__}: {exc}"
        if self._nvml is not None:
            bus = self.describe_device(gpu).get("bus_id")
            try:
                if bus:
                    handle = self._nvml.nvmlDeviceGetHandleByPciBusId(bus)
                elif not os.environ.get("CUDA_VISIBLE_DEVICES") and os.environ.get("CUDA_DEVICE_ORDER") == "PCI_BUS_ID":
                    # an older torch without PCI ids: with every GPU visible in PCI order, the indices agree
                    handle = self._nvml.nvmlDeviceGetHandleByIndex(gpu)
            except Exception:
                handle = None
        self._nvml_handles[gpu] = handle
        return handle

    def sample_load(self, gpu: int) -> Dict[str, Any] | None:
        if self.device_type == "cpu" or self.hip:
            return None
        handle = self._nvml_handle(gpu)
        if handle is None:
            return None
        nv = self._nvml
        out: Dict[str, Any] = {}

        def grab(key: str, fn: Callable[[], Any]) -> None:
            try:
                out[key] = fn()
            except Exception:
                pass

        reasons = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
            nv, "nvmlDeviceGetCurrentClocksThrottleReasons", None
        )
        if reasons is not None:
            grab("clocks_event_reasons", lambda: int(reasons(handle)))
        grab("sm_clock_mhz", lambda: int(nv.nvmlDeviceGetClockInfo(handle, nv.NVML_CLOCK_SM)))
        grab("sm_clock_max_mhz", lambda: int(nv.nvmlDeviceGetMaxClockInfo(handle, nv.NVML_CLOCK_SM)))
        grab("temperature_c", lambda: int(nv.nvmlDeviceGetTemperature(handle, nv.NVML_TEMPERATURE_GPU)))
        grab("power_draw_w", lambda: nv.nvmlDeviceGetPowerUsage(handle) / 1000.0)
        grab("power_limit_w", lambda: nv.nvmlDeviceGetEnforcedPowerLimit(handle) / 1000.0)
        return out or None

    @property
    def nvml_error(self) -> str:
        return self._nvml_error


def _load_module_file(name: str, path: str | None) -> Any:
    """Import a pure-Python module from a file (NVIDIA's pynvml, shipped with gpudoctor)."""
    import importlib.util

    if not path:
        raise ImportError(f"no module named {name!r} in this interpreter")
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {name} from {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def torch_facts(torch: Any) -> Dict[str, Any]:
    """What the installed torch does by default (read before the worker changes anything)."""
    import warnings

    out: Dict[str, Any] = {
        "torch_version": str(torch.__version__),
        "cuda_version": getattr(torch.version, "cuda", None),
        "hip_version": getattr(torch.version, "hip", None),
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            out["float32_matmul_precision_default"] = str(torch.get_float32_matmul_precision())
        except Exception:
            pass
        try:
            out["tf32_matmul_default"] = bool(torch.backends.cuda.matmul.allow_tf32)
        except Exception:
            pass
    return out


def emit(obj: Dict[str, Any]) -> None:
    """One event line of gpudoctor.children's protocol (its MARKER, a space, compact JSON)."""
    sys.stdout.write("@@GPUDOCTOR@@ " + json.dumps(obj, default=str, separators=(",", ":")) + "\n")
    sys.stdout.flush()


def main(argv: List[str]) -> int:
    try:
        config = json.loads(argv[1]) if len(argv) > 1 else {}
    except ValueError as exc:
        emit({"event": "fatal", "error": f"bad config: {exc}"})
        return 2
    mode = str(config.get("mode", "quick"))
    device_type = str(config.get("device_type", "cuda"))
    if mode not in MODES:
        emit({"event": "fatal", "error": f"unknown mode {mode!r}"})
        return 2
    try:
        import torch
    except ModuleNotFoundError as exc:
        emit({"event": "fatal", "error": f"ModuleNotFoundError: {exc}", "missing_torch": exc.name == "torch"})
        return 3
    except Exception as exc:
        emit({"event": "fatal", "error": f"importing torch failed: {type(exc).__name__}: {exc}"})
        return 3
    facts = torch_facts(torch)
    facts["python"] = sys.executable
    facts["cuda_visible_devices"] = os.environ.get("CUDA_VISIBLE_DEVICES")
    facts["cuda_device_order"] = os.environ.get("CUDA_DEVICE_ORDER")
    backend = TorchBackend(torch, device_type, config.get("pynvml_file"))
    if device_type != "cpu":
        try:
            available = torch.cuda.is_available()
        except Exception as exc:
            emit({"event": "fatal", "error": f"torch.cuda.is_available() failed: {exc}", **facts})
            return 4
        if not available:
            emit({"event": "fatal", "error": "torch sees no CUDA/ROCm device", "no_device": True, **facts})
            return 4
    all_devices = backend.devices()
    wanted = config.get("gpus")
    devices = all_devices if wanted in (None, "all") else [int(g) for g in wanted]
    missing = [g for g in devices if g not in all_devices]
    if missing:
        emit({"event": "fatal", "error": f"no such GPU index {missing}; torch sees {all_devices}", **facts})
        return 5
    described = []
    for g in devices:
        try:
            described.append(backend.describe_device(g))
        except Exception as exc:
            described.append({"index": g, "error": f"{type(exc).__name__}: {exc}"})
    emit({"event": "start", "devices": described, **facts})
    try:
        run(backend, devices, mode, emit)
    except Exception as exc:
        emit({"event": "fatal", "error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()[-2000:]})
        return 6
    if backend.nvml_error:
        emit({"event": "note", "nvml_error": backend.nvml_error})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
