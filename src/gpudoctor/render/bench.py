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
from .layout import fit_columns, fix_lines, left_out_note, pack, wrap, wrap_units

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


# The table's columns (header, right-aligned): a measurement with its unit, the datasheet's and
# the other GPUs' figures in the same unit, the ratios. Left out, first to last, while a row is
# wider than the output: the spread between repeats, the datasheet figure (eff. keeps the ratio),
# the others' figure (vs keeps the ratio), the size. What remains at the narrowest: the test, the
# measurement, eff. and vs.
COLUMNS = ("test", "size", "measured", "datasheet", "eff.", "others", "vs", "spread")
DROP_ORDER = ("spread", "datasheet", "others", "size")
INDENT = " " * 10  # a check's message and fix, under its rule id


def render_text(
    section: Mapping[str, Any],
    findings: Iterable[Finding] = (),
    style: Style = _plain,
    snapshot_path: str | None = None,
    width: int = 100,
) -> str:
    """The bench at `width` columns: prose wraps, each GPU's table leaves columns out (DROP_ORDER)
    until it fits and says which, and the commands in the checks' fixes are never broken."""
    out: list[str] = []
    gpus = (
        [g for g in section.get("gpus") or [] if isinstance(g, Mapping)]
        if isinstance(section.get("gpus"), list)
        else []
    )
    torch = section.get("torch_version")
    cuda = section.get("cuda_version") or section.get("hip_version")
    head = [f"gpudoctor bench ({printable(section.get('mode', '?'))})"]
    if isinstance(torch, str):
        head.append(f"torch {printable(torch)}")
    if isinstance(cuda, str):
        head.append(f"{'ROCm' if section.get('hip_version') else 'CUDA'} {printable(cuda)}")
    head.append(f"{len(gpus)} GPU(s)")
    head.append(f"{section.get('duration_s', 0):.1f} s")
    out.extend(style(line, bold=True) for line in pack(head, width, "", "  ", " · "))
    if section.get("status") != "ok":
        said = wrap(f"incomplete: {printable(section.get('error'))}", width, "  ", "    ")
        out.extend(style(line, fg="yellow", bold=True) for line in said)
    out.extend(
        wrap(
            "median of repeats, device-event timing, random non-zero inputs; datasheet = dense peak of one "
            "device (rules/data/gpu_specs.yaml); others = median of the other GPUs of the same kind",
            width,
            "  ",
        )
    )
    left_out: list[str] = []
    for entry in gpus:
        out.append("")
        out.extend(style(line, bold=True) for line in wrap(_gpu_title(entry), width, "", "  "))
        if "error" in entry:
            out.extend(wrap(f"could not describe the device: {printable(entry['error'])}", width, "  ", "    "))
        table, dropped = _table(entry, style, width)
        out.extend(table)
        left_out = left_out or dropped
        load = entry.get("under_load")
        if isinstance(load, Mapping):
            out.extend(pack(_load_parts(load), width, "  under load: ", "    ", ", "))
        elif isinstance(load, Unavailable):
            out.extend(wrap(printable(load.detail), width, "  under load: ", "    "))
        out.extend(_tuning(entry, section, width))
    if left_out:
        out.append("")
        out.extend(left_out_note(left_out, width, "a wider terminal, COLUMNS=120, or --format json"))
    out.extend(_between(section, style, width))
    findings = [f for f in findings if f.status is not Status.SKIP]
    if findings:
        out.append("")
        out.append(style("Checks (rules/performance.yaml)", bold=True))
        for f in findings:
            out.extend(_check(f, style, width))
    if snapshot_path:
        out.append("")
        shown = printable(snapshot_path)
        out.extend(wrap_units(f"Snapshot with these results: {shown} (gpudoctor check --facts {shown})", width))
    return "\n".join(out) + "\n"


def _cells(metric: Mapping[str, Any]) -> list[str]:
    unit = printable(metric.get("unit", ""))
    return [
        _size(metric),
        _num(metric.get("value"), unit),
        _num(metric.get("spec")),
        _pct(metric.get("efficiency_pct")),
        _num(metric.get("peer_median")),
        _pct(metric.get("vs_peers_pct")),
        _pct(metric.get("spread_pct")),
    ]


def _table(entry: Mapping[str, Any], style: Style, width: int) -> tuple[list[str], list[str]]:
    """One GPU's measurements, each column as wide as its widest cell, and the columns left out."""
    rows: list[tuple[str, list[str] | str]] = []  # (label, cells) or (label, why it is missing)
    for test, label in ROWS:
        metric = entry.get(test)
        if isinstance(metric, Unavailable):
            if not (metric.reason == "not_supported" and test == "matmul_bf16_unaligned"):
                rows.append((label, _why(metric)))
        elif isinstance(metric, Mapping):
            rows.append((label, _cells(metric)))
    full = [cells for _, cells in rows if isinstance(cells, list)]
    sizes = [max([len(COLUMNS[0])] + [len(label) for label, _ in rows])]
    sizes += [max([len(header)] + [len(c[i]) for c in full]) for i, header in enumerate(COLUMNS[1:])]
    columns = list(zip(COLUMNS, sizes))
    shown = fit_columns(columns, width, DROP_ORDER, indent=2)

    def line(label: str, cells: list[str]) -> str:
        parts = [f"{label:<{sizes[0]}}"] + [f"{cells[i - 1]:>{sizes[i]}}" for i in shown[1:]]
        return ("  " + "  ".join(parts)).rstrip()

    out = [style(line(COLUMNS[0], list(COLUMNS[1:])), bold=True)]
    for label, cells in rows:
        if isinstance(cells, list):
            out.append(line(label, cells))
        else:  # the reason runs on under the figures' columns, wrapped
            out.extend(wrap(f"— {cells}", width, f"  {label:<{sizes[0]}}  ", " " * (sizes[0] + 6)))
    return out, [header for i, (header, _) in enumerate(columns) if i not in shown]


def _load_parts(load: Mapping[str, Any]) -> list[str]:
    """What the GPU did under load: its lowest SM clock, highest temperature and power, clock reasons."""
    parts = []
    if isinstance(load.get("sm_clock_mhz"), int):
        top = load.get("sm_clock_max_mhz")
        parts.append(f"SM clock down to {load['sm_clock_mhz']}{f' of {top}' if isinstance(top, int) else ''} MHz")
    if isinstance(load.get("temperature_c"), int):
        parts.append(f"up to {load['temperature_c']} °C")
    if isinstance(load.get("power_draw_w"), (int, float)):
        limit = load.get("power_limit_w")
        of_limit = f" (limit {limit:.0f} W)" if isinstance(limit, (int, float)) else ""
        parts.append(f"up to {load['power_draw_w']:.0f} W{of_limit}")
    if isinstance(load.get("clocks_event_reasons"), int):
        parts.append(f"clock event reasons 0x{load['clocks_event_reasons']:x}")
    return parts


def _between(section: Mapping[str, Any], style: Style, width: int) -> list[str]:
    """The copies between GPUs, one line each where it fits (else its parts flow), and the all-reduce."""
    out: list[str] = []
    links = section.get("p2p")
    if isinstance(links, list) and links:
        out.append("")
        out.append(style("Between GPUs", bold=True))
        for link in links:
            metric = link.get("bandwidth")
            pair = f"GPU {printable(link['src'])} → GPU {printable(link['dst'])}"
            if not isinstance(metric, Mapping):
                out.extend(wrap(_why(metric), width, f"  {pair}: ", "    "))
                continue
            access = link.get("peer_access")
            ceiling = f"{_num(metric.get('spec'), 'GB/s')}, {_pct(metric.get('efficiency_pct'))}"
            parts = [
                f"{pair} copy {_size(metric):>7}",
                f"{_num(metric.get('value'), 'GB/s'):>13}",
                f"(link, one way: {ceiling})",
                {True: "peer access", False: "no peer access: staged through host memory"}.get(access, ""),
            ]
            row = "  " + "  ".join(parts).rstrip()
            out.extend([row] if len(row) <= width else pack([p.strip() for p in parts], width, "  ", "    ", "  "))
    elif isinstance(links, Unavailable) and links.reason != "not_supported":
        out.extend(wrap(_why(links), width, "  peer copies: ", "    "))
    allreduce = section.get("allreduce")
    if isinstance(allreduce, Mapping):
        said = (
            f"all-reduce over {printable(allreduce.get('gpus', '?'))} GPUs, {_size(allreduce)}: bus bandwidth "
            f"{_num(allreduce.get('value'), 'GB/s')} (algorithm bandwidth {_num(allreduce.get('algbw_gbs'), 'GB/s')})"
        )
        out.extend(wrap(said, width, "  ", "    "))
    elif isinstance(allreduce, Unavailable) and allreduce.reason != "not_supported":
        out.extend(wrap(_why(allreduce), width, "  all-reduce: ", "    "))
    return out


def _check(f: Finding, style: Style, width: int) -> list[str]:
    """A check as `check` shows one: badge, rule id and subject, then the message wrapped under
    them, and a failed check's fix (its commands whole)."""
    badge = {Status.FAIL: "FAIL" if f.severity.value == "error" else f.severity.value[:4]}.get(f.status, f.status.value)
    colour = {"FAIL": "red", "warn": "yellow", "info": "cyan", "pass": "green", "unknown": "magenta"}.get(badge)
    first, *more = wrap(f"{printable(f.rule_id)} · {printable(f.subject.label)}", width, f"  {badge:<8}", INDENT)
    lines = [f"  {style(f'{badge:<8}', fg=colour) if colour else f'{badge:<8}'}{first[10:]}", *more]
    lines.extend(wrap_units(f.message, width, INDENT))
    if f.status is Status.FAIL and f.fix:
        lines.extend(fix_lines(f.fix.strip(), width, f"{INDENT}fix:  ", INDENT + "      "))
    return lines


def _tuning(entry: Mapping[str, Any], section: Mapping[str, Any], width: int) -> list[str]:
    """The guides' tuning advice, as measured on this GPU, wrapped to `width`."""
    lines: list[str] = []
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
        lines.extend(pack(speed, width, "  mixed precision: matmul speed-up over fp32: ", "    ", ", "))
    precision = section.get("float32_matmul_precision_default")
    if isinstance(precision, str):
        state = "off (precision 'highest')" if precision == "highest" else f"on (precision '{printable(precision)}')"
        said = f"TF32 in this torch's defaults: {state}; torch.set_float32_matmul_precision('high') turns it on"
        lines.extend(wrap(said, width, "  ", "    "))
    unaligned = entry.get("matmul_bf16_unaligned")
    if isinstance(unaligned, Mapping) and isinstance(unaligned.get("vs_aligned_pct"), (int, float)):
        n = unaligned.get("n")
        aligned = n + 1 if isinstance(n, int) else "?"
        said = (
            f"shapes: a bf16 matmul of {n}³ runs at {unaligned['vs_aligned_pct']:.0f} % of {aligned}³;"
            " keep matrix dimensions multiples of 8 (of 64 for the best tensor-core tiles)"
        )
        lines.extend(wrap(said, width, "  ", "    "))
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
