"""The command registry: one summary per command for `gpudoctor --help` and the command's own help,
no command module imported to list them, and which command lines start NVML early."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import click
import pytest

from gpudoctor.cli.registry import COMMANDS, probes_early
from gpudoctor.cli.root import run

COMMAND_DIR = Path(__file__).resolve().parents[2] / "src" / "gpudoctor" / "cli" / "commands"


def _command(name: str) -> click.Command:
    command = importlib.import_module(f"gpudoctor.cli.commands.{COMMANDS[name].module}").command
    assert isinstance(command, click.Command)
    return command


def test_every_command_module_is_registered_once():
    modules = sorted(p.stem for p in COMMAND_DIR.glob("*.py") if p.stem != "__init__")
    assert sorted(entry.module for entry in COMMANDS.values()) == modules


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_the_summary_in_gpudoctor_help_is_the_first_line_of_the_commands_own_help(name):
    command = _command(name)
    summary = COMMANDS[name].summary
    assert command.name == name
    assert (command.help or "").split("\n\n")[0] == summary
    assert command.get_short_help_str(limit=200) == summary


def test_gpudoctor_help_lists_every_summary(capsys):
    assert run(["--help"]) == 0
    out = " ".join(capsys.readouterr().out.split())  # the summaries wrap at the terminal width
    for name, entry in COMMANDS.items():
        assert f"{name} {entry.summary}" in out


def test_gpudoctor_help_imports_no_command_module():
    script = (
        "import sys\n"
        "from gpudoctor.cli.root import run\n"
        "code = run(['--help'])\n"
        "print(sorted(m for m in sys.modules if m.startswith('gpudoctor.cli.commands.')), code)\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1] == "[] 0"


def test_asking_the_registry_loads_neither_click_nor_a_probe():
    script = (
        "import sys\n"
        "from gpudoctor.cli.registry import probes_early\n"
        "probes_early(['check'])\n"
        "heavy = ('click', 'gpudoctor.probes', 'gpudoctor.cli.commands')\n"
        "print(sorted(m for m in sys.modules if m.startswith(heavy)))\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1] == "[]"


def test_commands_that_probe_this_machine():
    probing = {name for name, entry in COMMANDS.items() if entry.probes}
    assert probing == {"check", "probe", "gate", "select", "topo", "fix", "tiers", "bench"}


@pytest.mark.parametrize(
    ("argv", "early"),
    [
        (["check"], True),
        (["gate", "--expect-gpus", "8"], True),
        (["select", "-n", "2"], True),
        (["fix", "--numa"], True),
        (["check", "--root", "/tmp/x"], False),
        (["check", "--facts=host.json"], False),
        (["topo", "--sysfs-root", "/x/sys"], False),
        (["check", "--help"], False),
        (["check", "-h"], False),
        (["rules", "list"], False),
        (["run", "--numa", "--", "python", "train.py"], False),
        (["report", "merge", "a.json"], False),
        (["no-such-command"], False),
        (["--version"], False),
        ([], False),
    ],
)
def test_nvml_starts_early_only_for_a_live_probe(argv, early):
    assert probes_early(argv) is early


def test_an_unknown_command_is_a_usage_error(capsys):
    assert run(["no-such-command"]) == 2
    assert "No such command 'no-such-command'" in capsys.readouterr().err
