"""The policy's expectations (GPU count and model, free memory) as checks over the facts."""

from __future__ import annotations

from typing import Any, Mapping

from ..facts import Unavailable
from ..findings import HOST, Cause, Finding, Status
from .checks import gate_finding
from .policy import Policy

GIB = 1 << 30


def _nvml_unavailable(facts: Mapping[str, Any]) -> tuple[Cause, str] | None:
    """(cause, detail) when NVML did not give its GPU list, else None."""
    from ..engine.subjects import NVML_REASON

    nvml = facts.get("nvml")
    if not isinstance(nvml, Mapping):
        return Cause("nvml", "error"), "no NVML facts"
    status = str(nvml.get("status", "error"))
    if status == "ok" and isinstance(nvml.get("gpus"), list):
        return None
    error = str(nvml.get("error", "")).strip()
    return Cause("nvml", NVML_REASON.get(status, "error")), f"NVML did not answer ({status})" + (
        f": {error}" if error else ""
    )


def expectation_findings(facts: Mapping[str, Any], policy: Policy, gpus: list[dict[str, Any]]) -> list[Finding]:
    from ..engine.subjects import gpu_subject_ref

    out: list[Finding] = []
    nvml_problem = _nvml_unavailable(facts)
    nvidia = [g for g in gpus if g.get("vendor") == "nvidia"]
    listed = [g for g in nvidia if g.get("in_nvml") is True]

    if policy.expect_gpus is not None:
        want = policy.expect_gpus
        if nvml_problem:
            cause, detail = nvml_problem
            out.append(
                gate_finding(
                    "gate-gpu-count",
                    HOST,
                    Status.UNKNOWN,
                    f"cannot count GPUs: {detail}",
                    [("nvml.status", facts.get("nvml", {}).get("status"))],
                    detail=detail,
                    cause=cause,
                )
            )
        else:
            count = len(listed)
            on_pci = [g for g in nvidia if g.get("on_pci") is True]
            evidence: list[tuple[str, Any]] = [("nvml.gpus (count)", count), ("pci GPUs (NVIDIA)", len(on_pci))]
            if count == want:
                out.append(gate_finding("gate-gpu-count", HOST, Status.PASS, f"NVML lists {count} GPU(s), as expected"))
            else:
                missing = [str(g.get("bus_id")) for g in nvidia if g.get("in_nvml") is not True]
                message = f"NVML lists {count} NVIDIA GPU(s), the policy expects {want}"
                if missing:
                    message += f"; on the PCI bus but not in NVML: {', '.join(missing)}"
                elif len(on_pci) != count:
                    message += f"; the PCI bus shows {len(on_pci)}"
                fix = None
                if count > want:
                    fix = "The node has more GPUs than the policy expects: fix expect.gpus (or --expect-gpus)."
                out.append(gate_finding("gate-gpu-count", HOST, Status.FAIL, message, evidence, fix=fix))

    if policy.expect_model is not None:
        want_model = policy.expect_model
        if not nvidia and nvml_problem is None:
            out.append(
                gate_finding(
                    "gate-gpu-model", HOST, Status.FAIL, f"no NVIDIA GPU found; the policy expects {want_model}"
                )
            )
        for g in nvidia:
            ref = gpu_subject_ref(g)
            name = g.get("name")
            if isinstance(name, Unavailable):
                out.append(
                    gate_finding(
                        "gate-gpu-model",
                        ref,
                        Status.UNKNOWN,
                        f"cannot check: gpu.name is unavailable ({name.reason})",
                        [("gpu.name", name)],
                        detail=name.detail,
                        cause=(nvml_problem[0] if nvml_problem else Cause("nvml", name.reason)),
                    )
                )
            elif want_model.casefold() in str(name).casefold():
                out.append(gate_finding("gate-gpu-model", ref, Status.PASS, f"{name}"))
            else:
                out.append(
                    gate_finding(
                        "gate-gpu-model",
                        ref,
                        Status.FAIL,
                        f"{ref.label} is {name}, the policy expects {want_model}",
                        [("gpu.name", name)],
                    )
                )

    if policy.min_free_memory_gib is not None:
        need = policy.min_free_memory_gib
        for g in nvidia:
            ref = gpu_subject_ref(g)
            total, used = g.get("memory_total_bytes"), g.get("memory_used_bytes")
            missing_fact = next((v for v in (total, used) if isinstance(v, Unavailable)), None)
            if missing_fact is not None or not isinstance(total, int) or not isinstance(used, int):
                u = missing_fact if isinstance(missing_fact, Unavailable) else Unavailable("error", "no memory facts")
                out.append(
                    gate_finding(
                        "gate-free-memory",
                        ref,
                        Status.UNKNOWN,
                        f"cannot check: GPU memory is unavailable ({u.reason})",
                        [("gpu.memory_total_bytes", total), ("gpu.memory_used_bytes", used)],
                        detail=u.detail,
                        cause=(nvml_problem[0] if nvml_problem else Cause("nvml", u.reason)),
                    )
                )
                continue
            free = total - used
            evidence = [("gpu.memory_total_bytes", total), ("gpu.memory_used_bytes", used)]
            text = f"{free / GIB:.1f} GiB free of {total / GIB:.1f} GiB"
            if free >= need * GIB:
                out.append(gate_finding("gate-free-memory", ref, Status.PASS, f"{text} (policy: {need:g} GiB)"))
            else:
                procs = g.get("processes")
                held = f"; {procs} process(es) use it" if isinstance(procs, int) and procs > 0 else ""
                out.append(
                    gate_finding(
                        "gate-free-memory",
                        ref,
                        Status.FAIL,
                        f"{ref.label} has {text}, the policy needs {need:g} GiB free{held}",
                        evidence,
                    )
                )
    return out
