"""The other text outputs fit the width too (issue 15 item 2): gate, fix. At 60, 80 and 120
columns no line runs past the width but one piece that cannot be broken or a command line; at
100 (pipes, files) the goldens hold the output."""

from __future__ import annotations

import json

import pytest

from gpudoctor.render.layout import is_command
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


# no driver (install commands), NVLink down on 8 GPUs, NVSwitch SXid, degraded RDMA, DKMS without headers
FIX_HOSTS = ("no-driver", "nvlink-down-8gpu", "nvswitch-sxid-fatal", "rdma-degraded", "dkms-headers-missing")


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("host", FIX_HOSTS)
def test_fix_list_fits_every_width_and_keeps_commands_whole(capsys, monkeypatch, width, host):
    out = run_at(capsys, monkeypatch, width, "fix", "--root", str(HOSTS / host))
    listing = run_at(capsys, monkeypatch, width, "fix", "--root", str(HOSTS / host), "--format", "json")
    commands = set()
    for group in json.loads(listing)["groups"]:
        for item in group["items"]:
            assert f"     then: {item['verify']}" in out  # the re-check, whole on one line
            for line in item["fix"].splitlines():
                if is_command(line):  # printed whole, on one line
                    assert line.rstrip() in out, line
                    commands.add(line.strip())
    rest = "\n".join(line for line in out.splitlines() if line.strip() not in commands)
    assert too_wide(rest, width, ("     then: ",)) == []


# two NUMA sockets with 8 GPUs, a container limited to some CPUs, a 2-node VM, no driver
NUMA_HOSTS = ("numa-dgx-8gpu", "numa-container-limited", "numa-vm-2node", "no-driver")


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("host", NUMA_HOSTS)
def test_fix_numa_fits_every_width_and_keeps_the_numactl_lines_whole(capsys, monkeypatch, width, host):
    out = run_at(capsys, monkeypatch, width, "fix", "--numa", "--root", str(HOSTS / host))
    plan = json.loads(
        run_at(capsys, monkeypatch, width, "fix", "--numa", "--format", "json", "--root", str(HOSTS / host))
    )
    assert plan["gpus"], plan
    commands = [line for line in out.splitlines() if line.startswith("numactl ")]
    assert len(commands) == sum(1 for g in plan["gpus"] if g.get("argv"))
    # comment lines wrap; the live numactl lines and the launcher examples ("#   torchrun ...") do not
    assert too_wide(out, width, ("numactl ", "#   torchrun ", "#   srun ")) == []


# the real H200 host, a Pascal card torch dropped, no driver, a B300 under the device minimum
TORCH_HOSTS = ("h200-x2-real", "pascal-dropped-refused", "no-driver", "b300-below-device-min")


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("host", TORCH_HOSTS)
def test_fix_torch_fits_every_width_and_keeps_the_install_commands_whole(capsys, monkeypatch, width, host):
    out = run_at(capsys, monkeypatch, width, "fix", "--torch", "--root", str(HOSTS / host))
    rec = json.loads(
        run_at(capsys, monkeypatch, width, "fix", "--torch", "--format", "json", "--root", str(HOSTS / host))
    )
    commands = {f"  {command}" for command in rec["commands"].values()}
    assert commands <= set(out.splitlines())  # each install command whole, on a line of its own
    assert too_wide("\n".join(line for line in out.splitlines() if line not in commands), width) == []
