"""`gate --distributed` on the CPU: two ranks over gloo (torch needed; skipped without it), and the
pieces that need no torch: which GPU a rank owns, the bandwidth verdict, the table."""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys

import pytest

from gpudoctor.findings import Status
from gpudoctor.preflight.distributed import allreduce_finding, own_gpu
from gpudoctor.preflight.policy import Policy
from gpudoctor.render.gate_distributed import render_table
from tests.preflight.helpers import DEGRADED, HEALTHY, cli, facts, ruleset

HAS_TORCH = importlib.util.find_spec("torch") is not None
needs_torch = pytest.mark.skipif(not HAS_TORCH, reason="torch is not installed here")


def test_own_gpu_follows_local_rank_and_cuda_visible_devices(monkeypatch):
    data = facts("healthy-2gpu")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert own_gpu(data, 0) == "0000:18:00.0" and own_gpu(data, 1) == "0000:9a:00.0"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,0")
    assert own_gpu(data, 0) == "0000:9a:00.0"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", data["nvml"]["gpus"][0]["uuid"])
    assert own_gpu(data, 0) == "0000:18:00.0" and own_gpu(data, 1) is None


def test_bandwidth_under_the_policy_minimum_fails():
    measured = {
        "correct": True,
        "bytes": 256 << 20,
        "iterations": 20,
        "algbw_gbps": 50.0,
        "busbw_gbps": 75.0,
    }

    def judged(measured, minimum):
        return allreduce_finding(ruleset(), facts("healthy-2gpu"), Policy(min_busbw_gbps=minimum), measured, 4)

    low = judged(measured, 100.0)
    assert low.status is Status.FAIL and "75.0 GB/s" in low.message and "minimum 100 GB/s" in low.message
    assert "across 4 ranks" in low.message and low.rule_id == "gate-allreduce-busbw"
    assert judged(measured, 50.0).status is Status.PASS
    assert judged(measured, None).status is Status.PASS
    assert judged({**measured, "correct": False}, 100.0).status is Status.FAIL


def test_table_lists_every_rank_and_puts_blocking_lines_first():
    rows = [
        {"rank": 0, "local_rank": 0, "node": "n1", "gpu": "GPU 0 (0000:18:00.0)", "verdict": "go", "blocking": []},
        {
            "rank": 1,
            "local_rank": 1,
            "node": "n1",
            "gpu": "GPU 1 (0000:9a:00.0)",
            "verdict": "no-go",
            "blocking": ["x: y"],
        },
    ]
    text = render_table(rows, "gloo", None, lambda s, **_: s)
    lines = text.splitlines()
    assert lines[0] == "NO-GO  rank 1 (n1): x: y"
    assert "2 ranks on 1 node(s)" in text and text.rstrip().endswith("rank 1 on n1 (every rank exits 1)")


def test_distributed_outside_torchrun_cannot_run(capsys, monkeypatch):
    for name in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    code, _, err = cli(capsys, "gate", "--root", HEALTHY, "--distributed")
    assert code == 2 and "torchrun" in err
    code, _, err = cli(capsys, "gate", "--root", HEALTHY, "--distributed", "--junit", "x.xml")
    assert code == 2 and "single-node" in err


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _launch(root: str, *extra: str) -> list[subprocess.CompletedProcess]:
    """Two ranks as torchrun would start them (env://), each with its own exit status. On a one-GPU
    host both use gloo (the node has fewer CUDA devices than ranks), as on a host without CUDA."""
    port = str(_free_port())
    procs = []
    for rank in range(2):
        env = dict(os.environ)
        env.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2", LOCAL_WORLD_SIZE="2",
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
        env.pop("CUDA_VISIBLE_DEVICES", None)
        procs.append(
            subprocess.Popen(
                [sys.executable, "-m", "gpudoctor", "gate", "--distributed", "--root", root, *extra],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    out = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=120)
        out.append(subprocess.CompletedProcess(p.args, p.returncode, stdout, stderr))
    return out


@pytest.mark.gloo
@needs_torch
def test_one_rank_no_go_stops_every_rank(tmp_path):
    # pcie-degraded: GPU 1 links at x8, so rank 1 (local rank 1 → GPU 1) is no-go, rank 0 is go
    report = tmp_path / "dist.json"
    rank0, rank1 = _launch(DEGRADED, "--json", str(report))
    assert rank0.returncode == 1 and rank1.returncode == 1, rank0.stderr + rank1.stderr
    lines = rank0.stdout.splitlines()
    assert lines[0].startswith("NO-GO  rank 1 (gpu-node-01): pcie-width-degraded: GPU 1 (0000:9a:00.0)")
    table = "\n".join(lines)
    assert "2 ranks on 1 node(s) · backend gloo" in table
    assert any(line.split()[:2] == ["0", "0"] and " go " in f"{line} " for line in lines)
    assert "all-reduce: not measured" in table and "Verdict: NO-GO — rank 1 on gpu-node-01" in table
    assert rank1.stdout == "" and "NO-GO  rank 1: pcie-width-degraded" in rank1.stderr
    import json

    import jsonschema

    from gpudoctor.schemas import load_schema

    data = json.loads(report.read_text())
    jsonschema.validate(data, load_schema("gate-report"))
    assert data["verdict"] == "no-go" and [r["verdict"] for r in data["distributed"]["ranks"]] == ["go", "no-go"]


@pytest.mark.gloo
@needs_torch
def test_torchrun_entry_point_all_go():
    port = str(_free_port())
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc-per-node",
            "2",
            "--master-addr",
            "127.0.0.1",
            "--master-port",
            port,
            "-m",
            "gpudoctor",
            "gate",
            "--distributed",
            "--root",
            HEALTHY,
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Verdict: GO — 2 ranks" in proc.stdout
    assert "not measured (no NCCL" in proc.stdout


class _Tensor:
    """As much of a CPU tensor as gather_rows uses: a list of numbers."""

    def __init__(self, data):
        self.data = list(data)

    def item(self):
        return self.data[0]

    def tolist(self):
        return list(self.data)

    def __getitem__(self, index):
        return _Tensor(self.data[index])

    def __setitem__(self, index, value):
        self.data[index] = value.data


class _FakeDist:
    """torch.distributed for one process: a gather returns this rank's own tensor."""

    ReduceOp = None

    def __init__(self):
        self.calls = []

    def is_available(self):
        return True

    def is_nccl_available(self):
        return True

    def init_process_group(self, **kwargs):
        self.calls.append(("init", kwargs["backend"], kwargs["world_size"]))

    def new_group(self, **kwargs):
        self.calls.append(("new_group", kwargs["backend"]))
        return "objects"

    def all_gather(self, outs, tensor, group=None):
        assert len(outs) == 1
        outs[0].data = list(tensor.data)

    def all_reduce(self, *args, **kwargs):
        raise AssertionError("one rank has nothing to all-reduce with")

    def destroy_process_group(self):
        self.calls.append(("destroy",))


def _fake_torch(cuda: bool):
    import types

    dist = _FakeDist()
    torch = types.SimpleNamespace(
        distributed=dist,
        int64="int64",
        uint8="uint8",
        tensor=lambda data, dtype=None: _Tensor(data),
        zeros=lambda n, dtype=None: _Tensor([0] * n),
        cuda=types.SimpleNamespace(
            is_available=lambda: cuda,
            device_count=lambda: 1 if cuda else 0,
            set_device=lambda index: None,
            get_device_properties=lambda index: types.SimpleNamespace(uuid="", pci_bus_id=0x18, pci_device_id=0),
        ),
    )
    return torch, dist


def _one_rank(monkeypatch, policy: Policy, cuda: bool = True):
    from gpudoctor.preflight.distributed import run_distributed

    torch, dist = _fake_torch(cuda)
    monkeypatch.setitem(sys.modules, "torch", torch)
    monkeypatch.setitem(sys.modules, "torch.distributed", dist)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    for name, value in (("RANK", "0"), ("LOCAL_RANK", "0"), ("WORLD_SIZE", "1"), ("MASTER_ADDR", "127.0.0.1"),
                        ("MASTER_PORT", "29500")):
        monkeypatch.setenv(name, value)
    return run_distributed(policy, {"root": HEALTHY, "nvml_timeout": 5.0}), dist


def test_one_rank_has_nothing_to_all_reduce_with_and_is_go(monkeypatch):
    # torchrun --nproc-per-node 1 (issue 19): every rank is go, nothing is measured, and the
    # table says why instead of "a rank is no-go"
    from gpudoctor.render.gate_distributed import distributed_json, stdout_text

    outcome, dist = _one_rank(monkeypatch, Policy())
    assert dist.calls[0] == ("init", "nccl", 1) and dist.calls[-1] == ("destroy",)
    assert outcome.rows and outcome.rows[0]["verdict"] == "go" and outcome.measured is None
    assert outcome.exit_code == 0 and outcome.not_measured == "one rank: nothing to all-reduce with"
    text = stdout_text(outcome, lambda s, **_: s)
    assert "all-reduce: not measured (one rank: nothing to all-reduce with)" in text
    assert "a rank is no-go" not in text and text.rstrip().endswith("Verdict: GO — 1 rank")
    assert '"allreduce_not_measured": "one rank: nothing to all-reduce with"' in distributed_json(outcome)
    # the same without CUDA (gloo): still one rank, that is the reason given
    outcome, _ = _one_rank(monkeypatch, Policy(), cuda=False)
    assert outcome.backend == "gloo" and outcome.not_measured.startswith("one rank") and outcome.exit_code == 0


def test_one_rank_blocks_only_on_a_policy_minimum_when_fail_closed(monkeypatch):
    from gpudoctor.render.gate_distributed import stdout_text

    outcome, _ = _one_rank(monkeypatch, Policy(min_busbw_gbps=100.0))
    assert outcome.exit_code == 1
    text = stdout_text(outcome, lambda s, **_: s)
    assert text.startswith("NO-GO  gate-allreduce-busbw: one rank has nothing to all-reduce with")
    assert "Verdict: NO-GO — all-reduce bandwidth not measured with one rank" in text
    outcome, _ = _one_rank(monkeypatch, Policy(min_busbw_gbps=100.0, fail_closed=False))
    assert outcome.exit_code == 0
    said = " ".join(stdout_text(outcome, lambda s, **_: s).split())  # as a reader reads it, wrapped or not
    assert "the policy's minimum 100 GB/s is not checked (fail-open)" in said


def test_ranks_of_a_node_with_fewer_gpus_than_ranks_all_use_gloo(monkeypatch):
    # two ranks on a one-GPU host (issue 19): rank 0 has a GPU, rank 1 none; both must pick gloo, or
    # rank 0 would wait on NCCL for a rank that joined over gloo until the watchdog gave up
    from gpudoctor.preflight.distributed import run_distributed

    for rank in (0, 1):
        torch, dist = _fake_torch(cuda=True)  # device_count 1
        monkeypatch.setitem(sys.modules, "torch", torch)
        monkeypatch.setitem(sys.modules, "torch.distributed", dist)
        for name, value in (("RANK", str(rank)), ("LOCAL_RANK", str(rank)), ("WORLD_SIZE", "1"),
                            ("LOCAL_WORLD_SIZE", "2"), ("MASTER_ADDR", "127.0.0.1"), ("MASTER_PORT", "29500")):
            monkeypatch.setenv(name, value)
        outcome = run_distributed(Policy(), {"root": HEALTHY, "nvml_timeout": 5.0})
        assert outcome.backend == "gloo" and dist.calls[0] == ("init", "gloo", 1), rank
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "1")
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("LOCAL_RANK", "0")
    assert run_distributed(Policy(), {"root": HEALTHY, "nvml_timeout": 5.0}).backend == "nccl"
