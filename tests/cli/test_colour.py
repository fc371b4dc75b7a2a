"""When text output is coloured: --color/--no-color always wins, then NO_COLOR, FORCE_COLOR, an
output file, TERM=dumb, and last whether stdout is a terminal."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpudoctor.cli.output import wants_colour
from gpudoctor.cli.root import run
from tests.conftest import HOSTS

PCIE = str(HOSTS / "pcie-degraded")  # a failing check: its FAIL label is coloured
SGR = "\x1b["


class Tty:
    def isatty(self) -> bool:
        return True


class Pipe:
    def isatty(self) -> bool:
        return False


@pytest.fixture(autouse=True)
def plain_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("NO_COLOR", "FORCE_COLOR", "TERM"):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize(
    ("env", "stream", "flag", "to_file", "want"),
    [
        ({}, Tty(), None, False, True),
        ({}, Pipe(), None, False, False),
        ({}, Tty(), None, True, False),  # -o FILE: plain unless asked
        ({"TERM": "dumb"}, Tty(), None, False, False),
        ({"NO_COLOR": "1"}, Tty(), None, False, False),
        ({"NO_COLOR": ""}, Tty(), None, False, True),  # no-color.org: set and not empty
        ({"FORCE_COLOR": "1"}, Pipe(), None, False, True),
        ({"FORCE_COLOR": "1"}, Tty(), None, True, True),
        ({"FORCE_COLOR": "1", "TERM": "dumb"}, Pipe(), None, False, True),
        ({"FORCE_COLOR": "1", "NO_COLOR": "1"}, Tty(), None, False, False),  # NO_COLOR wins
        ({"NO_COLOR": "1"}, Pipe(), True, True, True),  # the flag always wins
        ({"FORCE_COLOR": "1"}, Tty(), False, False, False),
    ],
)
def test_the_rules_in_order(monkeypatch, env, stream, flag, to_file, want) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert wants_colour(stream, flag, to_file) is want


def test_color_colours_a_pipe_and_a_file(capsys, tmp_path: Path) -> None:
    assert run(["check", "--root", PCIE, "--color"]) == 1
    assert SGR in capsys.readouterr().out
    report = tmp_path / "report.txt"
    assert run(["check", "--root", PCIE, "--color", "-o", str(report)]) == 1
    assert SGR in report.read_text(encoding="utf-8")
    assert run(["check", "--root", PCIE, "-o", str(report)]) == 1
    assert SGR not in report.read_text(encoding="utf-8")


def test_force_color_and_no_color_reach_the_commands(capsys, monkeypatch) -> None:
    monkeypatch.setenv("FORCE_COLOR", "1")
    run(["check", "--root", PCIE])
    assert SGR in capsys.readouterr().out
    monkeypatch.setenv("NO_COLOR", "1")
    run(["check", "--root", PCIE])
    assert SGR not in capsys.readouterr().out
    run(["check", "--root", PCIE, "--color"])
    assert SGR in capsys.readouterr().out
