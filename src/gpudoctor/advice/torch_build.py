"""Which torch wheel to install on the machine the facts describe, and the exact command.

Computed from the facts alone (a snapshot or a fixture root gives the answer for that machine)
and from two data tables: rules/data/torch_releases.yaml (each release's wheel variants, Pythons,
arch lists and gfx lists) and rules/data/cuda_driver.yaml (the driver each CUDA release needs).

The choice, for the requested release or else the newest one that has wheels for the target Python:

- NVIDIA: a cuXYZ variant is kept when the driver meets its CUDA major's minor-version-compatibility
  floor and its arch list has code for every GPU (SASS of the same major with an equal or lower
  minor, or PTX at or below the GPU's capability; PTX counts only where the driver fully supports
  that CUDA, since it cannot JIT newer PTX otherwise). Among those, full driver support beats
  minor-version compatibility, then the newest CUDA wins.
- AMD: a rocmX.Y variant whose gfx list holds every GPU's gfx target (exact match); the newest wins.
- No GPU: cpu.
When no release was requested and the newest release has nothing for these GPUs, older releases are
tried newest first (a Pascal card or an old driver gets the newest torch that still runs on it);
when nothing fits, the answer is cpu with the reason, and ``working`` is False.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from packaging.version import Version

from ..facts import Unavailable
from .fix_list import shell_command, shell_comment

INDEX_BASE = "https://download.pytorch.org/whl"

# Each pattern is used with fullmatch (``$`` would let a trailing newline through), names ASCII
# digits (``\d`` also takes other scripts' digits, which int() accepts and Version() does not) and
# bounds lengths (int() refuses more than 4300 digits): a version string from the facts or the
# command line that does not fit is treated as unknown or refused, never parsed further.
_CC_RE = re.compile(r"[0-9]{1,3}\.[0-9]{1,3}")
_GFX_RE = re.compile(r"gfx[0-9a-f]{3,5}")
_PY_RE = re.compile(r"([0-9])\.([0-9]{1,3})(?:\.[0-9]{1,4})?(?:(?:a|b|rc)[0-9]{1,4})?\+?")  # 3.12, 3.13.0rc1
_TORCH_RE = re.compile(r"([0-9]{1,3})\.([0-9]{1,3})(?:\.([0-9]{1,3}))?")
_DRIVER_RE = re.compile(r"[0-9]{1,5}(?:\.[0-9]{1,8}){0,3}")  # NVIDIA: 570.124.06, 580.65; in facts
_CLI_DRIVER_RE = re.compile(r"[0-9]{3}(?:\.[0-9]{1,8}){0,2}")  # --driver-version
_ARCH_RE = re.compile(r"(?:sm|compute)_[0-9]{2,4}[a-z]?")


class TorchAdviceError(ValueError):
    """Bad input for the advice (an unknown torch release, a malformed override)."""


# ---------------------------------------------------------------------------- inputs


@dataclass
class Overrides:
    """What the user says about the target machine, replacing what was probed."""

    driver_version: str | None = None
    compute_capabilities: Sequence[str] = ()
    gpu_archs: Sequence[str] = ()
    no_gpu: bool = False
    torch_version: str | None = None
    python_version: str | None = None


@dataclass
class Inputs:
    """The facts the choice rests on, each with where it came from."""

    nvidia_gpus: list[dict[str, Any]]  # {"label", "name", "cc"}; cc None when unknown
    amd_gpus: int
    amd_gfx: list[str]
    driver: str | None
    driver_source: str
    python: str | None
    python_source: str
    python_executable: str | None
    installed: dict[str, Any]
    notes: list[str] = field(default_factory=list)

    @property
    def ccs(self) -> list[str]:
        return [g["cc"] for g in self.nvidia_gpus if g["cc"]]

    @property
    def cc_unknown(self) -> bool:
        return any(not g["cc"] for g in self.nvidia_gpus)

    def to_json(self) -> dict[str, Any]:
        return {
            "nvidia_gpus": self.nvidia_gpus,
            "amd_gpus": self.amd_gpus,
            "amd_gfx": self.amd_gfx,
            "driver": self.driver,
            "driver_source": self.driver_source,
            "python": self.python,
            "python_source": self.python_source,
            "python_executable": self.python_executable,
            "notes": self.notes,
        }


def _known(value: Any) -> Any:
    return None if isinstance(value, Unavailable) else value


def _section(facts: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    value = facts.get(name)
    return value if isinstance(value, Mapping) else {}


def _python_minor(text: str) -> str | None:
    m = _PY_RE.fullmatch(text.strip())
    return f"{m.group(1)}.{m.group(2)}" if m else None


def shown(value: Any, limit: int = 60) -> str:
    """A value from the facts for a message: repr (control characters escaped), cut short when long."""
    text = repr(value)
    if len(text) <= limit:
        return text
    size = f" ({len(value)} characters)" if isinstance(value, str) else ""
    return text[: limit - 1] + "…" + size


def driver_version(value: Any) -> str | None:
    """An NVIDIA driver version from the facts, whitespace trimmed; None unless it is one
    (digits and dots: 570.124.06), so that no Version() or int() call on it can fail."""
    if not isinstance(value, str):
        return None
    text = value.strip()
    return text if _DRIVER_RE.fullmatch(text) else None


def _why_unavailable(value: Any) -> str:
    if isinstance(value, Unavailable):
        return f"{value.reason}{': ' + value.detail if value.detail else ''}"
    return "not recorded"


def gather_inputs(facts: Mapping[str, Any], overrides: Overrides | None = None) -> Inputs:
    """Read GPUs, driver, Python and the installed torch from the facts, then apply the overrides."""
    from ..engine.subjects import gpu_subjects

    o = overrides or Overrides()
    notes: list[str] = []
    nvml = _section(facts, "nvml")
    status = str(nvml.get("status", "unknown"))
    subjects = gpu_subjects(facts)
    nvidia: list[dict[str, Any]] = []
    amd = 0
    malformed: list[str] = []
    for s in subjects:
        vendor = s.get("vendor")
        if vendor == "nvidia":
            cc = _known(s.get("compute_capability"))
            name = _known(s.get("name"))
            good = isinstance(cc, str) and _CC_RE.fullmatch(cc) is not None
            if isinstance(cc, str) and not good:
                malformed.append(f"{s.get('label')}: {shown(cc)}")
            nvidia.append(
                {
                    "label": str(s.get("label")),
                    "name": name if isinstance(name, str) else "NVIDIA GPU",
                    "cc": cc if good else None,
                }
            )
        elif vendor == "amd":
            amd += 1
    if nvidia and not o.compute_capabilities and not o.no_gpu:
        if malformed:
            notes.append(
                f"NVML reported compute capabilities that are not MAJOR.MINOR ({'; '.join(malformed)}): treated "
                "as unknown; pass --compute-capability X.Y (one per GPU)"
            )
        if len(malformed) < sum(1 for g in nvidia if g["cc"] is None):
            error = str(nvml.get("error", "")).strip()
            notes.append(
                f"NVML is not answering ({status}{': ' + error if error else ''}): the compute capability of "
                f"{sum(1 for g in nvidia if g['cc'] is None) - len(malformed)} NVIDIA GPU(s) is unknown, so no "
                "wheel's arch list can be checked against them; pass --compute-capability X.Y (one per GPU, see "
                "https://developer.nvidia.com/cuda-gpus)"
            )

    rocm = _section(facts, "rocm")
    gfx_raw = rocm.get("gfx_targets")
    gfx_list = gfx_raw if isinstance(gfx_raw, list) else []
    amd_gfx = sorted({g for g in gfx_list if isinstance(g, str) and _GFX_RE.fullmatch(g)})
    odd = [shown(g) for g in gfx_list if not (isinstance(g, str) and _GFX_RE.fullmatch(g))]
    if odd:
        notes.append(
            f"rocm.gfx_targets holds {len(odd)} value(s) that are no gfx target ({', '.join(odd[:3])}): ignored"
        )
    if amd and not amd_gfx and not o.gpu_archs and not o.no_gpu:
        notes.append(
            f"{amd} AMD GPU(s) on the PCI bus but no gfx target is known ({_why_unavailable(gfx_raw)}); "
            "pass --gpu-arch gfxNNN (rocminfo | grep gfx)"
        )

    # The driver version: NVML's, else the kernel module's; one that is not a version number
    # (a hostile or corrupt snapshot) counts as unknown, with a note saying so.
    driver: str | None = None
    driver_source = "unknown"
    driver_unknown_why = "NVML did not answer and no nvidia kernel module is loaded"
    bad_driver: list[str] = []
    raw_nvml = _known(nvml.get("driver_version"))
    raw_module = _known(_section(facts, "modules").get("nvidia_version"))
    if isinstance(raw_nvml, str):
        driver = driver_version(raw_nvml)
        driver_source = "nvml.driver_version"
        if driver is None:
            bad_driver.append(f"nvml.driver_version {shown(raw_nvml)}")
    if driver is None and isinstance(raw_module, str):
        driver = driver_version(raw_module)
        why_module = "nvml.driver_version is not a version" if bad_driver else "NVML did not answer"
        driver_source = f"modules.nvidia_version (kernel module; {why_module})"
        if driver is None:
            bad_driver.append(f"modules.nvidia_version {shown(raw_module)}")
    if driver is None:
        driver_source = "unknown"
        if bad_driver:
            driver_unknown_why = "; ".join(f"{bad} is not a version number" for bad in bad_driver)
    elif bad_driver:
        notes.append(f"{bad_driver[0]} is not a version number: the kernel module's {driver} is used instead")
    host = _section(facts, "host")
    py_raw = _known(host.get("python_version"))
    python = _python_minor(py_raw) if isinstance(py_raw, str) else None
    python_source = "host.python_version" if python else "unknown"
    python_why = _why_unavailable(host.get("python_version"))
    if isinstance(py_raw, str) and python is None:
        python_why = f"host.python_version {shown(py_raw)} is not a Python version"
    exe = _known(host.get("python_executable"))
    torch = facts.get("torch")
    installed = dict(torch) if isinstance(torch, Mapping) else {}

    # Overrides describe another machine (or correct this one); each replaces the probed value.
    if o.no_gpu:
        nvidia, amd, amd_gfx = [], 0, []
        notes = []
    if o.compute_capabilities:
        ccs = [_check_cc(cc) for cc in o.compute_capabilities]
        nvidia = [
            {"label": f"GPU {i} (--compute-capability)", "name": "NVIDIA GPU", "cc": cc} for i, cc in enumerate(ccs)
        ]
        notes = [n for n in notes if not n.startswith("NVML")]
    if o.gpu_archs:
        amd_gfx = sorted({_check_gfx(g) for g in o.gpu_archs})
        amd = max(amd, len(amd_gfx))
        notes = [n for n in notes if "AMD GPU(s)" not in n]
    if o.driver_version:
        driver, driver_source = _check_driver(o.driver_version), "--driver-version"
    if o.python_version:
        checked = _python_minor(o.python_version)
        if not checked:
            raise TorchAdviceError(f"--python-version {o.python_version!r}: expected X.Y, e.g. 3.12")
        python, python_source = checked, "--python-version"
    if python is None:
        notes.append(
            f"the target Python is unknown ({python_why}): "
            "releases are not filtered by Python; pass --python-version X.Y"
        )
    if nvidia and driver is None and not o.no_gpu:
        notes.append(
            f"the NVIDIA driver version is unknown ({driver_unknown_why}): "
            "wheels are not filtered by driver; each choice says which driver it needs (or pass --driver-version)"
        )
    return Inputs(
        nvidia_gpus=nvidia,
        amd_gpus=amd,
        amd_gfx=amd_gfx,
        driver=driver,
        driver_source=driver_source,
        python=python,
        python_source=python_source,
        python_executable=exe if isinstance(exe, str) else None,
        installed=installed,
        notes=notes,
    )


def _check_cc(text: str) -> str:
    value = text.strip()
    if not _CC_RE.fullmatch(value):
        raise TorchAdviceError(f"--compute-capability {text!r}: expected MAJOR.MINOR, e.g. 8.6")
    return value


def _check_gfx(text: str) -> str:
    value = text.strip().lower()
    if not _GFX_RE.fullmatch(value):
        raise TorchAdviceError(f"--gpu-arch {text!r}: expected a gfx target such as gfx942")
    return value


def _check_driver(text: str) -> str:
    value = text.strip()
    if not _CLI_DRIVER_RE.fullmatch(value):
        raise TorchAdviceError(f"--driver-version {text!r}: expected an NVIDIA driver version such as 570.124.06")
    return value


# ---------------------------------------------------------------------------- tables


def load_tables() -> tuple[dict[str, Any], dict[str, Any]]:
    """(torch_releases rows, cuda_driver rows) of the built-in data tables."""
    from ..tables import builtin_rules_dir
    from ..tables import load_tables as load

    tables = load(builtin_rules_dir() / "data")
    return tables["torch_releases"]["rows"], tables["cuda_driver"]["rows"]


def parse_arch_list(text: str) -> list[str]:
    """TORCH_CUDA_ARCH_LIST notation to arch names: "8.6;9.0+PTX" → [sm_86, sm_90, compute_90]."""
    out: list[str] = []
    for part in str(text).replace(" ", ";").split(";"):
        part = part.strip()
        if not part:
            continue
        ptx = part.endswith("+PTX")
        base = part[: -len("+PTX")] if ptx else part
        if not _CC_RE.fullmatch(base):
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


def _sm(cc: str) -> str:
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
    archs = parse_arch_list(str(spec.get("arch", "")))
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
                uncovered.append(f"{_sm(cc)} (only PTX, which a driver below {full} cannot JIT-compile)")
            else:
                via_ptx.append(_sm(cc))
            continue
        uncovered.append(_sm(cc))
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


# ---------------------------------------------------------------------------- recommendation


@dataclass
class Recommendation:
    inputs: Inputs
    target: str  # "nvidia" | "amd" | "cpu"
    release: str | None  # table key "2.14"
    torch_version: str | None  # the pin, "2.14.1"
    variant: str | None
    working: bool  # a build that uses the GPUs was found (or the machine has none)
    why: list[str] = field(default_factory=list)
    verdicts: list[Verdict] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # newer releases passed over, and why
    warnings: list[str] = field(default_factory=list)
    torchvision: str | None = None
    torchaudio: str | None = None
    installed: str = ""
    installed_ok: bool | None = None
    upgrade_hint: str = ""

    @property
    def index_url(self) -> str | None:
        return f"{INDEX_BASE}/{self.variant}" if self.variant else None

    @property
    def exit_code(self) -> int:
        return 0 if self.working else 1

    def packages(self) -> list[str]:
        if not self.torch_version:
            return []
        out = [f"torch=={self.torch_version}"]
        if self.torchvision:
            out.append(f"torchvision=={self.torchvision}")
        if self.torchaudio:
            out.append(f"torchaudio=={self.torchaudio}")
        return out

    def argvs(self) -> dict[str, list[str]]:
        """The install commands as words (pip, uv, uv_backend); empty when no build was chosen."""
        if not self.variant or not self.torch_version:
            return {}
        pkgs = self.packages()
        return {
            "pip": ["pip", "install", *pkgs, "--index-url", str(self.index_url)],
            "uv": ["uv", "pip", "install", *pkgs, "--index-url", str(self.index_url)],
            "uv_backend": ["uv", "pip", "install", *pkgs, f"--torch-backend={self.variant}"],
        }

    def commands(self) -> dict[str, str]:
        return {name: shlex.join(argv) for name, argv in self.argvs().items()}

    def to_json(self) -> dict[str, Any]:
        return {
            "format": 1,
            "target": self.target,
            "working": self.working,
            "release": self.release,
            "torch_version": self.torch_version,
            "variant": self.variant,
            "index_url": self.index_url,
            "packages": self.packages(),
            "torchvision": self.torchvision,
            "torchaudio": self.torchaudio,
            "commands": self.commands(),
            "why": self.why,
            "other_variants": [v.to_json() for v in self.verdicts if v.variant != self.variant],
            "skipped_releases": [{"release": r, "why": w} for r, w in self.skipped],
            "warnings": self.warnings,
            "upgrade_hint": self.upgrade_hint,
            "installed": {"verdict": self.installed, "ok": self.installed_ok},
            "inputs": self.inputs.to_json(),
            "exit_code": self.exit_code,
        }


def _sorted_releases(rows: Mapping[str, Any]) -> list[str]:
    return sorted(rows, key=lambda k: Version(k), reverse=True)


def _python_fit(row: Mapping[str, Any], python: str | None) -> str | None:
    """'stable', 'experimental' or None (no wheel for this Python)."""
    if python is None:
        return "stable"
    if python in row.get("python", []):
        return "stable"
    if python in (row.get("python_experimental") or []):
        return "experimental"
    return None


def _judge_release(row: Mapping[str, Any], target: str, inputs: Inputs, cuda_rows: Mapping[str, Any]) -> list[Verdict]:
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


def _pick(verdicts: list[Verdict], target: str) -> Verdict | None:
    ok = [v for v in verdicts if v.ok]
    if not ok:
        return None
    if target == "nvidia":
        return max(ok, key=_rank_cuda)
    if target == "amd":
        return max(ok, key=lambda v: rocm_of(v.variant) or Version("0"))
    return ok[0]


def _summary(verdicts: list[Verdict]) -> str:
    """One line: the relevant variants, those with the same reason named together."""
    by_reason: dict[str, list[str]] = {}
    for v in verdicts:
        if v.relevant and v.variant != "cpu":
            by_reason.setdefault(v.reason if not v.ok else "runs (secondary sources only)", []).append(v.variant)
    if not by_reason:
        return "no variant for this kind of GPU"
    return "; ".join(f"{', '.join(names)}: {reason}" for reason, names in by_reason.items())


def recommend(
    facts: Mapping[str, Any],
    overrides: Overrides | None = None,
    tables: tuple[Mapping[str, Any], Mapping[str, Any]] | None = None,
) -> Recommendation:
    """The torch build for the machine the facts describe (see the module docstring)."""
    o = overrides or Overrides()
    releases, cuda_rows = tables if tables is not None else load_tables()
    inputs = gather_inputs(facts, o)
    if inputs.nvidia_gpus:
        target = "nvidia"
    elif inputs.amd_gpus or inputs.amd_gfx:
        target = "amd"
    else:
        target = "cpu"
    rec = Recommendation(inputs=inputs, target=target, release=None, torch_version=None, variant=None, working=False)
    if target == "nvidia" and inputs.amd_gpus:
        rec.warnings.append(f"{inputs.amd_gpus} AMD GPU(s) are present too; this advice is for the NVIDIA GPUs")

    requested_patch: str | None = None
    if o.torch_version:
        key = release_key(o.torch_version)
        if key not in releases:
            known = ", ".join(_sorted_releases(releases)[::-1])
            raise TorchAdviceError(
                f"--torch-version {o.torch_version}: torch {key} is not in the release table ({known})"
            )
        candidates = [key]
        if o.torch_version.strip().count(".") == 2:
            requested_patch = o.torch_version.strip()
    else:
        candidates = _sorted_releases(releases)

    fitting = [k for k in candidates if _python_fit(releases[k], inputs.python)]
    if not fitting:
        rel = candidates[0]
        pys = ", ".join(releases[rel].get("python", []))
        if o.torch_version:
            rec.why.append(f"torch {rel} has no wheel for Python {inputs.python} (it has {pys})")
        else:
            rec.why.append(f"no torch release in the table has a wheel for Python {inputs.python}")
        rec.release = rel
        rec.verdicts = _judge_release(releases[rel], target, inputs, cuda_rows)
        _compare_installed(rec, cuda_rows)
        return rec
    if o.torch_version is None and inputs.python and fitting[0] != candidates[0]:
        rec.skipped.append(
            (
                candidates[0],
                f"no wheel for Python {inputs.python} "
                f"(torch {candidates[0]} has {', '.join(releases[candidates[0]].get('python', []))})",
            )
        )

    # Newest first; a release whose only fitting variant is known from secondary sources is noted
    # and passed over for one that is verified, unless nothing verified fits at all.
    chosen_release: str | None = None
    chosen: Verdict | None = None
    lead_fallback: tuple[str, Verdict, list[Verdict]] | None = None
    lead_skips: list[tuple[str, str]] = []
    for key in fitting:
        verdicts = _judge_release(releases[key], target, inputs, cuda_rows)
        pick = _pick(verdicts, target)
        if pick is not None and not pick.lead:
            chosen_release, chosen = key, pick
            rec.verdicts = verdicts
            break
        lead_pick = pick
        if lead_pick is not None:
            if lead_fallback is None:
                lead_fallback = (key, lead_pick, verdicts)
            lead_skips.append((key, f"{lead_pick.variant} would fit, but it is known from secondary sources only"))
            rec.skipped.append(lead_skips[-1])
            continue
        rec.skipped.append((key, _summary(verdicts)))
    if chosen is None and lead_fallback is not None:
        chosen_release, chosen, rec.verdicts = lead_fallback
        rec.skipped = rec.skipped[: [k for k, _ in rec.skipped].index(chosen_release)]
    elif chosen is not None and lead_fallback is not None:
        lead_key, lead_pick, _ = lead_fallback
        rec.warnings.append(
            f"torch {releases[lead_key].get('latest')} probably has a fitting {lead_pick.variant} build too "
            f"(secondary sources only): pip install torch=={releases[lead_key].get('latest')} "
            f"--index-url {INDEX_BASE}/{lead_pick.variant}"
        )

    if chosen is None or chosen_release is None:
        # Nothing uses the GPUs: the CPU build of the newest fitting release, with why.
        key = fitting[0]
        rec.release, rec.variant = key, "cpu"
        rec.verdicts = _judge_release(releases[key], target, inputs, cuda_rows)
        rec.working = target == "cpu"
        where = f"torch {key}" if o.torch_version else "any torch release in the table"
        rec.why.append(f"no GPU build of {where} runs on this machine; the CPU build is the only one that installs")
        rec.skipped = [s for s in rec.skipped if s[0] != key]
        rec.warnings.extend(inputs.notes)
        _fill_release(rec, releases[key], requested_patch)
        _upgrade_hint(rec, releases, fitting, cuda_rows)
        _compare_installed(rec, cuda_rows)
        return rec

    row = releases[chosen_release]
    rec.release, rec.variant, rec.working = chosen_release, chosen.variant, True
    _fill_release(rec, row, requested_patch)
    py_fit = _python_fit(row, inputs.python)
    newest_note = (
        "the requested release"
        if o.torch_version
        else (
            "the newest release"
            if chosen_release == candidates[0]
            else f"the newest release that runs here ({len(rec.skipped)} newer skipped)"
        )
    )
    rec.why.append(
        f"torch {rec.torch_version}: {newest_note}"
        + (f" with wheels for Python {inputs.python}" if inputs.python else "")
    )
    if target == "nvidia":
        cover = ", ".join(sorted({_sm(c) for c in inputs.ccs})) or "the GPUs"
        rec.why.append(f"{chosen.variant}: kernels for {cover}; {chosen.reason}")
        if chosen.full_support is False:
            rec.warnings.append(
                "no variant of this release is fully supported by the driver: it runs through minor-version "
                "compatibility (some newer CUDA APIs and PTX JIT fail); upgrading the driver lifts that"
            )
        if inputs.cc_unknown:
            rec.warnings.append("the arch list was not checked for every GPU (compute capability unknown)")
        if inputs.driver is None:
            rec.warnings.append(f"driver unknown: {chosen.variant} needs an NVIDIA driver ≥ {chosen.need_driver}")
    elif target == "amd":
        rec.why.append(f"{chosen.variant}: {chosen.reason}")
    else:
        rec.why.append("no GPU found: the CPU build")
    if chosen.lead:
        rec.warnings.append(
            f"{chosen.variant} of torch {chosen_release} is known from secondary sources only "
            "(see rules/data/torch_releases.yaml)"
        )
    if py_fit == "experimental":
        rec.warnings.append(
            f"Python {inputs.python} wheels of torch {chosen_release} are experimental (PyTorch index only)"
        )
    rec.warnings.extend(inputs.notes)
    _upgrade_hint(rec, releases, fitting, cuda_rows)
    _compare_installed(rec, cuda_rows)
    return rec


def _fill_release(rec: Recommendation, row: Mapping[str, Any], requested_patch: str | None) -> None:
    rec.torch_version = requested_patch or str(row.get("latest"))
    if requested_patch and requested_patch != row.get("latest"):
        # Companion pins are recorded for the latest patch only.
        rec.torchvision = rec.torchaudio = None
        rec.warnings.append(
            f"torchvision/torchaudio pins are known for torch {row.get('latest')} only; "
            f"pick the ones matching {requested_patch}"
        )
        return
    tv, ta = row.get("torchvision"), row.get("torchaudio")
    rec.torchvision = str(tv) if tv else None
    rec.torchaudio = str(ta) if ta else None
    if not tv:
        rec.warnings.append(f"no torchvision release pairs with torch {rec.torch_version} in the table")
    if not ta:
        rec.warnings.append(
            f"torchaudio has no release for torch {rec.torch_version} (its last, 2.11.1, needs torch ≥ 2.11); left out"
        )


def _upgrade_hint(
    rec: Recommendation, releases: Mapping[str, Any], fitting: list[str], cuda_rows: Mapping[str, Any]
) -> None:
    """For NVIDIA: the driver the newest fitting release needs, where this host's is too old for it."""
    if rec.target != "nvidia" or not fitting or rec.inputs.driver is None:
        return
    newest = fitting[0]
    drv = Version(rec.inputs.driver)
    no_driver = Inputs(**{**rec.inputs.__dict__, "driver": None, "notes": []})
    options: list[tuple[Version, str, str]] = []
    for v in _judge_release(releases[newest], "nvidia", no_driver, cuda_rows):
        if v.ok:
            row = cuda_rows.get(cuda_of(v.variant) or "", {})
            need = row.get("min_driver") or row.get("mvc_floor")
            if need:
                options.append((Version(str(need)), str(need), v.variant))
    latest = releases[newest].get("latest")
    if not options:
        rec.upgrade_hint = f"no variant of torch {latest} has kernels for these GPUs, whatever the driver"
        return
    need_v, need, variant = min(options)
    if drv < need_v:
        rec.upgrade_hint = (
            f"torch {latest} ({variant}) needs an NVIDIA driver ≥ {need} for full support; "
            f"this host has {rec.inputs.driver}"
        )
        return
    chosen = next((v for v in rec.verdicts if v.variant == rec.variant), None)
    if chosen is not None and chosen.ok and chosen.full_support is False:
        full = cuda_rows.get(cuda_of(chosen.variant) or "", {}).get("min_driver")
        rec.upgrade_hint = (
            f"{chosen.variant} is fully supported from driver {full} on; this host has {rec.inputs.driver}"
        )


def _arch_names(value: Any) -> list[str] | None:
    """The arch names (sm_90, compute_90, sm_100a) of the installed torch's arch list; None when
    the list is unknown or holds something else (which helpers.arch_supported would choke on)."""
    if not isinstance(value, list) or not value:
        return None
    names = [a.strip() for a in value if isinstance(a, str)]
    if len(names) != len(value) or not all(_ARCH_RE.fullmatch(a) for a in names):
        return None
    return names


def _compare_installed(rec: Recommendation, cuda_rows: Mapping[str, Any]) -> None:
    t = rec.inputs.installed
    where = f" in {rec.inputs.python_executable}" if rec.inputs.python_executable else ""
    if not t:
        rec.installed = "the installed torch is unknown (no torch section in the facts)"
        return
    if t.get("installed") is not True:
        rec.installed = f"torch is not installed{where}"
        return
    version = _known(t.get("version")) or "?"
    build = _known(t.get("build"))
    install = rec.commands().get("pip", "")
    target = rec.target
    problem = ""
    if target == "nvidia":
        if build != "cuda":
            problem = f"torch {version} is a {build or 'non-CUDA'} build: it cannot use the NVIDIA GPUs"
        else:
            cuda = _known(t.get("cuda_version"))
            key = ".".join(str(cuda).split(".")[:2]) if isinstance(cuda, str) else None
            row = cuda_rows.get(key) if key else None
            if isinstance(row, Mapping) and rec.inputs.driver is not None:
                floor = str(row.get("mvc_floor"))
                if Version(rec.inputs.driver) < Version(floor):
                    problem = f"torch {version} needs driver ≥ {floor}; this host has {rec.inputs.driver}"
            archs = _arch_names(_known(t.get("arch_list")))
            if not problem and archs:
                from ..engine.helpers.versions import arch_supported

                lacking = sorted({_sm(c) for c in rec.inputs.ccs if not arch_supported(archs, c)})
                if lacking:
                    problem = f"torch {version} has no kernels for {', '.join(lacking)} (built for {', '.join(archs)})"
    elif target == "amd":
        if build != "rocm":
            problem = f"torch {version} is a {build or 'non-ROCm'} build: it cannot use the AMD GPUs"
        else:
            archs = _known(t.get("arch_list"))
            if isinstance(archs, list) and rec.inputs.amd_gfx:
                lacking = [g for g in rec.inputs.amd_gfx if g not in archs]
                if lacking:
                    problem = f"torch {version} has no code for {', '.join(lacking)}"
    if problem:
        rec.installed_ok = False
        rec.installed = problem + (f"; install: {install}" if install and rec.working else "")
        return
    rec.installed_ok = True
    local = str(version).split("+", 1)
    same_variant = len(local) == 2 and local[1] == rec.variant
    if str(version).split("+", 1)[0] == rec.torch_version and (
        same_variant or rec.variant == "cpu" and len(local) == 1
    ):
        rec.installed = f"the installed build is right: torch {version}{where}"
    elif target == "cpu":
        rec.installed = f"torch {version}{where} works here (no GPU to use)"
    else:
        newer = f"; torch {rec.torch_version} ({rec.variant}) is newer" if rec.torch_version else ""
        rec.installed = (
            f"the installed build works here: torch {version}{where} runs on this driver "
            f"and has kernels for these GPUs{newer}"
        )


# ---------------------------------------------------------------------------- rendering (formatting only)


def render_text(rec: Recommendation, origin: str = "") -> str:
    i = rec.inputs
    lines = [f"Torch build{' for ' + origin if origin else ''}"]
    if i.nvidia_gpus:
        groups: dict[str, int] = {}
        for g in i.nvidia_gpus:
            label = f"{g['name']} ({_sm(g['cc']) if g['cc'] else 'compute capability unknown'})"
            groups[label] = groups.get(label, 0) + 1
        lines.append("  GPUs:    " + ", ".join(f"{n}× {label}" for label, n in groups.items()))
    if i.amd_gpus or i.amd_gfx:
        lines.append(f"  AMD:     {i.amd_gpus} GPU(s), gfx {', '.join(i.amd_gfx) or 'unknown'}")
    if not i.nvidia_gpus and not (i.amd_gpus or i.amd_gfx):
        lines.append("  GPUs:    none")
    if i.nvidia_gpus:
        lines.append(f"  driver:  {i.driver or 'unknown'} ({i.driver_source})")
    where = i.python_executable if i.python_executable and i.python_source == "host.python_version" else i.python_source
    lines.append(f"  Python:  {i.python or 'unknown'} ({where})")
    lines.append("")
    if rec.working and rec.variant:
        kind = {"nvidia": f"CUDA {cuda_of(rec.variant)}", "amd": "ROCm", "cpu": "CPU"}[rec.target]
        lines.append(f"Recommended: torch {rec.torch_version} · {rec.variant} ({kind})")
    else:
        lines.append(f"No GPU build fits: torch {rec.torch_version or '?'} · {rec.variant or 'none'} (CPU only)")
    for w in rec.why:
        lines.append(f"  why: {w}")
    cmds = rec.commands()
    if cmds:
        lines.append("")
        lines.append(f"  {cmds['pip']}")
        lines.append(f"  {cmds['uv']}")
        lines.append(f"  {cmds['uv_backend']}")
    if rec.upgrade_hint:
        lines.append("")
        lines.append(f"  driver: {rec.upgrade_hint}")
    others = [v for v in rec.verdicts if v.variant != rec.variant and v.relevant]
    if others:
        lines.append("")
        lines.append(f"Other variants of torch {rec.release}:")
        width = max(len(v.variant) for v in others)
        for v in others:
            state = "runs, not chosen:" if v.ok else "no:"
            lines.append(f"  {v.variant.ljust(width)}  {state} {v.reason}")
    if rec.skipped:
        lines.append("")
        lines.append("Newer releases passed over:")
        for rel, why in rec.skipped:
            lines.append(f"  torch {rel}: {why}")
    lines.append("")
    lines.append(f"Installed: {rec.installed}")
    for w in rec.warnings:
        lines.append(f"note: {w}")
    return "\n".join(lines) + "\n"


def render_json(rec: Recommendation) -> str:
    return json.dumps(rec.to_json(), indent=2) + "\n"


def render_shell(rec: Recommendation) -> str:
    """Comments (shell_comment: the reasons and notes carry GPU names, driver, Python and NVML
    errors from the facts) and one live line, the pip command, of shell-quoted words (shell_word:
    release, variant and pins come from the data tables or checked options)."""
    lines = ["# gpudoctor fix --torch: review, then run one of the install lines (gpudoctor runs nothing)."]
    for w in rec.why:
        lines.append(shell_comment(w))
    for w in rec.warnings:
        lines.append(shell_comment(f"note: {w}"))
    argvs = rec.argvs()
    if argvs:
        try:
            lines.append(shell_command(argvs["pip"]))
        except ValueError:  # not reachable with the built-in tables; never print a broken command
            lines.append(shell_comment(f"pip: {rec.commands()['pip']}"))
        lines.append(shell_comment(f"or: {rec.commands()['uv']}"))
        lines.append(shell_comment(f"or: {rec.commands()['uv_backend']}"))
    else:
        lines.append("# no install command: no build of torch fits this machine")
    return "\n".join(lines) + "\n"
