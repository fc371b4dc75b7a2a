"""The pre-training gate: a policy, the checks it runs, and one go/no-go verdict.

Used by ``gpudoctor gate`` and by job scripts through the Python API::

    from gpudoctor import gate, GateFailed
    report = gate(expect_gpus=8, min_free_memory_gib=70)      # raises GateFailed on no-go

What blocks (the verdict is no-go when at least one finding blocks):

- A check *can block* when its severity is at or above ``fail_on`` (default error), or when the
  policy lists it (by id, area or tag) under ``required``.
- A failed check that can block, blocks.
- A check that could not be judged — its inputs were unavailable (status unknown), the rule broke
  (status error), or it reports that a source did not answer in time (rules tagged ``hang``, such
  as nvml-not-responding, and a device test that did not finish) — blocks when it can block and
  the policy is fail-closed (the default). Under ``on_cannot_check: fail-open`` it does not block
  and is reported as not judged, except for required checks, which must always be judged.
- Except: a check whose inputs are unavailable only because this process may not read them
  (reason ``no_permission``: the kernel log for a user without CAP_SYSLOG) or because the hardware
  or driver has no such feature (``not_supported``) says nothing about the machine's health; it
  is reported as not judged and blocks only when required. Unavailable for any other reason
  (``timeout``, ``error``, ``driver_not_loaded``, ``not_found``) means something did not answer
  or is missing, and fail-closed blocks on it. (Whether this process can use the GPUs at all is
  its own check: nvidia-device-nodes-not-accessible.)
- Checks under ``ignore`` are not run at all; a required check that does not apply to this
  machine (status skip) does not block.

Expectations (GPU count and model, free memory), the device test (``--deep``) and the all-reduce
bandwidth of ``--distributed`` are checks too, with ids starting ``gate-`` (see GATE_CHECKS), so
they can be required or ignored like rules.

Everything that can block runs under the policy's deadline: NVML in a forked child (a stuck
driver becomes nvml.status = timeout), the device test in a child process that is killed, never
waited for. The gate judges facts only; probing and the device test are the callers' inputs.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from .facts import Unavailable
from .findings import HOST, Finding, Severity, Status, Subject

FAIL_CLOSED = "fail-closed"
FAIL_OPEN = "fail-open"
GIB = 1 << 30


class GateError(Exception):
    """The gate could not run: a bad policy, a missing root, an unreadable snapshot (exit status 2)."""


class PolicyError(GateError):
    """A policy file or value that cannot be used; the message names the file and line."""


class GateFailed(Exception):
    """The gate said no-go. ``findings`` are the blocking findings, ``report`` the whole report."""

    def __init__(self, report: GateReport) -> None:
        self.report = report
        self.findings = list(report.blocking)
        lines = [line.text for line in report.lines]
        super().__init__("gpudoctor gate: no-go: " + "; ".join(lines))


@dataclass(frozen=True)
class GateCheck:
    title: str
    keys: tuple[str, ...]  # area and tags, for required/ignore selectors
    fix: str = ""


# The gate's own checks (findings with these rule ids are made here and in deep.py / distributed.py).
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


@dataclass(frozen=True)
class Policy:
    """What the gate expects and when it says no-go. Defaults: fail on error, fail-closed, 30 s."""

    source: str = "defaults"
    expect_gpus: int | None = None
    expect_model: str | None = None
    min_free_memory_gib: float | None = None
    fail_on: Severity = Severity.ERROR
    fail_closed: bool = True
    required: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()
    deadline_s: float = 30.0
    deep: bool = False
    deep_memory_mib: int = 256
    min_busbw_gbps: float | None = None
    allreduce_mib: int = 256
    allreduce_iterations: int = 20

    @property
    def on_cannot_check(self) -> str:
        return FAIL_CLOSED if self.fail_closed else FAIL_OPEN

    def override(self, **values: Any) -> Policy:
        """A copy with the given values; None means "not given" and keeps the current value."""
        given = {k: v for k, v in values.items() if v is not None}
        if "fail_on" in given and not isinstance(given["fail_on"], Severity):
            given["fail_on"] = Severity(given["fail_on"])
        for key in ("required", "ignore"):
            if key in given:
                given[key] = tuple(dict.fromkeys([*getattr(self, key), *given[key]]))
        return replace(self, **given)

    def to_json(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "fail_on": self.fail_on.value,
            "on_cannot_check": self.on_cannot_check,
            "deadline_s": self.deadline_s,
            "required": list(self.required),
            "ignore": list(self.ignore),
            "expect": {
                "gpus": self.expect_gpus,
                "model": self.expect_model,
                "min_free_memory_gib": self.min_free_memory_gib,
            },
            "deep": self.deep,
            "min_busbw_gbps": self.min_busbw_gbps,
        }


def _yaml_line(data: Any, where: str) -> int | None:
    """Line of the innermost mapping on a dotted schema path ('expect.gpus') in YAML read with lines."""
    line = getattr(data, "line", None)
    node = data
    for part in where.replace("[", ".").replace("]", "").split("."):
        if isinstance(node, dict) and part in node:
            node = node[part]
            line = getattr(node, "line", line)
        else:
            break
    return line


def policy_from_mapping(data: Any, source: str = "<policy>") -> Policy:
    """Validate a policy mapping (from YAML or a dict) and build a Policy."""
    from .inputs import type_name
    from .schemas import validate

    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise PolicyError(f"{source}: a policy is a mapping of keys (expect, fail_on, ...), not {type_name(data)}")
    problem = validate("policy", data)
    if problem:
        where = problem.split(":", 1)[0]
        line = _yaml_line(data, where)
        raise PolicyError(f"{source}{f':{line}' if line else ''}: {problem}")
    expect = data.get("expect", {})
    deep = data.get("deep", {})
    dist = data.get("distributed", {})
    defaults = Policy()
    return Policy(
        source=source,
        expect_gpus=expect.get("gpus"),
        expect_model=expect.get("model"),
        min_free_memory_gib=float(expect["min_free_memory_gib"]) if "min_free_memory_gib" in expect else None,
        fail_on=Severity(data.get("fail_on", "error")),
        fail_closed=data.get("on_cannot_check", FAIL_CLOSED) == FAIL_CLOSED,
        required=tuple(data.get("required", ())),
        ignore=tuple(data.get("ignore", ())),
        deadline_s=float(data.get("deadline_s", defaults.deadline_s)),
        deep=bool(deep.get("enabled", False)),
        deep_memory_mib=int(deep.get("memory_mib", defaults.deep_memory_mib)),
        min_busbw_gbps=float(dist["min_busbw_gbps"]) if "min_busbw_gbps" in dist else None,
        allreduce_mib=int(dist.get("allreduce_mib", defaults.allreduce_mib)),
        allreduce_iterations=int(dist.get("iterations", defaults.allreduce_iterations)),
    )


def load_policy(path: str | Path) -> Policy:
    """Read a policy YAML file; PolicyError names the file and line of any problem."""
    from .engine.loader import RuleLoadError, read_yaml

    try:
        data = read_yaml(Path(path), "policy file")
    except RuleLoadError as exc:
        raise PolicyError(str(exc)) from None
    return policy_from_mapping(data, str(path))


# ---------------------------------------------------------------------------
# Selectors: which findings the policy's required/ignore lists name.


def _rule_keys(ruleset: Any) -> dict[str, set[str]]:
    keys: dict[str, set[str]] = {}
    for rule in ruleset.rules:
        keys[rule.id] = {rule.id, rule.area, *rule.tags}
    for check_id, check in GATE_CHECKS.items():
        keys[check_id] = {check_id, *check.keys}
    return keys


def _hang_rules(ruleset: Any) -> set[str]:
    return {rule.id for rule in ruleset.rules if "hang" in rule.tags}


def check_selectors(policy: Policy, ruleset: Any) -> None:
    """Refuse selectors that name nothing, and required gate checks the policy does not run."""
    known: set[str] = set()
    for keys in _rule_keys(ruleset).values():
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


# ---------------------------------------------------------------------------
# Expectations as checks.


def _finding(
    check_id: str,
    subject: Subject,
    status: Status,
    message: str,
    evidence: list[tuple[str, Any]] | None = None,
    detail: str = "",
    cause: str = "",
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


def _nvml_unavailable(facts: Mapping[str, Any]) -> tuple[str, str] | None:
    """(cause, detail) when NVML did not give its GPU list, else None."""
    from .engine.subjects import NVML_REASON

    nvml = facts.get("nvml")
    if not isinstance(nvml, Mapping):
        return "nvml: error", "no NVML facts"
    status = str(nvml.get("status", "error"))
    if status == "ok" and isinstance(nvml.get("gpus"), list):
        return None
    error = str(nvml.get("error", "")).strip()
    return f"nvml: {NVML_REASON.get(status, 'error')}", f"NVML did not answer ({status})" + (
        f": {error}" if error else ""
    )


def expectation_findings(facts: Mapping[str, Any], policy: Policy, gpus: list[dict[str, Any]]) -> list[Finding]:
    from .engine.subjects import gpu_subject_ref

    out: list[Finding] = []
    nvml_problem = _nvml_unavailable(facts)
    nvidia = [g for g in gpus if g.get("vendor") == "nvidia"]
    listed = [g for g in nvidia if g.get("in_nvml") is True]

    if policy.expect_gpus is not None:
        want = policy.expect_gpus
        if nvml_problem:
            cause, detail = nvml_problem
            out.append(
                _finding(
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
                out.append(_finding("gate-gpu-count", HOST, Status.PASS, f"NVML lists {count} GPU(s), as expected"))
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
                out.append(_finding("gate-gpu-count", HOST, Status.FAIL, message, evidence, fix=fix))

    if policy.expect_model is not None:
        want_model = policy.expect_model
        if not nvidia and nvml_problem is None:
            out.append(
                _finding("gate-gpu-model", HOST, Status.FAIL, f"no NVIDIA GPU found; the policy expects {want_model}")
            )
        for g in nvidia:
            ref = gpu_subject_ref(g)
            name = g.get("name")
            if isinstance(name, Unavailable):
                out.append(
                    _finding(
                        "gate-gpu-model",
                        ref,
                        Status.UNKNOWN,
                        f"cannot check: gpu.name is unavailable ({name.reason})",
                        [("gpu.name", name)],
                        detail=name.detail,
                        cause=(nvml_problem[0] if nvml_problem else f"nvml: {name.reason}"),
                    )
                )
            elif want_model.casefold() in str(name).casefold():
                out.append(_finding("gate-gpu-model", ref, Status.PASS, f"{name}"))
            else:
                out.append(
                    _finding(
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
                    _finding(
                        "gate-free-memory",
                        ref,
                        Status.UNKNOWN,
                        f"cannot check: GPU memory is unavailable ({u.reason})",
                        [("gpu.memory_total_bytes", total), ("gpu.memory_used_bytes", used)],
                        detail=u.detail,
                        cause=(nvml_problem[0] if nvml_problem else f"nvml: {u.reason}"),
                    )
                )
                continue
            free = total - used
            evidence = [("gpu.memory_total_bytes", total), ("gpu.memory_used_bytes", used)]
            text = f"{free / GIB:.1f} GiB free of {total / GIB:.1f} GiB"
            if free >= need * GIB:
                out.append(_finding("gate-free-memory", ref, Status.PASS, f"{text} (policy: {need:g} GiB)"))
            else:
                procs = g.get("processes")
                held = f"; {procs} process(es) use it" if isinstance(procs, int) and procs > 0 else ""
                out.append(
                    _finding(
                        "gate-free-memory",
                        ref,
                        Status.FAIL,
                        f"{ref.label} has {text}, the policy needs {need:g} GiB free{held}",
                        evidence,
                    )
                )
    return out


# ---------------------------------------------------------------------------
# The verdict.


@dataclass(frozen=True)
class BlockingLine:
    """One printed line of a no-go: a blocking finding, or unjudged checks folded by their shared cause."""

    rule: str
    subject: Subject
    status: Status
    what: str
    fix: str
    count: int = 1
    # a line for one finding starts with its rule id; a folded group lists its rules at the end
    grouped: bool = False

    @property
    def text(self) -> str:
        head = self.what if self.grouped else f"{self.rule}: {self.what}"
        return head + (f" — fix: {self.fix}" if self.fix else "")

    def to_json(self) -> dict[str, Any]:
        return {
            "rule": self.rule,
            "subject": self.subject.to_json(),
            "status": self.status.value,
            "line": self.text,
            "fix": self.fix,
            "count": self.count,
        }


def _first_line(text: str) -> str:
    """The fix's first instruction; one that ends in a colon keeps the command that follows it."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    if not lines:
        return ""
    if lines[0].endswith(":") and len(lines) > 1:
        return f"{lines[0]} {lines[1]}"
    return lines[0]


def _said(f: Finding) -> str:
    """The finding's message with its subject named once."""
    message = f.message.strip()
    if f.subject.kind == "host" or f.subject.label in message or (f.subject.bus_id and f.subject.bus_id in message):
        return message
    return f"{f.subject.label}: {message}"


def _cause_text(cause: str) -> str:
    source, _, reason = cause.partition(": ")
    name = {"nvml": "NVML", "pci": "PCI", "numa": "NUMA", "torch": "torch", "deep": "the device test"}.get(
        source, source
    )
    return f"{name} facts are unavailable ({reason})" if source != "deep" else f"{name}: {reason}"


def blocking_lines(blocking: Sequence[Finding]) -> list[BlockingLine]:
    lines: list[BlockingLine] = []
    groups: dict[str, list[Finding]] = {}
    for f in blocking:
        if f.status is Status.FAIL:
            lines.append(BlockingLine(f.rule_id, f.subject, f.status, _said(f), _first_line(f.fix)))
        elif f.status is Status.UNKNOWN and f.cause:
            groups.setdefault(f.cause, []).append(f)
        else:
            how = "broke" if f.status is Status.ERROR else "could not be checked"
            detail = f" ({f.detail})" if f.detail else ""
            lines.append(
                BlockingLine(f.rule_id, f.subject, f.status, f"{f.subject.label}: {how}: {f.message}{detail}", "")
            )
    for cause, group in groups.items():
        first = group[0]
        if len(group) == 1:
            detail = f" ({first.detail})" if first.detail and first.detail not in first.message else ""
            lines.append(BlockingLine(first.rule_id, first.subject, first.status, _said(first) + detail, ""))
            continue
        subjects = list(dict.fromkeys(f.subject.label for f in group))
        where = ", ".join(subjects) if len(subjects) <= 3 else f"{len(subjects)} subjects"
        detail = max((f.detail for f in group), key=len)
        rules = list(dict.fromkeys(f.rule_id for f in group))
        shown = ", ".join(rules[:4]) + (f" and {len(rules) - 4} more" if len(rules) > 4 else "")
        text = f"{where}: {len(group)} checks could not be judged: {detail or _cause_text(cause)}"
        text += f" [{shown}]"
        lines.append(BlockingLine(rules[0], first.subject, Status.UNKNOWN, text, "", count=len(group), grouped=True))
    return lines


@dataclass
class GateReport:
    policy: Policy
    findings: list[Finding]
    blocking: list[Finding]
    not_judged: list[Finding]
    lines: list[BlockingLine]
    facts: Mapping[str, Any]
    facts_origin: str = "live"
    duration_s: float = 0.0
    generated_epoch: float = field(default_factory=time.time)
    deep: Any = None  # deep.DeepResult when the device test ran
    distributed: dict[str, Any] | None = None
    # rules whose failure means a source did not answer (tag `hang`): could not check, not failed
    hang_rules: frozenset[str] = frozenset()

    def cannot_check(self, f: Finding) -> bool:
        """The check could not be judged: inputs unavailable, the rule broke, or a source did not answer."""
        return f.status in (Status.UNKNOWN, Status.ERROR) or (f.status is Status.FAIL and f.rule_id in self.hang_rules)

    @property
    def generated_at(self) -> str:
        stamp = datetime.fromtimestamp(int(self.generated_epoch), timezone.utc)
        return stamp.isoformat(timespec="seconds").replace("+00:00", "Z")

    @property
    def go(self) -> bool:
        return not self.blocking

    @property
    def verdict(self) -> str:
        return "go" if self.go else "no-go"

    @property
    def exit_code(self) -> int:
        return 0 if self.go else 1

    def is_blocking(self, f: Finding) -> bool:
        return any(f is b for b in self.blocking)

    def counts(self) -> dict[str, int]:
        out = {s.value: 0 for s in Status}
        for f in self.findings:
            out[f.status.value] += 1
        out["blocking"] = len(self.blocking)
        out["not_judged"] = len(self.not_judged)
        return out

    def hostname(self) -> str:
        host = self.facts.get("host")
        name = host.get("hostname") if isinstance(host, Mapping) else None
        return name if isinstance(name, str) else "unknown"

    def gpus(self) -> list[dict[str, Any]]:
        """One row per GPU: identity, memory, and which checks failed on it."""
        from .engine.subjects import gpu_subjects

        def known(value: Any, kind: type) -> Any:
            return value if isinstance(value, kind) and not isinstance(value, bool) else None

        rows = []
        for g in gpu_subjects(self.facts):
            bus = known(g.get("bus_id"), str)
            on_it = [f for f in self.findings if f.subject.kind == "gpu" and f.subject.bus_id == bus]
            rows.append(
                {
                    "index": known(g.get("index"), int),
                    "bus_id": bus,
                    "uuid": known(g.get("uuid"), str),
                    "name": known(g.get("name"), str),
                    "memory_total_bytes": known(g.get("memory_total_bytes"), int),
                    "memory_used_bytes": known(g.get("memory_used_bytes"), int),
                    "utilization_gpu_pct": known(g.get("utilization_gpu_pct"), int),
                    "failed_checks": list(dict.fromkeys(f.rule_id for f in on_it if f.status is Status.FAIL)),
                    "blocking": any(self.is_blocking(f) for f in on_it),
                }
            )
        return rows

    def to_dict(self) -> dict[str, Any]:
        from . import __version__
        from .render.text import header

        out: dict[str, Any] = {
            "report_schema_version": 1,
            "kind": "gate",
            "gpudoctor_version": __version__,
            "generated_at": self.generated_at,
            "hostname": self.hostname(),
            "host": header(self.facts),
            "facts_origin": self.facts_origin,
            "verdict": self.verdict,
            "exit_code": self.exit_code,
            "duration_s": round(self.duration_s, 3),
            "policy": self.policy.to_json(),
            "summary": self.counts(),
            "blocking": [line.to_json() for line in self.lines],
            "gpus": self.gpus(),
            "findings": [
                {**f.to_json(), "blocking": self.is_blocking(f)} for f in self.findings if f.status is not Status.SKIP
            ],
        }
        if self.deep is not None:
            out["deep"] = self.deep.to_json()
        if self.distributed is not None:
            out["distributed"] = self.distributed
        return out


# Reasons that say "gpudoctor may not look here" or "there is nothing to look at", not "the machine
# did not answer": such a check is not judged and blocks only when required.
NOT_VISIBLE_REASONS = ("no_permission", "not_supported")


def not_visible(f: Finding) -> bool:
    """An unknown finding whose facts are unavailable for lack of permission or of the feature."""
    if f.status is not Status.UNKNOWN or not f.cause:
        return False
    reason = f.cause.partition(": ")[2].split(" ", 1)[0]
    return reason in NOT_VISIBLE_REASONS


def judge(
    facts: Mapping[str, Any],
    ruleset: Any,
    policy: Policy,
    *,
    deep_result: Any = None,
    extra: Iterable[Finding] = (),
    facts_origin: str = "live",
    duration_s: float = 0.0,
    deadline: float | None = None,
) -> GateReport:
    """Run the policy's checks over the facts and decide. Pure: reads nothing but its arguments
    (and the clock, against ``deadline``: rules not judged by then are unknown, cause timeout)."""
    from .engine.runner import run_rules, select
    from .engine.subjects import gpu_subjects

    rule_keys = _rule_keys(ruleset)
    ignored = set(policy.ignore)
    rules = select(ruleset.rules, (), policy.ignore)
    findings = run_rules(ruleset, facts, rules, deadline=deadline)
    gate_findings = expectation_findings(facts, policy, gpu_subjects(facts))
    if deep_result is not None:
        from .deep import deep_findings

        gate_findings += deep_findings(deep_result, facts)
    gate_findings += list(extra)
    findings += [f for f in gate_findings if not (rule_keys.get(f.rule_id, {f.rule_id}) & ignored)]

    hang = _hang_rules(ruleset)
    required = set(policy.required)
    blocking: list[Finding] = []
    not_judged: list[Finding] = []
    for f in findings:
        if f.status in (Status.PASS, Status.SKIP):
            continue
        is_required = bool(rule_keys.get(f.rule_id, {f.rule_id}) & required)
        can_block = is_required or f.severity.rank >= policy.fail_on.rank
        cannot_check = f.status in (Status.UNKNOWN, Status.ERROR) or (f.status is Status.FAIL and f.rule_id in hang)
        if not cannot_check:
            if can_block:
                blocking.append(f)
        elif can_block and (is_required or (policy.fail_closed and not not_visible(f))):
            blocking.append(f)
        else:
            not_judged.append(f)
    return GateReport(
        policy=policy,
        findings=findings,
        blocking=blocking,
        not_judged=not_judged,
        lines=blocking_lines(blocking),
        facts=facts,
        facts_origin=facts_origin,
        duration_s=duration_s,
        deep=deep_result,
        hang_rules=frozenset(hang),
    )


# ---------------------------------------------------------------------------
# One gate run: facts (snapshot, fixture root or this machine), the device test, the verdict.


def run(
    policy: Policy,
    *,
    facts_file: str | None = None,
    root: str | None = None,
    sysfs_root: str | None = None,
    procfs_root: str | None = None,
    python: str | None = None,
    torch_import: bool = False,
    nvml_timeout: float = 5.0,
    rule_dirs: Sequence[str] = (),
    builtin_rules: bool = True,
    deep_devices: Sequence[int] | None = None,
) -> GateReport:
    """Gate this machine (or a snapshot) under the policy's deadline. Raises GateError when it cannot run."""
    import os

    started = time.monotonic()
    deadline = started + policy.deadline_s
    probing = root or sysfs_root or procfs_root or python or torch_import
    if facts_file and probing:
        raise GateError("--facts judges a saved snapshot; it cannot be combined with --root/--python/--torch-import")
    if facts_file and policy.deep:
        raise GateError("--deep tests this machine's GPUs; it cannot be combined with --facts")
    for label, path in (("--root", root), ("--sysfs-root", sysfs_root), ("--procfs-root", procfs_root)):
        if path is not None and not Path(path).is_dir():
            raise GateError(f"{label} {path}: no such directory")
    if python is not None and not (os.path.isfile(python) and os.access(python, os.X_OK)):
        raise GateError(f"--python {python}: not an executable file")

    deep_run = None
    collection = None
    try:
        ignored = set(policy.ignore)
        if policy.deep and not ignored & {"gate", "deep"}:
            from .deep import start_deep

            # Steps the policy ignores are not run at all: NCCL's set-up is the costliest part.
            skip = [step for step in ("p2p", "allreduce") if f"gate-deep-{step}" in ignored]
            # Started first: its torch import overlaps the probes.
            deep_run = start_deep(
                python or sys.executable,
                deadline=deadline,
                memory_mib=policy.deep_memory_mib,
                devices=deep_devices,
                extra_args=["--skip", ",".join(skip)] if skip else (),
            )
        if not facts_file:
            from .context import make_context
            from .probes import start_collection

            ctx = make_context(
                root=root,
                sysfs_root=sysfs_root,
                procfs_root=procfs_root,
                python=python,
                timeout=policy.deadline_s,
                nvml_timeout=nvml_timeout,
                torch_import=torch_import,
            )
            collection = start_collection(ctx)
        ruleset = _load_rules(rule_dirs, builtin_rules)
        check_selectors(policy, ruleset)
        if facts_file:
            from .facts import SnapshotError, load_snapshot

            try:
                facts = load_snapshot(facts_file)
            except SnapshotError as exc:
                raise GateError(str(exc)) from None
            origin = facts_file
        else:
            assert collection is not None
            facts, collection = collection.finish(), None
            origin = "live" if not (root or sysfs_root or procfs_root) else f"root {root or '/'}"
    except BaseException:
        if collection is not None:
            collection.abort()
        if deep_run is not None:
            deep_run.cancel("the gate stopped before the device test finished")
        raise

    deep_result = None
    if deep_run is not None:
        nvml = facts.get("nvml")
        if isinstance(nvml, Mapping) and nvml.get("status") == "timeout":
            # The driver did not answer NVML; the device test would only hang until the deadline.
            deep_result = deep_run.cancel("NVML did not answer, so the driver is not responding", "nvml: timeout")
        else:
            deep_result = deep_run.result()
    from .engine.runner import judging_deadline

    return judge(
        facts,
        ruleset,
        policy,
        deep_result=deep_result,
        facts_origin=origin,
        duration_s=time.monotonic() - started,
        deadline=judging_deadline(deadline),
    )


def _load_rules(rule_dirs: Sequence[str], builtin: bool) -> Any:
    from .engine.loader import RuleLoadError, load_rules

    for d in rule_dirs:
        if not Path(d).is_dir():
            raise GateError(f"--rules {d}: no such directory")
    try:
        return load_rules(rule_dirs, include_builtin=builtin)
    except RuleLoadError as exc:
        raise GateError(f"bad rule file: {exc}") from None


def gate(
    *,
    policy: str | Path | Mapping[str, Any] | Policy | None = None,
    expect_gpus: int | None = None,
    expect_model: str | None = None,
    min_free_memory_gib: float | None = None,
    fail_on: str | None = None,
    fail_open: bool | None = None,
    required: Sequence[str] | None = None,
    ignore: Sequence[str] | None = None,
    deep: bool | None = None,
    timeout: float | None = None,
    nvml_timeout: float = 5.0,
    facts: str | None = None,
    root: str | None = None,
    python: str | None = None,
    rules: Sequence[str] = (),
    raise_on_no_go: bool = True,
) -> GateReport:
    """Gate this machine from Python (a job script) and return the report.

    ``policy`` is a policy file, a mapping with the file's keys, or a Policy; the keyword
    arguments override it, as the command-line flags do. On no-go raises :class:`GateFailed`
    (``.findings``, ``.report``) unless ``raise_on_no_go=False``; raises :class:`GateError`
    when the gate cannot run (bad policy, bad snapshot). Never hangs past ``timeout``.
    """
    if policy is None:
        base = Policy()
    elif isinstance(policy, Policy):
        base = policy
    elif isinstance(policy, Mapping):
        base = policy_from_mapping(dict(policy), "<policy>")
    else:
        base = load_policy(policy)
    effective = base.override(
        expect_gpus=expect_gpus,
        expect_model=expect_model,
        min_free_memory_gib=min_free_memory_gib,
        fail_on=fail_on,
        fail_closed=None if fail_open is None else not fail_open,
        required=tuple(required) if required else None,
        ignore=tuple(ignore) if ignore else None,
        deep=deep,
        deadline_s=timeout,
    )
    if effective.fail_on not in (Severity.ERROR, Severity.WARNING):
        raise PolicyError("fail_on must be error or warning")
    report = run(effective, facts_file=facts, root=root, python=python, nvml_timeout=nvml_timeout, rule_dirs=rules)
    if raise_on_no_go and not report.go:
        raise GateFailed(report)
    return report


class _CallableModule(type(sys)):  # type: ignore[misc]
    """`from gpudoctor import gate` may hand out this module instead of the function (when the
    module was imported first); calling it then still runs the gate."""

    def __call__(self, *args: Any, **kwargs: Any) -> GateReport:
        return gate(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
