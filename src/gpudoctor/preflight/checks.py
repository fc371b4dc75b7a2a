"""The gate's own checks (ids gate-...), the constructor of their findings, and the policy's
required/ignore selectors over rules and gate checks."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..findings import Cause, Finding, Severity, Status, Subject
from .errors import PolicyError
from .policy import Policy


@dataclass(frozen=True)
class GateCheck:
    title: str
    keys: tuple[str, ...]  # area and tags, for required/ignore selectors
    fix: str = ""


# The gate's own checks (findings with these rule ids are made by expectations.py, device_findings.py
# and distributed.py).
GATE_CHECKS: dict[str, GateCheck] = {
    "gate-gpu-count": GateCheck(
        "NVML lists the expected number of GPUs",
        ("gate", "expect"),
        "Compare `nvidia-smi -L` with `lspci -d 10de:`; look for GPUs that fell off the bus: "
        "sudo dmesg -T | grep -i -E 'xid|nvrm'. A GPU missing after a reboot needs reseating or RMA; "
        "drain the node meanwhile.",
    ),
    "gate-gpu-model": GateCheck(
        "Every GPU is the expected model",
        ("gate", "expect"),
        "Run the job on nodes with the expected GPUs (scheduler constraint or node selector), or fix the "
        "policy's expect.model.",
    ),
    "gate-free-memory": GateCheck(
        "Enough free memory on every GPU",
        ("gate", "expect"),
        "See what holds the memory: nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv; "
        "wait for it or stop it, or pick free GPUs with `gpudoctor select`.",
    ),
    "gate-deep-cuda": GateCheck(
        "torch can use CUDA and sees every GPU",
        ("gate", "deep"),
        "Run `gpudoctor check` for the driver and torch build checks; check CUDA_VISIBLE_DEVICES.",
    ),
    "gate-deep-gpu": GateCheck(
        "GPU creates a context, allocates memory and multiplies matrices correctly",
        ("gate", "deep"),
        "Look for Xid errors: sudo dmesg -T | grep -i -E 'xid|nvrm'; drain the node. A GPU that fails again "
        "after a reset or reboot needs service (RMA).",
    ),
    "gate-deep-p2p": GateCheck(
        "Peer-to-peer copy between GPUs is correct",
        ("gate", "deep"),
        "Check `nvidia-smi topo -m` and `nvidia-smi nvlink -s` for down links, and dmesg for Xid errors; "
        "with NVSwitch systems check that nvidia-fabricmanager is running.",
    ),
    "gate-deep-allreduce": GateCheck(
        "NCCL all-reduce among the GPUs is correct",
        ("gate", "deep"),
        "Run with NCCL_DEBUG=INFO to see the failing transport; check `nvidia-smi topo -m`, the fabric "
        "manager on NVSwitch systems, and dmesg for Xid errors.",
    ),
    "gate-allreduce-busbw": GateCheck(
        "All-reduce bus bandwidth across the ranks meets the policy",
        ("gate", "distributed"),
        "Run NCCL_DEBUG=INFO to see which transport NCCL chose (a fall-back to sockets instead of IB/RoCE or "
        "NVLink is the usual cause); check the NICs' link state and GPU-NIC affinity (`gpudoctor topo`).",
    ),
}


def rule_keys(ruleset: Any) -> dict[str, set[str]]:
    keys: dict[str, set[str]] = {}
    for rule in ruleset.rules:
        keys[rule.id] = {rule.id, rule.area, *rule.tags}
    for check_id, check in GATE_CHECKS.items():
        keys[check_id] = {check_id, *check.keys}
    return keys


def hang_rules(ruleset: Any) -> set[str]:
    return {rule.id for rule in ruleset.rules if "hang" in rule.tags}


def check_selectors(policy: Policy, ruleset: Any) -> None:
    """Refuse selectors that name nothing, and required gate checks the policy does not run."""
    known: set[str] = set()
    for keys in rule_keys(ruleset).values():
        known |= keys
    for label, selectors in (("required", policy.required), ("ignore", policy.ignore)):
        unknown = [s for s in selectors if s not in known]
        if unknown:
            import difflib

            hints = []
            for s in unknown:
                close = difflib.get_close_matches(s, sorted(known), n=1)
                hints.append(f"{s} (did you mean {close[0]}?)" if close else s)
            raise PolicyError(
                f"{policy.source}: {label}: no rule, area or tag named {', '.join(hints)} "
                "(see `gpudoctor rules list`; gate checks: " + ", ".join(GATE_CHECKS) + ")"
            )
    needs = {
        "gate-gpu-count": (policy.expect_gpus is not None, "expect.gpus (--expect-gpus)"),
        "gate-gpu-model": (policy.expect_model is not None, "expect.model (--expect-model)"),
        "gate-free-memory": (policy.min_free_memory_gib is not None, "expect.min_free_memory_gib (--min-free-memory)"),
        "deep": (policy.deep, "the device test (deep.enabled or --deep)"),
    }
    for selector in policy.required:
        for check_id, (enabled, what) in needs.items():
            if check_id == "deep":
                named = selector == "deep" or (selector.startswith("gate-deep-") and selector in GATE_CHECKS)
            else:
                named = selector == check_id
            if named and not enabled:
                raise PolicyError(f"{policy.source}: required: {selector} needs {what}")


def gate_finding(
    check_id: str,
    subject: Subject,
    status: Status,
    message: str,
    evidence: list[tuple[str, Any]] | None = None,
    detail: str = "",
    cause: Cause | None = None,
    fix: str | None = None,
    severity: Severity = Severity.ERROR,
) -> Finding:
    check = GATE_CHECKS[check_id]
    return Finding(
        rule_id=check_id,
        title=check.title,
        area="gate",
        severity=severity,
        status=status,
        subject=subject,
        message=message,
        evidence=evidence or [],
        fix=(check.fix if fix is None else fix) if status is Status.FAIL else "",
        detail=detail,
        cause=cause,
    )
