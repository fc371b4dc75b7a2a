"""Broken sysfs, procfs and /etc under a host root: every probe still runs to the end.

Corrupted copies of tests/fixtures/hosts/healthy-2gpu (every file at once, random mixes, and
the formats older kernels and odd machines really write) go through the whole probe set
(collect_all) and `gpudoctor check`. What a user depends on: no probe crashes, every fact that
could not be read is unavailable with a reason and a detail, the snapshot still fits its schema,
no rule breaks on what it gets, and `check` exits 0 or 1, never 2 and never with a traceback.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import threading
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from gpudoctor.cli.root import run
from gpudoctor.context import make_context
from gpudoctor.engine.loader import load_rules
from gpudoctor.engine.runner import run_rules
from gpudoctor.facts import REASONS, Unavailable, to_jsonable, walk
from gpudoctor.findings import Status
from gpudoctor.probes import collect_all
from gpudoctor.schemas import validate_facts
from tests.conftest import HOSTS
from tests.helpers.tree import deny

SOURCE = HOSTS / "healthy-2gpu"
GPU0 = "sys/devices/pci0000:16/0000:16:01.0/0000:17:01.0/0000:18:00.0"
RULES = load_rules(include_plugins=False)


def host_copy(dest: Path) -> Path:
    """A copy of the fixture host made of hard links: cheap, and safe because every corruption
    below replaces a file (a new inode) rather than writing into it."""
    shutil.copytree(SOURCE, dest, symlinks=True, copy_function=os.link)
    return dest


@pytest.fixture(scope="module")
def shared_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return host_copy(tmp_path_factory.mktemp("shared") / "host")


@pytest.fixture
def root_with(shared_root: Path) -> Iterator[Callable[[str, bytes], Path]]:
    """One file of the shared copy replaced for a test, and put back after it."""
    edited: list[str] = []

    def put(rel: str, data: bytes) -> Path:
        edited.append(rel)
        replace(shared_root / rel, data)
        return shared_root

    yield put
    for rel in edited:
        (shared_root / rel).unlink()
        os.link(SOURCE / rel, shared_root / rel)


def files_of(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file() and not p.is_symlink())


def replace(path: Path, data: bytes) -> None:
    path.unlink()
    path.write_bytes(data)


def make_loop(path: Path) -> None:
    path.unlink()
    path.symlink_to(path.name)  # a link to itself


def make_dangling(path: Path) -> None:
    path.unlink()
    path.symlink_to("no-such-target")


def make_dir(path: Path) -> None:
    path.unlink()
    path.mkdir()


def make_fifo(path: Path) -> None:
    path.unlink()
    os.mkfifo(path)  # nobody ever writes: a blocking read would hang forever


CORRUPTIONS: dict[str, Callable[[Path, random.Random], None]] = {
    "missing": lambda p, rng: p.unlink(),
    "empty": lambda p, rng: replace(p, b""),
    "whitespace": lambda p, rng: replace(p, b" \n\t\n"),
    "garbage": lambda p, rng: replace(p, bytes(rng.randrange(256) for _ in range(rng.randrange(1, 48)))),
    "nul-bytes": lambda p, rng: replace(p, b"\x00" * 16),
    "words": lambda p, rng: replace(p, b"not what you expected\n"),
    "negative": lambda p, rng: replace(p, b"-1\n"),
    "huge-number": lambda p, rng: replace(p, b"9" * 400 + b"\n"),
    "utf8-junk": lambda p, rng: replace(p, "ümlaut ☃ 0-3 GT/s\n".encode()),
    "symlink-loop": lambda p, rng: make_loop(p),
    "dangling-link": lambda p, rng: make_dangling(p),
    "directory": lambda p, rng: make_dir(p),
    "fifo": lambda p, rng: make_fifo(p),
}


def assert_sound(snapshot: dict[str, Any]) -> None:
    """The invariants a user depends on, whatever the tree held."""
    probes = snapshot["meta"]["probes"]
    crashed = {name: meta for name, meta in probes.items() if meta["status"] != "ok"}
    assert not crashed, crashed
    problems = validate_facts(to_jsonable(snapshot))
    assert not problems, problems
    for path, leaf in walk(snapshot):
        if isinstance(leaf, Unavailable):
            assert leaf.reason in REASONS and leaf.detail.strip(), (path, leaf)
    broken = [(f.rule_id, f.subject.label, f.detail) for f in run_rules(RULES, snapshot) if f.status is Status.ERROR]
    assert not broken, broken


@contextlib.contextmanager
def fifo_watchdog(root: Path, seconds: float = 15.0) -> Iterator[None]:
    """Fail, rather than hang the test run, should a probe block opening or reading a FIFO under
    root: after `seconds`, give every FIFO there a writer (its reader then sees end-of-file)."""
    fired = threading.Event()

    def unblock() -> None:
        fired.set()
        for path in root.rglob("*"):
            if path.is_fifo():
                try:
                    os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
                except OSError:
                    pass

    timer = threading.Timer(seconds, unblock)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
    assert not fired.is_set(), "a probe blocked on a FIFO"


def probe(root: Path) -> dict[str, Any]:
    with fifo_watchdog(root):
        return collect_all(make_context(root=str(root), timeout=20.0, nvml_timeout=5.0))


def section(root: Path, name: str) -> Any:
    """One probe's section (the format tests below need only the probe that reads the file),
    checked like a whole snapshot: it fits the schema, every unavailable fact says why."""
    from gpudoctor.probes import host as host_probe
    from gpudoctor.probes import numa as numa_probe
    from gpudoctor.probes import pci as pci_probe
    from tests.helpers.sections import validate_section

    probe_module = {"host": host_probe, "numa": numa_probe, "pci": pci_probe}[name]
    with fifo_watchdog(root):
        value = probe_module.collect(make_context(root=str(root), timeout=20.0, nvml_timeout=5.0))
    validate_section(name, value)
    for path, leaf in walk(value):
        if isinstance(leaf, Unavailable):
            assert leaf.reason in REASONS and leaf.detail.strip(), (path, leaf)
    return value


def check_exits_0_or_1(capsys: pytest.CaptureFixture[str], root: Path) -> str:
    with fifo_watchdog(root):
        code = run(["check", "--root", str(root), "-v"])
    out, err = capsys.readouterr()
    assert code in (0, 1), err
    assert "Traceback" not in out + err and err == ""
    return out


@pytest.mark.parametrize("mode", list(CORRUPTIONS))
def test_every_file_broken_the_same_way(tmp_path: Path, capsys: pytest.CaptureFixture[str], mode: str) -> None:
    root = host_copy(tmp_path / "host")
    rng = random.Random(mode)
    for path in files_of(root):
        if path.name != "nvml.json":  # NVML's recording has its own tests (tests/probes/nvml/)
            CORRUPTIONS[mode](path, rng)
    snapshot = probe(root)
    assert_sound(snapshot)
    unavailable = sum(1 for _, leaf in walk(snapshot["host"]) if isinstance(leaf, Unavailable))
    assert unavailable >= 5  # what could not be read says so; nothing was guessed
    check_exits_0_or_1(capsys, root)


def test_every_file_unreadable(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: Any) -> None:
    root = host_copy(tmp_path / "host")
    denied = [p for p in root.rglob("*") if p.name != "nvml.json"]
    deny(monkeypatch, denied)  # tests run as root, where mode 000 denies nothing
    snapshot = probe(root)
    assert_sound(snapshot)
    reasons = {leaf.reason for _, leaf in walk(snapshot) if isinstance(leaf, Unavailable)}
    assert "no_permission" in reasons
    assert snapshot["host"]["memory_total_bytes"] == Unavailable(
        "no_permission", f"{root / 'proc/meminfo'}: permission denied"
    )
    check_exits_0_or_1(capsys, root)


@pytest.mark.parametrize("seed", range(6))
def test_random_mix_of_breakage(tmp_path: Path, seed: int) -> None:
    """A random fifth of the files, each broken its own way (seeded, so a failure replays)."""
    root = host_copy(tmp_path / "host")
    rng = random.Random(seed)
    modes = list(CORRUPTIONS)
    for path in files_of(root):
        if path.name != "nvml.json" and rng.random() < 0.2:
            CORRUPTIONS[rng.choice(modes)](path, rng)
    assert_sound(probe(root))


def test_oversized_files_are_read_only_up_to_the_limit(tmp_path: Path) -> None:
    root = host_copy(tmp_path / "host")
    for rel in ("proc/meminfo", "proc/self/status", f"{GPU0}/local_cpulist", "sys/devices/system/cpu/online"):
        replace(root / rel, b"0," * (1 << 20))  # 2 MiB
    snapshot = probe(root)
    assert_sound(snapshot)
    assert isinstance(snapshot["host"]["cpu_count"], Unavailable)


# --- formats that real machines write --------------------------------------------------------

def gpu0(pci_section: dict[str, Any]) -> dict[str, Any]:
    return next(d for d in pci_section["devices"] if d["bus_id"] == "0000:18:00.0")


@pytest.mark.parametrize(
    ("text", "speed", "gen"),
    [
        ("32.0 GT/s PCIe\n", 32.0, 5),
        ("8 GT/s\n", 8.0, 3),  # kernels before 4.19 print no ".0" and no "PCIe"
        ("2.5 GT/s\n", 2.5, 1),
        ("5.0 GT/s PCIe\n", 5.0, 2),
        ("64.0 GT/s PCIe\n", 64.0, 6),
        ("Unknown\n", "not_supported", "not_supported"),  # a link that is down
        ("Unknown speed\n", "not_supported", "not_supported"),
        ("0 GT/s\n", 0.0, "not_supported"),
        ("7 GT/s\n", 7.0, "not_supported"),  # no PCIe generation runs at 7 GT/s
        ("fast\n", "error", "error"),
        ("GT/s\n", "error", "error"),
        ("", "not_found", "not_found"),
    ],
)
def test_link_speed_formats(root_with: Any, text: str, speed: Any, gen: Any) -> None:
    root = root_with(f"{GPU0}/current_link_speed", text.encode())
    got = gpu0(section(root, "pci"))
    for value, want in ((got["link_speed_gts"], speed), (got["link_gen"], gen)):
        if isinstance(want, str):
            assert isinstance(value, Unavailable) and value.reason == want, value
        else:
            assert value == want


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("0-15,32-47\n", list(range(16)) + list(range(32, 48))),
        ("0,2,4-5\n", [0, 2, 4, 5]),
        ("  0-1  \n", [0, 1]),
        ("00-03\n", [0, 1, 2, 3]),
        ("0,,1\n", [0, 1]),
        ("5,1,3\n", [1, 3, 5]),
        ("\n", []),  # what the kernel writes for a node or device with no CPUs
        ("3-1\n", "error"),
        ("0-\n", "error"),
        ("-1\n", "error"),
        ("0-99999999\n", "error"),
        ("0-15:2/4\n", "error"),  # stride syntax: the kernel accepts it as input, never prints it
        ("ffff,ffffffff\n", "error"),  # a cpumap (hex mask), not a cpulist
        ("0-3\x00\n", "error"),
        ("\u00b2\n", "error"),  # a superscript two: int() refuses what str.isdigit() accepts
        ("1_0\n", "error"),
        ("+3\n", "error"),
        ("70000\n", "error"),  # above any CPU id Linux builds for
    ],
)
def test_cpulist_formats(root_with: Any, text: str, want: Any) -> None:
    root = root_with(f"{GPU0}/local_cpulist", text.encode())
    got = gpu0(section(root, "pci"))["local_cpus"]
    if isinstance(want, str):
        assert isinstance(got, Unavailable) and got.reason == want, got
    else:
        assert got == want


@pytest.mark.parametrize(("text", "want"), [("-1\n", -1), ("1\n", 1), ("  0 \n", 0), ("node0\n", "error")])
def test_numa_node_formats(root_with: Any, capsys: pytest.CaptureFixture[str], text: str, want: Any) -> None:
    root = root_with(f"{GPU0}/numa_node", text.encode())
    got = gpu0(section(root, "pci"))["numa_node"]
    if isinstance(want, str):
        assert isinstance(got, Unavailable) and got.reason == want
    else:
        assert got == want
    if want == -1:
        # -1 (the firmware gave none, common in VMs) is not a node: the GPU's node comes from NVML
        assert_sound(probe(root))
        out = check_exits_0_or_1(capsys, root)
        assert "node -1" not in out


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("MemTotal:       527939480 kB\n", 527939480 * 1024),
        ("MemFree: 1 kB\nMemTotal: 2048 kB\n", 2048 * 1024),
        ("MemTotal: 4096\n", 4096),
        ("MemTotal: lots kB\n", "error"),
        ("MemTotal:\n", "error"),
        ("MemFree: 1 kB\n", "not_found"),
        ("\x00\x00\n", "not_found"),
        ("MemTotal: \u00b2 kB\n", "error"),  # once crashed the host probe (isdigit, then int)
    ],
)
def test_meminfo_formats(root_with: Any, text: str, want: Any) -> None:
    root = root_with("proc/meminfo", text.encode())
    got = section(root, "host")["memory_total_bytes"]
    if isinstance(want, str):
        assert isinstance(got, Unavailable) and got.reason == want, got
    else:
        assert got == want


@pytest.mark.parametrize(
    "status",
    [
        "Name:\tpython\nCpus_allowed_list:\t0-3,x\nMems_allowed_list:\t0\n",
        "Cpus_allowed_list\n",
        "Cpus_allowed_list:\t\nMems_allowed_list:\t\n",
        ":::\n",
    ],
)
def test_proc_status_formats(root_with: Any, status: str) -> None:
    root = root_with("proc/self/status", status.encode())
    assert isinstance(section(root, "host")["allowed_cpus"], (list, Unavailable))


def test_node_and_cpu_topology_odd_but_valid(tmp_path: Path) -> None:
    """A CPU in no node's list, a node with no CPUs, siblings lists that disagree."""
    root = host_copy(tmp_path / "host")
    replace(root / "sys/devices/system/node/node1/cpulist", b"\n")
    replace(root / "sys/devices/system/cpu/cpu0/topology/thread_siblings_list", b"0,999\n")
    replace(root / "sys/devices/system/node/node0/distance", b"10 twenty\n")
    snapshot = probe(root)
    assert_sound(snapshot)  # with the rules: a CPU in no node and a node with none must not break one
    assert isinstance(snapshot["numa"]["nodes"][0]["distances"], Unavailable)
