"""Findings: what a rule concluded about one subject, and the report of a run.

Bounds. Rule files (``--rules DIR``) and snapshots (``check --facts FILE``) are untrusted, and a
finding repeats what a rule wrote and what the facts held once per rule and subject, so what
findings may hold is bounded here and enforced by the runner (engine/runner.py):

- every rendered message and fix, and every detail, at most :data:`MAX_TEXT_CHARS` (4 KiB)
  characters; the rest is cut with a visible marker, ``' … [cut: N more characters]'``
  (message templates are cut while they render: engine/templates.py ``Template.render``);
- a subject's label, bus id and uuid, a title and a cause, at most :data:`MAX_LABEL_CHARS`;
- at most :data:`MAX_EVIDENCE_ITEMS` (64) facts as evidence per finding, the rest counted in a
  last ``("…", "[cut: N more facts read]")`` entry; an evidence string is cut like a message and
  a list or tuple holds at most :data:`MAX_EVIDENCE_CELLS` items and string characters in all;
- a rule judges at most :data:`MAX_SUBJECTS_PER_RULE` (16384) subjects; the others get one
  "unknown" finding saying how many were left out (cause ``engine: limit``);
- all findings of one run hold at most :data:`MAX_REPORT_CHARS` (64 Mi) characters of text
  (:class:`ReportBudget`); past that a finding keeps its rule, subject and status (so the exit
  code and the counts stay right) but its message says it was cut and it carries no fix, detail
  or evidence.

Also: a finding for a rule the run had no time left for is "unknown" with cause
``engine: timeout`` (see ``run_rules(deadline=...)``).

Causes. An unknown finding says why it could not be judged as a :class:`Cause`: the source whose
facts were missing and the reason (``Cause("nvml", "timeout")``). Layers pass it as it is; it
becomes words for people in :meth:`Cause.words` (and its parts, :attr:`Cause.name` and
:attr:`Cause.said`) and JSON in :meth:`Cause.to_json`, nowhere else.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from enum import Enum
from typing import Any, Iterable, Mapping

from .frozen import Frozen

MAX_TEXT_CHARS = 4096
MAX_LABEL_CHARS = 256
MAX_EVIDENCE_ITEMS = 64
MAX_EVIDENCE_CELLS = 16384
MAX_SUBJECTS_PER_RULE = 16384
MAX_REPORT_CHARS = 64 << 20

def cut_marker(more: int) -> str:
    """What replaces the end of a text that was cut: how many characters are not shown."""
    return f" … [cut: {more} more characters]"


def cut_text(text: str, limit: int = MAX_TEXT_CHARS) -> str:
    """``text`` if it has at most ``limit`` characters, else its start and a :func:`cut_marker`."""
    if len(text) <= limit:
        return text
    return text[:limit] + cut_marker(len(text) - limit)


# Room a cut marker takes past the limit: a text that long was cut already (a rendered message).
MARKER_ROOM = 64


def _bound(text: str, limit: int = MAX_TEXT_CHARS) -> str:
    return text if len(text) <= limit + MARKER_ROOM else cut_text(text, limit)


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


# What a failed finding recommends a scheduler or operator do with the node (a rule's action:,
# rules.schema.json; NONE_ACTION where a rule pack's rule says nothing), least drastic first: where one
# action must speak for a GPU or a node, the last one needed covers the others (a reboot resets every
# GPU; hardware to inspect outweighs all).
ACTIONS = ("none", "restart-job", "fix-software", "reset-gpu", "reboot-node", "drain-and-inspect-hardware")
NONE_ACTION = "none"


def action_rank(action: str) -> int:
    """Where ``action`` stands in ACTIONS (an unknown one counts as none)."""
    return ACTIONS.index(action) if action in ACTIONS else 0


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
    "rdma": "RDMA & InfiniBand",
    # the profile-* checks of `check --profile` and the gate policy's `profile:` (fleet/profile.py)
    "profile": "Node profile",
    "gate": "Gate checks (gpudoctor gate only)",
}


class Subject(Frozen):
    """What a finding is about: the host, a GPU, a NUMA node or a NIC."""

    __slots__ = ("kind", "label", "index", "bus_id", "uuid")
    kind: str  # host | gpu | numa_node | nic | pci_port
    label: str  # "host", "GPU 0 (0000:18:00.0)", "node 1", "mlx5_0 (0000:19:00.0)"
    index: int | None
    bus_id: str | None
    uuid: str | None

    def __init__(
        self, kind: str, label: str, index: int | None = None, bus_id: str | None = None, uuid: str | None = None
    ) -> None:
        object.__setattr__(self, "kind", kind)
        object.__setattr__(self, "label", label)
        object.__setattr__(self, "index", index)
        object.__setattr__(self, "bus_id", bus_id)
        object.__setattr__(self, "uuid", uuid)

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


# How a cause's source is named in a sentence; a facts section not listed is named as it is.
SOURCE_NAMES = {"nvml": "NVML", "pci": "PCI", "numa": "NUMA", "torch": "torch", "deep": "the device test"}


class Cause(Frozen):
    """Why an unknown finding could not be judged: the source whose facts were missing and why.

    ``source``: a facts section (``nvml``, ``pci``, ``torch``, ...), ``engine`` (the run's time
    limit, a rule's subject limit) or ``deep`` (the device test). ``reason``: an unavailable
    reason (``timeout``, ``driver_not_loaded``, ``no_permission``, ...) or the engine's
    (``timeout``, ``limit``). ``note``: a qualifier said after the reason, ``hung`` for a device
    test step that was still running when the test stopped. Findings with the same cause are
    folded into one line of a report, so equal causes must mean the same thing."""

    __slots__ = ("source", "reason", "note")
    source: str
    reason: str
    note: str

    def __init__(self, source: str, reason: str, note: str = "") -> None:
        object.__setattr__(self, "source", source)
        object.__setattr__(self, "reason", reason)
        object.__setattr__(self, "note", note)

    @property
    def name(self) -> str:
        """The source as a sentence names it: "NVML", "the device test"."""
        return SOURCE_NAMES.get(self.source, self.source)

    @property
    def said(self) -> str:
        """The reason with its note: "timeout", "timeout (hung)"."""
        return f"{self.reason} ({self.note})" if self.note else self.reason

    def words(self) -> str:
        """The cause for people: "NVML facts unavailable (timeout)", "the device test: not_found"."""
        if self.source == "deep":
            return f"{self.name}: {self.said}"
        return f"{self.name} facts unavailable ({self.said})"

    def to_json(self) -> dict[str, str]:
        out = {"source": self.source, "reason": self.reason}
        if self.note:
            out["note"] = self.note
        return out

    def bounded(self) -> Cause:
        """The cause with each part at most MAX_LABEL_CHARS (a source and a reason can come from
        a rule pack's fact paths and a snapshot's unavailable markers)."""
        room = MAX_LABEL_CHARS + MARKER_ROOM
        if max(len(self.source), len(self.reason), len(self.note)) <= room:
            return self
        return Cause(_bound(self.source, MAX_LABEL_CHARS), _bound(self.reason, MAX_LABEL_CHARS), _bound(self.note, 64))

    @property
    def chars(self) -> int:
        return len(self.source) + len(self.reason) + len(self.note)


# Causes of unknown findings the engine itself gives (the others name a probe: nvml, timeout).
TIMEOUT_CAUSE = Cause("engine", "timeout")
LIMIT_CAUSE = Cause("engine", "limit")


def bounded_subject(subject: Subject) -> Subject:
    """The subject with a label, bus id and uuid of at most MAX_LABEL_CHARS (they come from the facts)."""
    room = MAX_LABEL_CHARS + MARKER_ROOM
    if len(subject.label) <= room and len(subject.bus_id or "") <= room and len(subject.uuid or "") <= room:
        return subject
    return Subject(
        subject.kind,
        _bound(subject.label, MAX_LABEL_CHARS),
        subject.index,
        _bound(subject.bus_id, MAX_LABEL_CHARS) if subject.bus_id is not None else None,
        _bound(subject.uuid, MAX_LABEL_CHARS) if subject.uuid is not None else None,
    )


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
    # the rule's references (sources), at most 8, each cut to 400 characters (engine.runner)
    refs: tuple[str, ...] = ()
    # For unknown and error findings: why the check could not be judged.
    detail: str = ""
    # For unknown findings: the source whose facts were missing and why (Cause("nvml",
    # "driver_not_loaded")), so a report can say once that many checks could not run for it.
    cause: Cause | None = None
    # The rule's action (ACTIONS): in JSON as recommended_action, on failed findings only (a check
    # that passed or could not be judged recommends nothing of its own).
    action: str = NONE_ACTION

    def to_json(self) -> dict[str, Any]:
        from .facts import to_jsonable

        out = {
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
            "cause": self.cause.to_json() if self.cause is not None else None,
            "docs": self.docs,
            "refs": list(self.refs),
        }
        if self.status is Status.FAIL:
            out["recommended_action"] = self.action
        return out


def first_to_act_on(findings: Iterable[Finding]) -> Finding | None:
    """Of ``findings`` (say, the blocking ones about one GPU), the one to name when only one can
    be: the failed finding with the most drastic action, as its action covers the others' (the
    first such, in the order given); a finding that could not be judged comes after every failed
    one, as it recommends nothing. None for no findings."""
    best: Finding | None = None
    best_rank = -1
    for f in findings:
        rank = action_rank(f.action) + 1 if f.status is Status.FAIL else 0
        if rank > best_rank:
            best, best_rank = f, rank
    return best


def _value_cost(value: Any, limit: int) -> int:
    """Items and string characters in an evidence value, counted until past ``limit``."""
    total = 0
    stack = [value]
    while stack and total <= limit:
        item = stack.pop()
        if isinstance(item, str):
            total += 1 + len(item)
        elif isinstance(item, (list, tuple)):
            total += 1
            stack.extend(item)
        else:
            total += 1
    return total


_SCALARS = frozenset({int, float, bool, type(None)})


def _bounded_value(value: Any, room: int, depth: int = 0) -> tuple[Any, int]:
    """An evidence value cut to about ``room`` items and characters, and what it costs."""
    from .facts import Unavailable

    if type(value) in _SCALARS:
        return value, 1
    if isinstance(value, str):
        text = cut_text(value, min(MAX_TEXT_CHARS, max(room, 0)))
        return text, 1 + len(text)
    if isinstance(value, Unavailable):
        if len(value.detail) > MAX_TEXT_CHARS:
            value = Unavailable(value.reason, cut_text(value.detail))
        return value, 1 + len(value.detail)
    if isinstance(value, (list, tuple)):
        cost = _value_cost(value, room)
        if cost <= room:
            return value, cost
        out: list[Any] = []
        used = 1
        for i, item in enumerate(value):
            if used >= room or depth >= 16:
                out.append(f"… [cut: {len(value) - i} more items]")
                used += 32
                break
            part, spent = _bounded_value(item, room - used, depth + 1)
            out.append(part)
            used += spent
        return (out if isinstance(value, list) else tuple(out)), used
    return value, 1


def bounded_evidence(evidence: list[tuple[str, Any]]) -> tuple[list[tuple[str, Any]], int]:
    """Evidence cut to MAX_EVIDENCE_ITEMS facts of bounded size, and the text it costs (the
    list itself when nothing in it needs cutting)."""
    if len(evidence) <= MAX_EVIDENCE_ITEMS:
        cost = 0
        for path, value in evidence:  # most evidence: a few short paths to numbers and short strings
            kind = type(value)
            if len(path) > MAX_LABEL_CHARS + MARKER_ROOM:
                break
            if kind in _SCALARS:
                cost += len(path) + 1
            elif kind is str and len(value) <= MAX_TEXT_CHARS + MARKER_ROOM:
                cost += len(path) + 1 + len(value)
            else:
                break
        else:
            return evidence, cost
    out: list[tuple[str, Any]] = []
    cost = 0
    for path, value in evidence[:MAX_EVIDENCE_ITEMS]:
        if len(path) > MAX_LABEL_CHARS + MARKER_ROOM:
            path = cut_text(path, MAX_LABEL_CHARS)
        kind = type(value)
        if kind in _SCALARS:  # most facts: nothing to cut
            spent = 1
        elif kind is str and len(value) <= MAX_TEXT_CHARS + MARKER_ROOM:
            spent = 1 + len(value)
        else:
            value, spent = _bounded_value(value, MAX_EVIDENCE_CELLS)
        out.append((path, value))
        cost += len(path) + spent
    if len(evidence) > MAX_EVIDENCE_ITEMS:
        out.append(("…", f"[cut: {len(evidence) - MAX_EVIDENCE_ITEMS} more facts read]"))
        cost += 40
    return out, cost


class ReportBudget:
    """The text all findings of one run may hold together (MAX_REPORT_CHARS); see the module docstring."""

    def __init__(self, limit: int | None = None) -> None:
        self.limit = MAX_REPORT_CHARS if limit is None else limit
        self.left = self.limit
        self.cut = 0  # findings whose text was dropped
        # the subject and references last found within bounds, and what those references cost:
        # one rule's findings share them (a GPU rule's subjects are shared by every GPU rule)
        self._subject: Subject | None = None
        self._refs: tuple[str, ...] = ()
        self._refs_cost = 0

    def admit(self, finding: Finding) -> Finding:
        """The finding with every text bounded, or, once the budget is spent, with its text dropped."""
        f = finding
        if f.subject is not self._subject:
            subject = bounded_subject(f.subject)
            if subject is f.subject:
                self._subject = subject
            f.subject = subject
        refs = f.refs
        if refs is not self._refs:
            self._refs, self._refs_cost = refs, sum(map(len, refs))
        if len(f.title) > MAX_LABEL_CHARS:
            f.title = _bound(f.title, MAX_LABEL_CHARS)
        if f.cause is not None:
            f.cause = f.cause.bounded()
        if max(len(f.message), len(f.fix), len(f.detail), len(f.docs)) > MAX_TEXT_CHARS:
            f.message = _bound(f.message)
            f.fix = _bound(f.fix)
            f.detail = _bound(f.detail)
            f.docs = _bound(f.docs)
        f.evidence, evidence_cost = bounded_evidence(f.evidence)
        cost = (
            len(f.title)
            + (f.cause.chars if f.cause is not None else 0)
            + len(f.message)
            + len(f.fix)
            + len(f.detail)
            + len(f.docs)
            + self._refs_cost
            + len(f.subject.label)
            + evidence_cost
        )
        if cost <= self.left:
            self.left -= cost
            return f
        self.left = 0
        self.cut += 1
        f.message = f"[cut: the findings of this run reached their limit of {self.limit} characters of text]"
        f.fix = f.detail = f.docs = ""
        f.refs = ()
        f.evidence = []
        return f


def epoch_stamp(epoch: float) -> str:
    """A Unix time as the reports' ``generated_at``: UTC, RFC 3339, whole seconds."""
    return datetime.fromtimestamp(int(epoch), timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


def hostname_of(facts: Mapping[str, Any]) -> str:
    """The reports' top-level ``hostname``: the facts' hostname, or "unknown"."""
    host = facts.get("host")
    name = host.get("hostname") if isinstance(host, Mapping) else None
    return name if isinstance(name, str) else "unknown"


@dataclass
class Report:
    findings: list[Finding]
    fail_on: Severity = Severity.ERROR
    facts_origin: str = "live"
    host_label: str = ""
    rules_loaded: int = 0
    # when the report was made (the JSON's generated_at); goldens fix it, as the gate's do
    generated_epoch: float = field(default_factory=time.time)

    @property
    def generated_at(self) -> str:
        return epoch_stamp(self.generated_epoch)

    def counts(self) -> dict[str, int]:
        out = {s.value: 0 for s in Status}
        for f in self.findings:
            out[f.status.value] += 1
        return out

    def blocking(self) -> list[Finding]:
        """Failed findings at or above the fail-on severity."""
        return [f for f in self.findings if f.status is Status.FAIL and f.severity.rank >= self.fail_on.rank]

    def nothing_judged(self) -> bool:
        """Whether not one check could be judged: none passed, none failed, and some were unknown or
        rule errors (every probe timed out, say). `check` must not call that OK."""
        c = self.counts()
        return c["pass"] == 0 and c["fail"] == 0 and c["unknown"] + c["error"] > 0

    @property
    def exit_code(self) -> int:
        """1 a check failed at or above --fail-on; 3 nothing could be judged; else 0."""
        if self.blocking():
            return 1
        return 3 if self.nothing_judged() else 0
