"""The CUDA toolkit and the command-line tools gpudoctor's advice relies on.

Reads (through the context root; environment from ``ctx.env``):

- ``PATH`` (default ``/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin``), then
  ``$CUDA_HOME/bin`` and ``/usr/local/cuda/bin``: where ``nvcc``, ``numactl`` and ``nvidia-smi`` are
- ``<cuda dir>/version.json`` (``"cuda": {"version": "12.4.131"}``), else ``<cuda dir>/version.txt``
  ("CUDA Version 11.8.89"), else ``CUDART_VERSION`` in ``<cuda dir>/include/cuda_runtime_api.h``
  (first 64 KiB), else a ``cuda-X.Y`` directory name; only when none of these answers, on the
  live machine, ``nvcc --version`` (the one subprocess here, with a 2 s budget)
- ``CUDA_HOME`` / ``CUDA_PATH``, else ``/usr/local/cuda``
- ``LD_LIBRARY_PATH`` and ``/etc/ld.so.conf.d/*.conf``: whether a cuda-compat ``libcuda.so``
  (in a directory named ``compat``) is the one the loader will find first
"""

from __future__ import annotations

import os
import time
from typing import Any

from ..context import ProbeContext, shown
from ..facts import Unavailable
from ..inputs import parse_json
from ..lazy_re import LazyPattern
from .files import (
    MAX_SEARCH_DIRS,
    is_dir,
    is_file,
    list_dir,
    read_bytes,
    read_text,
    resolve_path,
    search_dirs,
)
from .tools import run_bounded

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

# Versions are a few digits: bounded quantifiers keep a megabyte of digits out of a fact.
_VERSION_TXT = LazyPattern(r"CUDA Version[ \t]{1,16}(\d{1,4})\.(\d{1,4})")
_NVCC_RELEASE = LazyPattern(r"release[ \t]{1,16}(\d{1,4})\.(\d{1,4})[ \t]{0,16},")
_RELEASE = LazyPattern(r"^(\d{1,4})\.(\d{1,4})")
_CUDART_VERSION = LazyPattern(rb"#define[ \t]{1,16}CUDART_VERSION[ \t]{1,16}(\d{1,9})")
# version.txt is one line; version.json lists the components, a few KiB.
MAX_VERSION_TXT = 1 << 12
# An environment value longer than PATH_MAX names no directory.
MAX_ENV_PATH = 4096
_CUDA_DIR_NAME = LazyPattern(r"^cuda-(\d+)\.(\d+)$")


def _search_dirs(ctx: ProbeContext) -> list[str]:
    # Relative PATH entries depend on the working directory of a process we do not see.
    cuda_home = ctx.env.get("CUDA_HOME", "").rstrip("/")
    extra = [f"{cuda_home}/bin"] if cuda_home.startswith("/") else []
    return search_dirs(ctx.env.get("PATH", DEFAULT_PATH), [*extra, "/usr/local/cuda/bin"], empty_is_root=True)


def find_program(ctx: ProbeContext, name: str, dirs: list[str]) -> str | Unavailable:
    """System path of the first ``name`` in ``dirs`` (executable on the live machine)."""
    for directory in dirs:
        candidate = f"{directory}/{name}"
        if not is_file(ctx, candidate):
            continue
        # Fixture trees hold empty placeholder files; only the live machine has real modes.
        if ctx.live and not os.access(ctx.path(candidate), os.X_OK):
            continue
        return candidate
    return Unavailable("not_found", f"{name} not found on PATH")


def _release(text: str) -> str | None:
    match = _RELEASE.match(text.strip())
    return f"{match.group(1)}.{match.group(2)}" if match else None


def cuda_dir_version(ctx: ProbeContext, cuda_dir: str) -> str | Unavailable:
    """CUDA release ("12.4") of a toolkit directory from its version.json or version.txt."""
    raw = read_text(ctx, f"{cuda_dir}/version.json")
    if isinstance(raw, str):
        try:
            # strict JSON (no NaN, bounded integers and nesting), as every file of a root is read
            data = parse_json(raw, str(ctx.path(cuda_dir + "/version.json")))
            release = _release(str(data["cuda"]["version"]))
        except (ValueError, KeyError, TypeError):  # ValueError: InputError, not strict JSON
            release = None
        if release:
            return release
        return Unavailable("error", f"{ctx.path(cuda_dir + '/version.json')}: no cuda.version")
    txt = read_text(ctx, f"{cuda_dir}/version.txt", whole=False, limit=MAX_VERSION_TXT)
    if isinstance(txt, str):
        match = _VERSION_TXT.search(txt)
        if match:
            return f"{match.group(1)}.{match.group(2)}"
        return Unavailable("error", f"{ctx.path(cuda_dir + '/version.txt')}: no 'CUDA Version' line")
    if raw.reason != "not_found" or txt.reason != "not_found":
        return raw if raw.reason != "not_found" else txt
    # Toolkits installed without the version files (some CUDA 13 images): the runtime
    # header's CUDART_VERSION, near its top, then the /usr/local/cuda-X.Y directory name.
    header = read_bytes(ctx, f"{cuda_dir}/include/cuda_runtime_api.h", 1 << 16)
    if isinstance(header, bytes):
        cudart = _CUDART_VERSION.search(header)
        if cudart:
            number = int(cudart.group(1))
            return f"{number // 1000}.{number % 1000 // 10}"
    real = resolve_path(ctx, cuda_dir)
    if isinstance(real, str):
        match = _CUDA_DIR_NAME.match(os.path.basename(real))
        if match:
            return f"{match.group(1)}.{match.group(2)}"
    return Unavailable("not_found", f"no version.json, version.txt or CUDART_VERSION in {cuda_dir}")


def _nvcc_version(ctx: ProbeContext, nvcc: str | Unavailable) -> str | Unavailable:
    if isinstance(nvcc, Unavailable):
        return nvcc
    real = resolve_path(ctx, nvcc)
    bin_dir = os.path.dirname(real if isinstance(real, str) else nvcc)
    cuda_dir = os.path.dirname(bin_dir) or "/"
    found = cuda_dir_version(ctx, cuda_dir)
    if not isinstance(found, Unavailable) or found.reason != "not_found" or not ctx.live:
        return found
    # A distribution nvcc (/usr/bin/nvcc) has no version file beside it: ask it, briefly.
    result = run_bounded([str(ctx.path(nvcc)), "--version"], ctx.budget(2.0), ctx.env)
    if isinstance(result, Unavailable):
        return result
    match = _NVCC_RELEASE.search(result.stdout)
    if match:
        return f"{match.group(1)}.{match.group(2)}"
    return Unavailable("error", f"{nvcc} --version: no 'release X.Y,' in its output (exit {result.returncode})")


def _has_libcuda(ctx: ProbeContext, directory: str) -> str | None:
    """System path of the libcuda the loader would take from a directory, if it has one."""
    names = list_dir(ctx, directory)
    if isinstance(names, Unavailable):
        return None
    libs = [n for n in names if n.startswith("libcuda.so")]
    if not libs:
        return None
    for preferred in ("libcuda.so.1", "libcuda.so"):
        if preferred in libs:
            real = resolve_path(ctx, f"{directory}/{preferred}")
            return real if isinstance(real, str) else f"{directory}/{preferred}"
    return f"{directory}/{sorted(libs)[-1]}"


def _is_compat_dir(directory: str) -> bool:
    return "compat" in directory.split("/")


def _cuda_compat(ctx: ProbeContext) -> tuple[bool | Unavailable, str | Unavailable]:
    stop = ctx.work_deadline()
    for directory in search_dirs(ctx.env.get("LD_LIBRARY_PATH", "")):
        if time.monotonic() > stop:
            return _compat_cut(), _compat_cut()
        lib = _has_libcuda(ctx, directory)
        if lib is None:
            continue
        if _is_compat_dir(directory):
            return True, lib
        return False, Unavailable("not_found", f"the first libcuda on LD_LIBRARY_PATH is {lib}, not cuda-compat")
    confs = list_dir(ctx, "/etc/ld.so.conf.d")
    if isinstance(confs, list):
        looked = 0  # compat directories named by the files, looked into
        for name in confs:
            if not name.endswith(".conf"):
                continue
            if looked >= MAX_SEARCH_DIRS or time.monotonic() > stop:
                return _compat_cut(), _compat_cut()
            text = read_text(ctx, f"/etc/ld.so.conf.d/{name}")
            if isinstance(text, Unavailable):
                continue
            for line in text.splitlines():
                directory = line.split("#", 1)[0].strip().rstrip("/")
                if directory.startswith("/") and _is_compat_dir(directory):
                    looked += 1
                    if looked > MAX_SEARCH_DIRS:
                        break
                    lib = _has_libcuda(ctx, directory)
                    if lib is not None:
                        return True, lib
    return False, Unavailable("not_found", "no cuda-compat libcuda on LD_LIBRARY_PATH or in /etc/ld.so.conf.d")


def _compat_cut() -> Unavailable:
    return Unavailable(
        "timeout", f"the deadline passed, or more than {MAX_SEARCH_DIRS} directories, before a libcuda was found"
    )


def collect(ctx: ProbeContext) -> dict[str, Any]:
    dirs = _search_dirs(ctx)
    out: dict[str, Any] = {}
    nvcc = find_program(ctx, "nvcc", dirs)
    out["nvcc_path"] = nvcc
    out["nvcc_version"] = _nvcc_version(ctx, nvcc)

    home_env = ctx.env.get("CUDA_HOME") or ctx.env.get("CUDA_PATH") or ""
    home_env = home_env.rstrip("/") or ("/" if home_env else "")
    if len(home_env) > MAX_ENV_PATH:
        too_long = Unavailable("error", f"CUDA_HOME is {len(home_env)} characters long, longer than a path can be")
        out["cuda_home"] = out["cuda_home_version"] = too_long
    elif home_env:
        out["cuda_home"] = home_env
        if home_env.startswith("/") and is_dir(ctx, home_env):
            out["cuda_home_version"] = cuda_dir_version(ctx, home_env)
        else:
            out["cuda_home_version"] = Unavailable("not_found", f"CUDA_HOME {shown(home_env)} is not a directory")
    elif is_dir(ctx, "/usr/local/cuda"):
        out["cuda_home"] = "/usr/local/cuda"
        out["cuda_home_version"] = cuda_dir_version(ctx, "/usr/local/cuda")
    else:
        missing = Unavailable("not_found", "CUDA_HOME and CUDA_PATH are unset and there is no /usr/local/cuda")
        out["cuda_home"] = missing
        out["cuda_home_version"] = missing

    out["numactl_path"] = find_program(ctx, "numactl", dirs)
    out["nvidia_smi_path"] = find_program(ctx, "nvidia-smi", dirs)
    out["cuda_compat_in_use"], out["cuda_compat_path"] = _cuda_compat(ctx)
    return out
