"""`gpudoctor fix` as people and scripts drive it: the fix list, --torch, --numa, exit statuses, bad input."""

from __future__ import annotations

import json

import pytest

from gpudoctor.cli.root import run
from tests.conftest import HOSTS, SNAPSHOTS

H200 = str(SNAPSHOTS / "h200-x2.json")
DEGRADED = str(HOSTS / "pcie-degraded")
HEALTHY = str(HOSTS / "healthy-2gpu")


def cli(capsys, *args: str) -> tuple[int, str, str]:
    code = run(list(args))
    out, err = capsys.readouterr()
    return code, out, err


RULES = """\
- id: test-needs-root
  title: A host check whose fix needs root
  area: kernel
  severity: warning
  tags: [kernel, fix-root]
  fail_if: host.cpu_count > 0
  message: "{host.cpu_count} CPUs seen"
  fix: "sudo sysctl -w kernel.numa_balancing=0"
  why: test
  refs: ["test"]
- id: test-hardware
  title: A per-GPU check whose fix is hardware work
  area: pcie
  severity: error
  subject: gpu
  tags: [pcie, fix-hardware]
  fail_if: gpu.vendor == "nvidia"
  message: "{gpu.label} looks wrong"
  fix: "Reseat the card."
  why: test
  refs: ["test"]
- id: test-user-config
  title: A config check a user fixes
  area: env
  severity: info
  tags: [env, fix-config]
  fail_if: host.cpu_count > 0
  message: "set a variable"
  fix: "export OMP_NUM_THREADS=8"
  why: test
  refs: ["test"]
- id: test-untagged
  title: A check without a fix tag
  area: env
  severity: warning
  tags: [env]
  fail_if: host.cpu_count > 0
  message: "untagged"
  fix: "Do the thing."
  why: test
  refs: ["test"]
- id: test-reboot
  title: A check that passes here
  area: driver
  severity: error
  tags: [driver, fix-reboot]
  fail_if: host.cpu_count < 0
  message: "never"
  fix: "Reboot."
  why: test
  refs: ["test"]
"""


@pytest.fixture
def rules_dir(tmp_path):
    d = tmp_path / "rules"
    d.mkdir()
    (d / "test.yaml").write_text(RULES, encoding="utf-8")
    return str(d)


# ---------------------------------------------------------------------------- the fix list


def test_fix_list_groups_by_what_the_fix_needs(capsys, rules_dir):
    code, out, err = cli(capsys, "fix", "--facts", H200, "--rules", rules_dir, "--no-builtin-rules")
    assert code == 0, err
    headings = [
        "Configuration and reinstalls (as your user) (1)",
        "Needs root (1)",
        "BIOS, cabling or hardware (1)",
        "Other fixes (1)",
    ]
    positions = [out.index(h) for h in headings]
    assert positions == sorted(positions)
    assert "Needs a reboot" not in out and "test-reboot" not in out  # it passes
    # The per-GPU rule failed on both GPUs with one fix: one item naming both.
    assert "test-hardware — GPU 0 (0000:00:06.0), GPU 1 (0000:00:07.0)" in out
    assert "sudo sysctl -w kernel.numa_balancing=0" in out
    assert f"then: gpudoctor check --only test-needs-root --rules {rules_dir}" in out
    assert "never runs them" in out


def test_fix_list_json(capsys, rules_dir):
    code, out, _ = cli(capsys, "fix", "--facts", H200, "--rules", rules_dir, "--no-builtin-rules", "--format", "json")
    assert code == 0
    data = json.loads(out)
    assert data["fixes"] == 4 and data["facts_origin"] == H200
    groups = {g["group"]: g["items"] for g in data["groups"]}
    assert list(groups) == ["fix-config", "fix-root", "fix-hardware", "other"]
    hw = groups["fix-hardware"][0]
    assert hw["rule"] == "test-hardware" and hw["severity"] == "error"
    assert [s["bus_id"] for s in hw["subjects"]] == ["0000:00:06.0", "0000:00:07.0"]
    assert hw["verify"].startswith("gpudoctor check --only test-hardware")


def test_fix_list_shell_runs_only_checks(capsys, rules_dir):
    code, out, _ = cli(capsys, "fix", "--facts", H200, "--rules", rules_dir, "--no-builtin-rules", "--format", "shell")
    assert code == 0
    live = [line for line in out.splitlines() if line and not line.startswith("#")]
    assert live and all(line.startswith("gpudoctor check --only ") for line in live)
    assert "#    sudo sysctl -w kernel.numa_balancing=0" in out


def test_fix_list_from_builtin_rules_on_a_degraded_host(capsys):
    code, out, _ = cli(capsys, "fix", "--root", DEGRADED)
    assert code == 0
    assert "pcie-width-degraded — GPU 1 (0000:9a:00.0)" in out and "Reseat the card" in out
    assert "then: gpudoctor check --only pcie-width-degraded" in out


def test_fix_list_on_a_healthy_host_says_nothing_to_fix(capsys, rules_dir, tmp_path):
    passing = tmp_path / "passing"
    passing.mkdir()
    # Only the rule that passes here.
    (passing / "p.yaml").write_text("- id: test-reboot" + RULES.split("- id: test-reboot", 1)[1], encoding="utf-8")
    code, out, _ = cli(capsys, "fix", "--facts", H200, "--rules", str(passing), "--no-builtin-rules")
    assert code == 0 and "Nothing to fix" in out


def test_fix_list_written_to_a_file(capsys, rules_dir, tmp_path):
    target = tmp_path / "fixes.json"
    code, out, _ = cli(
        capsys,
        "fix",
        "--facts",
        H200,
        "--rules",
        rules_dir,
        "--no-builtin-rules",
        "--format",
        "json",
        "-o",
        str(target),
    )
    assert code == 0 and out == ""
    assert json.loads(target.read_text())["fixes"] == 4


# ---------------------------------------------------------------------------- --torch


def test_fix_torch_on_the_real_h200_snapshot(capsys):
    code, out, _ = cli(capsys, "fix", "--torch", "--facts", H200)
    assert code == 0
    assert "Recommended: torch 2.14.1 · cu130" in out
    assert "pip install torch==2.14.1 torchvision==0.29.1 --index-url https://download.pytorch.org/whl/cu130" in out
    assert "Installed: the installed build works here: torch 2.11.0+cu130" in out


def test_fix_torch_for_another_machine(capsys):
    code, out, _ = cli(
        capsys, "fix", "--torch", "--facts", H200, "--compute-capability", "6.1", "--driver-version", "580.95.05",
        "--format", "json",
    )  # fmt: skip
    assert code == 0
    data = json.loads(out)
    assert data["variant"] == "cu126" and data["inputs"]["driver_source"] == "--driver-version"
    assert data["commands"]["uv"].startswith("uv pip install torch==2.14.1")


def test_fix_torch_shell_is_one_install_line(capsys):
    code, out, _ = cli(capsys, "fix", "--torch", "--facts", H200, "--format", "shell")
    assert code == 0
    assert [line for line in out.splitlines() if not line.startswith("#")] == [
        "pip install torch==2.14.1 torchvision==0.29.1 --index-url https://download.pytorch.org/whl/cu130"
    ]


def test_fix_torch_exit_1_when_no_gpu_build_exists(capsys):
    code, out, _ = cli(capsys, "fix", "--torch", "--facts", H200, "--compute-capability", "3.0")
    assert code == 1
    assert "No GPU build fits" in out and "whl/cpu" in out


@pytest.mark.parametrize(
    "args, message",
    [
        (["--torch", "--compute-capability", "nine"], "--compute-capability"),
        (["--torch", "--torch-version", "9.9"], "not in the release table"),
        (["--torch", "--no-gpu", "--gpu-arch", "gfx942"], "--no-gpu cannot be combined"),
        (["--driver-version", "570.0"], "--driver-version only applies with --torch"),
        (["--torch", "--numa"], "one at a time"),
        (["--torch", "--strategy", "node"], "--strategy only applies with --numa"),
        (["--torch", "--rules", "."], "--rules and --no-builtin-rules apply to the fix list"),
    ],
)
def test_bad_input_exits_2_with_one_line(capsys, args, message):
    code, out, err = cli(capsys, "fix", "--facts", H200, *args)
    assert code == 2
    assert message in err and "Traceback" not in err and out == ""


def test_facts_and_root_together_are_refused(capsys):
    code, _, err = cli(capsys, "fix", "--torch", "--facts", H200, "--root", HEALTHY)
    assert code == 2 and "--facts" in err


# ---------------------------------------------------------------------------- --numa


def test_fix_numa_prints_the_planners_plan(capsys):
    code, out, err = cli(capsys, "fix", "--numa", "--facts", H200)
    assert code == 0, err
    assert "numactl --cpunodebind=0" in out
    code, out, _ = cli(capsys, "fix", "--numa", "--facts", H200, "--format", "json")
    assert code == 0 and json.loads(out)


def test_fix_numa_bad_strategy_exits_2(capsys):
    code, _, err = cli(capsys, "fix", "--numa", "--facts", H200, "--strategy", "bogus")
    assert code == 2 and "bogus" in err


def test_help_lists_the_modes(capsys):
    code, out, _ = cli(capsys, "fix", "--help")
    assert code == 0
    for text in ("--torch", "--numa", "--compute-capability", "--strategy", "Exit status:"):
        assert text in out
