"""The status line on stderr for slow steps: on a terminal only, never in a pipe, a file or with
`check -q`, and always cleared before the report, so what stdout carries never changes."""

from __future__ import annotations

import io
import sys

import pytest

from gpudoctor.cli import progress as progress_module
from gpudoctor.cli.progress import Progress
from gpudoctor.cli.root import run
from tests.conftest import HOSTS

PCIE = str(HOSTS / "pcie-degraded")


class TtyText(io.StringIO):
    def isatty(self) -> bool:
        return True


def screen(written: str) -> str:
    """What a terminal shows at the end: each carriage return starts the line over."""
    shown = ""
    for part in written.split("\r"):
        shown = part + shown[len(part):]
    return shown.strip()


def test_a_slow_step_is_shown_on_a_terminal_and_cleared_when_done() -> None:
    tty = TtyText()
    with Progress(tty, delay=0) as progress:
        progress("importing torch in /opt/py\x1b[2J/bin/python3")
        assert tty.getvalue() == "gpudoctor: importing torch in /opt/py\\x1b[2J/bin/python3 ..."
        progress("waiting for NVML")
        assert screen(tty.getvalue()) == "gpudoctor: waiting for NVML ..."
    assert screen(tty.getvalue()) == ""


def test_a_pipe_or_a_file_sees_nothing() -> None:
    pipe = io.StringIO()
    with Progress(pipe, delay=0) as progress:
        progress("importing torch in /usr/bin/python3")
    assert pipe.getvalue() == ""


def test_a_step_done_before_the_delay_prints_nothing() -> None:
    tty = TtyText()
    with Progress(tty, delay=3600) as progress:
        progress("reading pci")
        progress("reading numa")
    assert tty.getvalue() == ""


def tty_stderr(monkeypatch: pytest.MonkeyPatch) -> TtyText:
    """A terminal as stderr, with no delay. Set in the test itself: pytest's capture puts its own
    sys.stderr back after the fixtures have run."""
    tty = TtyText()
    monkeypatch.setattr(progress_module, "DELAY_S", 0.0)
    monkeypatch.setattr(sys, "stderr", tty)
    return tty


def test_check_names_its_steps_on_a_terminal_and_leaves_the_report_as_it_was(monkeypatch, capsys) -> None:
    tty = tty_stderr(monkeypatch)
    assert run(["check", "--root", PCIE, "--no-color"]) == 1
    written = tty.getvalue()
    assert f"gpudoctor: reading torch in {sys.executable} ..." in written
    assert "gpudoctor: reading pci ..." in written
    assert screen(written) == ""  # cleared before the report is printed
    assert "gpudoctor:" not in capsys.readouterr().out


def test_check_quiet_shows_no_progress(monkeypatch) -> None:
    tty = tty_stderr(monkeypatch)
    assert run(["check", "--root", PCIE, "-q"]) == 1
    assert run(["check", "--root", PCIE, "--quiet", "--format", "json"]) == 1
    assert tty.getvalue() == ""


def test_gate_and_probe_show_progress_on_a_terminal(monkeypatch) -> None:
    tty = tty_stderr(monkeypatch)
    assert run(["gate", "--root", PCIE]) == 1
    assert "gpudoctor: reading pci ..." in tty.getvalue()
    tty.truncate(0)
    tty.seek(0)
    assert run(["probe", "--root", PCIE]) == 0
    assert "gpudoctor: reading torch in" in tty.getvalue()
    assert screen(tty.getvalue()) == ""


def test_without_a_terminal_check_writes_nothing_to_stderr(capsys) -> None:
    assert run(["check", "--root", PCIE]) == 1
    assert capsys.readouterr().err == ""


def test_a_sample_says_how_long_it_waits() -> None:
    assert progress_module.step_label("nvml", None, False, 2.0) == "reading the GPU error counters twice, 2 s apart"
    assert progress_module.step_label("torch", "/venv/bin/python", True, None) == "importing torch in /venv/bin/python"
