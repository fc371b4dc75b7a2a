"""`gpudoctor fix`: print what to do. Three modes, one at a time:

- no flag: every fix for the checks that fail (the rules `check` runs), grouped by what applying it
  takes (the rule's fix-config / fix-root / fix-reboot / fix-hardware tag), with the finding it
  answers and the check to run afterwards;
- ``--torch``: the torch build for this machine and the exact install command (advice/torch_build);
- ``--numa``: the NUMA binding plan per GPU (advice/numa_plan, written by render/numa_plan).

gpudoctor prints fixes and never runs them. Exit status: 0 printed; 1 ``--torch`` found no torch
build that uses this machine's GPUs (the CPU build is printed); 2 bad input.
"""

from __future__ import annotations

import sys
from typing import Any

import click

from ..errors import UserError
from ..load import load_ruleset, obtain_facts
from ..options import (
    ProbeOptions,
    color_option,
    facts_option,
    format_option,
    given,
    membind_option,
    output_option,
    root_options,
    rule_dir_options,
    strategy_option,
)
from ..output import coloured, output_width, style_for, write_output
from ..registry import help_text

FIX_EXIT_HELP = """\b
Exit status:
  0  the fixes, torch build or NUMA plan were printed
  1  --torch: no torch build uses this machine's GPUs (the CPU
     build is printed, with why)
  2  gpudoctor could not run (bad arguments, bad rule file,
     unreadable snapshot, missing root)"""

TORCH_ONLY = ("driver_version", "compute_capability", "gpu_arch", "no_gpu", "torch_version", "python_version")
NUMA_ONLY = ("strategy", "membind", "visible")


def _flag(name: str) -> str:
    return {
        "compute_capability": "--compute-capability",
        "gpu_arch": "--gpu-arch",
        "visible": "--visible-devices",
    }.get(name, "--" + name.replace("_", "-"))


FIX_HELP = """\b
gpudoctor fix                        every fix, grouped: as user, as root, reboot, hardware
gpudoctor fix --torch                the torch wheel for this machine and the pip/uv command
gpudoctor fix --torch --compute-capability 6.1 --driver-version 535.183.01
gpudoctor fix --numa --strategy exclusive --format json
gpudoctor never runs a fix."""


@click.command("fix", help=help_text("fix", FIX_HELP), epilog=FIX_EXIT_HELP)
@click.option(
    "--torch", "torch_mode", is_flag=True, help="Print the torch build for this machine and its install command."
)
@click.option("--numa", "numa_mode", is_flag=True, help="Print the NUMA binding (numactl line) for each GPU.")
@facts_option()
@format_option(
    ("text", "json", "shell"),
    default=None,
    help="text (default; --numa: shell), json, or shell (a script of comments and commands to review).",
)
@output_option("the output")
@rule_dir_options
@click.option("--driver-version", metavar="V", help="--torch: the NVIDIA driver version to advise for.")
@click.option(
    "--compute-capability",
    multiple=True,
    metavar="X.Y",
    help="--torch: a GPU's compute capability (repeatable, one per GPU); replaces the probed GPUs.",
)
@click.option("--gpu-arch", multiple=True, metavar="gfxNNN", help="--torch: an AMD GPU's gfx target (repeatable).")
@click.option("--no-gpu", is_flag=True, help="--torch: advise for a machine without GPUs.")
@click.option("--torch-version", metavar="X.Y[.Z]", help="--torch: this torch release instead of the newest that fits.")
@click.option("--python-version", metavar="X.Y", help="--torch: the Python the wheel is for.")
@strategy_option("--numa")
@membind_option("--numa")
@click.option("--visible-devices", "visible", metavar="LIST", help="--numa: plan for this CUDA_VISIBLE_DEVICES value.")
@color_option
@root_options
@click.pass_context
def command(
    ctx: click.Context,
    torch_mode: bool,
    numa_mode: bool,
    facts_file: str | None,
    fmt: str | None,
    output: str | None,
    rule_dirs: tuple[str, ...],
    no_builtin_rules: bool,
    driver_version: str | None,
    compute_capability: tuple[str, ...],
    gpu_arch: tuple[str, ...],
    no_gpu: bool,
    torch_version: str | None,
    python_version: str | None,
    strategy: str,
    membind: bool,
    visible: str | None,
    color: bool | None,
    probe: ProbeOptions,
) -> None:
    asked = {
        "driver_version": driver_version,
        "compute_capability": compute_capability,
        "gpu_arch": gpu_arch,
        "no_gpu": no_gpu,
        "torch_version": torch_version,
        "python_version": python_version,
        "strategy": given(ctx, "strategy"),
        "membind": membind,
        "visible": visible,
    }
    if torch_mode and numa_mode:
        raise UserError("--torch and --numa are separate advice; ask for one at a time")
    if not torch_mode:
        used = [_flag(n) for n in TORCH_ONLY if asked[n]]
        if used:
            raise UserError(f"{', '.join(used)} only appl{'y' if len(used) > 1 else 'ies'} with --torch")
    if not numa_mode:
        used = [_flag(n) for n in NUMA_ONLY if asked[n]]
        if used:
            raise UserError(f"{', '.join(used)} only appl{'y' if len(used) > 1 else 'ies'} with --numa")
    if (torch_mode or numa_mode) and (rule_dirs or no_builtin_rules):
        raise UserError("--rules and --no-builtin-rules apply to the fix list, not to --torch or --numa")
    if no_gpu and (compute_capability or gpu_arch):
        raise UserError("--no-gpu cannot be combined with --compute-capability or --gpu-arch")

    if numa_mode:
        from ...advice.numa_plan import plan_numa
        from ...render.numa_plan import render_numa_plan

        facts, _origin = obtain_facts(facts_file, probe)
        if (fmt or "shell") != "json":
            # the planner's shell and text interpolate hostnames and device names as they are: a
            # name with a newline would add a command to a script meant to be run
            facts, visible = _printable_facts(facts), None if visible is None else _printable(visible)
        try:
            plan = plan_numa(facts, strategy=strategy or "node", membind=membind, visible=visible)
            width = output_width(sys.stdout, bool(output and output != "-"))
            text = render_numa_plan(plan, facts, fmt or "shell", width)
        except ValueError as exc:
            raise UserError(f"--numa: {exc}") from None
        write_output(text, output)
        return

    facts, origin = obtain_facts(facts_file, probe)
    if (fmt or "text") != "json":
        # the advice's text and shell outputs interpolate facts unescaped (see above)
        facts, origin = _printable_facts(facts), _printable(origin)
    if torch_mode:
        sys.exit(
            _torch(facts, origin, fmt or "text", output, driver_version, compute_capability, gpu_arch, no_gpu,
                   torch_version, python_version)
        )  # fmt: skip
    _fix_list(facts, origin, fmt or "text", output, rule_dirs, no_builtin_rules, color)


def _printable_facts(facts: Any) -> Any:
    from ...escaping import printable_tree

    return printable_tree(facts)


def _printable(text: str) -> str:
    from ...escaping import printable

    return printable(text)


def _torch(
    facts: Any,
    origin: str,
    fmt: str,
    output: str | None,
    driver_version: str | None,
    compute_capability: tuple[str, ...],
    gpu_arch: tuple[str, ...],
    no_gpu: bool,
    torch_version: str | None,
    python_version: str | None,
) -> int:
    from ...advice.torch_build import recommend
    from ...advice.torch_inputs import Overrides, TorchAdviceError
    from ...render import torch_build

    overrides = Overrides(
        driver_version=driver_version,
        compute_capabilities=compute_capability,
        gpu_archs=gpu_arch,
        no_gpu=no_gpu,
        torch_version=torch_version,
        python_version=python_version,
    )
    try:
        rec = recommend(facts, overrides)
    except TorchAdviceError as exc:
        raise UserError(str(exc)) from None
    if fmt == "json":
        text = torch_build.render_json(rec)
    elif fmt == "shell":
        text = torch_build.render_shell(rec)
    else:
        width = output_width(sys.stdout, bool(output and output != "-"))
        text = torch_build.render_text(rec, "the live machine" if origin == "live" else origin, width)
    write_output(text, output)
    return rec.exit_code


def _fix_list(
    facts: Any,
    origin: str,
    fmt: str,
    output: str | None,
    rule_dirs: tuple[str, ...],
    no_builtin_rules: bool,
    color: bool | None,
) -> None:
    from ...advice.fix_list import collect
    from ...engine.runner import run_rules
    from ...render import fix_list
    from ...render.text import header

    ruleset = load_ruleset(rule_dirs, builtin=not no_builtin_rules)
    findings = run_rules(ruleset, facts)
    tags = {rule.id: rule.tags for rule in ruleset.rules}
    fixes = collect(findings, tags, rule_dirs=rule_dirs, origin=origin)
    head = header(facts) + ("" if origin == "live" else f" · facts: {origin}")
    if fmt == "json":
        text = fix_list.render_json(fixes)
    elif fmt == "shell":
        text = fix_list.render_shell(fixes, head)
    else:
        to_file = bool(output and output != "-")
        style = style_for(sys.stdout, color, to_file=to_file)
        text = fix_list.render_text(fixes, head, style, output_width(sys.stdout, to_file))
        write_output(text, output, colour=coloured(style))
        return
    write_output(text, output)
