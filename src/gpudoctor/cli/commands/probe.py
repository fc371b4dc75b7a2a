"""`gpudoctor probe`: read the machine and write its facts snapshot (JSON)."""

from __future__ import annotations

import click

from ..load import start_collect
from ..options import ProbeOptions, output_option, root_options
from ..output import write_output
from ..registry import help_text


@click.command("probe", help=help_text("probe"), epilog="Exit status: 0 snapshot written; 2 gpudoctor could not run.")
@output_option("the snapshot")
@click.option("--scrub", is_flag=True, help="Replace hostname, GPU UUIDs and serials (for bug reports and fixtures).")
@root_options
def command(
    output: str | None,
    scrub: bool,
    probe: ProbeOptions,
) -> None:
    from ...facts import dumps
    from ..progress import finish_collection

    facts = finish_collection(start_collect(probe), probe.python, probe.torch_import)
    if scrub:
        from ...facts import scrub as scrub_facts

        facts = scrub_facts(facts)
    write_output(dumps(facts), output)
