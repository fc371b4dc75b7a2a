"""Every option README.md and docs/ show on a gpudoctor command line is an option of that command."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import click
import pytest

from gpudoctor.cli.registry import COMMANDS

REPO = Path(__file__).resolve().parents[2]
DOCUMENTS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]

# `gpudoctor CMD [SUB] ...` up to where the command line ends in prose or markdown: a closing
# backtick, a shell operator or a table cell's " |" (not the `|` inside `node|socket`), a closing
# parenthesis, or the `--` before the program `run` execs.
LINE = re.compile(r"\bgpudoctor ([a-z]+)([^`\n]*)")
END = re.compile(r" \||;|\)| -- ")
OPTION = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*)")
GROUPS = {"rules": ("list", "show", "validate"), "report": ("merge",)}


def _documented() -> dict[tuple[str, str], set[str]]:
    found: dict[tuple[str, str], set[str]] = {}
    for path in DOCUMENTS:
        for match in LINE.finditer(path.read_text(encoding="utf-8")):
            name, rest = match.group(1), END.split(match.group(2))[0]
            if name not in COMMANDS:
                continue  # prose: "gpudoctor never runs a fix"
            words = rest.split()
            sub = words[0] if words and words[0] in GROUPS.get(name, ()) else ""
            found.setdefault((name, sub), set()).update(OPTION.findall(rest))
    return found


DOCUMENTED = _documented()


def _command(name: str, sub: str) -> click.Command:
    command = importlib.import_module(f"gpudoctor.cli.commands.{COMMANDS[name].module}").command
    if sub:
        assert isinstance(command, click.Group)
        found = command.commands.get(sub)
        assert found is not None, f"gpudoctor {name} {sub}: documented, but there is no such subcommand"
        return found
    return command


def test_the_groups_subcommands_are_these():
    for name, subs in GROUPS.items():
        group = _command(name, "")
        assert isinstance(group, click.Group) and sorted(group.commands) == sorted(subs)


def test_the_documents_show_the_commands_people_use():
    assert {("fix", ""), ("run", ""), ("gate", ""), ("report", "merge"), ("check", "")} <= set(DOCUMENTED)
    assert {"--numa", "--torch"} <= DOCUMENTED[("fix", "")] and "--deep" in DOCUMENTED[("gate", "")]


@pytest.mark.parametrize(("name", "sub"), sorted(DOCUMENTED))
def test_every_documented_option_exists(name, sub):
    command = _command(name, sub)
    known = {opt for param in command.params for opt in [*param.opts, *param.secondary_opts]}
    known.add("--help")
    missing = sorted(DOCUMENTED[(name, sub)] - known)
    assert missing == [], f"gpudoctor {name} {sub}: documented options it does not take: {missing}"
