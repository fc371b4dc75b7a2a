from __future__ import annotations

import os
import platform
import stat
import sys
import time
from pathlib import Path

import pytest

from gpudoctor.context import ProbeContext
from gpudoctor.facts import Unavailable
from gpudoctor.probes import host
from tests.helpers.sections import section_keys, validate_section
from tests.helpers.tree import deny, write_tree

UBUNTU = 'PRETTY_NAME="Ubuntu 22.04.4 LTS"\nNAME="Ubuntu"\nVERSION_ID="22.04"\nID=ubuntu\nID_LIKE=debian\n'


def ctx_for(root: Path, env: dict[str, str] | None = None) -> ProbeContext:
    return ProbeContext(root=root, env=env or {})


def collect(tmp_path: Path, spec: dict, env: dict[str, str] | None = None) -> dict:
    write_tree(tmp_path, spec)
    facts = host.collect(ctx_for(tmp_path, env))
    validate_section("host", facts)
    return facts


def reason(value: object) -> str | None:
    return value.reason if isinstance(value, Unavailable) else None


# --- whole section --------------------------------------------------------------------------------

def test_empty_root_gives_every_key_unavailable_or_known(tmp_path: Path) -> None:
    facts = collect(tmp_path, {})
    assert set(facts) == section_keys("host")
    for key, value in facts.items():
        if key == "env":
            assert value == {}
        elif key in ("in_container",):
            assert value is False
        else:
            assert isinstance(value, Unavailable), key
            assert value.reason == "not_found", key


def test_live_machine_collects_without_error() -> None:
    facts = host.collect(ProbeContext())
    validate_section("host", facts)
    assert set(facts) == section_keys("host")
    assert facts["python_version"] == platform.python_version()
    assert facts["python_executable"] == sys.executable
    assert facts["arch"] == platform.machine()
    assert isinstance(facts["in_container"], bool)


# --- identity and OS ------------------------------------------------------------------------------

def test_identity_and_os_release(tmp_path: Path) -> None:
    facts = collect(tmp_path, {
        "proc/sys/kernel/hostname": "gpu-node-01\n",
        "proc/sys/kernel/osrelease": "5.15.0-105-generic\n",
        "etc/os-release": UBUNTU,
    })
    assert facts["hostname"] == "gpu-node-01"
    assert facts["kernel_release"] == "5.15.0-105-generic"
    assert (facts["os_id"], facts["os_version"], facts["os_name"]) == ("ubuntu", "22.04", "Ubuntu 22.04.4 LTS")
    assert facts["wsl"] is False


def test_os_release_falls_back_to_usr_lib(tmp_path: Path) -> None:
    text = "ID=rhel\nVERSION_ID='9.4'\nPRETTY_NAME=\"Red Hat \\\"EL\\\" 9\"\n"
    facts = collect(tmp_path, {"usr/lib/os-release": text})
    assert facts["os_id"] == "rhel"
    assert facts["os_version"] == "9.4"
    assert facts["os_name"] == 'Red Hat "EL" 9'


def test_os_release_absolute_link_stays_inside_root(tmp_path: Path) -> None:
    facts = collect(tmp_path, {
        "etc/os-release": ("link", "/usr/lib/os-release"),
        "usr/lib/os-release": "ID=fixtureos\nVERSION_ID=1\nPRETTY_NAME=Fixture OS 1\n",
    })
    assert facts["os_id"] == "fixtureos"
    assert facts["os_name"] == "Fixture OS 1"


def test_os_release_missing_keys_and_garbage(tmp_path: Path) -> None:
    facts = collect(tmp_path, {"etc/os-release": "ID=arch\n# comment\nnot a line\nBAD KEY=1\nPRETTY_NAME=\"open\n"})
    assert facts["os_id"] == "arch"
    assert reason(facts["os_version"]) == "not_found"
    assert facts["os_name"] == "open"


def test_os_release_binary_garbage(tmp_path: Path) -> None:
    facts = collect(tmp_path, {"etc/os-release": b"\xff\xfe\x00ID\x00=\xff\n"})
    assert all(reason(facts[k]) == "not_found" for k in ("os_id", "os_version", "os_name"))


def test_parse_os_release_quoting() -> None:
    parsed = host.parse_os_release('A="x y"\nB=\'q\'\nC=plain\nD="esc\\$ape"\n E = spaced \n')
    assert parsed == {"A": "x y", "B": "q", "C": "plain", "D": "esc$ape", "E": "spaced"}


@pytest.mark.parametrize("release", ["5.15.153.1-microsoft-standard-WSL2", "4.4.0-19041-Microsoft"])
def test_wsl(tmp_path: Path, release: str) -> None:
    assert collect(tmp_path, {"proc/sys/kernel/osrelease": release + "\n"})["wsl"] is True


def test_arch_from_kernel_arch_or_release_suffix(tmp_path: Path) -> None:
    assert collect(tmp_path / "a", {"proc/sys/kernel/arch": "aarch64\n"})["arch"] == "aarch64"
    rhel = collect(tmp_path / "b", {"proc/sys/kernel/osrelease": "5.14.0-427.el9.x86_64\n"})
    assert rhel["arch"] == "x86_64"
    plain = collect(tmp_path / "c", {"proc/sys/kernel/osrelease": "6.8.0-45-generic\n"})
    assert reason(plain["arch"]) == "not_found"


def test_glibc_is_live_only(tmp_path: Path) -> None:
    assert reason(collect(tmp_path, {})["glibc"]) == "not_found"
    live = host._glibc(ProbeContext())
    try:
        expected = os.confstr("CS_GNU_LIBC_VERSION")
    except (ValueError, OSError):
        expected = None
    if expected and expected.startswith("glibc "):
        assert live == expected.split()[1]
    else:
        assert isinstance(live, Unavailable)


# --- interpreter ----------------------------------------------------------------------------------

def test_python_recorded_in_torch_json(tmp_path: Path) -> None:
    facts = collect(tmp_path, {"torch.json": '{"installed": true, "python_version": "3.10.12",'
                                             ' "python_executable": "/opt/venv/bin/python"}'})
    assert facts["python_version"] == "3.10.12"
    assert facts["python_executable"] == "/opt/venv/bin/python"


def test_python_torch_json_garbage(tmp_path: Path) -> None:
    facts = collect(tmp_path, {"torch.json": "{not json"})
    assert reason(facts["python_version"]) == "not_found"


def fake_python(tmp_path: Path, body: str) -> str:
    path = tmp_path / "fakepython"
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def live_ctx(python: str, seconds: float = 10.0) -> ProbeContext:
    return ProbeContext(python=python, deadline=time.monotonic() + seconds)


def test_python_other_interpreter_is_asked(tmp_path: Path) -> None:
    exe = fake_python(tmp_path, "printf '3.8.10\\n/opt/py38/bin/python3.8\\n'")
    assert host._python(live_ctx(exe)) == ("3.8.10", "/opt/py38/bin/python3.8")


def test_python_real_other_interpreter(tmp_path: Path) -> None:
    # A copy of the path string that is not sys.executable itself still runs the child.
    link = tmp_path / "python-link"
    link.symlink_to(sys.executable)
    version, _ = host._python(live_ctx(str(link)))
    assert version == platform.python_version()


def test_python_missing_failing_and_hanging(tmp_path: Path) -> None:
    missing = host._python(live_ctx(str(tmp_path / "nope")))
    assert [reason(v) for v in missing] == ["not_found", "not_found"]
    failing = host._python(live_ctx(fake_python(tmp_path, "echo boom >&2; exit 3")))
    assert reason(failing[0]) == "error" and "boom" in failing[0].detail  # type: ignore[union-attr]
    slow = tmp_path / "slow"
    slow.mkdir()
    started = time.monotonic()
    hanging = host._python(live_ctx(fake_python(slow, "exec sleep 30"), seconds=0.3))
    assert reason(hanging[0]) == "timeout"
    assert time.monotonic() - started < 5


def test_python_not_executable(tmp_path: Path) -> None:
    path = tmp_path / "noexec"
    path.write_text("#!/bin/sh\n")
    result = host._python(live_ctx(str(path)))
    # root may execute anything with an x bit only; without one it is refused even for root
    assert reason(result[0]) in ("no_permission", "error")


# --- CPU, memory, status, limits ------------------------------------------------------------------

def test_cpu_count_memory_and_status(tmp_path: Path) -> None:
    facts = collect(tmp_path, {
        "sys/devices/system/cpu/online": "0-3,8,10-11\n",
        "proc/meminfo": "MemTotal:       527939480 kB\nMemFree: 1 kB\n",
        "proc/self/status": "Name:\tpython3\nCpus_allowed_list:\t0-3,8\nMems_allowed_list:\t0\n",
    })
    assert facts["cpu_count"] == 7
    assert facts["memory_total_bytes"] == 527939480 * 1024
    assert facts["allowed_cpus"] == [0, 1, 2, 3, 8]
    assert facts["allowed_mems"] == [0]


@pytest.mark.parametrize(("online", "expected"), [("garbage\n", "error"), ("\n", "error"), ("", "error")])
def test_cpu_count_bad_online(tmp_path: Path, online: str, expected: str) -> None:
    assert reason(collect(tmp_path, {"sys/devices/system/cpu/online": online})["cpu_count"]) == expected


def test_meminfo_without_or_with_bad_memtotal(tmp_path: Path) -> None:
    assert reason(collect(tmp_path / "a", {"proc/meminfo": "MemFree: 1 kB\n"})["memory_total_bytes"]) == "not_found"
    assert reason(collect(tmp_path / "b", {"proc/meminfo": "MemTotal: lots\n"})["memory_total_bytes"]) == "error"


def test_status_missing_key_and_garbage_list(tmp_path: Path) -> None:
    facts = collect(tmp_path, {"proc/self/status": "Name:\tx\nCpus_allowed_list:\tzero-three\n"})
    assert reason(facts["allowed_cpus"]) == "error"
    assert reason(facts["allowed_mems"]) == "not_found"


@pytest.mark.parametrize(("line", "soft", "hard"), [
    ("Max locked memory         unlimited            unlimited            bytes     ", -1, -1),
    ("Max locked memory         8388608              8388608              bytes     ", 8388608, 8388608),
    ("Max locked memory         65536                unlimited            bytes     ", 65536, -1),
])
def test_memlock(tmp_path: Path, line: str, soft: int, hard: int) -> None:
    limits = "Limit                     Soft Limit           Hard Limit           Units     \n" + line + "\n"
    facts = collect(tmp_path, {"proc/self/limits": limits})
    assert (facts["memlock_soft_bytes"], facts["memlock_hard_bytes"]) == (soft, hard)


def test_memlock_garbage_and_missing(tmp_path: Path) -> None:
    bad = collect(tmp_path / "a", {"proc/self/limits": "Max locked memory  lots  more  bytes\n"})
    assert reason(bad["memlock_soft_bytes"]) == "error"
    absent = collect(tmp_path / "b", {"proc/self/limits": "Max open files 1024 1024 files\n"})
    assert reason(absent["memlock_hard_bytes"]) == "not_found"


def test_memlock_live_falls_back_to_getrlimit(monkeypatch: pytest.MonkeyPatch) -> None:
    import resource

    monkeypatch.setattr(host, "read_lines", lambda ctx, path: Unavailable("no_permission", "test"))
    soft, hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    inf = resource.RLIM_INFINITY
    assert host._memlock(ProbeContext()) == (-1 if soft == inf else soft, -1 if hard == inf else hard)


# --- cgroup cpuset --------------------------------------------------------------------------------

def test_cgroup_v2_walks_up_to_the_nearest_cpuset(tmp_path: Path) -> None:
    facts = collect(tmp_path, {
        "proc/self/cgroup": "0::/kubepods.slice/pod1/cri-containerd-abc.scope\n",
        "sys/fs/cgroup/kubepods.slice/pod1/cpuset.cpus.effective": "4-7\n",
        "sys/fs/cgroup/cpuset.cpus.effective": "0-63\n",
    })
    assert facts["cgroup_cpus"] == [4, 5, 6, 7]


def test_cgroup_v2_path_absent_in_container_uses_mount_root(tmp_path: Path) -> None:
    facts = collect(tmp_path, {
        "proc/self/cgroup": "0::/system.slice/docker-0123456789abcdef.scope\n",
        "sys/fs/cgroup/cpuset.cpus.effective": "2-3\n",
    })
    assert facts["cgroup_cpus"] == [2, 3]


def test_cgroup_v1_cpuset(tmp_path: Path) -> None:
    facts = collect(tmp_path, {
        "proc/self/cgroup": "5:memory:/job\n3:cpuset,cpu:/slurm/uid_1000/job_7\n0::/\n",
        "sys/fs/cgroup/cpuset/slurm/uid_1000/job_7/cpuset.cpus": "16-31\n",
        "sys/fs/cgroup/cpuset/cpuset.cpus": "0-63\n",
    })
    assert facts["cgroup_cpus"] == list(range(16, 32))


def test_cgroup_without_cpuset_file_or_garbage(tmp_path: Path) -> None:
    assert reason(collect(tmp_path / "a", {"proc/self/cgroup": "0::/\n"})["cgroup_cpus"]) == "not_found"
    assert reason(collect(tmp_path / "b", {"proc/self/cgroup": "garbage\n"})["cgroup_cpus"]) == "not_found"
    bad = collect(tmp_path / "c", {"proc/self/cgroup": "0::/\n", "sys/fs/cgroup/cpuset.cpus.effective": "x\n"})
    assert reason(bad["cgroup_cpus"]) == "error"


# --- containers -----------------------------------------------------------------------------------

HEX = "0123456789abcdef" * 4


@pytest.mark.parametrize(("spec", "env", "runtime"), [
    ({".dockerenv": ""}, {}, "docker"),
    ({"run/.containerenv": 'engine="podman-4.9.3"\n'}, {}, "podman"),
    ({}, {"KUBERNETES_SERVICE_HOST": "10.0.0.1"}, "kubernetes"),
    ({"proc/1/cgroup": f"12:cpuset:/docker/{HEX}\n"}, {}, "docker"),
    ({"proc/self/cgroup": f"0::/system.slice/docker-{HEX}.scope\n"}, {}, "docker"),
    ({"proc/self/cgroup": "0::/kubepods/burstable/pod1/abc\n", ".dockerenv": ""}, {}, "kubernetes"),
    ({"proc/self/cgroup": "0::/lxc.payload.c1/\n"}, {}, "lxc"),
    ({"proc/self/mountinfo": f"600 500 259:2 /var/lib/docker/containers/{HEX}/hostname /etc/hostname rw - ext4 x rw\n"},
     {}, "docker"),
    ({}, {"container": "podman"}, "podman"),
    ({}, {"container": "systemd-nspawn"}, "systemd-nspawn"),
])
def test_container_signs(tmp_path: Path, spec: dict, env: dict, runtime: str) -> None:
    facts = collect(tmp_path, spec, env)
    assert facts["in_container"] is True
    assert facts["container_runtime"] == runtime


def test_overlay_root_alone_is_a_container_of_unknown_runtime(tmp_path: Path) -> None:
    mountinfo = "500 400 0:50 / / rw,relatime - overlay overlay rw,lowerdir=/l\n"
    facts = collect(tmp_path, {"proc/self/mountinfo": mountinfo})
    assert facts["in_container"] is True
    assert reason(facts["container_runtime"]) == "not_found"


def test_host_signs_are_not_containers(tmp_path: Path) -> None:
    facts = collect(tmp_path, {
        "proc/self/cgroup": "0::/system.slice/docker.service\n",
        "proc/1/cgroup": "0::/init.scope\n",
        # kubelet's own mounts on a node are seen by host processes; they are not /etc binds
        "proc/self/mountinfo": "27 1 254:0 / / rw - ext4 /dev/vda rw\n"
                               "90 27 254:0 /var/lib/kubelet/pods/x/volumes/v /var/lib/kubelet/pods/x/v rw - ext4 y\n",
    })
    assert facts["in_container"] is False
    assert reason(facts["container_runtime"]) == "not_found"


# --- /dev/shm -------------------------------------------------------------------------------------

def mounts(*lines: str) -> str:
    return "proc /proc proc rw 0 0\n" + "".join(line + "\n" for line in lines)


def test_shm_size_last_mount_wins(tmp_path: Path) -> None:
    facts = collect(tmp_path, {"proc/mounts": mounts("tmpfs /dev/shm tmpfs rw,size=263998500k 0 0",
                                                     "shm /dev/shm tmpfs rw,nosuid,size=65536k 0 0")})
    assert facts["shm_bytes"] == 65536 * 1024


def test_shm_prefers_proc_self_mounts(tmp_path: Path) -> None:
    facts = collect(tmp_path, {"proc/self/mounts": mounts("shm /dev/shm tmpfs rw,size=64m 0 0"),
                               "proc/mounts": mounts("tmpfs /dev/shm tmpfs rw,size=1g 0 0")})
    assert facts["shm_bytes"] == 64 << 20


@pytest.mark.parametrize(("text", "expected"), [
    (mounts("tmpfs /dev/shm tmpfs rw,nosuid 0 0"), "not_found"),
    (mounts("tmpfs /run tmpfs rw,size=10k 0 0"), "not_found"),
    (mounts("tmpfs /dev/shm tmpfs rw,size=50% 0 0"), "error"),
    (mounts("tmpfs /dev/shm tmpfs rw,size=0 0 0"), "not_found"),
    ("\n", "not_found"),
])
def test_shm_unknown_in_fixture(tmp_path: Path, text: str, expected: str) -> None:
    assert reason(collect(tmp_path, {"proc/mounts": text})["shm_bytes"]) == expected


def test_shm_live_without_size_uses_statvfs(monkeypatch: pytest.MonkeyPatch) -> None:
    if not os.path.isdir("/dev/shm"):
        pytest.skip("no /dev/shm here")
    monkeypatch.setattr(host, "read_lines", lambda ctx, path: ["tmpfs /dev/shm tmpfs rw,nosuid,nodev 0 0"])
    st = os.statvfs("/dev/shm")
    assert host._shm_bytes(ProbeContext()) == st.f_blocks * st.f_frsize


# --- environment ----------------------------------------------------------------------------------

def test_env_filter() -> None:
    env = {
        "PATH": "/usr/bin", "HOME": "/root", "CUDA_VISIBLE_DEVICES": "0,1", "NCCL_DEBUG": "INFO",
        "HIP_VISIBLE_DEVICES": "0", "ROCR_VISIBLE_DEVICES": "0", "ROCM_PATH": "/opt/rocm", "HSA_XNACK": "1",
        "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True", "TORCH_CUDA_ARCH_LIST": "9.0",
        "NVIDIA_VISIBLE_DEVICES": "all", "UCX_NET_DEVICES": "mlx5_0:1", "OMP_NUM_THREADS": "8",
        "KMP_AFFINITY": "disabled", "SLURM_LOCALID": "0", "SLURM_JOB_ID": "7", "SLURM_STEP_GPUS": "0",
        "SLURM_JOB_GPUS": "0,1", "SLURM_NTASKS": "8", "SLURM_CPUS_ON_NODE": "64", "NSIGHT_X": "1",
        "LOCAL_RANK": "0", "RANK": "3", "WORLD_SIZE": "8", "LD_LIBRARY_PATH": "/usr/local/cuda/lib64",
        "LD_PRELOAD": "libx.so", "COMPUTE_PROFILE": "1", "OPENCL_PROFILE": "1",
        "CUDA_INJECTION64_PATH": "/x.so", "MASTER_ADDR": "10.0.0.1", "RANKING": "no", "cuda_x": "no",
    }
    kept = host.gpu_env(env)
    assert set(env) - set(kept) == {"PATH", "HOME", "SLURM_NTASKS", "SLURM_CPUS_ON_NODE", "MASTER_ADDR",
                                    "RANKING", "cuda_x"}
    assert list(kept) == sorted(kept)


def test_env_in_section(tmp_path: Path) -> None:
    facts = collect(tmp_path, {}, {"PATH": "/bin", "OMP_NUM_THREADS": "8"})
    assert facts["env"] == {"OMP_NUM_THREADS": "8"}


# --- broken files ---------------------------------------------------------------------------------

def test_permission_denied(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_tree(tmp_path, {"proc/sys/kernel/hostname": "h\n", "proc/self/status": "Cpus_allowed_list:\t0\n",
                          "proc/self/limits": "Max locked memory 1 1 bytes\n"})
    deny(monkeypatch, [tmp_path / "proc/sys/kernel/hostname", tmp_path / "proc/self/status",
                       tmp_path / "proc/self/limits"])
    facts = host.collect(ctx_for(tmp_path))
    assert reason(facts["hostname"]) == "no_permission"
    assert reason(facts["allowed_cpus"]) == "no_permission"
    assert reason(facts["memlock_soft_bytes"]) == "no_permission"


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads mode-000 files")
def test_permission_denied_by_mode(tmp_path: Path) -> None:
    write_tree(tmp_path, {"proc/sys/kernel/hostname": "h\n"})
    (tmp_path / "proc/sys/kernel/hostname").chmod(0)
    assert reason(host.collect(ctx_for(tmp_path))["hostname"]) == "no_permission"


def test_symlink_loops_and_directories(tmp_path: Path) -> None:
    facts = collect(tmp_path, {
        "proc/sys/kernel/osrelease": ("link", "osrelease"),
        "etc/os-release": ("link", "../etc/os-release"),
        "proc/meminfo": ("dir",),
        "sys/devices/system/cpu/online": ("link", "../cpu/online"),
    })
    assert reason(facts["kernel_release"]) == "error"
    assert reason(facts["wsl"]) == "error"
    assert reason(facts["os_id"]) == "error"
    assert reason(facts["memory_total_bytes"]) == "error"
    assert reason(facts["cpu_count"]) == "error"
