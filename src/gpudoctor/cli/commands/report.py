"""`gpudoctor report merge REPORTS...`: one fleet summary from many nodes' JSON reports."""

from __future__ import annotations

import sys
from typing import Any

import click

from ..errors import UserError
from ..options import format_option, output_option
from ..output import output_width, write_output
from ..registry import help_text

# The most reports one merge reads (ten times the largest fleet it is made for), and processes.
MAX_REPORTS = 100_000
MAX_JOBS = 64

MERGE_HELP = """\b
Reads gate reports (gpudoctor gate --json PATH) and check reports
(gpudoctor check --format json); a directory stands for the *.json
files in it (a symbolic link among them is refused, not followed).
Nodes are named by the hostname in each report's envelope; for a
node reported twice, the newer report by the reports' own times (a
gate report's time, else when its facts were read) counts; where one
of the two has no time, the later one on the command line.

\b
At most 100000 reports, each at most 16 MiB; --jobs N processes read
them (default: one per CPU this may run on, at most 16).

\b
--drift compares the nodes' profile facts instead (the facts a
golden-node profile fixes, which every report of this version
carries): for each, the value most nodes have and the nodes that
differ.

\b
Exit status:
  0  every node is go (gate) or passed (check); with --drift, no node
     differs from the majority on a blocking fact
  1  at least one node is no-go; with --drift, a node differs on a
     blocking fact (GPU count or model, driver, CUDA, torch, NVLink,
     PCIe generation or width, RDMA NIC count, rate or link layer)
  2  a file is missing or not a valid gpudoctor report"""


@click.group("report", help=help_text("report"))
def command() -> None:
    pass


@command.command("merge", epilog=MERGE_HELP)
@click.argument("reports", nargs=-1, required=True, type=click.Path())
@click.option("--drift", is_flag=True, help="Show how the nodes differ on the facts a golden-node profile fixes.")
@click.option(
    "--jobs",
    type=click.IntRange(1, MAX_JOBS),
    default=None,
    metavar="N",
    help="Read the reports in N processes (default: one per CPU, at most 16; 1: in this one).",
)
@format_option()
@output_option("the summary")
def merge(reports: tuple[str, ...], drift: bool, jobs: int | None, fmt: str, output: str | None) -> None:
    """Which nodes fail which checks, counts per check and per GPU model."""
    import json

    from ...fleet.merge import ReportError
    from ...fleet.merge import merge as merge_reports
    from ...fleet.reading import jobs_default
    from ...render.fleet import render_text

    paths, follow = _report_paths(reports)
    try:
        fleet = merge_reports(paths, jobs=jobs or jobs_default(), follow=follow)
    except ReportError as exc:
        raise UserError(str(exc)) from None
    if drift:
        from ...fleet.drift import drift as drift_of
        from ...render.fleet import render_drift

        result = drift_of(fleet.nodes)
        if fmt == "json":
            text = json.dumps(result.to_json(), indent=2, ensure_ascii=False) + "\n"
        else:
            text = render_drift(result, output_width(sys.stdout, bool(output and output != "-")))
        write_output(text, output)
        sys.exit(result.exit_code)
    if fmt == "json":
        text = json.dumps(fleet.to_json(), indent=2, ensure_ascii=False) + "\n"
    else:
        text = render_text(_printable(fleet), output_width(sys.stdout, bool(output and output != "-")))
    write_output(text, output)
    sys.exit(1 if any(n.verdict != "go" for n in fleet.nodes) else 0)


def _report_paths(reports: tuple[str, ...]) -> tuple[list[str], list[bool]]:
    """The report files named on the command line, a directory standing for the *.json entries
    in it (sorted; each opened without following a symbolic link), and whether to follow each;
    UserError past MAX_REPORTS (counted while a directory is listed, so a directory of millions
    of entries is not read whole first)."""
    import os
    from pathlib import Path

    paths: list[str] = []
    follow: list[bool] = []
    for item in reports:
        p = Path(item)
        if p.is_dir():
            found: list[str] = []
            try:
                with os.scandir(p) as entries:
                    for entry in entries:
                        if entry.name.endswith(".json"):
                            found.append(str(p / entry.name))
                            if len(paths) + len(found) > MAX_REPORTS:
                                raise UserError(_too_many())
            except OSError as exc:
                raise UserError(f"{item}: cannot list this directory: {exc.strerror or exc}") from None
            if not found:
                raise UserError(f"{item}: no *.json reports in this directory")
            found.sort()
            paths += found
            follow += [False] * len(found)
        else:
            paths.append(item)
            follow.append(True)
            if len(paths) > MAX_REPORTS:
                raise UserError(_too_many())
    return paths, follow


def _too_many() -> str:
    return f"more than {MAX_REPORTS} reports: report merge reads at most {MAX_REPORTS} at once"


def _printable(fleet: Any) -> Any:
    """The fleet with every string from the reports (node names, check ids, GPU models, blocking
    lines) through gpudoctor.escaping.printable: the summary interpolates them as they are, and a name
    with a newline or an escape sequence would otherwise forge a line or drive the terminal."""
    from dataclasses import fields, replace

    from ...escaping import printable_tree

    def clean(item: Any) -> Any:
        return replace(item, **{f.name: printable_tree(getattr(item, f.name)) for f in fields(item)})

    return replace(fleet, nodes=[clean(n) for n in fleet.nodes], replaced=printable_tree(fleet.replaced))
