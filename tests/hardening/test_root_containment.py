"""A --root tree is hostile: nothing outside it is ever read, listed or stat'ed through a link.

gpudoctor runs as root on every node, and ``--root`` (with ``--sysfs-root`` / ``--procfs-root``)
probes a tree someone else made: a mounted image, a capture sent in a bug report. Such a tree can
hold ``proc/sys/kernel/hostname -> /etc/shadow``. Every lookup under a root that is not the live
machine therefore resolves inside the root (gpudoctor.rootfs.RootFS): absolute link targets are
taken from the root, ``..`` stops at it, loops end after 40 links, and only regular files and
directories are opened (a device node in an image is this machine's device, a FIFO would wait).

The files outside the root that the links below point at hold unique markers; a marker in any
output means the machine's own file was read. The same outcomes hold with the kernel's openat2
lookup and with the portable walk (USE_OPENAT2 off). Then the bounds on what a hostile tree can
make a probe do: 300 KB lines for the regexes, tens of thousands of PCI functions, environment
lists of a hundred thousand entries: each run finishes within seconds of ``--timeout``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any, Iterator

import pytest

from gpudoctor import rootfs
from gpudoctor.cli.root import run
from gpudoctor.context import ProbeContext, make_context
from gpudoctor.facts import REASONS, Unavailable, walk
from gpudoctor.probes import collect_all, host, modules, pci, rocm
from tests.conftest import HOSTS
from tests.hardening.roots import climbing, host_copy, replace_with_link

SOURCE = HOSTS / "healthy-2gpu"
SRC = Path(__file__).resolve().parents[2] / "src"
TAG = uuid.uuid4().hex[:12]


def marker(name: str) -> str:
    return f"OUTSIDE{TAG}{name}"


def texts(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    code = run(argv)
    out = capsys.readouterr()
    assert code in (0, 1), (code, out.err[-2000:])
    return out.out + out.err


@pytest.fixture
def hostile(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """(root, outside): a fixture host whose files and directories link out to ``outside``."""
    root = host_copy(SOURCE, tmp_path / "root")
    outside = tmp_path / "outside"
    outside.mkdir()

    # absolute link to a file outside (the /etc/shadow case)
    (outside / "hostname").write_text(marker("hostname") + "\n")
    replace_with_link(root / "proc/sys/kernel/hostname", outside / "hostname")
    # relative link climbing out with ../../..
    (outside / "osrelease").write_text(marker("osrelease") + "\n")
    replace_with_link(root / "proc/sys/kernel/osrelease", climbing(root / "proc/sys/kernel", outside / "osrelease"))
    # a directory component that links out: relative, and absolute under sys/class
    (outside / "nvidia").mkdir()
    (outside / "nvidia/version").write_text(
        f"NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.90.07  {marker('nvrm')}\n"
    )
    replace_with_link(root / "proc/driver/nvidia", climbing(root / "proc/driver", outside / "nvidia"))
    nodes = outside / "kfd/kfd/topology/nodes/1"
    nodes.mkdir(parents=True)
    (nodes / "properties").write_text("gfx_target_version 123456\n")  # gfx123438: in no fixture
    replace_with_link(root / "sys/class/kfd", outside / "kfd")
    # the process environment, the recorded answers
    (outside / "environ").write_bytes(f"CUDA_MARK={marker('environ')}\0PATH=/usr/bin\0".encode())
    replace_with_link(root / "proc/self/environ", outside / "environ")
    torch_json = json.loads((SOURCE / "torch.json").read_text())
    torch_json["version"] = marker("torch")
    (outside / "torch.json").write_text(json.dumps(torch_json))
    replace_with_link(root / "torch.json", climbing(root, outside / "torch.json"))
    nvml_json = (SOURCE / "nvml.json").read_text().replace("NVIDIA H100 80GB HBM3", marker("nvml"))
    (outside / "nvml.json").write_text(nvml_json)
    replace_with_link(root / "nvml.json", outside / "nvml.json")
    # a link to itself by absolute path: a loop inside the root, this machine's file outside it
    replace_with_link(root / "proc/sys/kernel/arch", "/proc/sys/kernel/arch")
    # a /dev/zero-style link: inside the root there is no dev/zero
    replace_with_link(root / "proc/cmdline", "/dev/zero")
    yield root, outside


def assert_no_marker(text: str) -> None:
    assert f"OUTSIDE{TAG}" not in text, text[text.find(f"OUTSIDE{TAG}") - 300:][:600]


def test_probe_and_check_never_read_outside_the_root(
    hostile: tuple[Path, Path], capsys: pytest.CaptureFixture[str], mechanism: str
) -> None:
    root, _ = hostile
    assert_no_marker(texts(capsys, ["probe", "--root", str(root), "--timeout", "10"]))
    assert_no_marker(texts(capsys, ["check", "--root", str(root), "--timeout", "10"]))
    assert_no_marker(texts(capsys, ["check", "--root", str(root), "--timeout", "10", "--format", "json"]))
    assert "gfx123438" not in texts(capsys, ["probe", "--root", str(root), "--timeout", "10"])


def test_links_out_are_unavailable_with_a_reason(hostile: tuple[Path, Path], mechanism: str) -> None:
    root, _ = hostile
    snap = collect_all(make_context(root=str(root), timeout=10))
    for path, leaf in walk(snap):
        if isinstance(leaf, Unavailable):
            assert leaf.reason in REASONS and leaf.detail, path
    hostname = snap["host"]["hostname"]
    assert isinstance(hostname, Unavailable) and hostname.reason == "not_found"
    assert "symlink" in hostname.detail and "inside the root" in hostname.detail
    assert isinstance(snap["host"]["kernel_release"], Unavailable)
    assert isinstance(snap["modules"]["nvidia_proc_version"], Unavailable)
    assert isinstance(snap["rocm"]["gfx_targets"], Unavailable)
    assert "CUDA_MARK" not in snap["host"]["env"]
    arch = snap["host"]["arch"]
    assert isinstance(arch, Unavailable) and "loop" in arch.detail  # not this machine's arch
    cmdline = snap["modules"]["cmdline"]
    assert isinstance(cmdline, Unavailable) and cmdline.reason == "not_found"  # not 1 MiB of zeros
    assert isinstance(snap["torch"], Unavailable) or snap["torch"]["version"] != marker("torch")
    assert snap["nvml"]["status"] != "ok"  # the recorded answers lead outside: none are served
    assert_no_marker(json.dumps(snap, default=str))  # link targets are named; what is there never


def test_a_link_out_under_a_separate_sysfs_root(tmp_path: Path, mechanism: str) -> None:
    sysfs = tmp_path / "capture"
    (sysfs / "class").mkdir(parents=True)
    outside = tmp_path / "outside/kfd/kfd/topology/nodes/1"
    outside.mkdir(parents=True)
    (outside / "properties").write_text("gfx_target_version 123456\n")
    (sysfs / "class/kfd").symlink_to(tmp_path / "outside/kfd")
    (sysfs / "devices/system/cpu").mkdir(parents=True)
    (tmp_path / "outside/online").write_text(marker("online"))
    cpu = sysfs / "devices/system/cpu"
    (cpu / "online").symlink_to(climbing(cpu, tmp_path / "outside/online"))
    ctx = ProbeContext(root=tmp_path / "empty", sysfs_root=sysfs, env={})
    assert isinstance(rocm.collect(ctx)["gfx_targets"], Unavailable)
    count = host.collect(ctx)["cpu_count"]
    assert isinstance(count, Unavailable) and marker("online") not in count.detail


def test_link_loops_end(tmp_path: Path, mechanism: str) -> None:
    root = tmp_path / "root"
    kernel = root / "proc/sys/kernel"
    kernel.mkdir(parents=True)
    (kernel / "hostname").symlink_to("/proc/sys/kernel/hostname")  # this machine's, if followed out
    (kernel / "osrelease").symlink_to("../kernel/../kernel/osrelease")
    (root / "proc/self").mkdir()
    (root / "proc/self/status").symlink_to("/proc/self/status")
    # links that expand to thousands of components without ever looping: bounded work, not a loop
    (root / "etc").mkdir()
    (root / "etc/real").write_text('PRETTY_NAME="Inside"\n')
    for name, to in (("os-release", "s1"), ("s1", "s2"), ("s2", "real")):
        os.symlink("/" + "etc/../" * 500 + "etc/" + to, root / "etc" / name)
    ctx = ProbeContext(root=root, env={})
    t0 = time.monotonic()
    facts = host.collect(ctx)
    assert time.monotonic() - t0 < 2
    for key in ("hostname", "kernel_release"):
        value = facts[key]
        assert isinstance(value, Unavailable) and value.reason == "error" and "loop" in value.detail, (key, value)
    assert isinstance(facts["allowed_cpus"], Unavailable)  # not this test runner's own Cpus_allowed_list
    name = facts["os_name"]
    assert isinstance(name, Unavailable) and "path components" in name.detail


def test_fifos_and_devices_under_a_root_are_not_opened(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], mechanism: str
) -> None:
    root = host_copy(SOURCE, tmp_path / "root")
    fifo = root / "proc/uptime"
    os.mkfifo(fifo)
    # a writer that is already there: a read would get the marker, a blocking open would not wait
    keep = os.open(fifo, os.O_RDWR | os.O_NONBLOCK)
    try:
        os.write(keep, (marker("fifo") + " 1.0\n").encode() * 50)
        zero = root / "sys/devices/system/cpu/online"
        zero.unlink()
        try:
            os.mknod(zero, 0o644 | 0o020000, os.makedev(1, 5))  # a character device: this machine's /dev/zero
            have_device = True
        except (PermissionError, OSError):
            zero.write_text("0-3\n")
            have_device = False
        t0 = time.monotonic()
        snap = collect_all(make_context(root=str(root), timeout=10))
        assert time.monotonic() - t0 < 8
        uptime = snap["host"]["uptime_s"]
        assert isinstance(uptime, Unavailable) and uptime.reason == "not_supported" and "FIFO" in uptime.detail
        if have_device:
            count = snap["host"]["cpu_count"]
            assert isinstance(count, Unavailable) and "character device" in count.detail
        assert_no_marker(texts(capsys, ["probe", "--root", str(root), "--timeout", "10"]))
    finally:
        os.close(keep)


def test_a_dangling_link_says_where_it_leads(tmp_path: Path, mechanism: str) -> None:
    root = tmp_path / "root"
    (root / "proc/sys/kernel").mkdir(parents=True)
    (root / "proc/sys/kernel/hostname").symlink_to(tmp_path / "nowhere" / "hostname")
    value = host.collect(ProbeContext(root=root, env={}))["hostname"]
    assert isinstance(value, Unavailable) and value.reason == "not_found"
    assert str(tmp_path / "nowhere") in value.detail and "inside the root" in value.detail


def test_the_walk_and_openat2_agree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever the kernel offers, the same tree gives the same facts."""
    root = host_copy(SOURCE, tmp_path / "root")
    replace_with_link(root / "etc/os-release", "/usr/lib/os-release")
    (root / "usr/lib").mkdir(parents=True, exist_ok=True)
    shutil.copy(SOURCE / "etc/os-release", root / "usr/lib/os-release")
    # absolute from the root, with .. on the way: the root's own file (the kernel would go to /hostname-file)
    replace_with_link(root / "proc/sys/kernel/hostname", "/etc/../proc/sys/kernel/../../../../hostname-file")
    (root / "hostname-file").write_text("inside\n")
    snaps = []
    for use in (True, False):
        monkeypatch.setattr(rootfs, "USE_OPENAT2", use)
        snap = collect_all(make_context(root=str(root), timeout=10))
        snap.pop("meta")
        snaps.append(json.dumps(snap, default=str, sort_keys=True))
    assert snaps[0] == snaps[1]
    assert json.loads(snaps[0])["host"]["hostname"] == "inside"


def test_the_live_machine_is_read_as_the_kernel_resolves_it() -> None:
    ctx = ProbeContext()
    assert ctx.contained() is None  # no lookup of its own on the live path
    assert modules.collect(ctx)  # and it still answers


# --- bounds: what a hostile tree can make a probe do ------------------------------------------------


def _probe(root: Path, timeout: float, limit: float) -> tuple[float, dict[str, Any]]:
    """`gpudoctor probe --root ROOT --timeout T` in a child: (seconds it took, the snapshot)."""
    env = {**os.environ, "PYTHONPATH": str(SRC) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    t0 = time.monotonic()
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "gpudoctor", "probe", "--root", str(root), "--timeout", str(timeout)],
            capture_output=True, text=True, env=env, timeout=limit + 30,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"probe --root --timeout {timeout} still running after {limit + 30} s")
    took = time.monotonic() - t0
    assert proc.returncode == 0, proc.stderr[-2000:]
    return took, json.loads(proc.stdout)


def _finishes(code: str, seconds: float) -> None:
    """Run ``code`` in a child with gpudoctor importable, at most 2 GiB of memory, and a time limit."""
    env = {**os.environ, "PYTHONPATH": str(SRC) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    prelude = "import resource; resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))\n"
    t0 = time.monotonic()
    try:
        proc = subprocess.run([sys.executable, "-c", prelude + code], capture_output=True, text=True,
                              env=env, timeout=seconds + 10)
    except subprocess.TimeoutExpired:
        pytest.fail(f"still running after {seconds + 10} s")
    took = time.monotonic() - t0
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert took < seconds, f"took {took:.1f} s"


def test_nvrm_version_regex_is_linear() -> None:
    # "Kernel Module " repeated: the old lazy .*? search took 50 s on these 300 KB
    _finishes(
        "from gpudoctor.probes.modules import parse_nvrm_version\n"
        "assert parse_nvrm_version('NVRM version: ' + 'Kernel Module ' * 21500) is None\n"
        "assert parse_nvrm_version('NVRM version: ' + '9' * 300000) is None\n",
        2.0,
    )


def test_cpulist_ranges_do_not_multiply() -> None:
    # 300 KB of "0-65535,": expanding every range before merging them wanted ~100 GB
    _finishes(
        "from gpudoctor.model.cpus import parse_cpulist\n"
        "assert parse_cpulist(','.join(['0-65535'] * 37500)) == list(range(65536))\n",
        2.0,
    )


def test_a_huge_nvrm_line_under_root_keeps_the_deadline(tmp_path: Path) -> None:
    root = host_copy(SOURCE, tmp_path / "root")
    version = root / "proc/driver/nvidia/version"
    version.unlink()
    version.write_text("NVRM version: " + "Kernel Module " * 20000 + "\n")  # 280 KB
    took, snap = _probe(root, 2, 8)
    assert took < 2 + 6, f"probe --timeout 2 took {took:.1f} s"
    assert isinstance(snap["modules"]["nvidia_proc_version"], str)
    assert len(snap["modules"]["nvidia_proc_version"]) <= modules.MAX_SHOWN_LINE


def _many_functions(root: Path, count: int) -> None:
    """`count` GPU-class NVIDIA functions in sys/bus/pci/devices, all links to one device directory
    (as cheap to make as a link; as costly to probe as a real function)."""
    device = root / "sys/devices/pci0000:00/0000:00:01.0"
    device.mkdir(parents=True)
    for name, value in (("class", "0x030200"), ("vendor", "0x10de"), ("device", "0x2330"), ("numa_node", "0"),
                        ("local_cpulist", "0-3"), ("current_link_speed", "32.0 GT/s PCIe"),
                        ("max_link_speed", "32.0 GT/s PCIe"), ("current_link_width", "16"),
                        ("max_link_width", "16")):
        (device / name).write_text(value + "\n")
    devices = root / "sys/bus/pci/devices"
    devices.mkdir(parents=True)
    for i in range(count):
        os.symlink("../../../devices/pci0000:00/0000:00:01.0",
                   devices / f"{i >> 16:04x}:{(i >> 8) & 0xFF:02x}:{(i >> 3) & 0x1F:02x}.{i & 7}")


def test_sixty_thousand_pci_functions_keep_the_deadline(tmp_path: Path) -> None:
    root = tmp_path / "root"
    _many_functions(root, 60_000)
    took, snap = _probe(root, 2, 8)
    assert took < 2 + 6, f"probe --timeout 2 took {took:.1f} s"
    devices = snap["pci"]["devices"]
    assert 0 < len(devices) <= pci.MAX_FUNCTIONS + 1
    rest = devices[-1]
    assert rest["kind"] == "other" and rest["class_code"]["unavailable"] in ("timeout", "not_supported")
    assert "were not probed" in rest["class_code"]["detail"]


def test_a_huge_search_path_is_bounded(tmp_path: Path) -> None:
    root = host_copy(SOURCE, tmp_path / "root")
    environ = root / "proc/self/environ"
    environ.unlink()
    entries = ":".join(f"/p{i}" for i in range(100_000))  # the old dedupe was quadratic in these
    environ.write_bytes(f"PATH={entries}\0LD_LIBRARY_PATH={entries}\0".encode())
    took, snap = _probe(root, 2, 8)
    assert took < 2 + 6, f"probe --timeout 2 took {took:.1f} s"
    assert snap["meta"]["probes"]["toolkit"]["status"] == "ok"


def test_a_cpu_list_of_every_id_keeps_the_deadline(tmp_path: Path) -> None:
    root = tmp_path / "root"
    system = root / "sys/devices/system"
    (system / "cpu").mkdir(parents=True)
    (system / "cpu/online").write_text("0-65535\n")  # and no cpu<N> directory at all
    for node in range(200):
        (system / f"node/node{node}").mkdir(parents=True)
        (system / f"node/node{node}/cpulist").write_text("0-65535\n")
    took, snap = _probe(root, 2, 8)
    assert took < 2 + 6, f"probe --timeout 2 took {took:.1f} s"
    assert isinstance(snap["numa"]["nodes"], dict) and "unavailable" in snap["numa"]["nodes"]
