"""Colour takes no column (issue 15 item 2): with --color, every text output is laid out exactly as
without it, so at 60 columns no visible line is wider than the plain one (layout.visible_len)."""

from __future__ import annotations

import re

import click
import pytest

from gpudoctor.render import layout
from tests.conftest import HOSTS
from tests.helpers.width import run_at

SGR = re.compile("\x1b\\[[0-9;]*m")
# seconds the gate's device checks took differ from run to run; nothing else may differ
TIMING = re.compile(r"\d+\.\d+ s\b")

COMMANDS = (
    ("check", "--root", str(HOSTS / "nvlink-down-8gpu")),
    ("check", "-v", "--root", str(HOSTS / "no-driver")),
    ("gate", "-v", "--root", str(HOSTS / "rdma-degraded")),
    ("fix", "--root", str(HOSTS / "nvlink-down-8gpu")),
    ("tiers", "--root", str(HOSTS / "h200-x2-real")),
)


@pytest.mark.parametrize("width", (60, 80, 120))
@pytest.mark.parametrize("args", COMMANDS, ids=lambda a: " ".join(a[:2]))
def test_coloured_output_is_laid_out_as_the_plain_one(capsys, monkeypatch, width, args):
    coloured = run_at(capsys, monkeypatch, width, *args, "--color")
    plain = run_at(capsys, monkeypatch, width, *args, "--no-color")
    assert "\x1b[" in coloured and "\x1b[" not in plain
    assert TIMING.sub("<t>", SGR.sub("", coloured)) == TIMING.sub("<t>", plain)


def test_the_line_packer_measures_what_the_terminal_shows():
    red = click.style("FAIL", fg="red")
    assert layout.visible_len(red) == 4 and len(red) > 4
    # 4 + 1 + 5 visible columns fit 10, although the line holds more characters than that
    assert layout.pack([red, "12345", "6"], 10) == [f"{red} 12345", "6"]
    assert layout.flow(f"{red} 12345 6", 10) == [f"{red} 12345", "6"]
