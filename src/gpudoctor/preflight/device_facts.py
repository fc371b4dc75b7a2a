"""The device test's result (its events) as the facts section ``device_test`` that the gate's rules
(rules/gate/gate.yaml: gate-deep-cuda, gate-deep-gpu, gate-deep-p2p, gate-deep-allreduce) judge.

Per CUDA device, each step's result: passed or failed (with the worker's error) and its duration.
A step that did not finish is unavailable: reason timeout when the test was killed at the deadline
(the GPU or its driver may be hung; the step that was running is named); a step never reached is
unavailable with reason not_found, its detail saying how the test ended. The step the test was in
when its process died failed. Torch missing, or a test that could not start or stopped before
torch answered, makes ``cuda`` unavailable with its own reason and detail; then no GPU has
results. engine/subjects.py attaches each device's results to its GPU as gpu.device_test.
"""

from __future__ import annotations

from typing import Any

from ..facts import Unavailable
from .device_test import GPU_STEPS, DeepResult

_STEP_WORDS = {
    "context": "creating the CUDA context",
    "memory": "allocating and checking memory",
    "matmul": "matrix multiply against the CPU reference",
}
# The unavailable reasons a cause may carry (facts.schema.json's unavailable marker).
_REASONS = ("not_found", "not_supported", "no_permission", "driver_not_loaded", "timeout", "error")
# What the worker's end events carry besides ok/error/s, kept for the rules' messages.
_EXTRAS = ("mib", "low_dtype", "peer_access", "gbps")


def _how_it_ended(result: DeepResult) -> tuple[str, str, str]:
    """(status, unavailable reason, words) for steps that never ran or never finished."""
    if not result.started:
        return "not_started", "not_found", f"the device test could not start: {result.start_error}"
    if result.cancelled:
        reason = result.cancel_cause.reason if result.cancel_cause is not None else "error"
        words = f"the device test was stopped: {result.cancelled}"
        return "cancelled", reason if reason in _REASONS else "error", words
    if result.timed_out:
        return "timeout", "timeout", f"the device test did not finish within its {result.budget_s:.1f} s"
    if result.cut:
        words = f"the device test printed more than gpudoctor reads on its {result.cut} and was stopped"
        return "cut", "error", words
    code = result.returncode
    how = f"killed by signal {-code}" if code is not None and code < 0 else f"exit status {code}"
    tail = f"; stderr: {result.stderr_tail.splitlines()[-1]}" if result.stderr_tail else ""
    return "exited", "error", f"the device test process died ({how}){tail}"


def device_test_facts(result: DeepResult) -> dict[str, Any]:
    """The facts section ``device_test`` for one run of the device test."""
    status, reason, ended = _how_it_ended(result)
    torch_event, cuda, torch_error = result.first("torch"), result.first("cuda"), result.first("torch_error")
    no_torch = Unavailable("not_found", "torch was not imported")
    out: dict[str, Any] = {
        "python": result.python,
        "status": status,
        "ended": "" if status == "exited" and result.returncode == 0 else ended,
        "duration_s": round(result.duration_s, 3),
        "budget_s": result.budget_s,
        "torch_version": str(torch_event.get("version", "?")) if torch_event else no_torch,
        "import_s": _number(torch_event.get("import_s"), no_torch) if torch_event else no_torch,
        "index_is_nvml": result.index_is_nvml,
    }
    if not result.started:
        out["cuda"] = Unavailable("not_found", ended)
        return out
    if torch_error is not None:
        out["cuda"] = Unavailable(
            "not_found",
            f"{result.python} cannot import torch: {torch_error.get('error')} "
            "(install torch in that interpreter, or point --python at the job's interpreter)",
        )
        return out
    if cuda is None:
        phase = "importing torch" if torch_event is None else "initialising CUDA (torch.cuda.is_available)"
        if status == "exited" and torch_event is not None:
            # it died in CUDA's initialisation: a failure, not a question left open
            out["cuda"] = {"available": False, "count": 0, "error": f"{ended} while {phase}", "stopped": True}
        else:
            out["cuda"] = Unavailable(reason, f"{ended} while {phase}")
        return out
    available = bool(cuda.get("available"))
    out["cuda"] = {
        "available": available,
        "count": int(cuda.get("count") or 0),
        "error": str(cuda.get("error") or "no CUDA device"),
        "stopped": False,
    }
    if available:
        _gpu_results(result, out, status == "exited", reason, ended)
    return out


def _gpu_results(result: DeepResult, out: dict[str, Any], died: bool, reason: str, ended: str) -> None:
    """Each device's steps, and the collectives among them, into ``out``."""
    devices = result.devices
    ends = result.ends()
    running = {(e.get("gpu"), e.get("step"), e.get("peer")) for e in result.running()}
    stalled = "did not finish" if result.timed_out else "was still running when it stopped"
    # not_found, not the reason the test ended: a step never begun has no result, and its cause
    # must not fold into one line with the step that hung (whose cause is that reason)
    not_reached = Unavailable("not_found", f"not reached: {ended}")

    def stopped_in(step: str, what: str, detail: str) -> dict[str, Any]:
        """A step the test was in when it stopped: failed if its process died, else not finished."""
        if died:
            error = f"still running when the test stopped: {ended}"
            return {"step": step, "ran": True, "passed": False, "error": error}
        return {"step": step, "ran": True, "passed": Unavailable(reason, f"{what}: {detail}")}

    gpus: list[dict[str, Any]] = []
    for i in sorted(devices):
        dev = devices[i]
        entry: dict[str, Any] = {
            "index": i,
            "name": str(dev.get("name") or "GPU"),
            "uuid": dev.get("uuid") if isinstance(dev.get("uuid"), str) else None,
            "bus_id": dev.get("bus_id") if isinstance(dev.get("bus_id"), str) else None,
        }
        hung = next((s for s in GPU_STEPS if (i, s, None) in running), None)
        for step in GPU_STEPS:
            if (i, step, None) in ends:
                entry[step] = _ended(step, ends[(i, step, None)])
            elif hung is not None and (step == hung or not died):
                # every step of a GPU that hung waits on that step: each names it
                what = f"the GPU {stalled} step '{hung}' ({_STEP_WORDS[hung]})"
                detail = f"{ended}; the GPU or its driver may be hung: check dmesg for Xid errors"
                entry[step] = stopped_in(step, what, detail)
            else:
                entry[step] = {"step": step, "ran": True, "passed": not_reached}
        gpus.append(entry)
    out["gpus"] = gpus
    if len(gpus) < 2:
        return

    gpu_ok = all(entry[s].get("passed") is True for entry in gpus for s in GPU_STEPS)
    order = [entry["index"] for entry in gpus]
    for pos, entry in enumerate(gpus):
        i, j = order[pos], order[(pos + 1) % len(order)]
        key = (i, "p2p", j)
        if key in ends:
            p2p = _ended("p2p", ends[key])
        elif key in running:
            p2p = stopped_in("p2p", f"the copy to CUDA device {j} {stalled}", ended)
        elif not gpu_ok:
            p2p = {"step": "p2p", "ran": False, "passed": False, "error": "not run: a GPU failed its own test first"}
        else:
            p2p = {"step": "p2p", "ran": True, "passed": not_reached}
        entry["p2p"] = {**p2p, "peer": j}

    names = ", ".join(str(i) for i in order)
    key = (None, "allreduce", None)
    p2p_failed = any(entry["p2p"].get("passed") is False and entry["p2p"]["ran"] for entry in gpus)
    if key in ends:
        allreduce = _ended("allreduce", ends[key])
        if ends[key].get("ok") is None:  # the worker could not run NCCL here (no NCCL, one device)
            allreduce["passed"] = Unavailable("not_supported", str(ends[key].get("error")))
    elif key in running:
        allreduce = stopped_in("allreduce", f"the NCCL all-reduce among GPUs {names} {stalled}", ended)
    elif not gpu_ok or p2p_failed:
        allreduce = {"step": "allreduce", "ran": False, "passed": False, "error": "not run: a GPU test failed first"}
    else:
        allreduce = {"step": "allreduce", "ran": True, "passed": not_reached}
    out["allreduce"] = {**allreduce, "gpus": order}


def _ended(step: str, event: dict[str, Any]) -> dict[str, Any]:
    """A step's end event as its result."""
    out: dict[str, Any] = {
        "step": step,
        "ran": True,
        "passed": event.get("ok") is True,
        "error": str(event.get("error") or ""),
        "seconds": _number(event.get("s"), 0.0),
    }
    for key in _EXTRAS:
        value = event.get(key)
        if isinstance(value, (bool, int, float, str)):
            out[key] = value
    return out


def _number(value: Any, otherwise: Any) -> Any:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else otherwise
