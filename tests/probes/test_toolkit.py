"""Tests for probes/toolkit.py: nvcc and CUDA_HOME versions, tools on PATH, cuda-compat."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from gpudoctor.context import ProbeContext
from gpudoctor.facts import Unavailable
from gpudoctor.probes import toolkit
from tests.helpers.sections import section_keys, validate_section
from tests.helpers.tree import Entry, deny, write_tree

HOSTS = Path(__file__).resolve().parents[1] / "fixtures" / "hosts"


def version_json(version: str) -> str:
    return json.dumps({"cuda": {"name": "CUDA SDK", "version": version}, "cuda_nvcc": {"version": version}})


def collect(root: Path, env: dict[str, str] | None = None) -> dict[str, Any]:
    out = toolkit.collect(ProbeContext(root=root, env=env if env is not None else {}))
    validate_section("toolkit", out)
    assert set(out) == section_keys("toolkit")
    return out


def reason(value: Any) -> str:
    assert isinstance(value, Unavailable), value
    return value.reason


def test_healthy_fixture() -> None:
    out = collect(HOSTS / "healthy-2gpu", {"PATH": "/usr/local/cuda/bin:/usr/bin:/bin"})
    assert out["nvcc_path"] == "/usr/local/cuda/bin/nvcc"
    assert out["nvcc_version"] == "12.4"
    assert out["cuda_home"] == "/usr/local/cuda"
    assert out["cuda_home_version"] == "12.4"
    assert out["numactl_path"] == "/usr/bin/numactl"
    assert out["nvidia_smi_path"] == "/usr/bin/nvidia-smi"
    assert out["cuda_compat_in_use"] is False
    assert reason(out["cuda_compat_path"]) == "not_found"


def test_nothing_installed(tmp_path: Path) -> None:
    out = collect(tmp_path)
    for key in ("nvcc_path", "nvcc_version", "cuda_home", "cuda_home_version", "numactl_path", "nvidia_smi_path"):
        assert reason(out[key]) == "not_found", key
    assert out["cuda_compat_in_use"] is False


def test_default_path_and_cuda_dirs(tmp_path: Path) -> None:
    write_tree(
        tmp_path,
        {
            "usr/local/cuda-12.4/version.json": version_json("12.4.131"),
            "usr/local/cuda-12.4/bin/nvcc": b"",
            "usr/local/cuda": ("link", "cuda-12.4"),
            "usr/local/bin/nvidia-smi": b"",
            "bin/numactl": b"",
        },
    )
    out = collect(tmp_path)  # no PATH in the environment: the default one, then /usr/local/cuda/bin
    assert out["nvcc_path"] == "/usr/local/cuda/bin/nvcc"
    assert out["nvcc_version"] == "12.4"
    assert out["nvidia_smi_path"] == "/usr/local/bin/nvidia-smi"
    assert out["numactl_path"] == "/bin/numactl"
    # a relative PATH entry is ignored, the order of the others kept
    out = collect(tmp_path, {"PATH": ".:bin:/bin:/usr/local/bin"})
    assert out["numactl_path"] == "/bin/numactl"


def test_nvcc_symlink_resolves_to_its_toolkit(tmp_path: Path) -> None:
    write_tree(
        tmp_path,
        {
            "opt/cuda-11.8/bin/nvcc": b"",
            "opt/cuda-11.8/version.txt": "CUDA Version 11.8.89\n",
            "usr/bin/nvcc": ("link", "/opt/cuda-11.8/bin/nvcc"),  # absolute: followed inside the root
            "usr/local/cuda-12.4/version.json": version_json("12.4.131"),
            "usr/local/cuda": ("link", "/usr/local/cuda-12.4"),
        },
    )
    out = collect(tmp_path, {"PATH": "/usr/bin"})
    assert out["nvcc_path"] == "/usr/bin/nvcc"
    assert out["nvcc_version"] == "11.8"
    assert out["cuda_home"] == "/usr/local/cuda"
    assert out["cuda_home_version"] == "12.4"


def test_cuda_home_and_cuda_path(tmp_path: Path) -> None:
    write_tree(
        tmp_path,
        {
            "opt/cuda/version.txt": "CUDA Version 12.2.140\n",
            "usr/local/cuda/version.json": version_json("12.4.131"),
        },
    )
    out = collect(tmp_path, {"CUDA_PATH": "/opt/cuda/"})
    assert out["cuda_home"] == "/opt/cuda"
    assert out["cuda_home_version"] == "12.2"
    out = collect(tmp_path, {"CUDA_HOME": "/nowhere", "CUDA_PATH": "/opt/cuda"})
    assert out["cuda_home"] == "/nowhere"
    assert reason(out["cuda_home_version"]) == "not_found"


def test_version_fallbacks(tmp_path: Path) -> None:
    header = "/*\n * Copyright 1993-2025 NVIDIA Corporation.\n */\n" * 50 + "#define CUDART_VERSION  13000\n"
    write_tree(
        tmp_path,
        {
            "usr/local/cuda-13.0/targets/x86_64-linux/include/cuda_runtime_api.h": header,
            "usr/local/cuda-13.0/include": ("link", "targets/x86_64-linux/include"),
            "usr/local/cuda-13.0/bin/nvcc": b"",
            "usr/local/cuda-12.6/bin/nvcc": b"",
            "usr/local/cuda": ("link", "cuda-13.0"),
        },
    )
    assert collect(tmp_path)["cuda_home_version"] == "13.0"  # from the header
    out = collect(tmp_path, {"PATH": "/usr/local/cuda-12.6/bin"})
    assert out["nvcc_version"] == "12.6"  # from the directory name


@pytest.mark.parametrize(
    "name, content",
    [
        ("version.json", "{not json"),
        ("version.json", json.dumps({"cuda_nvcc": {"version": "12.4.131"}})),
        ("version.json", json.dumps({"cuda": {"version": "twelve"}})),
        ("version.txt", "CUDA Toolkit, unknown\n"),
    ],
)
def test_garbage_version_files(tmp_path: Path, name: str, content: str) -> None:
    write_tree(tmp_path, {f"usr/local/cuda/{name}": content, "usr/local/cuda/bin/nvcc": b""})
    out = collect(tmp_path, {"PATH": "/usr/bin"})
    assert reason(out["cuda_home_version"]) == "error"
    assert reason(out["nvcc_version"]) == "error"


def test_unreadable_version_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_tree(tmp_path, {"usr/local/cuda/version.json": version_json("12.4.131")})
    deny(monkeypatch, [tmp_path / "usr/local/cuda/version.json"])
    assert reason(collect(tmp_path)["cuda_home_version"]) == "no_permission"


COMPAT: dict[str, Entry] = {
    "usr/local/cuda-12.4/compat/libcuda.so.550.54.15": b"",
    "usr/local/cuda-12.4/compat/libcuda.so.1": ("link", "libcuda.so.550.54.15"),
    "usr/lib/x86_64-linux-gnu/libcuda.so.535.183.01": b"",
    "usr/lib/x86_64-linux-gnu/libcuda.so.1": ("link", "libcuda.so.535.183.01"),
}


def test_cuda_compat_first_on_ld_library_path(tmp_path: Path) -> None:
    write_tree(tmp_path, COMPAT)
    out = collect(tmp_path, {"LD_LIBRARY_PATH": "/usr/local/cuda-12.4/compat:/usr/lib/x86_64-linux-gnu"})
    assert out["cuda_compat_in_use"] is True
    assert out["cuda_compat_path"] == "/usr/local/cuda-12.4/compat/libcuda.so.550.54.15"
    out = collect(tmp_path, {"LD_LIBRARY_PATH": "/usr/lib/x86_64-linux-gnu:/usr/local/cuda-12.4/compat"})
    assert out["cuda_compat_in_use"] is False
    assert "libcuda.so.535.183.01" in out["cuda_compat_path"].detail


def test_cuda_compat_from_ld_so_conf(tmp_path: Path) -> None:
    write_tree(tmp_path, {**COMPAT, "etc/ld.so.conf.d/000_cuda-compat.conf": "# NGC\n/usr/local/cuda-12.4/compat\n"})
    out = collect(tmp_path, {"LD_LIBRARY_PATH": "relative/dir:/nonexistent"})
    assert out["cuda_compat_in_use"] is True
    write_tree(tmp_path, {"etc/ld.so.conf.d/000_cuda-compat.conf": "/usr/local/cuda-12.2/compat\n"})
    assert collect(tmp_path)["cuda_compat_in_use"] is False  # that compat dir holds no libcuda


def live_context(tmp_path: Path, seconds: float = 30.0) -> ProbeContext:
    return ProbeContext(env={"PATH": f"{tmp_path}/bin:/usr/bin:/bin"}, deadline=time.monotonic() + seconds)


def script(path: Path, body: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)


def test_live_nvcc_without_version_files_is_asked(tmp_path: Path) -> None:
    script(
        tmp_path / "bin/nvcc",
        "echo 'nvcc: NVIDIA (R) Cuda compiler driver'\necho 'Cuda compilation tools, release 12.6, V12.6.77'\n",
    )
    out = toolkit.collect(live_context(tmp_path))
    assert out["nvcc_path"] == str(tmp_path / "bin/nvcc")
    assert out["nvcc_version"] == "12.6"


def test_live_nvcc_not_executable_is_skipped(tmp_path: Path) -> None:
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin/nvcc").write_text("")
    (tmp_path / "bin/nvcc").chmod(0o644)
    out = toolkit.collect(live_context(tmp_path))
    if os.access(tmp_path / "bin/nvcc", os.X_OK):  # root may execute anything with an x bit... or not
        pytest.skip("this user can execute a 0644 file")
    assert out["nvcc_path"] != str(tmp_path / "bin/nvcc")


def test_live_nvcc_that_hangs_times_out(tmp_path: Path) -> None:
    script(tmp_path / "bin/nvcc", "sleep 30\n")
    started = time.monotonic()
    out = toolkit.collect(live_context(tmp_path, seconds=0.5))
    assert time.monotonic() - started < 3.0
    assert reason(out["nvcc_version"]) == "timeout"


def test_live_nvcc_with_garbage_output(tmp_path: Path) -> None:
    script(tmp_path / "bin/nvcc", "echo hello; exit 3\n")
    out = toolkit.collect(live_context(tmp_path))
    assert reason(out["nvcc_version"]) == "error"
    assert "exit 3" in out["nvcc_version"].detail
