"""`gpudoctor tiers`: the GPU tier list from the spec table, this machine's GPUs marked."""

from __future__ import annotations

import sys

import click

from ..errors import UserError
from ..load import obtain_facts
from ..options import ProbeOptions, color_option, facts_option, format_option, output_option, root_options
from ..output import coloured, output_width, style_for, write_output
from ..registry import help_text

EPILOG = """\b
Workloads (--workload MODE-SIZE[-PRECISION], or --mode/--params/--precision):
  finetune-7b-bf16   full fine-tune, Adam, mixed precision (16 bytes/parameter + activations)
  lora-8b-bf16       LoRA on a frozen bf16 base;  qlora-70b: 4-bit base
  serve-70b-fp8      serving: weights + KV cache (--context tokens x --batch sequences)
The memory arithmetic and its assumptions are printed; cards needing more than 8 GPUs are left
out unless --all.

\b
Exit status: 0 the list was printed; 2 gpudoctor could not run (bad option, unreadable
snapshot or table, a plot it cannot write)."""


@click.command("tiers", help=help_text("tiers"), epilog=EPILOG)
@click.option(
    "--sort",
    type=click.Choice(["fp16", "bf16", "memory", "bandwidth", "perf-per-watt", "perf-per-dollar"]),
    default="fp16",
    show_default=True,
    help="What to rank by (dense tensor rates; per-watt and per-dollar use the 16-bit rate).",
)
@click.option("--workload", metavar="NAME", help="Show which cards fit, e.g. finetune-7b-bf16, serve-70b-fp8.")
@click.option(
    "--mode", type=click.Choice(["finetune", "lora", "qlora", "serve"]), help="Workload mode (with --params)."
)
@click.option("--params", metavar="N", help="Model size for --mode, e.g. 7B, 70B, 500M.")
@click.option(
    "--precision", type=click.Choice(["fp32", "bf16", "fp16", "fp8", "int8", "int4"]), help="Weights precision."
)
@click.option(
    "--context", type=click.IntRange(min=1), help="Tokens per sequence (default 4096 training, 8192 serving)."
)
@click.option("--batch", type=click.IntRange(min=1), help="Micro-batch (training) or concurrent sequences (serving).")
@click.option("--kv-precision", type=click.Choice(["bf16", "fp16", "fp8"]), help="KV cache precision (serving).")
@click.option("--all", "show_all", is_flag=True, help="With a workload, also list cards that cannot hold it.")
@click.option(
    "--vendor", "vendors", multiple=True, metavar="NAME", help="Only these vendors (nvidia, amd, intel, huawei)."
)
@format_option()
@output_option("the list")
@click.option(
    "--plot", type=click.Path(dir_okay=False), metavar="FILE.svg|FILE.png", help="Also draw the list as a chart."
)
@facts_option()
@color_option
@root_options
def command(
    sort: str,
    workload: str | None,
    mode: str | None,
    params: str | None,
    precision: str | None,
    context: int | None,
    batch: int | None,
    kv_precision: str | None,
    show_all: bool,
    vendors: tuple[str, ...],
    fmt: str,
    output: str | None,
    plot: str | None,
    facts_file: str | None,
    color: bool | None,
    probe: ProbeOptions,
) -> None:
    from ...advice.gpu_specs import SpecTableError, load_specs, machine_gpus
    from ...advice.tiers import tier_list
    from ...advice.workload import WorkloadError, estimate, make_workload, parse_workload
    from ...render.tiers import render_json, render_text

    if plot and not plot.lower().endswith((".svg", ".png")):
        raise UserError(f"--plot {plot}: give a .svg or .png file name")
    known_vendors = {"nvidia", "amd", "intel", "huawei"}
    bad = [v for v in vendors if v.lower() not in known_vendors]
    if bad:
        raise UserError(f"--vendor {', '.join(bad)}: use one of {', '.join(sorted(known_vendors))}")
    est = None
    try:
        if workload and (mode or params):
            raise UserError("give either --workload NAME or --mode/--params, not both")
        if workload:
            if precision or kv_precision:
                wl = parse_workload(workload, context, batch)
                wl = make_workload(
                    wl.mode, float(wl.params), precision or wl.precision, context, batch, 16, kv_precision
                )
            else:
                wl = parse_workload(workload, context, batch)
            est = estimate(wl)
        elif mode or params:
            if not (mode and params):
                raise UserError("--mode and --params go together (e.g. --mode serve --params 70B --precision fp8)")
            est = estimate(make_workload(str(mode), str(params), precision, context, batch, 16, kv_precision))
        elif precision or context or batch or kv_precision:
            raise UserError(
                "--precision/--context/--batch/--kv-precision describe a workload: add --workload or --mode/--params"
            )
    except WorkloadError as exc:
        raise UserError(str(exc)) from None
    try:
        table = load_specs()
    except SpecTableError as exc:
        raise UserError(f"GPU spec table: {exc}") from None
    facts, origin = obtain_facts(facts_file, probe)
    tl = tier_list(
        table,
        sort=sort,
        machine=machine_gpus(facts, table),
        estimate=est,
        show_all=show_all,
        vendors=tuple(v.lower() for v in vendors),
    )
    if plot:
        from ...outputs import OutputError
        from ...render.tiers_plot import PlotError, write_plot

        try:
            write_plot(tl, plot)  # through gpudoctor.outputs.write_file, as every output
        except (PlotError, OutputError) as exc:
            raise UserError(str(exc)) from None
    style = None
    if fmt == "json":
        text = render_json(tl, origin)
    else:
        to_file = bool(output and output != "-")
        style = style_for(sys.stdout, color, to_file=to_file)
        text = render_text(tl, style, origin, output_width(sys.stdout, to_file))
    write_output(text, output, colour=coloured(style))
