"""Text outputs fit the width the command gets (issue 15 item 2): COLUMNS, else the terminal, else
100. Prose wraps; a command or an expression is never wrapped or cut; a line runs past the width
only where one token cannot be broken. Goldens at 60, 80 and 120 columns for tiers and rules list."""

from __future__ import annotations

import pytest

from gpudoctor.render.layout import is_command
from tests.conftest import HOSTS
from tests.helpers.golden import GOLDEN, check
from tests.helpers.width import run_at, too_wide
from tests.preflight.helpers import cli

WIDTHS = (60, 80, 120)
# one per kind: the real two-GPU H200, an 8-GPU NVSwitch board, no driver, a degraded PCIe host
TIER_HOSTS = ("h200-x2-real", "nvswitch-8gpu", "no-driver", "pcie-degraded")


@pytest.mark.parametrize("width", WIDTHS)
def test_tiers_golden_at_each_width(capsys, monkeypatch, width):
    out = run_at(capsys, monkeypatch, width, "tiers", "--root", str(HOSTS / "h200-x2-real"))
    check(GOLDEN / "width" / f"tiers-h200-x2-real-{width}.txt", out)
    assert max(len(line) for line in out.splitlines()) <= width
    assert "NVIDIA H200 SXM 141GB" in out and "◀ this machine: GPU 0, 1" in out


@pytest.mark.parametrize("width", WIDTHS)
def test_rules_list_golden_at_each_width(capsys, monkeypatch, width):
    out = run_at(capsys, monkeypatch, width, "rules", "list")
    check(GOLDEN / "width" / f"rules-list-{width}.txt", out)
    assert too_wide(out, width) == []


@pytest.mark.parametrize("width", (*WIDTHS, 100))
@pytest.mark.parametrize("host", TIER_HOSTS)
@pytest.mark.parametrize("extra", ((), ("--workload", "serve-70b-fp8"), ("--sort", "perf-per-watt")))
def test_tiers_fit_every_width(capsys, monkeypatch, width, host, extra):
    out = run_at(capsys, monkeypatch, width, "tiers", "--root", str(HOSTS / host), *extra)
    assert too_wide(out, width) == []


def test_tiers_leave_columns_out_in_the_documented_order_and_say_so(capsys, monkeypatch):
    wide = run_at(capsys, monkeypatch, 200, "tiers", "--root", str(HOSTS / "h200-x2-real"))
    narrow = run_at(capsys, monkeypatch, 60, "tiers", "--root", str(HOSTS / "h200-x2-real"))
    header_wide = next(line for line in wide.splitlines() if line.startswith("tier "))
    header_narrow = next(line for line in narrow.splitlines() if line.startswith("tier "))
    assert "launch $" in header_wide and "TDP W" in header_wide and "Columns left out" not in wide
    assert header_narrow.split() == ["tier", "card", "memory", "FP16"]
    left_out = "BW GB/s, FP32, TF32, BF16, FP8, link GB/s, TDP W, launch $"
    assert f"Columns left out to fit 60 columns: {left_out}" in " ".join(narrow.split())


def test_tiers_keep_the_sorted_column(capsys, monkeypatch):
    out = run_at(capsys, monkeypatch, 60, "tiers", "--sort", "bandwidth", "--root", str(HOSTS / "h200-x2-real"))
    assert "BW GB/s" in next(line for line in out.splitlines() if line.startswith("tier "))


@pytest.mark.parametrize("width", (*WIDTHS, 100))
def test_rules_show_fits_and_never_wraps_a_command(capsys, monkeypatch, width):
    code, listing, _ = cli(capsys, "rules", "list", "--format", "json")
    import json

    rules = json.loads(listing)
    for rule in rules:
        out = run_at(capsys, monkeypatch, width, "rules", "show", rule["id"])
        assert too_wide(out, width, ("Applies when:", "Fails when:", "  ")) == [], rule["id"]
        for line in rule["fix"].splitlines():
            if is_command(line):  # printed whole, on one line
                assert line.rstrip() in out, (rule["id"], line)


def test_the_nouveau_command_is_one_line_at_60_columns(capsys, monkeypatch):
    out = run_at(capsys, monkeypatch, 60, "rules", "show", "nouveau-loaded")
    assert any(
        "printf 'blacklist nouveau" in line and "| sudo tee /etc/modprobe.d/blacklist-nouveau.conf" in line
        for line in out.splitlines()
    )


def test_default_width_without_a_terminal_is_100(capsys, monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)
    code, out, _ = cli(capsys, "tiers", "--root", str(HOSTS / "h200-x2-real"))
    assert code == 0 and max(len(line) for line in out.splitlines()) == 100


# Fixes whose first line started with a command word and went on in prose: printed whole as a
# command line, 150 to 260 columns at any width. Now prose with the command inline (or a command
# on a line of its own), they wrap.
PROSE_BESIDE_A_COMMAND = (
    "ascend-torch-without-torch-npu",
    "nccl-p2p-disabled",
    "nccl-ib-disabled",
    "omp-num-threads-unset",
)


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("rule_id", PROSE_BESIDE_A_COMMAND)
def test_a_fix_with_prose_beside_its_command_wraps_to_the_width(capsys, monkeypatch, width, rule_id):
    from gpudoctor.render.layout import units

    out = run_at(capsys, monkeypatch, width, "rules", "show", rule_id)
    fix = out[out.index("\nFix:\n") : out.index("\nReferences:")].splitlines()
    assert len(fix) > 2
    # a line runs long only when it is one piece that cannot be broken (a command, a token)
    assert [line for line in fix if len(line) > width and len(units(line.strip())) > 1] == []
