"""`gpudoctor check`: judge this machine (or a snapshot) with the rules; findings with fixes."""

from __future__ import annotations

import sys

import click

from ..errors import UserError
from ..load import (
    load_facts_file,
    load_previous_file,
    load_profile_file,
    load_ruleset,
    refuse_probe_options_with_facts,
    start_collect,
    with_previous,
)
from ..options import (
    ProbeOptions,
    check_rate_options,
    color_option,
    completer,
    facts_option,
    fail_on_option,
    format_option,
    output_option,
    previous_option,
    root_options,
    rule_dir_options,
    sample_option,
)
from ..output import coloured, output_width, style_for, write_output
from ..registry import EXIT_HELP, help_text


@click.command("check", help=help_text("check"), epilog=EXIT_HELP)
@facts_option()
@format_option()
@output_option("the report")
@rule_dir_options
@click.option(
    "--only",
    multiple=True,
    metavar="AREA|TAG|ID",
    shell_complete=completer("complete_area"),
    help="Run only these checks (repeatable).",
)
@click.option(
    "--skip",
    multiple=True,
    metavar="AREA|TAG|ID",
    shell_complete=completer("complete_area"),
    help="Skip these checks (repeatable).",
)
@fail_on_option("Lowest severity of a failed check that makes the exit status 1.", ("error", "warning", "info"))
@click.option("-v", "--verbose", is_flag=True, help="List every pass and skipped check, each subject on its own.")
@click.option("-q", "--quiet", is_flag=True, help="Print only the problems, the summary and the verdict.")
@click.option(
    "--profile",
    "profile_file",
    type=click.Path(dir_okay=False),
    metavar="FILE",
    help="Also check the node against this golden-node profile (gpudoctor profile create): one "
    "profile-* check per fact it names.",
)
@previous_option
@sample_option
@color_option
@root_options
def command(
    facts_file: str | None,
    fmt: str,
    output: str | None,
    rule_dirs: tuple[str, ...],
    no_builtin_rules: bool,
    only: tuple[str, ...],
    skip: tuple[str, ...],
    fail_on: str,
    verbose: bool,
    quiet: bool,
    previous_file: str | None,
    sample_s: float | None,
    color: bool | None,
    probe: ProbeOptions,
    profile_file: str | None = None,
) -> None:
    import time

    deadline = time.monotonic() + probe.timeout
    check_rate_options(facts_file, previous_file, sample_s, probe.timeout)
    if facts_file:
        refuse_probe_options_with_facts(probe)
    previous = load_previous_file(previous_file)
    profile = load_profile_file(profile_file)
    # Probing starts first, before the rule engine is even imported, so that NVML's start-up in
    # its child overlaps importing the engine and loading the rules.
    collection = None
    if not facts_file:
        collection = start_collect(probe, sample_s)
    try:
        from ...engine.runner import judging_deadline, prepare, run_rules, select, unknown_selectors
        from ...findings import Report, Severity

        ruleset = load_ruleset(rule_dirs, builtin=not no_builtin_rules)
        unknown = unknown_selectors(ruleset, list(only) + list(skip))
        if unknown:
            raise UserError(
                f"--only/--skip: no rule, area or tag named {', '.join(unknown)} (see `gpudoctor rules list`)"
            )
    except BaseException:
        if collection is not None:
            collection.abort()
        raise
    rules = select(ruleset.rules, only, skip)
    if collection is None:
        facts = load_facts_file(str(facts_file))
        origin = str(facts_file)
    else:
        from ..progress import finish_collection

        # -q asks for the problems only: no status line either; while NVML's child may still be
        # answering, compile what every run of the rules reads first
        facts = finish_collection(
            collection,
            probe.python,
            probe.torch_import,
            sample_s,
            enabled=not quiet,
            meanwhile=lambda: prepare(rules, deadline),
        )
        origin = probe.origin
    facts = with_previous(facts, previous)
    findings = run_rules(ruleset, facts, rules, deadline=judging_deadline(deadline))
    if profile is not None:
        from ...fleet.profile import check as check_profile

        findings += check_profile(facts, profile, only, skip)
    report = Report(
        findings=findings,
        fail_on=Severity(fail_on),
        facts_origin=origin,
        rules_loaded=len(ruleset.rules),
    )
    style = None
    if fmt == "json":
        from ...render.json_report import render as render_json

        text = render_json(report, facts, include_skipped=verbose)
    else:
        from ...render.text import render as render_text

        stream = sys.stdout
        to_file = bool(output and output != "-")
        style = style_for(stream, color, to_file=to_file)
        width = output_width(stream, to_file)
        text = render_text(report, facts, style=style, verbose=verbose, quiet=quiet, width=width)
    write_output(text, output, colour=coloured(style))
    sys.exit(report.exit_code)
