"""`gpudoctor topo`: GPUs, NUMA nodes, CPUs, RDMA NICs and how they connect, for a person to read."""

from __future__ import annotations

import click

from ..cli import ProbeOptions, obtain_facts, root_options, write_output

EPILOG = """\b
Exit status: 0 shown; 2 gpudoctor could not run (bad arguments, unreadable
snapshot, missing root)."""


@click.command("topo", epilog=EPILOG)
@click.option(
    "--facts",
    "facts_file",
    type=click.Path(dir_okay=False),
    help="Show this snapshot (from `gpudoctor probe`) instead of probing the machine.",
)
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Write it here (atomically).")
@root_options
def command(
    facts_file: str | None,
    fmt: str,
    output: str | None,
    probe: ProbeOptions,
) -> None:
    """Show which GPU and NIC sits on which NUMA node, PCIe host bridge and switch.

    \b
    A tree per NUMA node (its CPUs, memory and the CPUs this process may use), the GPUs and
    RDMA NICs below their host bridges and PCIe switches, then one row per GPU: node, local
    allowed CPUs, active NVLink links, and the nearest RDMA NIC.
    """
    from ..render import topo

    facts, _origin = obtain_facts(facts_file, probe)
    write_output(topo.render_json(facts) if fmt == "json" else topo.render_text(facts), output)
