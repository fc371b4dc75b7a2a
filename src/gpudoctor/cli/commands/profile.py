"""`gpudoctor profile create SNAPSHOTS... -o FILE`: a golden-node profile from known-good snapshots."""

from __future__ import annotations

import click

from ..errors import UserError
from ..load import load_facts_file
from ..options import output_option
from ..output import write_output
from ..registry import help_text

CREATE_HELP = """\b
Reads facts snapshots of nodes known to be good (gpudoctor probe -o
FILE) and writes what they have: GPU count and model, each GPU's PCIe
generation and width, NVLink links and islands, RDMA NICs (count,
rate, link layer), the GPU / NUMA node / NIC placement, driver, CUDA,
torch and kernel versions, memory per NUMA node. A value the snapshots
differ on becomes a set of allowed values (a range, for memory), and a
comment in the file says which snapshot had which.

\b
Use it: gpudoctor check --profile FILE, or the gate policy's
`profile: FILE`. Each fact is then a profile-* check.

\b
Exit status:
  0  the profile was written
  2  a snapshot is missing or not valid, or the file cannot be written"""


@click.group("profile", help=help_text("profile"))
def command() -> None:
    pass


@command.command("create", epilog=CREATE_HELP)
@click.argument("snapshots", nargs=-1, required=True, type=click.Path(dir_okay=False))
@output_option("the profile")
def create(snapshots: tuple[str, ...], output: str | None) -> None:
    """Write a node profile (YAML) from known-good facts snapshots."""
    from ...fleet.profile import ProfileError, profile_from_mapping
    from ...fleet.profile import create as make_profile
    from ...inputs import InputError, parse_yaml
    from ...render.profile_yaml import render

    draft = make_profile([(path, load_facts_file(path)) for path in snapshots])
    text = render(draft.data, draft.notes)
    try:
        # what is written must read back: the schema is the file's contract
        profile_from_mapping(parse_yaml(text, "<profile>"), "<profile>")
    except (ProfileError, InputError) as exc:
        raise UserError(f"internal error: the profile made does not read back: {exc}") from None
    write_output(text, output)
