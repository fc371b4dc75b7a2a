"""Helpers for versions, GPU architectures and wheel tags: version(), arch_supported(), ..."""

from __future__ import annotations

import re
from typing import Any, Iterable

from packaging.version import InvalidVersion, Version

from .common import MAX_NUMBER_DIGITS, shown, small_int

_VERSION_HEAD = re.compile(r"\d+(?:\.\d+)*")

# Dotted parts a version may have ("580.65.06" has 3).
MAX_VERSION_PARTS = 16


def version(text: Any) -> Version:
    """The leading dotted number of a version string, comparable with < and >=.

    Example: version("580.65.06") → 580.65.6
    Example: version("6.8.0-45-generic") >= version("6.8") → True
    """
    if isinstance(text, (int, float)):
        text = str(text)
    if not isinstance(text, str):
        raise TypeError(f"version() needs a string, got {type(text).__name__}")
    match = _VERSION_HEAD.search(text)
    if not match:
        raise ValueError(f"no version number in {shown(text)}")
    parts = match.group(0).split(".")
    if len(parts) > MAX_VERSION_PARTS:
        raise ValueError(f"bad version {shown(text)}: more than {MAX_VERSION_PARTS} dotted parts")
    longest = max(map(len, parts))
    if longest > MAX_NUMBER_DIGITS:
        raise ValueError(f"bad version {shown(text)}: a part with {longest} digits (at most {MAX_NUMBER_DIGITS})")
    try:
        return Version(match.group(0))
    except (InvalidVersion, ValueError):
        raise ValueError(f"bad version {shown(text)}") from None


def major(text: Any) -> int:
    """The major number of a version.

    Example: major("12.4.131") → 12
    """
    return version(text).major


def minor_version(text: Any) -> str:
    """"major.minor" of a version, as the data tables key CUDA and torch releases.

    Example: minor_version("12.4.131") → "12.4"
    """
    v = version(text)
    return f"{v.major}.{v.minor}"


def _cc_tuple(cc: str) -> tuple[int, int]:
    major_s, _, minor_s = str(cc).partition(".")
    return small_int(major_s, "compute capability"), small_int(minor_s or "0", "compute capability")

_ARCH = re.compile(rf"(sm|compute)_(\d{{1,{MAX_NUMBER_DIGITS}}})([a-z]?)")


def _arch_tuple(arch: str) -> tuple[str, int, int] | None:
    """ "sm_90" → ("sm", 9, 0); "compute_90" → ("compute", 9, 0); "sm_100a"/"sm_90a" keep the base arch."""
    m = _ARCH.fullmatch(arch.strip())
    if not m:
        return None
    digits = m.group(2)
    return m.group(1), int(digits[:-1]), int(digits[-1])


def arch_supported(arch_list: Iterable[str], cc: str) -> bool:
    """Can a build with these targets run on a GPU of compute capability cc?

    Machine code (sm_XY) runs on the same major with an equal or higher
    minor; PTX (compute_XY) is JIT-compiled for any GPU of capability >= X.Y.
    Architecture-specific targets (sm_90a) run only on exactly that GPU.

    Example: arch_supported(["sm_80", "compute_90"], "9.0") → True
    Example: arch_supported(["sm_80", "sm_86"], "9.0") → False
    """
    gpu = _cc_tuple(cc)
    for raw in arch_list:
        parsed = _arch_tuple(str(raw))
        if parsed is None:
            continue
        kind, maj, mino = parsed
        specific = str(raw).strip()[-1].isalpha()
        if kind == "sm":
            if specific and (maj, mino) == gpu:
                return True
            if not specific and maj == gpu[0] and mino <= gpu[1]:
                return True
        elif (maj, mino) <= gpu:
            return True
    return False


def sm(cc: str) -> str:
    """A compute capability as an arch name.

    Example: sm("9.0") → "sm_90"
    """
    maj, mino = _cc_tuple(cc)
    return f"sm_{maj}{mino}"


def local_version(text: Any) -> str:
    """The local part of a wheel version, after "+" ("" when it has none).

    Example: local_version("2.4.1+cu121") → "cu121"
    """
    if not isinstance(text, str):
        raise TypeError(f"local_version() needs a string, got {type(text).__name__}")
    return text.partition("+")[2].strip()


def wheel_family(text: Any) -> str:
    """Which accelerator family a torch/torchvision/torchaudio wheel was built for, from its
    local version: "cuda12", "cuda13", "rocm6", "cpu", "xpu"; "" when the version carries no tag
    (a PyPI default wheel or a source build), where the family cannot be told.

    The CUDA tag is the major and minor run together with the minor as its last digit
    (cu92, cu118, cu130), so the major is everything but the last digit.

    Example: wheel_family("2.4.1+cu121") → "cuda12"
    Example: wheel_family("2.7.0+rocm6.3") → "rocm6"
    """
    tag = local_version(text).lower()
    digits = re.fullmatch(r"cu(\d+)", tag)
    if digits:
        number = digits.group(1)
        return f"cuda{number[:-1] or number}"
    rocm = re.fullmatch(r"rocm(\d+)(?:\.\d+)*", tag)
    if rocm:
        return f"rocm{rocm.group(1)}"
    if tag in ("cpu", "xpu"):
        return tag
    return ""


def _gfx_base(name: Any) -> str:
    # "gfx90a:sramecc+:xnack-" → "gfx90a": torch and rocminfo may append target features.
    return str(name).strip().split(":", 1)[0].lower()


def missing_gfx(targets: Iterable[Any], arch_list: Iterable[Any]) -> list[str]:
    """The GPU targets (gfx names) that a ROCm build's arch list has no code for, in order,
    each once; target features after ":" are ignored on both sides.

    Example: missing_gfx(["gfx1100", "gfx90a:sramecc+:xnack-"], ["gfx90a"]) → ["gfx1100"]
    """
    built = {_gfx_base(a) for a in arch_list}
    out: list[str] = []
    for target in targets:
        base = _gfx_base(target)
        if base not in built and base not in out:
            out.append(base)
    return out


_HSA_OVERRIDE = re.compile(r"(\d{1,2})\.(\d{1,2})\.(\d{1,2})")


def hsa_override_gfx(value: Any) -> str:
    """The gfx target that HSA_OVERRIDE_GFX_VERSION ("major.minor.stepping") makes the ROCm
    runtime present every AMD GPU as; "" when the value is unset or not of that form. The target
    name is "gfx", the major in decimal, then the minor and stepping as one hex digit each, as
    LLVM names the processors (gfx90a is 9.0.10).

    Example: hsa_override_gfx("11.0.0") → "gfx1100"
    Example: hsa_override_gfx("9.0.10") → "gfx90a"
    Example: hsa_override_gfx(None) → ""
    """
    if not isinstance(value, str):
        return ""
    match = _HSA_OVERRIDE.fullmatch(value.strip())
    if not match:
        return ""
    major, minor, stepping = (int(part) for part in match.groups())
    if major == 0 or minor > 15 or stepping > 15:
        return ""
    return f"gfx{major}{minor:x}{stepping:x}"
