"""`gpudoctor bench` output: per GPU, each measurement beside the datasheet and the node's other
GPUs; the links between GPUs; the tuning measurements; the verdicts of rules/performance.yaml.
Formatting only; in the text every value from the results, the facts and the findings goes
through gpudoctor.escaping.printable."""

from __future__ import annotations

import json
from typing import Any, Callable, Iterable, Mapping

from ..bench.runner import NoDevice
from ..escaping import printable
from ..facts import Unavailable, to_jsonable
from ..findings import Finding, Status

Style = Callable[..., str]

ROWS = (
    ("matmul_fp32", "fp32 matmul"),
    ("matmul_tf32", "tf32 matmul"),
    ("matmul_fp16", "fp16 matmul"),
    ("matmul_bf16", "bf16 matmul"),
    ("matmul_fp8", "fp8 matmul"),
    ("matmul_bf16_unaligned", "bf16 matmul, unaligned"),
    ("copy", "device memory copy"),
    ("h2d", "pinned host→device"),
    ("d2h", "pinned device→host"),
)


def _plain(text: str, **_: Any) -> str:
    return text


def _num(value: Any, unit: str = "") -> str:
    if isinstance(value, Unavailable):
        return "—"
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return "—"
    text = f"{value:,.0f}" if abs(value) >= 100 else (f"{value:,.1f}" if abs(value) >= 10 else f"{value:,.2f}")
    return f"{text} {unit}".rstrip()


def _pct(value: Any) -> str:
    return f"{value:.0f} %" if isinstance(value, (int, float)) and not isinstance(value, bool) else "—"


def _why(value: Any) -> str:
    return printable(f"{value.reason}: {value.detail}") if isinstance(value, Unavailable) else ""


def _size(metric: Mapping[str, Any]) -> str:
    if isinstance(metric.get("n"), int):
        n = metric["n"]
        return f"{n}³"
    if isinstance(metric.get("bytes"), int):
        b = metric["bytes"]
        return f"{b / (1 << 30):g} GiB" if b >= (1 << 30) else f"{b / (1 << 20):g} MiB"
    return ""


def _gpu_title(entry: Mapping[str, Any]) -> str:
    bus = entry.get("bus_id")
    name = entry.get("name")
    spec = entry.get("spec_id")
    nvml = entry.get("nvml_index")
    label = f"GPU {nvml if isinstance(nvml, int) else printable(entry.get('index'))}"
    if isinstance(bus, str):
        label += f" ({printable(bus)})"
    label += f" {printable(name)}" if isinstance(name, str) else ""
    label += f" → {printable(spec)}" if isinstance(spec, str) else " (not in the spec table: no datasheet comparison)"
    return label


def render_text(
    section: Mapping[str, Any],
    findings: Iterable[Finding] = (),
    style: Style = _plain,
    snapshot_path: str | None = None,
) -> str:
    out: list[str] = []
    gpus = (
        [g for g in section.get("gpus") or [] if isinstance(g, Mapping)]
        if isinstance(section.get("gpus"), list)
        else []
    )
    torch = section.get("torch_version")
    cuda = section.get("cuda_version") or section.get("hip_version")
    head = f"gpudoctor bench ({printable(section.get('mode', '?'))})"
    if isinstance(torch, str):
        head += f" · torch {printable(torch)}"
    if isinstance(cuda, str):
        head += f" · {'ROCm' if section.get('hip_version') else 'CUDA'} {printable(cuda)}"
    head += f" · {len(gpus)} GPU(s) · {section.get('duration_s', 0):.1f} s"
    out.append(style(head, bold=True))
    if section.get("status") != "ok":
        out.append(style(f"  incomplete: {printable(section.get('error'))}", fg="yellow", bold=True))
    out.append(
        "  median of repeats, device-event timing, random non-zero inputs; datasheet = dense peak of one device "
        "(rules/data/gpu_specs.yaml); others = median of the other GPUs of the same kind"
    )
    header = (
        f"  {'test':<24}{'size':>8}  {'measured':>15}  {'datasheet':>15}  {'eff.':>6}  "
        f"{'others':>15}  {'vs':>6}  {'spread':>6}"
    )
    for entry in gpus:
        out.append("")
        out.append(style(_gpu_title(entry), bold=True))
        if "error" in entry:
            out.append(f"  could not describe the device: {printable(entry['error'])}")
        out.append(style(header, bold=True))
        for test, label in ROWS:
            metric = entry.get(test)
            if isinstance(metric, Unavailable):
                if metric.reason == "not_supported" and test == "matmul_bf16_unaligned":
                    continue
                out.append(f"  {label:<24}{'':>8}  {'—':>15}  {_why(metric)}"[:160])
                continue
            if not isinstance(metric, Mapping):
                continue
            unit = printable(metric.get("unit", ""))
            cells = (
                f"  {label:<24}{_size(metric):>8}  {_num(metric.get('value'), unit):>15}  "
                f"{_num(metric.get('spec'), unit):>15}  {_pct(metric.get('efficiency_pct')):>6}  "
                f"{_num(metric.get('peer_median'), unit):>15}  {_pct(metric.get('vs_peers_pct')):>6}  "
                f"{_pct(metric.get('spread_pct')):>6}"
            )
            out.append(cells.rstrip())
        load = entry.get("under_load")
        if isinstance(load, Mapping):
            parts = []
            if isinstance(load.get("sm_clock_mhz"), int):
                top = load.get("sm_clock_max_mhz")
                parts.append(
                    f"SM clock down to {load['sm_clock_mhz']}{f' of {top}' if isinstance(top, int) else ''} MHz"
                )
            if isinstance(load.get("temperature_c"), int):
                parts.append(f"up to {load['temperature_c']} °C")
            if isinstance(load.get("power_draw_w"), (int, float)):
                limit = load.get("power_limit_w")
                of_limit = f" (limit {limit:.0f} W)" if isinstance(limit, (int, float)) else ""
                parts.append(f"up to {load['power_draw_w']:.0f} W{of_limit}")
            if isinstance(load.get("clocks_event_reasons"), int):
                parts.append(f"clock event reasons 0x{load['clocks_event_reasons']:x}")
            out.append(f"  under load: {', '.join(parts)}")
        elif isinstance(load, Unavailable):
            out.append(f"  under load: {printable(load.detail)}")
        out.extend(_tuning(entry, section))
    links = section.get("p2p")
    if isinstance(links, list) and links:
        out.append("")
        out.append(style("Between GPUs", bold=True))
        for link in links:
            metric = link.get("bandwidth")
            access = link.get("peer_access")
            access_text = (
                "peer access"
                if access is True
                else ("no peer access: staged through host memory" if access is False else "")
            )
            if isinstance(metric, Mapping):
                measured = _num(metric.get("value"), "GB/s")
                ceiling = f"{_num(metric.get('spec'), 'GB/s')}, {_pct(metric.get('efficiency_pct'))}"
                out.append(
                    f"  GPU {printable(link['src'])} → GPU {printable(link['dst'])} copy {_size(metric):>7}  "
                    f"{measured:>13}  (link, one way: {ceiling})  {access_text}"
                )
            else:
                out.append(f"  GPU {printable(link['src'])} → GPU {printable(link['dst'])}: {_why(metric)}")
    elif isinstance(links, Unavailable) and links.reason != "not_supported":
        out.append(f"  peer copies: {_why(links)}")
    allreduce = section.get("allreduce")
    if isinstance(allreduce, Mapping):
        out.append(
            f"  all-reduce over {printable(allreduce.get('gpus', '?'))} GPUs, {_size(allreduce)}: bus bandwidth "
            f"{_num(allreduce.get('value'), 'GB/s')} (algorithm bandwidth {_num(allreduce.get('algbw_gbs'), 'GB/s')})"
        )
    elif isinstance(allreduce, Unavailable) and allreduce.reason != "not_supported":
        out.append(f"  all-reduce: {_why(allreduce)}")
    findings = list(findings)
    if findings:
        out.append("")
        out.append(style("Checks (rules/performance.yaml)", bold=True))
        for f in findings:
            if f.status is Status.SKIP:
                continue
            badge = {Status.FAIL: "FAIL" if f.severity.value == "error" else f.severity.value[:4]}.get(
                f.status, f.status.value
            )
            colour = {"FAIL": "red", "warn": "yellow", "info": "cyan", "pass": "green", "unknown": "magenta"}.get(badge)
            line = f"  {badge:<8}{printable(f.rule_id):<30}{printable(f.subject.label):<24}{printable(f.message)}"
            out.append(style(line, fg=colour) if colour else line)
            if f.status is Status.FAIL and f.fix:
                for fix_line in f.fix.strip().splitlines():
                    out.append(f"          {printable(fix_line)}")
    if snapshot_path:
        out.append("")
        shown = printable(snapshot_path)
        out.append(f"Snapshot with these results: {shown} (gpudoctor check --facts {shown})")
    return "\n".join(out) + "\n"


def _tuning(entry: Mapping[str, Any], section: Mapping[str, Any]) -> list[str]:
    """The guides' tuning advice, as measured on this GPU."""
    lines = []
    speed = [
        f"{name} {entry[key]:.1f}x"
        for name, key in (
            ("tf32", "tf32_speedup_vs_fp32"),
            ("fp16", "fp16_speedup_vs_fp32"),
            ("bf16", "bf16_speedup_vs_fp32"),
            ("fp8", "fp8_speedup_vs_fp32"),
        )
        if isinstance(entry.get(key), (int, float))
    ]
    if speed:
        lines.append(f"  mixed precision: matmul speed-up over fp32: {', '.join(speed)}")
    precision = section.get("float32_matmul_precision_default")
    if isinstance(precision, str):
        state = "off (precision 'highest')" if precision == "highest" else f"on (precision '{printable(precision)}')"
        lines.append(
            f"  TF32 in this torch's defaults: {state}; torch.set_float32_matmul_precision('high') turns it on"
        )
    unaligned = entry.get("matmul_bf16_unaligned")
    if isinstance(unaligned, Mapping) and isinstance(unaligned.get("vs_aligned_pct"), (int, float)):
        n = unaligned.get("n")
        aligned = n + 1 if isinstance(n, int) else "?"
        lines.append(
            f"  shapes: a bf16 matmul of {n}³ runs at {unaligned['vs_aligned_pct']:.0f} % of {aligned}³;"
            " keep matrix dimensions multiples of 8 (of 64 for the best tensor-core tiles)"
        )
    return lines


def render_json(section: Mapping[str, Any], findings: Iterable[Finding] = ()) -> str:
    doc = {
        "bench": to_jsonable(section),
        "findings": [
            {
                "rule": f.rule_id,
                "status": f.status.value,
                "severity": f.severity.value,
                "subject": f.subject.label,
                "bus_id": f.subject.bus_id,
                "message": f.message,
                "fix": f.fix,
            }
            for f in findings
            if f.status is not Status.SKIP
        ],
    }
    return json.dumps(doc, indent=2) + "\n"


def no_device_message(cause: NoDevice) -> str:
    """One line for `bench` when torch saw no GPU: what was found, then what to do."""
    count = "" if cause.device_count is None else f", {cause.device_count} device(s)"
    found = f"torch {printable(cause.torch_version)} in {printable(cause.python)} is a {cause.build} build{count}"
    if cause.visible_devices is not None:
        found += f", CUDA_VISIBLE_DEVICES={printable(cause.visible_devices)!r}"
    if cause.remedy == "torch_build":
        todo = (
            "a CPU-only torch never sees a GPU: install a CUDA or ROCm build of torch "
            "(gpudoctor fix --torch prints the pip command for this machine's GPUs and driver)"
        )
    elif cause.remedy == "visible_devices":
        todo = "CUDA_VISIBLE_DEVICES hides every GPU: unset it, or set it to the GPUs to use (e.g. 0,1)"
    else:
        todo = (
            f"torch finds no GPU although it was built for {cause.build}: check the driver "
            "(nvidia-smi or rocm-smi should list the GPUs; gpudoctor check judges the driver against this torch)"
        )
        if cause.visible_devices is not None:
            todo += " and that CUDA_VISIBLE_DEVICES names GPUs that exist"
    return f"the bench could not run: {found}; {todo}"
