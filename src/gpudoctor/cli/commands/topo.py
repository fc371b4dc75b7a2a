"""`gpudoctor topo`: GPUs, NUMA nodes, CPUs, RDMA NICs and how they connect, for a person to read."""

from __future__ import annotations

import sys

import click

from ..load import obtain_facts
from ..options import ProbeOptions, facts_option, format_option, output_option, root_options
from ..output import output_width, write_output
from ..registry import help_text

EPILOG = """\b
Exit status: 0 shown; 2 gpudoctor could not run (bad arguments, unreadable
snapshot, missing root)."""

TOPO_HELP = """\b
A tree per NUMA node (its CPUs, memory and the CPUs this process may use), the GPUs and
RDMA NICs below their host bridges and PCIe switches, then one row per GPU: node, local
allowed CPUs, active NVLink links (an AMD GPU's XGMI links), and the nearest RDMA NIC; an
AMD host's XGMI hives and the GPUs with fewer links than the others of their hive."""


@click.command("topo", help=help_text("topo", TOPO_HELP), epilog=EPILOG)
@facts_option()
@format_option()
@output_option("the view")
@root_options
def command(
    facts_file: str | None,
    fmt: str,
    output: str | None,
    probe: ProbeOptions,
) -> None:
    from ...render import topo

    facts, _origin = obtain_facts(facts_file, probe)
    if fmt == "json":
        write_output(topo.render_json(facts), output)
    else:
        to_file = bool(output and output != "-")
        write_output(topo.render_text(facts, output_width(sys.stdout, to_file)), output)
