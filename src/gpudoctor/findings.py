"""Findings: what a rule concluded about one subject, and the report of a run."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any


class Status(str, Enum):
    PASS = "pass"
    FAIL = "fail"
    UNKNOWN = "unknown"  # inputs unavailable: cannot judge
    ERROR = "error"  # the rule itself broke
    SKIP = "skip"  # the rule does not apply to this subject


class Severity(str, Enum):
    INFO = "info"
    WARNING = "warning"
    ERROR = "error"

    @property
    def rank(self) -> int:
        return {"info": 0, "warning": 1, "error": 2}[self.value]


# Areas in report order, with the heading a person sees.
AREAS: dict[str, str] = {
    "driver": "Driver & CUDA",
    "torch": "Torch build",
    "kernel": "Kernel & OS",
    "rocm": "ROCm",
    "numa": "NUMA",
    "pcie": "PCIe",
    "thermal": "Thermal & clocks",
    "health": "GPU health",
    "env": "Environment",
}


@dataclass(frozen=True)
class Subject:
    """What a finding is about: the host, a GPU, a NUMA node or a NIC."""

    kind: str  # host | gpu | numa_node | nic
    label: str  # "host", "GPU 0 (0000:18:00.0)", "node 1", "mlx5_0 (0000:19:00.0)"
    index: int | None = None
    bus_id: str | None = None
    uuid: str | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "label": self.label}
        if self.index is not None:
            out["index"] = self.index
        if self.bus_id is not None:
            out["bus_id"] = self.bus_id
        if self.uuid is not None:
            out["uuid"] = self.uuid
        return out


HOST = Subject("host", "host")


@dataclass
class Finding:
    rule_id: str
    title: str
    area: str
    severity: Severity
    status: Status
    subject: Subject
    message: str
    evidence: list[tuple[str, Any]] = field(default_factory=list)
    fix: str = ""
    docs: str = ""
    # For unknown and error findings: why the check could not be judged.
    detail: str = ""
    # For unknown findings: the source whose facts were missing and why ("nvml: driver_not_loaded"),
    # so a report can say once that many checks could not run for the same reason.
    cause: str = ""

    def to_json(self) -> dict[str, Any]:
        from .facts import to_jsonable

        return {
            "rule": self.rule_id,
            "title": self.title,
            "area": self.area,
            "severity": self.severity.value,
            "status": self.status.value,
            "subject": self.subject.to_json(),
            "message": self.message,
            "evidence": [{"fact": path, "value": to_jsonable(value)} for path, value in self.evidence],
            "fix": self.fix,
            "detail": self.detail,
            "docs": self.docs,
        }


@dataclass
class Report:
    findings: list[Finding]
    fail_on: Severity = Severity.ERROR
    facts_origin: str = "live"
    host_label: str = ""
    rules_loaded: int = 0

    def counts(self) -> dict[str, int]:
        out = {s.value: 0 for s in Status}
        for f in self.findings:
            out[f.status.value] += 1
        return out

    def blocking(self) -> list[Finding]:
        """Failed findings at or above the fail-on severity."""
        return [f for f in self.findings if f.status is Status.FAIL and f.severity.rank >= self.fail_on.rank]

    @property
    def exit_code(self) -> int:
        return 1 if self.blocking() else 0
