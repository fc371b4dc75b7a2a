"""`gpudoctor select -n K`: the CUDA_VISIBLE_DEVICES value of the K best free, healthy GPUs."""

from __future__ import annotations

import sys

import click

from ...escaping import printable
from ..load import load_ruleset, obtain_facts
from ..options import (
    ProbeOptions,
    facts_option,
    fail_on_option,
    format_option,
    min_free_memory_option,
    root_options,
)
from ..output import write_output
from ..registry import help_text

SELECT_HELP = """\b
Usage in a job script:
  export CUDA_DEVICE_ORDER=PCI_BUS_ID
  CUDA_VISIBLE_DEVICES=$(gpudoctor select -n 2 --min-free-memory 40) || exit 1
  export CUDA_VISIBLE_DEVICES

\b
Chosen: GPUs NVML lists, with no failed check at or above --fail-on,
enough free memory, a compute mode that admits the job, and inside
CUDA_VISIBLE_DEVICES when that is already set (on an AMD host also
ROCR_VISIBLE_DEVICES, whose GPUs HIP numbers from 0, and
HIP_VISIBLE_DEVICES); idle ones first, then
most free memory, then least busy; for -n > 1, where enough qualify,
from one NVLink island and NUMA node, else one NVLink island, else one
NUMA node. Indices are NVML's (PCI bus order): set
CUDA_DEVICE_ORDER=PCI_BUS_ID, or print UUIDs with --uuid.

\b
Exit status:
  0  the value is on stdout
  1  fewer than K GPUs qualify (stderr says why each was left out)
  2  gpudoctor could not run

\b
--format json prints one object on stdout, with either exit status 0
or 1: ok, cuda_visible_devices (null unless K qualified), chosen (index,
uuid, bus_id, name, free_memory_mib, numa_node, ...), left_out (gpu,
why) and notes."""


@click.command("select", help=help_text("select"), epilog=SELECT_HELP)
@click.option("-n", "count", type=click.IntRange(min=1), default=1, show_default=True, help="How many GPUs.")
@min_free_memory_option("Free memory each needs.", default=0.0)
@fail_on_option("A GPU with a failed check at or above this severity is left out.")
@click.option("--uuid", "uuids", is_flag=True, help="Print GPU UUIDs instead of indices.")
@format_option(help="text: the CUDA_VISIBLE_DEVICES value alone; json: the whole plan.")
@facts_option()
@click.option("-v", "--verbose", is_flag=True, help="Also say on stderr what was chosen and why others were not.")
@root_options
def command(
    count: int,
    min_free_memory: float,
    fail_on: str,
    uuids: bool,
    fmt: str,
    facts_file: str | None,
    verbose: bool,
    probe: ProbeOptions,
) -> None:
    from ...advice.gpu_select import GIB, plan
    from ...engine.runner import run_rules
    from ...findings import Severity

    facts, _origin = obtain_facts(facts_file, probe)
    ruleset = load_ruleset(())
    findings = run_rules(ruleset, facts, [r for r in ruleset.rules if r.subject == "gpu"])
    selection = plan(facts, findings, count, min_free_memory, Severity(fail_on))
    if fmt == "json":
        from ...render.select_json import render

        write_output(render(selection, uuids), None)
        sys.exit(0 if selection.ok else 1)
    for note in selection.notes:
        click.echo(f"gpudoctor select: {printable(note)}", err=True)
    if not selection.ok:
        click.echo(f"gpudoctor select: {len(selection.eligible)} GPU(s) qualify, {count} asked for", err=True)
        for label, why in selection.excluded:
            click.echo(f"  {printable(label)}: {printable(why)}", err=True)
        if not selection.excluded and not selection.eligible:
            click.echo("  no GPU found (NVML, the PCI bus and amdgpu list no NVIDIA or AMD GPU)", err=True)
        sys.exit(1)
    if verbose:
        for c in selection.chosen:
            util = f"{c.utilization_pct} %" if c.utilization_pct is not None else "?"
            click.echo(
                f"gpudoctor select: chose {printable(c.label)} {printable(c.name)}: {c.free_bytes / GIB:.1f} GiB free, "
                f"{util} busy, NUMA node {c.numa_node if c.numa_node is not None else '?'}, "
                + (f"NVLink island of GPU {c.island}" if c.island is not None else "no NVLink peers"),
                err=True,
            )
        for label, why in selection.excluded:
            click.echo(f"gpudoctor select: left out {printable(label)}: {printable(why)}", err=True)
    write_output(selection.value(uuids) + "\n", None)
