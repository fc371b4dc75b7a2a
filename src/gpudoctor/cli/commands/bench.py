"""`gpudoctor bench`: per-GPU microbenchmarks beside the datasheet and the node's other GPUs."""

from __future__ import annotations

import os
import sys

import click

from ...escaping import printable
from ..errors import UserError
from ..load import load_ruleset, obtain_facts
from ..options import (
    MAX_TIMEOUT_S,
    FiniteFloat,
    ProbeOptions,
    color_option,
    facts_option,
    format_option,
    output_option,
    root_options,
)
from ..output import coloured, output_width, style_for, write_output
from ..registry import help_text

EPILOG = """\b
What it measures, per GPU: matmul TFLOP/s in fp32, tf32, fp16, bf16 and fp8 (where the GPU
and torch have it), a device memory copy, pinned host→device and device→host copies; with
several GPUs also peer copies and an NCCL all-reduce. Each figure is shown beside the
datasheet's dense figure (efficiency) and beside the median of the other GPUs of the same kind.
--full adds repeats, every GPU pair, and an 8191³ matmul that shows what shapes not a multiple
of 8 cost. torch runs in a child process of --python (default: this interpreter).

\b
Results are facts: -o FILE writes a snapshot with a `bench` section (with --facts FILE,
that snapshot plus the results); `gpudoctor check --facts FILE` then judges them.

\b
Exit status: 0 measured, no performance check failed; 1 a GPU is far below its peers or its
datasheet (rules/performance.yaml); 2 could not run or could not finish (no torch, no GPU, a bad
option, the deadline; what was measured is still reported and written)."""


# No host has more GPUs than this; a larger index or range is a typo (or an attempt to make
# `0-99999999999` a list of a hundred billion entries).
MAX_GPU_INDEX = 4095


def _parse_gpus(text: str | None) -> list[int] | None:
    from ...inputs import parse_int

    if text is None or text.strip().lower() in ("", "all"):
        return None
    out: list[int] = []
    try:
        for part in text.split(","):
            lo_text, dash, hi_text = part.partition("-")
            lo = parse_int(lo_text, "a GPU index", 4)
            hi = parse_int(hi_text, "a GPU index", 4) if dash else lo
            if lo_text.strip()[:1] in "+-" or hi < lo or hi > MAX_GPU_INDEX:
                raise ValueError(f"{part.strip()!r} is not an index or range of indices from 0 to {MAX_GPU_INDEX}")
            out.extend(range(lo, hi + 1))
    except ValueError as exc:
        shown = text if len(text) <= 40 else text[:40] + "..."
        raise UserError(f"--gpus {shown}: give device indices like 0,1 or 0-3 (or all): {exc}") from None
    return list(dict.fromkeys(out))


@click.command("bench", help=help_text("bench"), epilog=EPILOG)
@click.option("--gpus", metavar="LIST", help="Device indices to measure, e.g. 0,1 or 0-3 (default: all).")
@click.option(
    "--quick/--full", "quick", default=True, show_default=True, help="Quick (under 30 s on 2 GPUs) or thorough."
)
@format_option()
@output_option("a facts snapshot with the results")
@facts_option(help="Add the results to this snapshot (of this machine) instead of probing it again.")
@click.option(
    "--bench-timeout",
    type=FiniteFloat(min=1.0, max=MAX_TIMEOUT_S),
    help="Seconds the measurements may take before they are stopped (default 120 quick, 900 full).",
)
@click.option("--no-progress", is_flag=True, help="No progress bar on stderr.")
@color_option
@click.option("--device", "device_type", type=click.Choice(["cuda", "cpu"]), default="cuda", hidden=True)
@root_options
def command(
    gpus: str | None,
    quick: bool,
    fmt: str,
    output: str | None,
    facts_file: str | None,
    bench_timeout: float | None,
    no_progress: bool,
    color: bool | None,
    device_type: str,
    probe: ProbeOptions,
) -> None:
    from ...advice.gpu_specs import SpecTableError, load_specs
    from ...bench import analysis, runner
    from ...facts import SnapshotError, dumps, from_jsonable, to_jsonable
    from ...render.bench import no_device_message, render_json, render_text

    if probe.elsewhere:
        raise UserError(
            "bench measures this machine; --root/--sysfs-root/--procfs-root describe another one (use --facts FILE)"
        )
    python = probe.python
    if python is not None and not (os.path.isfile(python) and os.access(python, os.X_OK)):
        raise UserError(f"--python {python}: not an executable file")
    devices = _parse_gpus(gpus)
    try:
        table = load_specs()
    except SpecTableError as exc:
        raise UserError(f"GPU spec table: {exc}") from None
    # --python names the interpreter that runs the bench; the probe of a live machine reads its torch too
    live_probe = ProbeOptions(
        python=None if facts_file else python,
        torch_import=probe.torch_import and not facts_file,
        timeout=probe.timeout,
        nvml_timeout=probe.nvml_timeout,
    )
    facts, origin = obtain_facts(facts_file, live_probe)
    if facts_file is None:
        facts = dict(facts)

    mode = "cpu-smoke" if device_type == "cpu" else ("quick" if quick else "full")
    config = {"mode": mode, "device_type": device_type, "gpus": devices}
    limit = bench_timeout or (120.0 if quick else 900.0)
    bar = runner.ProgressBar(sys.stderr)
    if no_progress:
        bar.enabled = False
    try:
        run = runner.run_worker(runner.worker_argv(python or sys.executable, config), limit, progress=bar)
    finally:
        bar.close()
    if run.status == "no_torch":
        raise UserError(
            f"gpudoctor bench needs torch in {python or sys.executable}: pip install torch there "
            "(gpudoctor fix --torch names the build for this machine), "
            "or point --python at the interpreter of an environment that has it"
        )
    if run.status == "no_device":
        raise UserError(no_device_message(runner.no_device_cause(run, python or sys.executable)))
    if run.status == "error" and not run.results:
        # the worker's own fatal event says what failed; stderr is shown only when it said nothing
        last = run.stderr_tail.strip().splitlines()[-1:] if not run.fatal else []
        detail = f" ({last[0]})" if last else ""
        raise UserError(f"the bench could not run: {run.error}{detail}")
    if run.status == "timeout" and not run.results:
        raise UserError(f"{run.error} before finishing a single test (raise --bench-timeout)")

    section = analysis.build_section(run, facts, table)
    if facts_file:
        _check_same_machine(section, facts, facts_file)
        if isinstance(facts.get("bench"), dict):
            click.echo(
                f"gpudoctor: replacing the bench results of {printable(facts['bench'].get('collected_at', '?'))} "
                f"in {printable(facts_file)}",
                err=True,
            )
    merged = dict(facts)
    merged["bench"] = section
    from ...schemas import validate_facts

    problem = validate_facts(to_jsonable(merged))
    if problem:  # a bug in gpudoctor, not in the input: say so plainly rather than write a bad file
        raise UserError(f"internal error: the bench results do not fit the snapshot schema: {problem}")
    try:
        merged = from_jsonable(to_jsonable(merged))
    except SnapshotError as exc:
        raise UserError(str(exc)) from None

    findings = _judge(merged)
    if output:
        write_output(dumps(merged), output)
    if fmt == "json":
        write_output(render_json(section, findings), None)
    else:
        style = style_for(sys.stdout, color)
        text = render_text(section, findings, style, snapshot_path=output, width=output_width(sys.stdout))
        write_output(text, None, colour=coloured(style))
    from ...findings import Severity, Status

    if run.status != "ok":
        raise UserError(f"the bench is incomplete: {run.error}")  # after its results were written
    failed = [f for f in findings if f.status is Status.FAIL and f.severity.rank >= Severity.WARNING.rank]
    sys.exit(1 if failed else 0)


def _check_same_machine(section: dict, facts: dict, facts_file: str) -> None:
    """Results go into a snapshot only when its GPUs are the ones that were measured."""
    from ...model.gpus import gpus_of, match_gpu

    gpus = gpus_of(facts)
    measured = [g.get("bus_id") for g in section.get("gpus", []) if isinstance(g.get("bus_id"), str)]
    strangers = [b for b in measured if match_gpu(gpus, bus_id=b) is None]
    if strangers:
        raise UserError(
            f"{facts_file} is not a snapshot of this machine: it has no GPU at {', '.join(strangers)} "
            "(take one here with gpudoctor probe -o FILE, or leave out --facts)"
        )


def _judge(facts: dict) -> list:
    from ...engine.runner import run_rules

    ruleset = load_ruleset(())
    rules = [r for r in ruleset.rules if "bench" in r.tags]
    return run_rules(ruleset, facts, rules)
