"""Tests for probes/torch.py: version.py parsing, the fat binary scan, the interpreter paths.

torch is never imported here: fake torch packages in tmp_path stand in for it (one whose
``__init__`` raises, to prove the cheap path does not run it).
"""

from __future__ import annotations

import importlib.util
import json
import os
import struct
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from gpudoctor.context import ProbeContext
from gpudoctor.facts import Unavailable
from gpudoctor.probes import torch as torch_probe
from gpudoctor.probes import torch_fatbin
from tests.helpers.sections import section_keys, validate_section
from tests.helpers.tree import deny, write_tree

HOSTS = Path(__file__).resolve().parents[1] / "fixtures" / "hosts"
MAGIC = 0xBA55ED50
PTX, CUBIN = 1, 2


def reason(value: Any) -> str:
    assert isinstance(value, Unavailable), value
    return value.reason


def check(section: Any) -> Any:
    validate_section("torch", section)
    if isinstance(section, dict):
        assert set(section) == section_keys("torch")
    return section


# --- synthetic libraries ---------------------------------------------------------------------------


def fatbin_entry(kind: int, arch: int, payload: int, header_size: int = 64) -> tuple[bytes, int]:
    """An entry header and its padded payload size (the payload itself is left to the caller)."""
    padded = (payload + 7) & ~7
    head = struct.pack("<HHIIIII", kind, 0x0101, header_size, padded, 0, payload, 0) + struct.pack("<II", 0, arch)
    return head.ljust(header_size, b"\0"), padded


def container(entries: list[tuple[int, int, int]]) -> bytes:
    """A fatbin container with entries (kind, arch, payload size); payloads filled with 0xAB."""
    body = b""
    for kind, arch, payload in entries:
        head, padded = fatbin_entry(kind, arch, payload, 112 if arch >= 100 and kind == CUBIN else 64)
        body += head + b"\xab" * padded
    return struct.pack("<IHHQ", MAGIC, 1, 16, len(body)) + body


def elf(sections: list[tuple[bytes, bytes]], *, elf_class: int = 2) -> bytes:
    """A minimal ELF64 little-endian shared object with the named sections (and .shstrtab)."""
    names = b"\0" + b"".join(name + b"\0" for name, _ in sections) + b".shstrtab\0"
    data = bytearray(64)
    placed = []
    for _name, body in sections:
        data += b"\0" * (-len(data) % 16)
        placed.append((len(data), len(body)))
        data += body
    strtab_offset = len(data)
    data += names
    data += b"\0" * (-len(data) % 8)
    shoff = len(data)
    headers = [bytes(64)]
    name_at = 1
    for (name, _body), (offset, size) in zip(sections, placed):
        headers.append(struct.pack("<IIQQQQIIQQ", name_at, 1, 2, 0, offset, size, 0, 0, 16, 0))
        name_at += len(name) + 1
    headers.append(struct.pack("<IIQQQQIIQQ", name_at, 3, 0, 0, strtab_offset, len(names), 0, 0, 1, 0))
    data += b"".join(headers)
    ident = b"\x7fELF" + bytes([elf_class, 1, 1, 0]) + bytes(8)
    count = len(headers)
    data[:64] = ident + struct.pack("<HHIQQQIHHHHHH", 3, 62, 1, 0, 0, shoff, 0, 64, 56, 0, 64, count, count - 1)
    return bytes(data)


def cu121_fatbin() -> bytes:
    """Three containers built for 8.0 and 9.0+PTX; one kernel also for sm_89 (not the arch list)."""
    common = [(CUBIN, 80, 1000), (CUBIN, 90, 1203), (PTX, 90, 777)]
    return container(common) + container(common + [(CUBIN, 89, 64)]) + container(common) + b"\0" * 24


def libtorch_cuda(fatbin: bytes | None = None) -> bytes:
    sections = [(b".text", b"\x90" * 256)]
    if fatbin is not None:
        sections.append((b".nv_fatbin", fatbin))
    sections.append((b".rodata", b"hello\0"))
    return elf(sections)


def test_fatbin_scan(tmp_path: Path) -> None:
    lib = tmp_path / "libtorch_cuda.so"
    lib.write_bytes(libtorch_cuda(cu121_fatbin()))
    assert torch_fatbin.scan_fatbin_archs(str(lib)) == ["sm_80", "sm_90", "compute_90"]


def test_fatbin_blackwell_headers(tmp_path: Path) -> None:
    lib = tmp_path / "libtorch_cuda.so"
    lib.write_bytes(libtorch_cuda(container([(CUBIN, 100, 4000), (CUBIN, 120, 10), (PTX, 120, 5)])))
    assert torch_fatbin.scan_fatbin_archs(str(lib)) == ["sm_100", "sm_120", "compute_120"]


@pytest.mark.parametrize(
    "content, words",
    [
        (b"", "short read"),
        (b"#!/bin/sh\n" + bytes(100), "not an ELF"),
        (elf([(b".text", b"x")], elf_class=1), "64-bit"),
        (libtorch_cuda(None), "no .nv_fatbin"),
        (libtorch_cuda(container([(CUBIN, 80, 100)])[:-40]), "overruns"),
        (libtorch_cuda(b"garbage!" * 8), "no fatbin container"),
        (libtorch_cuda(container([(CUBIN, 5000, 8)])), "SM 5000"),
        (libtorch_cuda(bytes(64)), "no GPU code"),
    ],
)
def test_fatbin_scan_refuses_what_it_does_not_know(tmp_path: Path, content: bytes, words: str) -> None:
    lib = tmp_path / "libtorch_cuda.so"
    lib.write_bytes(content)
    result = torch_fatbin.scan_fatbin_archs(str(lib))
    assert isinstance(result, Unavailable) and result.reason == "not_supported"
    assert words in result.detail
    assert "--torch-import" in result.detail


def test_fatbin_scan_missing_and_unreadable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert reason(torch_fatbin.scan_fatbin_archs(str(tmp_path / "nope.so"))) == "not_found"
    lib = tmp_path / "libtorch_cuda.so"
    lib.write_bytes(libtorch_cuda(cu121_fatbin()))
    deny(monkeypatch, [lib])
    assert reason(torch_fatbin.scan_fatbin_archs(str(lib))) == "no_permission"


def test_fatbin_scan_reads_headers_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A sparse 1.2 GB library: the scan must skip the payloads, not read them."""
    lib = tmp_path / "libtorch_cuda.so"
    payload = 1 << 20
    containers = 600
    section_offset = 4096
    with open(lib, "wb") as fh:
        pos = section_offset
        for _ in range(containers):
            entries = [(CUBIN, 80, payload), (CUBIN, 90, payload - 3)]
            body_size = sum(64 + ((size + 7) & ~7) for _k, _a, size in entries)
            fh.seek(pos)
            fh.write(struct.pack("<IHHQ", MAGIC, 1, 16, body_size))
            pos += 16
            for kind, arch, size in entries:
                head, padded = fatbin_entry(kind, arch, size)
                fh.seek(pos)
                fh.write(head)
                pos += len(head) + padded
        section_size = pos - section_offset
        small = elf([(b".text", b"\x90" * 16), (b".nv_fatbin", b"\0" * 16)])
        # Re-point the .nv_fatbin header of the small ELF at the big section, then append its tables.
        shoff = struct.unpack_from("<Q", small, 0x28)[0]
        table = bytearray(small[shoff:])
        struct.pack_into("<QQ", table, 2 * 64 + 24, section_offset, section_size)
        strtab_offset, strtab_size = struct.unpack_from("<QQ", table, 3 * 64 + 24)
        strtab = small[strtab_offset:strtab_offset + strtab_size]
        fh.seek(pos)
        struct.pack_into("<QQ", table, 3 * 64 + 24, pos, len(strtab))
        fh.write(strtab)
        new_shoff = pos + len(strtab)
        fh.write(bytes(table))
        header = bytearray(small[:64])
        struct.pack_into("<Q", header, 0x28, new_shoff)
        fh.seek(0)
        fh.write(bytes(header))
    assert lib.stat().st_size > 1_200_000_000
    read = []
    real_pread = os.pread

    def counting_pread(fd: int, size: int, offset: int) -> bytes:
        read.append(size)
        return real_pread(fd, size, offset)

    monkeypatch.setattr(torch_fatbin.os, "pread", counting_pread)
    started = time.perf_counter()
    assert torch_fatbin.scan_fatbin_archs(str(lib)) == ["sm_80", "sm_90"]
    elapsed = time.perf_counter() - started
    assert sum(read) < 100_000, sum(read)
    assert len(read) < 2 * containers + containers + 10
    print(f"scan of a {lib.stat().st_size / 1e9:.2f} GB sparse library: {elapsed * 1000:.1f} ms")


# --- version.py and the package directory ------------------------------------------------------------

VERSION_PY = (
    "from typing import Optional\n\n"
    "__all__ = ['__version__', 'debug', 'cuda', 'git_version', 'hip', 'xpu']\n"
    "__version__ = '{version}'\n"
    "debug = False\n"
    "cuda: Optional[str] = {cuda!r}\n"
    "git_version = 'ee1b6804381c57161c477caa380a840a84167676'\n"
    "hip: Optional[str] = {hip!r}\n"
    "xpu: Optional[str] = None\n"
)


def site_packages(
    root: Path,
    version: str = "2.4.1+cu121",
    cuda: str | None = "12.1",
    hip: str | None = None,
    init: str = "raise RuntimeError('torch/__init__.py must not run')\n",
    lib: bytes | None = None,
) -> Path:
    site = root / "site-packages"
    tree: dict[str, Any] = {
        "torch/__init__.py": init,
        "torch/version.py": VERSION_PY.format(version=version, cuda=cuda, hip=hip),
        "torchvision/version.py": "__version__ = '0.19.1+cu121'\ngit_version = 'abc'\n",
        "torchvision/__init__.py": "raise RuntimeError('no')\n",
        "torchaudio-2.4.1+cu121.dist-info/METADATA": "Metadata-Version: 2.1\nName: torchaudio\nVersion: 2.4.1+cu121\n",
        "nvidia_cudnn_cu12-9.1.0.70.dist-info/METADATA": "Name: nvidia-cudnn-cu12\n",
        "nvidia_cudnn_cu11-8.9.2.26.dist-info/METADATA": "Name: nvidia-cudnn-cu11\n",
        "nvidia_nccl_cu12-2.20.5.dist-info/METADATA": "Name: nvidia-nccl-cu12\n",
    }
    if cuda:
        tree["torch/lib/libtorch_cuda.so"] = lib if lib is not None else libtorch_cuda(cu121_fatbin())
    write_tree(site, tree)
    return site


def test_read_version_py(tmp_path: Path) -> None:
    site = site_packages(tmp_path)
    values = torch_probe.read_version_py(str(site / "torch/version.py"))
    assert values == {
        "__version__": "2.4.1+cu121",
        "debug": False,
        "cuda": "12.1",
        "git_version": "ee1b6804381c57161c477caa380a840a84167676",
        "hip": None,
        "xpu": None,
    }
    (tmp_path / "v.py").write_text("__version__ = compute()\nimport os\nos.system('false')\ncuda = 12\n")
    assert torch_probe.read_version_py(str(tmp_path / "v.py")) == {}
    (tmp_path / "bad.py").write_bytes(b"__version__ = '1.0\n\xff\xfe")
    assert reason(torch_probe.read_version_py(str(tmp_path / "bad.py"))) == "error"
    assert reason(torch_probe.read_version_py(str(tmp_path / "missing.py"))) == "not_found"


def test_package_facts_cuda_build(tmp_path: Path) -> None:
    site = site_packages(tmp_path)
    out = check(torch_probe.package_facts(str(site / "torch")))
    assert out["installed"] is True
    assert out["version"] == "2.4.1+cu121"
    assert out["location"] == str(site / "torch")
    assert out["cuda_version"] == "12.1"
    assert out["hip_version"] is None
    assert out["build"] == "cuda"
    assert out["arch_list"] == ["sm_80", "sm_90", "compute_90"]
    assert out["arch_list_source"] == "binary"
    assert out["cudnn_version"] == "9.1.0"  # the cu12 wheel, not the cu11 one
    assert out["nccl_version"] == "2.20.5"
    assert out["torchvision_version"] == "0.19.1+cu121"
    assert out["torchaudio_version"] == "2.4.1+cu121"
    assert reason(out["cuda_available"]) == "not_supported"
    assert out["cuda_available"].detail == "needs --torch-import"
    assert reason(out["device_count"]) == "not_supported"


def test_package_facts_without_library_or_wheels(tmp_path: Path) -> None:
    site = tmp_path / "site"
    write_tree(site, {"torch/version.py": VERSION_PY.format(version="2.1.0", cuda="11.8", hip=None)})
    out = check(torch_probe.package_facts(str(site / "torch")))
    assert out["build"] == "cuda"
    assert reason(out["arch_list"]) == "not_found"
    assert reason(out["cudnn_version"]) == "not_found"
    assert reason(out["torchvision_version"]) == "not_found"


@pytest.mark.parametrize(
    "version, cuda, hip, build",
    [
        ("2.5.1+rocm6.2", None, "6.2.41133-dd7f95766", "rocm"),
        ("2.5.1+cpu", None, None, "cpu"),
        ("2.5.1+xpu", None, None, "xpu"),
    ],
)
def test_package_facts_other_builds(
    tmp_path: Path, version: str, cuda: str | None, hip: str | None, build: str
) -> None:
    site = site_packages(tmp_path, version=version, cuda=cuda, hip=hip)
    out = check(torch_probe.package_facts(str(site / "torch")))
    assert out["build"] == build
    assert out["hip_version"] == hip
    assert reason(out["cudnn_version"]) == "not_supported"
    if build == "cpu":
        assert out["arch_list"] == []
    else:
        assert reason(out["arch_list"]) == "not_supported"


def test_package_facts_garbage_version_py(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    site = site_packages(tmp_path)
    (site / "torch/version.py").write_text("def broken(:\n")
    out = check(torch_probe.package_facts(str(site / "torch")))
    assert out["installed"] is True
    assert reason(out["version"]) == "error"
    assert reason(out["build"]) == "error"
    (site / "torch/version.py").write_text("VERSION = '2.4.1'\n")
    assert reason(torch_probe.package_facts(str(site / "torch"))["version"]) == "error"
    deny(monkeypatch, [site / "torch/version.py"])
    assert reason(torch_probe.package_facts(str(site / "torch"))["version"]) == "no_permission"


# --- finding torch in the target interpreter ----------------------------------------------------------


@pytest.fixture
def fake_site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A site-packages with a fake torch first on this interpreter's sys.path."""
    site = site_packages(tmp_path)
    monkeypatch.syspath_prepend(str(site))
    importlib.invalidate_caches()
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    return site


def test_find_spec_path_does_not_import_torch(fake_site: Path) -> None:
    ctx = ProbeContext(env={})  # live, and ctx.python is this interpreter
    out = check(torch_probe.collect(ctx))
    assert "torch" not in sys.modules
    assert out["installed"] is True
    assert out["version"] == "2.4.1+cu121"
    assert out["location"] == str(fake_site / "torch")
    assert out["arch_list"] == ["sm_80", "sm_90", "compute_90"]
    assert out["arch_list_source"] == "binary"


def test_not_installed_in_this_interpreter(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "path", [str(tmp_path)])
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    importlib.invalidate_caches()
    out = check(torch_probe.collect(ProbeContext(env={})))
    assert out["installed"] is False
    assert reason(out["version"]) == "not_found"


def other_python(tmp_path: Path) -> str:
    """This interpreter under another path, so that the probe runs it as a child."""
    link = tmp_path / "bin" / "python-other"
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(sys.executable)
    return str(link)


def child_env(site: Path | None) -> dict[str, str]:
    env = {"PATH": "/usr/bin:/bin", "PYTHONNOUSERSITE": "1"}
    if site is not None:
        env["PYTHONPATH"] = str(site)
    return env


def test_other_interpreter_is_asked_in_a_child(tmp_path: Path) -> None:
    site = site_packages(tmp_path)
    ctx = ProbeContext(python=other_python(tmp_path), env=child_env(site))
    out = check(torch_probe.collect(ctx))
    assert out["installed"] is True
    assert out["version"] == "2.4.1+cu121"
    assert out["location"] == str(site / "torch")
    empty = tmp_path / "empty"
    empty.mkdir()
    ctx = ProbeContext(python=other_python(tmp_path / "b"), env=child_env(empty))
    assert check(torch_probe.collect(ctx))["installed"] is False


def test_hanging_interpreter_times_out_within_budget(tmp_path: Path) -> None:
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\nexec sleep 60\n")
    fake.chmod(0o755)
    ctx = ProbeContext(python=str(fake), env=child_env(None), deadline=time.monotonic() + 0.5)
    started = time.monotonic()
    out = check(torch_probe.collect(ctx))
    assert time.monotonic() - started < 2.0
    assert all(reason(out[k]) == "timeout" for k in out)


def test_missing_and_broken_interpreters(tmp_path: Path) -> None:
    out = check(torch_probe.collect(ProbeContext(python=str(tmp_path / "nope"), env={})))
    assert reason(out["installed"]) == "not_found"
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\necho 'python: bad magic number' >&2\nexit 1\n")
    fake.chmod(0o755)
    out = check(torch_probe.collect(ProbeContext(python=str(fake), env=child_env(None))))
    assert reason(out["installed"]) == "error"
    assert "bad magic number" in out["installed"].detail


# --- --torch-import ----------------------------------------------------------------------------------

FAKE_TORCH_INIT = """
__version__ = '2.4.1+cu121'
from . import version, cuda, backends
"""
FAKE_CUDA = """
import time
from . import nccl
def get_arch_list():
    return ['sm_80', 'sm_90', 'compute_90']
def is_available():
    {is_available}
def device_count():
    return 2
"""


def importable_site(tmp_path: Path, is_available: str = "return True") -> Path:
    site = site_packages(tmp_path, init=FAKE_TORCH_INIT)
    write_tree(
        site,
        {
            "torch/cuda/__init__.py": FAKE_CUDA.format(is_available=is_available),
            "torch/cuda/nccl.py": "def version():\n    return (2, 20, 5)\n",
            "torch/backends/__init__.py": "from . import cudnn\n",
            "torch/backends/cudnn.py": "def version():\n    return 90100\n",
        },
    )
    return site


def test_torch_import(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    site = importable_site(tmp_path)
    monkeypatch.syspath_prepend(str(site))
    importlib.invalidate_caches()
    ctx = ProbeContext(env=child_env(site), torch_import=True)
    out = check(torch_probe.collect(ctx))
    # the fake torch was imported by the child only (a real torch may be loaded here already: on a
    # GPU host an earlier test's importorskip("torch") imports it into this process)
    loaded = sys.modules.get("torch")
    assert loaded is None or not str(getattr(loaded, "__file__", "")).startswith(str(site))
    assert out["version"] == "2.4.1+cu121"
    assert out["arch_list"] == ["sm_80", "sm_90", "compute_90"]
    assert out["arch_list_source"] == "import"
    assert out["cudnn_version"] == "9.1.0"
    assert out["nccl_version"] == "2.20.5"
    assert out["cuda_available"] is True
    assert out["device_count"] == 2
    assert out["torchvision_version"] == "0.19.1+cu121"


def test_torch_import_hanging_in_cuda_init_keeps_what_it_had(tmp_path: Path) -> None:
    site = importable_site(tmp_path, is_available="time.sleep(60)")
    ctx = ProbeContext(
        python=other_python(tmp_path), env=child_env(site), torch_import=True, deadline=time.monotonic() + 2.0
    )
    started = time.monotonic()
    out = check(torch_probe.collect(ctx))
    assert time.monotonic() - started < 5.0
    assert out["version"] == "2.4.1+cu121"
    assert out["arch_list_source"] == "import"
    assert out["nccl_version"] == "2.20.5"
    assert reason(out["cuda_available"]) == "timeout"
    assert reason(out["device_count"]) == "timeout"


def test_torch_import_failing_keeps_file_facts(tmp_path: Path) -> None:
    site = site_packages(tmp_path)  # its __init__ raises
    ctx = ProbeContext(python=other_python(tmp_path), env=child_env(site), torch_import=True)
    out = check(torch_probe.collect(ctx))
    assert out["version"] == "2.4.1+cu121"
    assert out["arch_list"] == ["sm_80", "sm_90", "compute_90"]
    assert out["arch_list_source"] == "binary"
    assert reason(out["cuda_available"]) == "error"
    assert "must not run" in out["cuda_available"].detail


@pytest.mark.parametrize(
    "raw, expected", [(90100, "9.1.0"), (8902, "8.9.2"), (91900, "9.19.0"), (None, None), (True, None)]
)
def test_normalise_cudnn(raw: Any, expected: str | None) -> None:
    assert torch_probe._normalise_cudnn(raw) == expected


@pytest.mark.parametrize("raw, expected", [([2, 20, 5], "2.20.5"), (2708, "2.7.8"), (21805, "2.18.5"), ("x", None)])
def test_normalise_nccl(raw: Any, expected: str | None) -> None:
    assert torch_probe._normalise_nccl(raw) == expected


# --- recorded answers under a fixture root -----------------------------------------------------------


def test_recorded_fixture() -> None:
    ctx = ProbeContext(root=HOSTS / "healthy-2gpu", env={})
    out = check(torch_probe.collect(ctx))
    assert out["version"] == "2.4.1+cu121"
    assert out["arch_list"] == ["sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"]
    assert reason(out["cuda_available"]) == "not_supported"
    ctx = ProbeContext(root=HOSTS / "no-driver", env={})
    assert check(torch_probe.collect(ctx))["version"] == "2.5.1+cu124"


def test_recorded_missing_and_garbage(tmp_path: Path) -> None:
    ctx = ProbeContext(root=tmp_path, env={})
    out = check(torch_probe.collect(ctx))
    assert reason(out) == "not_found"
    assert out.detail == "no recorded torch facts in fixture root"
    (tmp_path / "torch.json").write_text("{nope")
    assert reason(torch_probe.collect(ctx)) == "error"
    (tmp_path / "torch.json").write_text("[1, 2]")
    assert reason(torch_probe.collect(ctx)) == "error"
    (tmp_path / "torch.json").write_text(json.dumps({"installed": True, "version": {"unavailable": "bogus"}}))
    assert reason(torch_probe.collect(ctx)) == "error"


def test_recorded_loose_validation(tmp_path: Path) -> None:
    data = {
        "installed": True,
        "version": 2.4,
        "build": "quantum",
        "arch_list": ["sm_90", 90],
        "device_count": {"unavailable": "timeout", "detail": "hung"},
        "cuda_version": None,
        "extra": "dropped",
    }
    (tmp_path / "torch.json").write_text(json.dumps(data))
    out = check(torch_probe.collect(ProbeContext(root=tmp_path, env={})))
    assert out["installed"] is True
    assert out["cuda_version"] is None
    assert reason(out["version"]) == "error"
    assert reason(out["build"]) == "error"
    assert reason(out["arch_list"]) == "error"
    assert reason(out["device_count"]) == "timeout"
    assert reason(out["nccl_version"]) == "not_found"
    assert "extra" not in out


# --- a real torch, where there is one ----------------------------------------------------------------

_REAL = importlib.util.find_spec("torch")


@pytest.mark.gpu
@pytest.mark.skipif(_REAL is None or _REAL.origin is None, reason="torch is not installed here")
def test_binary_arch_list_matches_import() -> None:
    ctx = ProbeContext(torch_import=True)
    imported = torch_probe.collect(ctx)
    cheap = torch_probe.collect(ProbeContext())
    assert isinstance(imported, dict) and isinstance(cheap, dict)
    if imported["build"] != "cuda":
        pytest.skip("not a CUDA build of torch")
    assert cheap["arch_list_source"] == "binary"
    assert cheap["arch_list"] == imported["arch_list"]
    for key in ("version", "cuda_version", "cudnn_version", "nccl_version", "torchvision_version"):
        assert cheap[key] == imported[key], key
