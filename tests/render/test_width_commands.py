"""The other text outputs fit the width too (issue 15 item 2): gate, fix. At 60, 80 and 120
columns no line runs past the width but one piece that cannot be broken or a command line; at
100 (pipes, files) the goldens hold the output."""

from __future__ import annotations

import pytest

from tests.conftest import HOSTS
from tests.helpers.width import run_at, too_wide

WIDTHS = (60, 80, 120)
# healthy two-GPU H200, 8-GPU NVSwitch board, no driver (no-go), degraded RDMA (no-go), PCIe x8
GATE_HOSTS = ("h200-x2-real", "nvswitch-8gpu", "no-driver", "rdma-degraded", "pcie-degraded")
# the blocking lines are one line each at any width (README: "blocking findings first, one line each")
NO_GO = ("NO-GO  ",)


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("host", GATE_HOSTS)
@pytest.mark.parametrize("verbose", ((), ("-v",)))
def test_gate_text_fits_every_width(capsys, monkeypatch, width, host, verbose):
    out = run_at(capsys, monkeypatch, width, "gate", "--root", str(HOSTS / host), *verbose)
    assert too_wide(out, width, NO_GO) == []
    assert any(line.startswith("Verdict: ") for line in out.splitlines())


def test_gate_rows_move_the_message_below_when_the_columns_leave_no_room(capsys, monkeypatch):
    wide = run_at(capsys, monkeypatch, 120, "gate", "--root", str(HOSTS / "h200-x2-real"), "-v")
    narrow = run_at(capsys, monkeypatch, 60, "gate", "--root", str(HOSTS / "h200-x2-real"), "-v")
    row = next(line for line in wide.splitlines() if "nouveau-loaded " in line)
    assert row.split()[:2] == ["pass", "nouveau-loaded"] and "nouveau is not loaded" in row
    lines = narrow.splitlines()
    at = next(i for i, line in enumerate(lines) if "nouveau-loaded " in line)
    assert "nouveau is not loaded" not in lines[at] and lines[at + 1] == "          nouveau is not loaded"


def test_gate_blocking_lines_stay_one_line_each_at_60(capsys, monkeypatch):
    out = run_at(capsys, monkeypatch, 60, "gate", "--root", str(HOSTS / "no-driver"))
    lines = out.splitlines()
    blocking = [line for line in lines if line.startswith("NO-GO  ")]
    assert blocking and lines[: len(blocking)] == blocking and lines[len(blocking)] == ""
