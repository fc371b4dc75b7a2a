"""gpudoctor bench worker: run with the target interpreter, `python bench.py CONFIG_JSON`.

Standalone on purpose (no gpudoctor import, see gpudoctor.workers): the target Python may be a
job's venv that has torch but not gpudoctor. It prints one event per line in gpudoctor's line
protocol (:func:`emit`) as soon as it is known, so a run killed at its deadline still leaves what
it measured:

  {"event": "start", torch and device facts}      {"event": "plan", "steps": N}
  {"event": "step", "done": i, "label": "..."}    {"event": "result", "gpu": i, "test": ..., ...}
  {"event": "done"}

How it measures is in bench_method.py beside it (loaded by path: a worker runs as a script, where
its directory is not on sys.path under ``python -I`` or PYTHONSAFEPATH); here are the torch
backend and the entry point. The measuring code talks to a backend (TorchBackend here; tests pass
a fake one), so the timing and arithmetic can be checked without a GPU.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from typing import Any, Callable, Dict, List


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


# The measuring method (bench_method.py beside this file), under a name of its own.
method = _load_module_file(
    "gpudoctor_bench_method", os.path.join(os.path.dirname(os.path.abspath(__file__)), "bench_method.py")
)


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
        while nbytes > 64 * method.MIB and 2 * nbytes > 0.5 * self.free_bytes(gpu):
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
            raise method.Unsupported(f"{dtype} is a GPU tensor-core format")
        if dtype == "fp8":
            return self._fp8_matmul(gpu, n)
        if dtype == "bf16" and self.device_type != "cpu" and not self.hip:
            cc = torch.cuda.get_device_capability(gpu)
            if cc < (8, 0):
                raise method.Unsupported(
                    f"no bf16 tensor cores below compute capability 8.0 (this GPU: {cc[0]}.{cc[1]})"
                )
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
            raise method.Unsupported(f"torch {torch.__version__} has no torch._scaled_mm")
        if self.hip:
            arch = str(getattr(torch.cuda.get_device_properties(gpu), "gcnArchName", ""))
            if not arch.startswith(("gfx94", "gfx95", "gfx12")):
                raise method.Unsupported(f"no FP8 matrix cores on {arch or 'this GPU'}")
            f8 = getattr(torch, "float8_e4m3fnuz" if arch.startswith("gfx94") else "float8_e4m3fn", None)
        else:
            cc = torch.cuda.get_device_capability(gpu)
            if cc < (8, 9):
                raise method.Unsupported(
                    f"FP8 tensor cores need compute capability 8.9 or newer (this GPU: {cc[0]}.{cc[1]})"
                )
            f8 = getattr(torch, "float8_e4m3fn", None)
        if f8 is None:
            raise method.Unsupported(f"torch {torch.__version__} has no float8 e4m3 dtype")
        a = self._random((n, n), torch.float32, gpu).to(f8)
        b = self._random((n, n), torch.float32, gpu).to(f8).t()  # _scaled_mm wants mat2 column-major
        scale = torch.ones((), device=self.dev(gpu), dtype=torch.float32)

        def fn() -> None:
            torch._scaled_mm(a, b, scale_a=scale, scale_b=scale, out_dtype=torch.bfloat16)

        try:
            fn()
            self.sync(gpu)
        except RuntimeError as exc:
            raise method.Unsupported(f"torch._scaled_mm failed here: {str(exc).splitlines()[0][:200]}") from None

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
            raise method.Unsupported("no device: host and device memory are the same")
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
            raise method.Unsupported("one CPU device")
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
            raise method.Unsupported("one CPU device")
        try:
            import torch.cuda.nccl as nccl  # single-process, multi-GPU collectives (NCCL / RCCL)
        except ImportError:
            raise method.Unsupported("this torch has no torch.cuda.nccl") from None
        tensors = [self._random((nbytes // 4,), torch.float32, g) for g in devices]
        if not nccl.is_available(tensors):
            raise method.Unsupported("NCCL is not available in this torch build")

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
    if mode not in method.MODES:
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
            # facts, not prose: the parent explains from the build, the count and the environment
            try:
                facts["device_count"] = int(torch.cuda.device_count())
            except Exception:
                facts["device_count"] = None
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
        method.run(backend, devices, mode, emit)
    except Exception as exc:
        emit({"event": "fatal", "error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()[-2000:]})
        return 6
    if backend.nvml_error:
        emit({"event": "note", "nvml_error": backend.nvml_error})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
