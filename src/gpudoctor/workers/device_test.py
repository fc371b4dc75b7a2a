"""The device test of `gpudoctor gate --deep`, run as a script by the target interpreter.

Run as ``<python> device_test.py [--memory-mib N] [--devices 0,1]``; it needs only the standard
library and torch (the interpreter may have no gpudoctor). It reports to the parent in gpudoctor's
one child line protocol: one line per event, ``@@GPUDOCTOR@@ <compact JSON object>`` with an
``event`` key, flushed at once: a ``begin`` line before every step and an ``end`` line after
it, so that the parent, which kills this process at its deadline, knows which GPU and step did
not finish.

Steps, every GPU on its own thread (contexts and first calls overlap; one hung GPU does not stop
the others from reporting):

- context: ``torch.zeros(1)`` on the device (creates the CUDA context);
- memory: an int32 ``arange`` of ``--memory-mib`` MiB written, summed, bit-inverted in place and
  summed again, both sums checked exactly (int64);
- matmul: 512×512 fp32 and bf16 (fp16 before compute capability 8.0) products against the same
  product computed on the CPU from the same inputs;

then, with two GPUs or more, a ring of peer copies (GPU i → GPU i+1, 64 MiB or --memory-mib if
smaller, checked on the receiving GPU) and one NCCL all-reduce of the same size
(``torch.cuda.nccl``: one process, one communicator per GPU, no store or rendezvous, so it costs
little beyond NCCL's own set-up), checked exactly. The all-reduce starts on its own thread as soon
as every GPU has its context, so NCCL's set-up (about half a second) overlaps the memory and
matmul steps rather than following them.

The process leaves with ``os._exit`` once its last line is out: the driver frees the contexts as
the process ends, without the interpreter's and NCCL's teardown, which a job waiting on the gate
would otherwise pay for.

``--skip p2p,allreduce`` leaves those steps out (the gate's policy ignores them).
``--cpu-devices N`` runs the same steps on N pretend devices that are the CPU (no CUDA calls; the
all-reduce is summed by hand): gpudoctor's own tests use it to run this script on machines
without a GPU.

Exit status: 0 all passed, 1 a step failed, 3 torch cannot be imported, 4 CUDA is not usable.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
import time

MARKER = "@@GPUDOCTOR@@"
_T0 = time.monotonic()
_LOCK = threading.Lock()
MATMUL_N = 512
P2P_MIB = 64
ALLREDUCE_MIB = 64


# Its own emit function rather than workers/_emit.py: the parent runs this file's source with -c,
# so no sibling module is importable from here.
def emit(event, **fields):
    fields["t"] = round(time.monotonic() - _T0, 4)
    line = MARKER + " " + json.dumps({"event": event, **fields}, separators=(",", ":")) + "\n"
    with _LOCK:
        sys.stdout.write(line)
        sys.stdout.flush()


def _error(exc):
    text = f"{type(exc).__name__}: {exc}".strip()
    return text if len(text) <= 500 else text[:497] + "..."


def _step(gpu, step, fn, peer=None):
    """Run one step between begin/end events; return True when it passed."""
    emit("begin", gpu=gpu, step=step, peer=peer)
    started = time.monotonic()
    try:
        extra = fn() or {}
    except Exception as exc:  # the parent reports it; the other GPUs go on
        seconds = round(time.monotonic() - started, 4)
        emit("end", gpu=gpu, step=step, peer=peer, ok=False, error=_error(exc), s=seconds)
        return False
    ok = extra.pop("ok", True)
    emit("end", gpu=gpu, step=step, peer=peer, ok=ok, s=round(time.monotonic() - started, 4), **extra)
    return bool(ok)


def _parse(argv):
    options = {"memory_mib": 256, "devices": None, "cpu_devices": 0, "skip": set()}  # type: dict
    i = 0
    while i < len(argv):
        if argv[i] == "--memory-mib":
            options["memory_mib"] = int(argv[i + 1])
        elif argv[i] == "--devices":
            options["devices"] = [int(x) for x in argv[i + 1].split(",") if x.strip()]
        elif argv[i] == "--cpu-devices":
            options["cpu_devices"] = int(argv[i + 1])
        elif argv[i] == "--skip":
            options["skip"] = {x.strip() for x in argv[i + 1].split(",") if x.strip()}
        else:
            raise SystemExit(f"device_test: unknown argument {argv[i]!r}")
        i += 2
    return options


def _uuid(props):
    raw = getattr(props, "uuid", None)
    if raw is None:
        return None
    text = str(raw).strip()
    return text if text.startswith(("GPU-", "MIG-")) else "GPU-" + text


def _bus_id(props):
    bus = getattr(props, "pci_bus_id", None)
    device = getattr(props, "pci_device_id", None)
    domain = getattr(props, "pci_domain_id", 0) or 0
    if not isinstance(bus, int) or not isinstance(device, int):
        return None
    return f"{domain:04x}:{bus:02x}:{device:02x}.0"


class Cuda:
    """The real thing."""

    def __init__(self, torch):
        self.torch = torch

    def count(self):
        """(available, device count, why not)."""
        torch = self.torch
        available, count = torch.cuda.is_available(), torch.cuda.device_count()
        if available and count:
            return True, count, ""
        reason = "torch.cuda.is_available() is False"
        try:
            torch.cuda.init()  # raises with the driver's reason (too old, no device, ...)
        except Exception as exc:
            reason = _error(exc)
        return False, count, reason

    def describe(self, i):
        props = self.torch.cuda.get_device_properties(i)
        return {
            "name": props.name,
            "uuid": _uuid(props),
            "bus_id": _bus_id(props),
            "total_memory": int(props.total_memory),
            "cc": (props.major, props.minor),
        }

    def device(self, i):
        return self.torch.device("cuda", i)

    def current(self, i):
        return self.torch.cuda.device(i)

    def sync(self, i):
        self.torch.cuda.synchronize(i)

    def peer_access(self, i, j):
        return bool(self.torch.cuda.can_device_access_peer(i, j))

    def all_reduce(self, tensors):
        """Sum in place across devices; None when this torch has no NCCL."""
        try:
            import torch.cuda.nccl as nccl
        except Exception as exc:
            return f"torch.cuda.nccl cannot be imported: {_error(exc)}"
        if not nccl.is_available(tensors):
            return "this torch build has no NCCL"
        nccl.all_reduce(tensors)
        return None


class Cpu(Cuda):
    """--cpu-devices N: N pretend devices that are all the CPU (for gpudoctor's tests)."""

    def __init__(self, torch, n):
        super().__init__(torch)
        self.n = n

    def count(self):
        return True, self.n, ""

    def describe(self, i):
        return {"name": "CPU", "uuid": None, "bus_id": None, "total_memory": 0, "cc": (8, 0)}

    def device(self, i):
        return self.torch.device("cpu")

    def current(self, i):
        return contextlib.nullcontext()

    def sync(self, i):
        pass

    def peer_access(self, i, j):
        return False

    def all_reduce(self, tensors):
        total = sum(t.clone() for t in tensors)
        for t in tensors:
            t.copy_(total)
        return None


def main(argv):
    options = _parse(argv)
    memory_mib = options["memory_mib"]
    emit("hello", python=sys.version.split()[0], pid=os.getpid())
    started = time.monotonic()
    try:
        import torch
    except Exception as exc:
        emit("torch_error", error=_error(exc))
        return 3
    took = round(time.monotonic() - started, 4)
    emit("torch", version=str(torch.__version__), cuda=torch.version.cuda, import_s=took)
    backend = Cpu(torch, options["cpu_devices"]) if options["cpu_devices"] else Cuda(torch)

    try:
        available, count, reason = backend.count()
    except Exception as exc:
        emit("cuda", available=False, count=0, error=_error(exc))
        return 4
    if not available:
        emit("cuda", available=False, count=count, error=reason)
        return 4
    emit("cuda", available=True, count=count)
    wanted = options["devices"]
    devices = [d for d in (wanted if wanted is not None else range(count)) if 0 <= d < count]
    caps = {}
    for i in devices:
        info = backend.describe(i)
        caps[i] = info.pop("cc")
        emit("device", gpu=i, cc="{}.{}".format(*caps[i]), **info)

    # CPU references from fixed inputs: the same numbers on every run and every GPU.
    gen = torch.Generator().manual_seed(1234)
    a = torch.rand(MATMUL_N, MATMUL_N, generator=gen) * 2 - 1
    b = torch.rand(MATMUL_N, MATMUL_N, generator=gen) * 2 - 1
    ref32 = a @ b
    low = {}
    for dtype in (torch.bfloat16, torch.float16):
        la, lb = a.to(dtype), b.to(dtype)
        low[dtype] = (la, lb, la.float() @ lb.float())
    with contextlib.suppress(Exception):
        torch.backends.cuda.matmul.allow_tf32 = False  # fp32 means fp32: a TF32 result is not the reference

    elements = memory_mib * (1 << 20) // 4
    results = {}
    context_up = {i: threading.Event() for i in devices}
    context_ok = {}

    def gpu_work(i):
        dev = backend.device(i)

        def context():
            with backend.current(i):
                torch.zeros(1, device=dev)
                backend.sync(i)

        def memory():
            x = torch.arange(elements, dtype=torch.int32, device=dev)
            first = int(x.sum(dtype=torch.int64).item())
            x.bitwise_not_()
            second = int(x.sum(dtype=torch.int64).item())
            want = elements * (elements - 1) // 2
            del x
            ok = first == want and second == -want - elements
            out = {"ok": ok, "mib": memory_mib}
            if not ok:
                out["error"] = f"checksum mismatch: got {first} and {second}, want {want} and {-want - elements}"
            return out

        def matmul():
            got = (a.to(dev) @ b.to(dev)).cpu()
            err32 = float((got - ref32).abs().max())
            dtype = torch.bfloat16 if caps[i] >= (8, 0) else torch.float16
            la, lb, lref = low[dtype]
            got_low = (la.to(dev) @ lb.to(dev)).float().cpu()
            err_low = float((got_low - lref).abs().max())
            scale = float(ref32.abs().max())
            # fp32: summation order only; low precision: the result is rounded to 8 (bf16) or 11
            # (fp16) bits, so a few units in its last place of the largest value
            ok = err32 <= 1e-3 * scale and err_low <= 2.0**-5 * scale
            low_name = str(dtype).replace("torch.", "")
            out = {"ok": ok, "fp32_max_error": err32, "low_dtype": low_name, "low_max_error": err_low}
            if not ok:
                out["error"] = f"wrong result: max error fp32 {err32:.3g}, {low_name} {err_low:.3g} (scale {scale:.3g})"
            return out

        try:
            context_ok[i] = _step(i, "context", context)
        finally:
            context_up[i].set()
        results[i] = context_ok[i] and _step(i, "memory", memory) and _step(i, "matmul", matmul)

    def allreduce():
        m = min(ALLREDUCE_MIB, memory_mib) * (1 << 20) // 4
        tensors = [torch.full((m,), float(k + 1), device=backend.device(d)) for k, d in enumerate(devices)]
        missing = backend.all_reduce(tensors)
        if missing:
            return {"ok": None, "error": missing}
        for d in devices:
            backend.sync(d)
        want_value = float(len(devices) * (len(devices) + 1) // 2)
        wrong = [devices[k] for k, t in enumerate(tensors) if float((t - want_value).abs().max()) != 0.0]
        out = {"ok": not wrong, "mib": min(ALLREDUCE_MIB, memory_mib)}
        if wrong:
            out["error"] = "wrong sum on GPU(s) " + ", ".join(str(w) for w in wrong)
        return out

    reduced = {}

    def allreduce_when_contexts_are_up():
        for i in devices:
            context_up[i].wait()
        if all(context_ok.get(i) for i in devices):
            reduced["ok"] = _step(None, "allreduce", allreduce)

    threads = [threading.Thread(target=gpu_work, args=(i,), name=f"gpu{i}", daemon=True) for i in devices]
    if len(devices) >= 2 and "allreduce" not in options["skip"]:
        threads.append(threading.Thread(target=allreduce_when_contexts_are_up, name="allreduce", daemon=True))
    for t in threads:
        t.start()
    for t in threads[: len(devices)]:
        t.join()
    all_ok = all(results.get(i) for i in devices)

    if len(devices) >= 2 and all_ok:
        n = min(P2P_MIB, memory_mib) * (1 << 20) // 4
        want = n * (n - 1) // 2
        for pos, i in enumerate(devices if "p2p" not in options["skip"] else ()):
            j = devices[(pos + 1) % len(devices)]

            def copy(i=i, j=j):
                peer = backend.peer_access(i, j)
                x = torch.arange(n, dtype=torch.int32, device=backend.device(i))
                backend.sync(i)
                t0 = time.monotonic()
                y = x.to(backend.device(j), copy=True)
                backend.sync(j)
                seconds = time.monotonic() - t0
                got = int(y.sum(dtype=torch.int64).item())
                out = {"ok": got == want, "peer_access": peer, "gbps": round(n * 4 / max(seconds, 1e-9) / 1e9, 2)}
                if got != want:
                    out["error"] = f"data arrived wrong: checksum {got}, want {want}"
                return out

            all_ok = _step(i, "p2p", copy, peer=j) and all_ok

    for t in threads[len(devices):]:
        t.join()
    if "ok" in reduced:
        all_ok = reduced["ok"] and all_ok

    emit("done", ok=all_ok)
    return 0 if all_ok else 1


if __name__ == "__main__":
    code = main(sys.argv[1:])
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)
