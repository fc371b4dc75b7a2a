"""`gpudoctor gate`: the pre-training go/no-go gate for job scripts, Slurm, Kubernetes and torchrun."""

from __future__ import annotations

import functools
import sys
from typing import Any, Callable

import click

from ..errors import UserError
from ..options import (
    FiniteFloat,
    ProbeOptions,
    check_rate_options,
    color_option,
    facts_option,
    fail_on_option,
    format_option,
    given,
    min_free_memory_option,
    previous_option,
    root_options,
    rules_option,
    sample_option,
)
from ..output import coloured, output_width, style_for, write_output
from ..registry import help_text

GATE_HELP = """\b
What blocks (exit status 1, no-go):
  - a failed check at or above --fail-on (default error), or any
    failed check listed under required (policy) / --require;
  - with --fail-closed (the default), a check at or above --fail-on
    that could not be judged: its facts were unavailable, its rule
    broke, or a source did not answer in time (NVML hung, the device
    test did not finish). --fail-open lets the gate say go and lists
    them as not judged, except required checks, which always block
    unless they pass or do not apply.
  - not blocking unless required: a check whose facts this process
    may not read (no_permission, e.g. the kernel log without root)
    or the hardware does not have (not_supported); it is listed as
    not judged.
On no-go the first lines name every blocking finding: check id,
subject, what, and the fix; checks that could not run for one cause
(e.g. NVML did not answer) are folded into one line naming it.

\b
Precedence: command-line flags, then --policy FILE, then defaults
(fail on error, fail-closed, deadline 30 s, no expectations).

\b
Exit status:
  0  go
  1  no-go
  2  the gate could not run (bad arguments or policy, unreadable
     snapshot, missing root, an output file that cannot be written)

\b
With --npd (Node Problem Detector's custom plugin protocol): 0 go,
1 a blocking check failed, 2 unknown: only checks that could not
be judged block, or the gate could not run; stdout is one line of
reason, the blocking lines go to stderr (NPD logs it)."""


GATE_EXAMPLES = """\b
gpudoctor gate --expect-gpus 8 --expect-model H100 --min-free-memory 70
gpudoctor gate --policy gate.yaml --deep --json gate.json --junit gate.xml
torchrun --nproc-per-node 8 -m gpudoctor gate --distributed --min-busbw 100"""


def _npd_answers(command: Callable[..., None]) -> Callable[..., None]:
    """With --npd, the gate that could not run (a bad option or policy, an unreadable snapshot, an
    output that cannot be written) still answers in NPD's protocol: unknown, with the one-line
    reason on stdout instead of the error on stderr. So does a gate that broke (a bug): Python's
    exit status 1 would be NPD's "the node has a problem", and a cordon or drain may act on it."""

    @functools.wraps(command)
    def answering(*args: Any, **kwargs: Any) -> None:
        if not kwargs.get("npd"):
            return command(*args, **kwargs)
        from ...render.npd import could_not_run

        try:
            return command(*args, **kwargs)
        except UserError as exc:
            status, line = could_not_run(exc.message)
        except Exception as exc:
            from ...children.stopping import stop_in

            if stop_in(exc) is not None:
                raise  # a stop signal Python wrapped: the usual handling
            import traceback

            traceback.print_exc()  # to stderr, which NPD logs: the bug's report
            status, line = could_not_run(f"internal error: {type(exc).__name__}: {exc}")
        write_output(line + "\n", None)
        sys.exit(status)

    return answering


@click.command("gate", help=help_text("gate", GATE_EXAMPLES), epilog=GATE_HELP)
@click.option(
    "--policy", "policy_file", type=click.Path(dir_okay=False), help="Policy YAML (expectations, fail-on, ...)."
)
@click.option(
    "--expect-gpus",
    type=click.IntRange(min=0),
    metavar="N",
    help="Exactly N GPUs: NVML's list; on a node without NVIDIA GPUs, the AMD GPUs bound to amdgpu "
    "or the Ascend NPUs' /dev/davinci<N> files.",
)
@click.option("--expect-model", metavar="NAME", help="Every GPU's name must contain NAME (case-insensitive).")
@min_free_memory_option("GiB that must be free on every GPU.")
@click.option(
    "--expect-nics", type=click.IntRange(min=0, max=4096), metavar="N", help="At least N RDMA ports must be ACTIVE."
)
@click.option(
    "--min-nic-rate",
    type=FiniteFloat(min=0, min_open=True, max=100000),
    metavar="Gb/s",
    help="Every ACTIVE RDMA port must run at least this fast (400 for NDR).",
)
@click.option(
    "--min-nvlink-links",
    type=click.IntRange(min=0, max=64),
    metavar="N",
    help="Every NVIDIA GPU must have at least N active NVLink links.",
)
@fail_on_option("Lowest severity of a failed check that blocks [policy, else error].", default=None)
@click.option(
    "--fail-closed/--fail-open",
    "fail_closed",
    default=None,
    help="Whether a check that could not be judged blocks [policy, else fail-closed].",
)
@click.option("--require", multiple=True, metavar="ID|AREA|TAG", help="Must be judged and pass (repeatable).")
@click.option("--ignore", multiple=True, metavar="ID|AREA|TAG", help="Do not run (repeatable).")
@click.option(
    "--deep/--no-deep",
    default=None,
    help="Also prove the GPUs work: context, memory, matmul, P2P and NCCL all-reduce, in a child "
    "process of --python under the deadline (needs torch there).",
)
@click.option("--json", "json_path", type=click.Path(dir_okay=False), metavar="PATH", help="Write the JSON report.")
@click.option("--junit", "junit_path", type=click.Path(dir_okay=False), metavar="PATH", help="Write JUnit XML.")
@click.option(
    "--prometheus",
    "prometheus_path",
    type=click.Path(dir_okay=False),
    metavar="PATH",
    help="Write node_exporter textfile metrics (e.g. .../textfile/gpudoctor.prom).",
)
@click.option(
    "--nfd-features",
    "nfd_path",
    type=click.Path(dir_okay=False),
    metavar="PATH",
    help="Write a Node Feature Discovery feature file (/etc/kubernetes/node-feature-discovery/features.d/gpudoctor).",
)
@click.option(
    "--nfd-ttl",
    type=click.IntRange(min=60),
    default=900,
    show_default=True,
    metavar="SECONDS",
    help="The NFD labels expire this long after the run.",
)
@format_option(
    ("text", "json", "markdown"), help="Report on stdout; with json or markdown the blocking lines go to stderr."
)
@facts_option()
@rules_option
@click.option(
    "--distributed",
    is_flag=True,
    help="Run as a torchrun entry point: every rank gates its GPU and node, rank 0 prints one table, "
    "every rank exits 1 when any rank is no-go; with NCCL also measures all-reduce bus bandwidth.",
)
@click.option(
    "--min-busbw",
    type=FiniteFloat(min=0, min_open=True),
    metavar="GB/s",
    help="With --distributed: all-reduce bus bandwidth below this is no-go [policy].",
)
@click.option(
    "--localize",
    is_flag=True,
    help="With --distributed: also time each node's own ranks and pairs of nodes, and name the slow node "
    "or pair (done anyway when the all-reduce is under --min-busbw); within the deadline.",
)
@click.option("-v", "--verbose", is_flag=True, help="List every check, not only those that did not pass.")
@click.option(
    "--npd",
    is_flag=True,
    help="Answer as a Kubernetes Node Problem Detector custom plugin: exit 0 go, 1 problem, 2 unknown; "
    "one line of reason on stdout (scripts/k8s/npd-gpudoctor-monitor.json).",
)
@previous_option
@sample_option
@color_option
@root_options
@click.pass_context
@_npd_answers
def command(
    ctx: click.Context,
    policy_file: str | None,
    expect_gpus: int | None,
    expect_model: str | None,
    min_free_memory: float | None,
    expect_nics: int | None,
    min_nic_rate: float | None,
    min_nvlink_links: int | None,
    fail_on: str | None,
    fail_closed: bool | None,
    require: tuple[str, ...],
    ignore: tuple[str, ...],
    deep: bool | None,
    json_path: str | None,
    junit_path: str | None,
    prometheus_path: str | None,
    nfd_path: str | None,
    nfd_ttl: int,
    fmt: str,
    facts_file: str | None,
    rule_dirs: tuple[str, ...],
    distributed: bool,
    min_busbw: float | None,
    localize: bool,
    verbose: bool,
    npd: bool,
    previous_file: str | None,
    sample_s: float | None,
    color: bool | None,
    probe: ProbeOptions,
) -> None:
    from ...preflight.errors import GateError
    from ...preflight.policy import Policy, load_policy

    try:
        policy = load_policy(policy_file) if policy_file else Policy()
        policy = policy.override(
            expect_gpus=expect_gpus,
            expect_model=expect_model,
            min_free_memory_gib=min_free_memory,
            expect_nics=expect_nics,
            nic_rate_gbps=min_nic_rate,
            nvlink_links=min_nvlink_links,
            fail_on=fail_on,
            fail_closed=fail_closed,
            required=require or None,
            ignore=ignore or None,
            deep=deep,
            deadline_s=probe.timeout if given(ctx, "timeout") else None,
            min_busbw_gbps=min_busbw,
        )
    except GateError as exc:
        raise UserError(str(exc)) from None
    check_rate_options(facts_file, previous_file, sample_s, policy.deadline_s)
    if npd and (distributed or fmt != "text" or verbose):
        raise UserError(
            "--npd prints one line for Node Problem Detector: not with --distributed, --format or --verbose"
        )
    run_options: dict[str, Any] = {
        "facts_file": facts_file,
        "root": probe.root,
        "sysfs_root": probe.sysfs_root,
        "procfs_root": probe.procfs_root,
        "python": probe.python,
        "torch_import": probe.torch_import,
        "nvml_timeout": probe.nvml_timeout,
        "rule_dirs": rule_dirs,
        "previous_file": previous_file,
        "sample_s": sample_s,
    }
    if localize and not distributed:
        raise UserError("--localize goes with --distributed (it times the nodes of a torchrun job)")
    if distributed:
        if junit_path or prometheus_path or nfd_path or fmt != "text":
            raise UserError(
                "--distributed prints one table on rank 0 and writes --json there; "
                "--junit, --prometheus, --nfd-features and --format are for single-node runs"
            )
        from ...escaping import terminal_safe
        from ...preflight.distributed import run_distributed
        from ...render.gate_distributed import distributed_json, stderr_lines, stdout_text

        try:
            outcome = run_distributed(policy, run_options, localize)
        except GateError as exc:
            raise UserError(str(exc)) from None
        for line in stderr_lines(outcome):
            click.echo(terminal_safe(line), err=True)
        style = style_for(sys.stdout, color)
        text = stdout_text(outcome, style, output_width(sys.stdout, False))
        write_output(text, None, colour=coloured(style))
        if json_path and outcome.rank == 0 and not outcome.problem:
            write_output(distributed_json(outcome), json_path)
        sys.exit(outcome.exit_code)

    from ...preflight.api import run as run_gate
    from ..progress import Progress, steps

    try:
        with Progress() as progress:
            report = run_gate(
                policy, on_step=steps(progress, probe.python, probe.torch_import, sample_s), **run_options
            )
    except GateError as exc:
        raise UserError(str(exc)) from None

    # Files first, so that what is printed last is the verdict; each through the one output writer
    # (gpudoctor.outputs.write_file: a regular file replaced atomically, a device or FIFO written).
    # JUnit XML, Prometheus and NFD escape what they quote in their own syntax: written as rendered.
    outputs: list[tuple[str, Any, bool]] = []
    if json_path:
        outputs.append((json_path, lambda: _json(report), False))
    if junit_path:
        from ...render.junit import render as render_junit

        outputs.append((junit_path, lambda: render_junit(report), True))
    if prometheus_path:
        from ...render.prometheus import render as render_prometheus

        outputs.append((prometheus_path, lambda: render_prometheus(report), True))
    if nfd_path:
        from ...render.nfd import render as render_nfd

        outputs.append((nfd_path, lambda: render_nfd(report, nfd_ttl), True))
    for path, make, raw in outputs:
        write_output(make(), path, raw=raw)

    if npd:
        from ...render.npd import render as render_npd

        _blocking_to_stderr(report, color)
        status, line = render_npd(report)
        write_output(line + "\n", None)
        sys.exit(status)
    if fmt == "text":
        from ...render.gate_text import render as render_text

        style = style_for(sys.stdout, color)
        text = render_text(report, style=style, verbose=verbose, width=output_width(sys.stdout, False))
        write_output(text, None, colour=coloured(style))
    else:
        _blocking_to_stderr(report, color)
        if fmt == "json":
            write_output(_json(report), None)
        else:
            from ...render.markdown import render as render_markdown

            write_output(render_markdown(report), None)
    sys.exit(report.exit_code)


def _blocking_to_stderr(report: Any, color: bool | None) -> None:
    """On no-go, the blocking lines on stderr (where stdout carries something else)."""
    if report.go:
        return
    from ...escaping import terminal_safe
    from ...render.gate_text import blocking_text

    err_style = style_for(sys.stderr, color)
    for line in blocking_text(report, err_style):
        click.echo(terminal_safe(line, coloured(err_style)), err=True)


def _json(report: Any) -> str:
    from ...render.gate_json import render

    return render(report)
