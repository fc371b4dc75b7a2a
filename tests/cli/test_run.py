"""`gpudoctor run --numa`: picks the rank's GPU, binds, execs the command; bad input exits 2 in one line.

The exec tests start a real child (`python -m gpudoctor run ...`) whose command prints its own CPU
affinity. They plan from a tree built here whose CPUs are this machine's, so that the binding is
real: with --no-numactl the child binds itself (sched_setaffinity), and a stand-in numactl on
PATH shows the numactl path's exact argv.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gpudoctor.cli.root import run
from tests.conftest import HOSTS, REPO
from tests.helpers.hosts import make_hosts

PRINT_AFFINITY = "import os; print(sorted(os.sched_getaffinity(0)))"
DGX = str(HOSTS / "numa-dgx-8gpu")
CONTAINER = str(HOSTS / "numa-container-limited")
VM = str(HOSTS / "numa-vm-2node")


def cli(capsys, *args: str) -> tuple[int, str, str]:
    code = run(list(args))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def rank_env(monkeypatch):
    for name in ("LOCAL_RANK", "SLURM_LOCALID", "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


# --- a tree that matches this machine's CPUs -----------------------------------------------------------


def this_machine_root(tmp_path: Path) -> tuple[Path, list[int], list[int]]:
    """Two NUMA nodes made of the CPUs this process may use (node 0: the first, node 1: the rest;
    with one CPU both are that CPU's node), GPU 0 on node 0 and GPU 1 on node 1."""
    mh = make_hosts()
    mine = sorted(os.sched_getaffinity(0))
    node0, node1 = (mine[:1], mine[1:]) if len(mine) > 1 else (mine, [])
    nodes = {0: mh.Node(node0, 16 * mh.GiB_KB, [10, 20])}
    if node1:
        nodes[1] = mh.Node(node1, 16 * mh.GiB_KB, [20, 10])
    cpus = {c: mh.Cpu(0, c, [c], mine, "32768K") for c in mine}
    spec = dict(mh.cpu_topology(cpus, nodes, smt=False))
    for i, node in enumerate(sorted(nodes)):
        text = mh.cpulist(nodes[node].cpus)
        spec.update(mh.pci_function(f"sys/devices/pci0000:00/0000:00:0{5 + i}.0", cls="0x030200", vendor="0x10de",
                                    device="0x2330", numa_node=node, local_cpus=text, driver="nvidia"))
    spec["proc/self/status"] = mh.proc_status(mine, sorted(nodes))
    from tests.helpers.tree import write_tree

    write_tree(tmp_path, spec)
    return tmp_path, node0, node1 or node0


def child(args: list[str], env_extra: dict[str, str] | None = None, path_first: str | None = None):
    env = {k: v for k, v in os.environ.items() if k not in ("LOCAL_RANK", "SLURM_LOCALID", "CUDA_VISIBLE_DEVICES")}
    env.update(env_extra or {})
    env["PYTHONPATH"] = str(REPO / "src") + os.pathsep + env.get("PYTHONPATH", "")
    if path_first:
        env["PATH"] = path_first + os.pathsep + env.get("PATH", "")
    return subprocess.run([sys.executable, "-m", "gpudoctor", "run", *args], capture_output=True, text=True,
                          env=env, timeout=60, cwd=REPO)


def test_exec_binds_the_command_to_the_gpus_node_without_numactl(tmp_path):
    root, node0, node1 = this_machine_root(tmp_path)
    proc = child(["--numa", "--no-numactl", "--root", str(root), "--gpu", "1", "--",
                  sys.executable, "-c", PRINT_AFFINITY])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(node1)
    assert proc.stderr.startswith("gpudoctor run: cuda:1 = GPU 1 (0000:00:06.0)")
    # Memory policy: set where node 1 exists here, else the fallback is said on stderr.
    assert "set_mempolicy" in proc.stderr or "memory policy NOT set" in proc.stderr
    assert proc.stderr.count("\n") == 1


@pytest.mark.skipif(not Path("/proc/self/numa_maps").exists(), reason="kernel without NUMA support")
def test_memory_policy_set_without_numactl_survives_exec(tmp_path):
    root, _, _ = this_machine_root(tmp_path)
    policy = "print(open('/proc/self/numa_maps').readline().split()[1])"
    for extra, expected in (([], "prefer:0"), (["--membind"], "bind:0")):
        proc = child(["--numa", "--no-numactl", "-q", *extra, "--root", str(root), "--gpu", "0", "--",
                      sys.executable, "-c", policy])
        assert (proc.returncode, proc.stdout.strip()) == (0, expected), proc.stderr


def test_exec_takes_the_gpu_from_local_rank_then_slurm_localid(tmp_path):
    root, node0, node1 = this_machine_root(tmp_path)
    base = ["--numa", "--no-numactl", "-q", "--root", str(root), "--", sys.executable, "-c", PRINT_AFFINITY]
    by_rank = child(base, {"LOCAL_RANK": "1", "SLURM_LOCALID": "0"})
    assert (by_rank.returncode, by_rank.stdout.strip(), by_rank.stderr) == (0, str(node1), "")
    by_slurm = child(base, {"SLURM_LOCALID": "0"})
    assert (by_slurm.returncode, by_slurm.stdout.strip()) == (0, str(node0))
    default = child(base)
    assert (default.returncode, default.stdout.strip()) == (0, str(node0))


def test_exec_hands_numactl_the_plan_and_the_command(tmp_path):
    root, _, _ = this_machine_root(tmp_path / "root")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "numactl"  # stands in for numactl: shows the argv it was given
    fake.write_text(f"#!{sys.executable}\nimport sys; print(sys.argv[1:])\n")
    fake.chmod(0o755)
    proc = child(["--numa", "--root", str(root), "--gpu", "1", "--", "python3", "-c", "print(1)"],
                 path_first=str(bin_dir))
    assert proc.returncode == 0, proc.stderr
    python3 = subprocess.run(["which", "python3"], capture_output=True, text=True,
                             env={"PATH": str(bin_dir) + os.pathsep + os.environ["PATH"]}).stdout.strip()
    assert proc.stdout.strip() == str(["--cpunodebind=1", "--preferred=1", "--", python3, "-c", "print(1)"])
    assert "(numactl)" in proc.stderr


# --- choosing the GPU, in process with --dry-run ----------------------------------------------------------


def test_dry_run_shows_binding_and_command(capsys, rank_env):
    code, out, err = cli(capsys, "run", "--numa", "--no-numactl", "--dry-run", "--root", DGX, "--gpu", "5", "--",
                         "true")
    assert code == 0, err
    head, line = out.splitlines()
    assert head.startswith("# cuda:5 = GPU 5 (0000:9b:00.0) on NUMA node 1: CPUs 56-111,168-223")
    assert line.endswith("true")


def test_rank_variables_count_the_gpus_the_job_sees(capsys, rank_env):
    rank_env.setenv("CUDA_VISIBLE_DEVICES", "5,0")
    rank_env.setenv("LOCAL_RANK", "1")
    code, out, _ = cli(capsys, "run", "--numa", "--no-numactl", "--dry-run", "--root", DGX, "--", "true")
    assert code == 0
    assert out.startswith("# cuda:1 = GPU 0 (0000:18:00.0) (from LOCAL_RANK=1) on NUMA node 0")


def test_uuids_in_visible_devices_are_resolved_through_nvml(capsys, rank_env):
    rank_env.setenv("CUDA_VISIBLE_DEVICES", "GPU-d9000005,GPU-d9000002")
    code, out, _ = cli(capsys, "run", "--numa", "--no-numactl", "--dry-run", "--root", DGX, "--gpu", "1", "--", "true")
    assert code == 0
    assert out.startswith("# cuda:1 = GPU 2 (0000:3a:00.0) on NUMA node 0")


def test_a_task_given_one_gpu_uses_it_whatever_its_rank(capsys, rank_env):
    rank_env.setenv("CUDA_VISIBLE_DEVICES", "6")
    rank_env.setenv("SLURM_LOCALID", "3")
    code, out, _ = cli(capsys, "run", "--numa", "--no-numactl", "--dry-run", "--root", DGX, "--", "true")
    assert code == 0
    assert "cuda:0 = GPU 6 (0000:ba:00.0) (the only GPU this task sees; SLURM_LOCALID=3) on NUMA node 1" in out


def test_export_nic_sets_the_nearest_hca(capsys, rank_env):
    code, out, _ = cli(capsys, "run", "--numa", "--export-nic", "--no-numactl", "--dry-run", "--root", DGX,
                       "--gpu", "4", "--", "true")
    assert code == 0
    assert out.splitlines()[1].startswith("NCCL_IB_HCA==mlx5_2 UCX_NET_DEVICES=mlx5_2:1 ")


def test_strategy_reaches_the_binding(capsys, rank_env):
    code, out, _ = cli(capsys, "run", "--numa", "--strategy", "exclusive", "--no-numactl", "--dry-run",
                       "--root", DGX, "--gpu", "1", "--", "true")
    assert code == 0 and "CPUs 14-27,126-139" in out


def test_container_gpus_come_from_the_drivers_list_not_every_gpu_in_sysfs(capsys, rank_env):
    # sysfs shows four A100s; the driver lists the container's two: cuda:0 is 0000:31:00.0, not 17:00.0.
    code, out, _ = cli(capsys, "run", "--numa", "--no-numactl", "--dry-run", "--root", CONTAINER, "--gpu", "0",
                       "--", "true")
    assert code == 0
    assert out.startswith("# cuda:0 = GPU 0 (0000:31:00.0) on NUMA node 0: CPUs 2-9, memory preferred on node 0")


# --- bad input: exit 2, one line ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args, env, message",
    [
        (["--numa"], {}, "no command given"),
        (["--", "true"], {}, "nothing to bind: use gpudoctor run --numa"),
        (["--numa", "--root", DGX, "--gpu", "8", "--", "true"], {}, "--gpu 8: this job sees 8 GPU(s) (cuda:0-7)"),
        (["--numa", "--root", DGX, "--", "true"], {"LOCAL_RANK": "x1"}, "LOCAL_RANK='x1' is not a GPU index"),
        (["--numa", "--root", DGX, "--", "true"], {"LOCAL_RANK": "9"}, "LOCAL_RANK=9 but this job sees 8 GPU(s)"),
        (["--numa", "--root", DGX, "--", "no-such-command-xyz"], {}, "no-such-command-xyz: command not found"),
        (["--numa", "--root", CONTAINER, "--gpu", "1", "--", "true"], {}, "none is near this GPU"),
        (["--numa", "--root", VM, "--", "true"], {}, "NUMA node unknown"),
        (["--numa", "--root", DGX, "--", "true"], {"CUDA_VISIBLE_DEVICES": ""}, "no GPU to bind to"),
        (["--numa", "--root", "/nonexistent-root", "--", "true"], {}, "--root /nonexistent-root: no such directory"),
    ],
)
def test_bad_input_exits_2_with_one_line(capsys, rank_env, args, env, message):
    for key, value in env.items():
        rank_env.setenv(key, value)
    code, out, err = cli(capsys, "run", "--dry-run", *args)
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1 and message in err, err


# --- numactl where memory policies are refused (containers under the default seccomp profile) ------------


class Exec(Exception):
    pass


def test_memory_option_is_dropped_when_the_kernel_refuses_memory_policies(capsys, rank_env, tmp_path):
    from gpudoctor.cli.commands import run as run_module

    calls: list = []

    def fake_exec(path, argv, env):
        calls.append((path, list(argv)))
        raise Exec()

    fake = tmp_path / "numactl"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    rank_env.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    rank_env.setattr(run_module, "_exec", fake_exec)
    blocked = "set_mempolicy: Operation not permitted (a container without CAP_SYS_NICE)"
    rank_env.setattr(run_module, "mempolicy_blocked", lambda: blocked)
    with pytest.raises(Exec):
        run(["run", "--numa", "--root", DGX, "--gpu", "4", "--", "true"])
    path, argv = calls[0]
    assert path == str(fake)
    assert argv[1:] == ["--cpunodebind=1", "--", shutil.which("true")]
    assert "memory policy NOT set (set_mempolicy: Operation not permitted" in capsys.readouterr().err

    calls.clear()
    rank_env.setattr(run_module, "mempolicy_blocked", lambda: None)
    with pytest.raises(Exec):
        run(["run", "--numa", "--membind", "--root", DGX, "--gpu", "4", "--", "true"])
    assert calls[0][1][1:3] == ["--cpunodebind=1", "--membind=1"]
