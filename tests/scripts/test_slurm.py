"""The Slurm wrapper (scripts/slurm/gpudoctor-healthcheck.sh) against stand-in gpudoctor, sinfo and
scontrol commands: what it drains, what it resumes, and what it leaves alone."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO

SCRIPT = REPO / "scripts" / "slurm" / "gpudoctor-healthcheck.sh"
LINE = "pcie-width-degraded: GPU 1 (0000:9a:00.0) links at x8 of x16 — fix: Reseat the card"

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")


def _exe(path: Path, body: str) -> None:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


class Node:
    def __init__(self, tmp_path: Path) -> None:
        self.tmp = tmp_path
        self.bin = tmp_path / "bin"
        self.bin.mkdir()
        self.state = tmp_path / "state"
        self.log = tmp_path / "scontrol.log"
        self.args = tmp_path / "gate.args"
        _exe(self.bin / "gpudoctor", 'echo "$@" > "$FAKE_ARGS"\nprintf "%b" "$FAKE_OUT"\nexit "$FAKE_RC"\n')
        _exe(self.bin / "sinfo", 'printf "%s\\n" "$FAKE_SINFO"\n')
        _exe(
            self.bin / "scontrol",
            'for a in "$@"; do printf "%s|" "$a"; done >> "$SCONTROL_LOG"; echo >> "$SCONTROL_LOG"\n',
        )

    def run(self, mode: str, rc: int, sinfo: str = "idle|", out: str = "", **env: str) -> subprocess.CompletedProcess:
        if rc == 1 and not out:
            out = f"NO-GO  {LINE}\\n\\ngpudoctor gate 0.1.0\\nVerdict: NO-GO\\n"
        full = {
            "PATH": f"{self.bin}:/usr/bin:/bin",
            "FAKE_RC": str(rc),
            "FAKE_OUT": out,
            "FAKE_ARGS": str(self.args),
            "FAKE_SINFO": sinfo,
            "SCONTROL_LOG": str(self.log),
            "GPUDOCTOR_STATE_DIR": str(self.state),
            "GPUDOCTOR_DEFAULTS": str(self.tmp / "no-defaults"),
            "GPUDOCTOR_NODE": "gpu017",
            **env,
        }
        args = ["bash", str(SCRIPT)] + ([mode] if mode else [])
        return subprocess.run(args, env=full, capture_output=True, text=True, timeout=30)

    def scontrol(self) -> list[list[str]]:
        if not self.log.exists():
            return []
        return [line.rstrip("|").split("|") for line in self.log.read_text().splitlines() if line]


@pytest.fixture
def node(tmp_path):
    return Node(tmp_path)


def test_no_go_drains_with_the_gpudoctor_prefix_and_the_finding(node):
    proc = node.run("--health-check", 1)
    assert proc.returncode == 0, proc.stderr
    assert node.scontrol() == [["update", "NodeName=gpu017", "State=DRAIN", f"Reason=gpudoctor: {LINE}"]]
    args = node.args.read_text()
    assert args.startswith("gate --no-color --timeout 40 --json ")


def test_pass_resumes_only_a_node_gpudoctor_drained(node):
    node.run("--health-check", 0, sinfo=f"drained|gpudoctor: {LINE}")
    assert node.scontrol() == [["update", "NodeName=gpu017", "State=RESUME"]]


def test_pass_leaves_an_admin_drain_alone(node):
    node.run("--health-check", 0, sinfo="drained|bad DIMM, ticket 4711")
    node.run("--health-check", 0, sinfo="idle|")
    assert node.scontrol() == []


def test_no_go_leaves_an_admin_drain_alone_and_keeps_the_same_reason(node):
    node.run("--health-check", 1, sinfo="draining|bad DIMM, ticket 4711")
    node.run("--health-check", 1, sinfo=f"drained|gpudoctor: {LINE}")
    assert node.scontrol() == []
    node.run("--health-check", 1, sinfo="drained|gpudoctor: an older finding")
    assert node.scontrol()[0][-1] == f"Reason=gpudoctor: {LINE}"


def test_gpudoctor_that_cannot_run_drains_nothing_unless_asked(node):
    proc = node.run("--health-check", 2, out="")
    assert node.scontrol() == [] and "could not run (exit status 2)" in proc.stderr
    node.run("--health-check", 2, out="", GPUDOCTOR_DRAIN_ON_ERROR="1")
    [call] = node.scontrol()
    assert call[2] == "State=DRAIN" and call[3].startswith("Reason=gpudoctor: gpudoctor could not run (exit status 2)")


def test_a_gate_killed_by_the_backstop_drains(node):
    node.run("--health-check", 124, out="")
    [call] = node.scontrol()
    assert call[3].startswith("Reason=gpudoctor: the gate did not finish within 55 s")


def test_prolog_answers_with_its_exit_status_and_calls_no_slurm_command(node):
    proc = node.run("--prolog", 1, SLURM_JOB_ID="1234")
    assert proc.returncode == 1 and node.scontrol() == []
    marker = (node.state / "prolog-failed").read_text()
    assert "job=1234" in marker and f"gpudoctor: {LINE}" in marker
    assert "--timeout 20" in node.args.read_text()
    proc = node.run("", 0, SLURM_JOB_ID="1235")  # no option: prolog mode from SLURM_JOB_ID
    assert proc.returncode == 0 and not (node.state / "prolog-failed").exists()


def test_prolog_can_be_told_to_set_the_reason(node):
    node.run("--prolog", 1, SLURM_JOB_ID="1", GPUDOCTOR_PROLOG_DRAIN="1")
    assert node.scontrol() == [["update", "NodeName=gpu017", "State=DRAIN", f"Reason=gpudoctor: {LINE}"]]


def test_health_check_takes_over_and_later_resumes_a_prolog_drain_of_its_own(node):
    node.run("--prolog", 1, SLURM_JOB_ID="7")
    node.run("--health-check", 1, sinfo="drained|Prolog error")
    assert node.scontrol()[-1] == ["update", "NodeName=gpu017", "State=DRAIN", f"Reason=gpudoctor: {LINE}"]
    node.run("--health-check", 0, sinfo="drained|Prolog error")
    assert node.scontrol()[-1] == ["update", "NodeName=gpu017", "State=RESUME"]
    assert not (node.state / "prolog-failed").exists()


def test_someone_elses_prolog_error_is_not_resumed(node):
    node.run("--health-check", 0, sinfo="drained|Prolog error")
    assert node.scontrol() == []


def test_policy_and_extra_arguments_reach_the_gate(node, tmp_path):
    policy = tmp_path / "policy.yaml"
    policy.write_text("version: 1\n")
    node.run(
        "--health-check",
        0,
        GPUDOCTOR_POLICY=str(policy),
        GPUDOCTOR_ARGS="--expect-gpus 8",
        GPUDOCTOR_PROMETHEUS=str(tmp_path / "g.prom"),
    )
    args = node.args.read_text().split()
    assert args[args.index("--policy") + 1] == str(policy)
    assert "--expect-gpus" in args and args[args.index("--prometheus") + 1] == str(tmp_path / "g.prom")


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck is not installed")
def test_script_passes_shellcheck():
    proc = subprocess.run(["shellcheck", str(SCRIPT)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout


def test_script_is_executable():
    assert os.access(SCRIPT, os.X_OK)
