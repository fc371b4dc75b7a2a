"""The torch release table, and each wheel variant of a release judged against the target machine.

A cuXYZ variant runs where the driver meets its CUDA major's minor-version-compatibility floor and
its arch list has code for every GPU (SASS of the same major with an equal or lower minor, or PTX
at or below the GPU's capability; PTX counts only where the driver fully supports that CUDA, since
it cannot JIT newer PTX otherwise). A rocmX.Y variant runs where its gfx list holds every GPU's
gfx target (exact match). torch_build.recommend picks among the verdicts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from packaging.version import Version

from ..lazy_re import LazyPattern
from .torch_inputs import CC_RE, Inputs, TorchAdviceError

_TORCH_RE = LazyPattern(r"([0-9]{1,3})\.([0-9]{1,3})(?:\.([0-9]{1,3}))?")


# ---------------------------------------------------------------------------- tables


def load_release_tables() -> tuple[dict[str, Any], dict[str, Any], str | None]:
    """(torch_releases rows, cuda_driver rows, the date the release table was last checked against
    its sources, YYYY-MM-DD) of the built-in data tables."""
    from ..tables import builtin_tables

    tables = builtin_tables()
    retrieved = tables["torch_releases"].get("retrieved")
    return tables["torch_releases"]["rows"], tables["cuda_driver"]["rows"], str(retrieved) if retrieved else None


def load_tables() -> tuple[dict[str, Any], dict[str, Any]]:
    """(torch_releases rows, cuda_driver rows) of the built-in data tables."""
    releases, cuda_rows, _ = load_release_tables()
    return releases, cuda_rows


def parse_arch_list(text: str) -> list[str]:
    """TORCH_CUDA_ARCH_LIST notation to arch names: "8.6;9.0+PTX" → [sm_86, sm_90, compute_90]."""
    out: list[str] = []
    for part in str(text).replace(" ", ";").split(";"):
        part = part.strip()
        if not part:
            continue
        ptx = part.endswith("+PTX")
        base = part[: -len("+PTX")] if ptx else part
        if not CC_RE.fullmatch(base):
            raise ValueError(f"bad arch {part!r} in {text!r}")
        major, minor = base.split(".")
        out.append(f"sm_{major}{minor}")
        if ptx:
            out.append(f"compute_{major}{minor}")
    return out


def cuda_of(variant: str) -> str | None:
    """ "cu126" → "12.6", "cu130" → "13.0", "cu118" → "11.8"; None for other variants."""
    m = re.fullmatch(r"cu(\d+)(\d)", variant)
    return f"{m.group(1)}.{m.group(2)}" if m else None


def rocm_of(variant: str) -> Version | None:
    m = re.fullmatch(r"rocm(\d+(?:\.\d+)+)", variant)
    return Version(m.group(1)) if m else None


def release_key(text: str) -> str:
    m = _TORCH_RE.fullmatch(text.strip())
    if not m:
        raise TorchAdviceError(f"--torch-version {text!r}: expected X.Y or X.Y.Z, e.g. 2.14")
    return f"{m.group(1)}.{m.group(2)}"


def _sass_covers(archs: Sequence[str], cc: str) -> bool:
    from ..engine.helpers.versions import arch_supported

    return arch_supported([a for a in archs if a.startswith("sm_")], cc)


def _ptx_covers(archs: Sequence[str], cc: str) -> bool:
    from ..engine.helpers.versions import arch_supported

    return arch_supported([a for a in archs if a.startswith("compute_")], cc)


def sm_name(cc: str) -> str:
    major, minor = cc.split(".")
    return f"sm_{major}{minor}"


def _span(archs: Sequence[str]) -> str:
    sms = [a for a in archs if a.startswith("sm_")]
    ptx = [a for a in archs if a.startswith("compute_")]
    text = f"{sms[0]}…{sms[-1]}" if len(sms) > 2 else ", ".join(sms)
    return text + (f" + PTX {', '.join(ptx)}" if ptx else "")


# ---------------------------------------------------------------------------- verdicts


@dataclass
class Verdict:
    """One variant of one release judged against the machine."""

    variant: str
    ok: bool
    reason: str
    full_support: bool | None = None  # driver ≥ the CUDA release's own minimum (None: unknown)
    via_ptx: list[str] = field(default_factory=list)
    lead: bool = False
    need_driver: str | None = None  # the lowest driver this variant runs on (CUDA variants)
    relevant: bool = True  # a variant for this machine's kind of GPU (not another vendor's)

    def to_json(self) -> dict[str, Any]:
        return {
            "variant": self.variant,
            "ok": self.ok,
            "reason": self.reason,
            "full_driver_support": self.full_support,
            "via_ptx": self.via_ptx,
            "from_secondary_sources": self.lead,
            "needs_driver": self.need_driver,
        }


def _judge_cuda(variant: str, spec: Mapping[str, Any], inputs: Inputs, cuda_rows: Mapping[str, Any]) -> Verdict:
    lead = bool(spec.get("lead"))
    cuda = cuda_of(variant) or "?"
    row = cuda_rows.get(cuda)
    if not isinstance(row, Mapping):
        return Verdict(variant, False, f"CUDA {cuda} is not in the driver table (cuda_driver)", lead=lead)
    floor, full = str(row.get("mvc_floor")), row.get("min_driver")
    full_support: bool | None = None
    if inputs.driver is not None:
        drv = Version(inputs.driver)
        if drv < Version(floor):
            return Verdict(
                variant,
                False,
                f"needs driver ≥ {floor} (CUDA {cuda.split('.')[0]}.x minor-version-compatibility floor); "
                f"this host has {inputs.driver}",
                full_support=False,
                lead=lead,
                need_driver=floor,
            )
        full_support = bool(full) and drv >= Version(str(full))
    if not spec.get("arch"):
        return Verdict(
            variant,
            False,
            "the arch list of this build is not known (the wheel index does not state it); not chosen blindly",
            full_support=full_support,
            lead=lead,
            need_driver=floor,
        )
    archs = parse_arch_list(str(spec.get("arch")))
    uncovered: list[str] = []
    via_ptx: list[str] = []
    for gpu in inputs.nvidia_gpus:
        cc = gpu["cc"]
        if not cc:
            continue
        if _sass_covers(archs, cc):
            continue
        if _ptx_covers(archs, cc):
            if full_support is False:
                uncovered.append(f"{sm_name(cc)} (only PTX, which a driver below {full} cannot JIT-compile)")
            else:
                via_ptx.append(sm_name(cc))
            continue
        uncovered.append(sm_name(cc))
    if uncovered:
        names = sorted(set(uncovered))
        return Verdict(
            variant,
            False,
            f"no kernels for {', '.join(names)}: built for {_span(archs)}",
            full_support=full_support,
            lead=lead,
            need_driver=floor,
        )
    if inputs.driver is None:
        reason = f"needs driver ≥ {floor} (full CUDA {cuda} support from {full})" if full else f"needs driver ≥ {floor}"
    elif full_support:
        reason = f"driver {inputs.driver} ≥ {full} fully supports CUDA {cuda}"
    else:
        reason = (
            f"driver {inputs.driver} runs CUDA {cuda} only through minor-version compatibility "
            f"(full support needs ≥ {full})"
            if full
            else f"driver {inputs.driver} ≥ {floor} runs CUDA {cuda} through minor-version compatibility"
        )
    if via_ptx:
        reason += f"; {', '.join(sorted(set(via_ptx)))} only through PTX (JIT-compiled at first use)"
    return Verdict(variant, True, reason, full_support=full_support, via_ptx=via_ptx, lead=lead, need_driver=floor)


def _judge_rocm(variant: str, spec: Mapping[str, Any], inputs: Inputs) -> Verdict:
    lead = bool(spec.get("lead"))
    gfx = spec.get("gfx")
    if not isinstance(gfx, list):
        return Verdict(
            variant, False, "the gfx targets this build carries are not known; not chosen blindly", lead=lead
        )
    if not inputs.amd_gfx:
        return Verdict(variant, False, "the GPUs' gfx targets are unknown (pass --gpu-arch gfxNNN)", lead=lead)
    missing = [g for g in inputs.amd_gfx if g not in gfx]
    if missing:
        return Verdict(variant, False, f"no code for {', '.join(missing)}: built for {', '.join(gfx)}", lead=lead)
    return Verdict(variant, True, f"has code for {', '.join(inputs.amd_gfx)}", lead=lead)


def _rank_cuda(v: Verdict) -> tuple[int, int, Version]:
    return (1 if v.full_support else 0, 0 if v.lead else 1, Version(cuda_of(v.variant) or "0"))


# ---------------------------------------------------------------------------- releases


def newest_first(rows: Mapping[str, Any]) -> list[str]:
    return sorted(rows, key=lambda k: Version(k), reverse=True)


def python_fit(row: Mapping[str, Any], python: str | None) -> str | None:
    """'stable', 'experimental' or None (no wheel for this Python)."""
    if python is None:
        return "stable"
    if python in row.get("python", []):
        return "stable"
    if python in (row.get("python_experimental") or []):
        return "experimental"
    return None


def judge_release(row: Mapping[str, Any], target: str, inputs: Inputs, cuda_rows: Mapping[str, Any]) -> list[Verdict]:
    verdicts: list[Verdict] = []
    for variant, spec in (row.get("variants") or {}).items():
        spec = spec or {}
        if variant.startswith("cu") and cuda_of(variant):
            if target == "nvidia":
                verdicts.append(_judge_cuda(variant, spec, inputs, cuda_rows))
            else:
                verdicts.append(Verdict(variant, False, "a CUDA build; no NVIDIA GPU here", relevant=False))
        elif variant.startswith("rocm"):
            if target == "amd":
                verdicts.append(_judge_rocm(variant, spec, inputs))
            else:
                verdicts.append(Verdict(variant, False, "a ROCm build; no AMD GPU here", relevant=False))
        elif variant == "cpu":
            ok = target == "cpu"
            verdicts.append(
                Verdict(
                    variant, ok, "no GPU here: the CPU build" if ok else "CPU only: leaves the GPUs unused", relevant=ok
                )
            )
        else:
            verdicts.append(Verdict(variant, False, f"{variant} wheels are for Intel GPUs", relevant=False))
    return verdicts


def pick_variant(verdicts: list[Verdict], target: str) -> Verdict | None:
    ok = [v for v in verdicts if v.ok]
    if not ok:
        return None
    if target == "nvidia":
        return max(ok, key=_rank_cuda)
    if target == "amd":
        return max(ok, key=lambda v: rocm_of(v.variant) or Version("0"))
    return ok[0]


def summarise(verdicts: list[Verdict]) -> str:
    """One line: the relevant variants, those with the same reason named together."""
    by_reason: dict[str, list[str]] = {}
    for v in verdicts:
        if v.relevant and v.variant != "cpu":
            by_reason.setdefault(v.reason if not v.ok else "runs (secondary sources only)", []).append(v.variant)
    if not by_reason:
        return "no variant for this kind of GPU"
    return "; ".join(f"{', '.join(names)}: {reason}" for reason, names in by_reason.items())
