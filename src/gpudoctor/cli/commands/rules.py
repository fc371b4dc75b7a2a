"""`gpudoctor rules list|show|validate`: the rules gpudoctor knows, one explained, rule files checked."""

from __future__ import annotations

import sys

import click

from ..errors import UserError
from ..load import load_ruleset
from ..options import completer, format_option, rules_option
from ..output import output_width, say, write_output
from ..registry import help_text


@click.group("rules", help=help_text("rules"))
def command() -> None:
    pass


@command.command("list")
@format_option()
@rules_option
def rules_list(fmt: str, rule_dirs: tuple[str, ...]) -> None:
    """Every rule with its area, severity and subject."""
    from ...render.rules import list_json, list_text

    ruleset = load_ruleset(rule_dirs, gate=True)  # the gate's checks too (area gate)
    width = output_width(sys.stdout)
    write_output(list_json(ruleset) if fmt == "json" else list_text(ruleset, width), None)


@command.command("show")
@click.argument("rule_id", shell_complete=completer("complete_rule_id"))
@rules_option
def rules_show(rule_id: str, rule_dirs: tuple[str, ...]) -> None:
    """Explain one rule: why it matters, what it reads, how to fix it."""
    from ...model.profile_facts import BY_RULE_ID
    from ...render.rules import show_profile_text, show_text

    ruleset = load_ruleset(rule_dirs, gate=True)  # the gate's checks too (area gate)
    rule = ruleset.by_id(rule_id)
    if rule is None and rule_id in BY_RULE_ID:  # a node profile's check (model/profile_facts.py)
        write_output(show_profile_text(BY_RULE_ID[rule_id], output_width(sys.stdout)), None)
        return
    if rule is None:
        import difflib

        close = difflib.get_close_matches(rule_id, [r.id for r in ruleset.rules] + list(BY_RULE_ID), n=3)
        raise UserError(f"no rule {rule_id!r}" + (f"; did you mean {', '.join(close)}?" if close else ""))
    write_output(show_text(rule, output_width(sys.stdout)), None)


@command.command("validate")
@click.argument("paths", nargs=-1, required=True, type=click.Path())
def rules_validate(paths: tuple[str, ...]) -> None:
    """Check rule files or directories; exit 2 naming file and line on the first problem in each."""
    from ...engine.loader import RuleLoadError, validate_paths

    try:
        count, errors = validate_paths(paths)
    except RuleLoadError as exc:
        raise UserError(str(exc)) from None
    from ...escaping import printable

    # one line per file with a problem, so not a UserError (which is one line in all)
    for e in errors:
        say(f"gpudoctor: {printable(str(e))}")
    if errors:
        sys.exit(2)
    write_output(f"{count} rule(s) OK\n", None)
