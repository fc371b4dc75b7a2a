"""The gate report in the Prometheus text exposition format, for node_exporter's textfile
collector (``--collector.textfile.directory``): write it as ``<dir>/gpudoctor.prom``.

Metrics (all gauges):

- ``gpudoctor_gate_go``                  1 when the gate said go, 0 for no-go
- ``gpudoctor_gate_blocking``            findings that made it no-go
- ``gpudoctor_gate_duration_seconds``    how long the gate ran
- ``gpudoctor_gate_timestamp_seconds``   when it ran (Unix time)
- ``gpudoctor_gate_checks{status}``      findings per status (pass, fail, unknown, error, skip)
- ``gpudoctor_check_failed{check,area,severity,subject,gpu,pci_bus_id}``     1 failed, else 0
- ``gpudoctor_check_unjudged{...}``      1 when the check could not be judged
- ``gpudoctor_check_blocking{...}``      1 when it made the gate no-go
- ``gpudoctor_gpu_healthy{gpu,UUID,pci_bus_id,device,modelName}``   0 when a blocking finding is
  about the GPU
- ``gpudoctor_gpu_health{<the same GPU labels>,check,action}``   1 healthy, 0 when a blocking
  finding is about the GPU; then ``check`` names it and ``action`` says what it recommends
  (restart-job, fix-software, reset-gpu, reboot-node, drain-and-inspect-hardware, none; "" for a
  check that could not be judged). Of several, the one whose action covers the others'
  (findings.first_to_act_on); a healthy GPU has ``check=""`` and ``action=""``. For a scheduler
  that acts per GPU: ``gpudoctor_gpu_health == 0`` drains it, ``action`` says how to recover it
- ``gpudoctor_gpu_failed_checks{<the same GPU labels>}``   failed checks on the GPU
- ``gpudoctor_gpu_memory_total_bytes{...}``, ``gpudoctor_gpu_memory_used_bytes{...}``
- ``gpudoctor_info{version,policy,on_cannot_check}``  always 1

The GPU labels are dcgm-exporter's, named and written as it writes them, so a dashboard joins the
two with ``on(UUID)`` or ``on(gpu, pci_bus_id)``: ``gpu`` the index in decimal, ``UUID``,
``pci_bus_id`` in NVML's form (``00000000:9A:00.0``), ``device`` ``nvidia<index>``, ``modelName``
the NVML name (NVIDIA/dcgm-exporter at d5e5f510, internal/pkg/rendermetrics/render_metrics.go,
the GPU template, and internal/pkg/collector/base_collector.go, createMetric; its test data writes
bus ids "00000000:1B:00.0"). Host-level checks carry ``gpu=""`` and ``pci_bus_id=""``; a value
gpudoctor does not know is "". No ``instance`` or ``Hostname`` label: the scrape adds the
instance. Formatting only.
"""

from __future__ import annotations

from typing import Any, Iterable

from ..escaping import printable_lines
from ..findings import Status, first_to_act_on
from ..model.bus_ids import parse_bus_id

# The file is written as rendered (the output writer's escaping pass would break the format), so
# outside text (a GPU name, a subject) is made printable here: every control character but the
# newline becomes a visible escape, then backslash, double quote and newline are escaped as the
# exposition format says (label values: all three; HELP text: backslash and newline).


def _escape(value: str) -> str:
    text = printable_lines(value)
    return text.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _help(text: str) -> str:
    return printable_lines(text).replace("\\", "\\\\").replace("\n", "\\n")


def _labels(pairs: Iterable[tuple[str, Any]]) -> str:
    inner = ",".join(f'{k}="{_escape("" if v is None else str(v))}"' for k, v in pairs)
    return "{" + inner + "}" if inner else ""


def _dcgm_bus_id(bus_id: str | None) -> str:
    """A bus id as NVML and so dcgm-exporter write it: an 8-digit domain, upper-case hex."""
    if not bus_id:
        return ""
    try:
        domain, bus, rest = parse_bus_id(bus_id).split(":")
    except ValueError:
        return bus_id  # not a bus id: shown as read, so it still names the same thing
    return f"{int(domain, 16):08X}:{bus.upper()}:{rest.upper()}"


def _gpu_labels(g: dict[str, Any]) -> list[tuple[str, Any]]:
    index = g["index"]
    return [
        ("gpu", "" if index is None else index),
        ("UUID", g["uuid"] or ""),
        ("pci_bus_id", _dcgm_bus_id(g["bus_id"])),
        ("device", "" if index is None else f"nvidia{index}"),
        ("modelName", g["name"] or ""),
    ]


def _number(value: float) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    return repr(float(value))


class _Families:
    def __init__(self) -> None:
        self.order: list[str] = []
        self.help: dict[str, str] = {}
        self.samples: dict[str, dict[str, str]] = {}

    def add(self, name: str, help_text: str, value: float, labels: Iterable[tuple[str, Any]] = ()) -> None:
        if name not in self.help:
            self.order.append(name)
            self.help[name] = help_text
            self.samples[name] = {}
        # one sample per label set: a repeated one (the same check on the same subject) keeps the first
        self.samples[name].setdefault(_labels(labels), _number(value))

    def text(self) -> str:
        lines = []
        for name in self.order:
            lines.append(f"# HELP {name} {_help(self.help[name])}")
            lines.append(f"# TYPE {name} gauge")
            for labels, value in self.samples[name].items():
                lines.append(f"{name}{labels} {value}")
        return "\n".join(lines) + "\n"


def render(report: Any) -> str:
    from .. import __version__

    m = _Families()
    m.add("gpudoctor_gate_go", "1 when the last gpudoctor gate said go, 0 for no-go.", 1 if report.go else 0)
    m.add("gpudoctor_gate_blocking", "Findings that made the gate no-go.", len(report.blocking))
    m.add("gpudoctor_gate_duration_seconds", "Seconds the gate took.", round(report.duration_s, 3))
    m.add("gpudoctor_gate_timestamp_seconds", "When the gate ran (Unix time).", int(report.generated_epoch))
    counts = report.counts()
    for status in Status:
        m.add(
            "gpudoctor_gate_checks",
            "Findings of the last gate per status.",
            counts[status.value],
            [("status", status.value)],
        )
    for f in report.findings:
        if f.status is Status.SKIP:
            continue
        labels = [
            ("check", f.rule_id),
            ("area", f.area),
            ("severity", f.severity.value),
            ("subject", f.subject.label),
            ("gpu", "" if f.subject.index is None or f.subject.kind != "gpu" else f.subject.index),
            ("pci_bus_id", _dcgm_bus_id(f.subject.bus_id)),
        ]
        m.add(
            "gpudoctor_check_failed",
            "1 when the check failed on this subject.",
            1 if f.status is Status.FAIL and not report.cannot_check(f) else 0,
            labels,
        )
        m.add(
            "gpudoctor_check_unjudged",
            "1 when the check could not be judged (inputs unavailable, a source did not answer, the rule broke).",
            1 if report.cannot_check(f) else 0,
            labels,
        )
        m.add(
            "gpudoctor_check_blocking",
            "1 when the finding made the gate no-go.",
            1 if report.is_blocking(f) else 0,
            labels,
        )
    # the blocking findings about each GPU, keyed as gpu_rows matches a GPU's findings (its bus id)
    blocking_on: dict[Any, list[Any]] = {}
    for f in report.blocking:
        if f.subject.kind == "gpu":
            blocking_on.setdefault(f.subject.bus_id, []).append(f)
    for g in report.gpus():
        ident = _gpu_labels(g)
        m.add(
            "gpudoctor_gpu_healthy",
            "0 when a blocking finding is about this GPU, else 1.",
            0 if g["blocking"] else 1,
            ident,
        )
        worst = first_to_act_on(blocking_on.get(g["bus_id"], [])) if g["blocking"] else None
        m.add(
            "gpudoctor_gpu_health",
            "1 when the GPU is healthy, 0 when a blocking finding is about it: check names it, action is "
            "what it recommends (reset-gpu, reboot-node, drain-and-inspect-hardware, ...).",
            1 if worst is None else 0,
            [
                *ident,
                ("check", "" if worst is None else worst.rule_id),
                ("action", "" if worst is None or worst.status is not Status.FAIL else worst.action),
            ],
        )
        m.add("gpudoctor_gpu_failed_checks", "Checks that failed on this GPU.", len(g["failed_checks"]), ident)
        if g["memory_total_bytes"] is not None:
            m.add("gpudoctor_gpu_memory_total_bytes", "GPU memory in bytes (NVML).", g["memory_total_bytes"], ident)
        if g["memory_used_bytes"] is not None:
            m.add(
                "gpudoctor_gpu_memory_used_bytes", "GPU memory in use in bytes (NVML).", g["memory_used_bytes"], ident
            )
    m.add(
        "gpudoctor_info",
        "gpudoctor version and the gate's policy.",
        1,
        [
            ("version", __version__),
            ("policy", report.policy.source),
            ("on_cannot_check", report.policy.on_cannot_check),
        ],
    )
    return m.text()
