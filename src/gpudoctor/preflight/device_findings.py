"""The device test's events as findings (gate-deep-cuda, gate-deep-gpu, gate-deep-p2p,
gate-deep-allreduce). A step that failed is a failed check; a step that did not finish in time is a
check that could not be judged (the gate's fail-open/fail-closed policy decides), with the running
step named."""

from __future__ import annotations

from typing import Any, Mapping

from ..findings import HOST, Cause, Finding, Status, Subject
from .checks import gate_finding
from .device_test import GPU_STEPS, DeepResult


def _subjects(result: DeepResult, facts: Mapping[str, Any]) -> dict[int, Subject]:
    from ..engine.subjects import gpu_subject_ref, gpu_subjects, normalise_bus_id

    gpus = gpu_subjects(facts)
    out: dict[int, Subject] = {}
    for i, dev in result.devices.items():
        match = None
        uuid = dev.get("uuid")
        bus = dev.get("bus_id")
        for g in gpus:
            g_uuid = g.get("uuid")
            if isinstance(uuid, str) and isinstance(g_uuid, str) and g_uuid.lower() == uuid.lower():
                match = g
                break
        if match is None and isinstance(bus, str):
            match = next((g for g in gpus if g.get("bus_id") == normalise_bus_id(bus)), None)
        if match is None and result.index_is_nvml:
            match = next((g for g in gpus if g.get("index") == i), None)
        if match is not None:
            out[i] = gpu_subject_ref(match)
        else:
            name = dev.get("name") or "GPU"
            out[i] = Subject("gpu", f"CUDA device {i} ({name})", index=i, bus_id=bus if isinstance(bus, str) else None)
    return out


def _how_it_ended(result: DeepResult) -> tuple[Cause, str]:
    """(cause, words) for steps that never ran or never finished."""
    if result.cancelled:
        return (result.cancel_cause or Cause("deep", "not run")), f"the device test was stopped: {result.cancelled}"
    if result.timed_out:
        return Cause("deep", "timeout"), f"the device test did not finish within its {result.budget_s:.1f} s"
    if result.cut:
        cut = f"the device test printed more than gpudoctor reads on its {result.cut} and was stopped"
        return Cause("deep", "error"), cut
    code = result.returncode
    how = f"killed by signal {-code}" if code is not None and code < 0 else f"exit status {code}"
    tail = f"; stderr: {result.stderr_tail.splitlines()[-1]}" if result.stderr_tail else ""
    return Cause("deep", "error"), f"the device test process died ({how}){tail}"


def deep_findings(result: DeepResult, facts: Mapping[str, Any]) -> list[Finding]:
    out: list[Finding] = []
    cause, ended = _how_it_ended(result)
    died = not result.timed_out and not result.cancelled and not result.cut and result.started
    if not result.started:
        out.append(
            gate_finding(
                "gate-deep-cuda",
                HOST,
                Status.UNKNOWN,
                f"the device test could not start: {result.start_error}",
                detail=result.start_error,
                cause=Cause("deep", "not_found"),
            )
        )
        return out
    torch_event, cuda = result.first("torch"), result.first("cuda")
    error_event = result.first("torch_error")
    if error_event is not None:
        message = (
            f"{result.python} cannot import torch: {error_event.get('error')} "
            "(install torch in that interpreter, or point --python at the job's interpreter)"
        )
        out.append(gate_finding("gate-deep-cuda", HOST, Status.UNKNOWN, message, cause=Cause("deep", "not_found")))
        return out
    if cuda is None:
        phase = "importing torch" if torch_event is None else "initialising CUDA (torch.cuda.is_available)"
        if died and torch_event is not None:
            out.append(gate_finding("gate-deep-cuda", HOST, Status.FAIL, f"{ended} while {phase}"))
        else:
            out.append(
                gate_finding(
                    "gate-deep-cuda", HOST, Status.UNKNOWN, f"{ended} while {phase}", detail=ended, cause=cause
                )
            )
        return out
    version = (torch_event or {}).get("version", "?")
    if not cuda.get("available"):
        out.append(
            gate_finding(
                "gate-deep-cuda",
                HOST,
                Status.FAIL,
                f"torch {version} cannot use CUDA on this machine: {cuda.get('error') or 'no CUDA device'}",
            )
        )
        return out
    count = int(cuda.get("count") or 0)
    nvml = facts.get("nvml")
    nvml_gpus = nvml.get("gpus") if isinstance(nvml, Mapping) and nvml.get("status") == "ok" else None
    if result.index_is_nvml and isinstance(nvml_gpus, list) and len(nvml_gpus) != count:
        out.append(
            gate_finding(
                "gate-deep-cuda",
                HOST,
                Status.FAIL,
                f"torch {version} sees {count} CUDA device(s) but NVML lists {len(nvml_gpus)}",
                [("nvml.gpus (count)", len(nvml_gpus))],
            )
        )
    else:
        took = (torch_event or {}).get("import_s")
        out.append(
            gate_finding(
                "gate-deep-cuda",
                HOST,
                Status.PASS,
                f"torch {version} sees {count} CUDA device(s)" + (f"; import took {took:.1f} s" if took else ""),
            )
        )

    subjects = _subjects(result, facts)
    ends = result.ends()
    running = {(e.get("gpu"), e.get("step"), e.get("peer")) for e in result.running()}
    stalled = "did not finish" if result.timed_out else "was still running when it stopped"

    def stopped_in(rule: str, subject: Subject, what: str, detail: str = ended) -> Finding:
        """A step the child was in when it stopped: failed if the child died, else unknown (hung)."""
        if died:
            return gate_finding(rule, subject, Status.FAIL, f"{what}: {ended}")
        hung = Cause(cause.source, cause.reason, "hung")
        return gate_finding(rule, subject, Status.UNKNOWN, what, detail=detail, cause=hung)

    def not_reached(rule: str, subject: Subject) -> Finding:
        return gate_finding(rule, subject, Status.UNKNOWN, f"not reached: {ended}", detail=ended, cause=cause)

    for i, subject in subjects.items():
        failed = next(
            (ends[(i, s, None)] for s in GPU_STEPS if (i, s, None) in ends and ends[(i, s, None)].get("ok") is False),
            None,
        )
        hung = next((s for s in GPU_STEPS if (i, s, None) in running), None)
        if failed is not None:
            out.append(
                gate_finding(
                    "gate-deep-gpu",
                    subject,
                    Status.FAIL,
                    f"{subject.label}: {failed.get('step')} failed: {failed.get('error')}",
                )
            )
        elif hung is not None:
            what = f"{subject.label} {stalled} step '{hung}' ({_STEP_WORDS[hung]})"
            detail = f"{ended}; the GPU or its driver may be hung: check dmesg for Xid errors"
            out.append(stopped_in("gate-deep-gpu", subject, what, detail))
        elif all((i, s, None) in ends for s in GPU_STEPS):
            took = sum(float(ends[(i, s, None)].get("s") or 0) for s in GPU_STEPS)
            matmul = ends[(i, "matmul", None)]
            mib = ends[(i, "memory", None)].get("mib")
            out.append(
                gate_finding(
                    "gate-deep-gpu",
                    subject,
                    Status.PASS,
                    f"context, {mib} MiB memory check and fp32/{matmul.get('low_dtype', '?')} matmul correct "
                    f"in {took:.2f} s",
                )
            )
        else:
            out.append(not_reached("gate-deep-gpu", subject))

    if len(subjects) < 2:
        return out
    gpu_ok = all(all((i, s, None) in ends and ends[(i, s, None)].get("ok") for s in GPU_STEPS) for i in subjects)
    order = sorted(subjects)
    for pos, i in enumerate(order):
        j = order[(pos + 1) % len(order)]
        subject = subjects[i]
        key: tuple[Any, Any, Any] = (i, "p2p", j)
        target = subjects[j].label
        if key in ends:
            e = ends[key]
            via = "peer access" if e.get("peer_access") else "no peer access: staged through host memory"
            if e.get("ok"):
                out.append(
                    gate_finding(
                        "gate-deep-p2p", subject, Status.PASS, f"copy to {target} correct ({via}, {e.get('gbps')} GB/s)"
                    )
                )
            else:
                out.append(
                    gate_finding(
                        "gate-deep-p2p", subject, Status.FAIL, f"copy {subject.label} → {target}: {e.get('error')}"
                    )
                )
        elif key in running:
            out.append(stopped_in("gate-deep-p2p", subject, f"copy {subject.label} → {target} {stalled}"))
        elif not gpu_ok:
            out.append(gate_finding("gate-deep-p2p", subject, Status.SKIP, "not run: a GPU failed its own test first"))
        else:
            out.append(not_reached("gate-deep-p2p", subject))

    key = (None, "allreduce", None)
    names = ", ".join(str(i) for i in order)
    if key in ends:
        e = ends[key]
        if e.get("ok") is True:
            out.append(
                gate_finding("gate-deep-allreduce", HOST, Status.PASS, f"NCCL all-reduce among GPUs {names} correct")
            )
        elif e.get("ok") is None:
            out.append(
                gate_finding(
                    "gate-deep-allreduce",
                    HOST,
                    Status.UNKNOWN,
                    f"cannot check: {e.get('error')}",
                    detail=str(e.get("error")),
                    cause=Cause("deep", "not_supported"),
                )
            )
        else:
            out.append(
                gate_finding(
                    "gate-deep-allreduce", HOST, Status.FAIL, f"NCCL all-reduce among GPUs {names}: {e.get('error')}"
                )
            )
    elif key in running:
        out.append(stopped_in("gate-deep-allreduce", HOST, f"NCCL all-reduce among GPUs {names} {stalled}"))
    elif not gpu_ok or any(f.rule_id == "gate-deep-p2p" and f.status is Status.FAIL for f in out):
        out.append(gate_finding("gate-deep-allreduce", HOST, Status.SKIP, "not run: a GPU test failed first"))
    else:
        out.append(not_reached("gate-deep-allreduce", HOST))
    return out


_STEP_WORDS = {
    "context": "creating the CUDA context",
    "memory": "allocating and checking memory",
    "matmul": "matrix multiply against the CPU reference",
}
