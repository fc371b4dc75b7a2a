"""What the torch build advice rests on: the GPUs, driver and Python of the target machine.

Read from the facts (a snapshot or a fixture root gives the answer for that machine), then
replaced by what the user says about the target (``fix --torch --driver-version ...``): see
:class:`Overrides`. Every value from the facts or the command line is checked before use; one that
does not fit is treated as unknown (with a note) or refused (TorchAdviceError).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from packaging.version import Version

from ..facts import Unavailable
from ..inputs import shown_excerpt
from ..lazy_re import LazyPattern

# Each pattern is used with fullmatch (``$`` would let a trailing newline through), names ASCII
# digits (``\d`` also takes other scripts' digits, which int() accepts and Version() does not) and
# bounds lengths (int() refuses more than 4300 digits): a version string from the facts or the
# command line that does not fit is treated as unknown or refused, never parsed further.
CC_RE = LazyPattern(r"[0-9]{1,3}\.[0-9]{1,3}")
_GFX_RE = LazyPattern(r"gfx[0-9a-f]{3,5}")
_PY_RE = LazyPattern(r"([0-9])\.([0-9]{1,3})(?:\.[0-9]{1,4})?(?:(?:a|b|rc)[0-9]{1,4})?\+?")  # 3.12, 3.13.0rc1
_DRIVER_RE = LazyPattern(r"[0-9]{1,5}(?:\.[0-9]{1,8}){0,3}")  # NVIDIA: 570.124.06, 580.65; in facts
_CLI_DRIVER_RE = LazyPattern(r"[0-9]{3}(?:\.[0-9]{1,8}){0,2}")  # --driver-version


class TorchAdviceError(ValueError):
    """Bad input for the advice (an unknown torch release, a malformed override)."""


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


def known(value: Any) -> Any:
    return None if isinstance(value, Unavailable) else value


def _section(facts: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    value = facts.get(name)
    return value if isinstance(value, Mapping) else {}


def _python_minor(text: str) -> str | None:
    m = _PY_RE.fullmatch(text.strip())
    return f"{m.group(1)}.{m.group(2)}" if m else None


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


def _cc_of_architecture(subject: Mapping[str, Any], chosen: dict[str, str]) -> str | None:
    """The compute capability a GPU NVML does not list is judged at: the lowest of the architecture
    its PCI device id names, where all of that architecture's capabilities share one major version
    (SASS of X.Y runs on X.Z for Z >= Y, so a build that has the lowest has one for each); None for
    an architecture that spans majors (Blackwell: 10.x and 12.x) or is not in the tables."""
    from ..tables import architecture_of_device, builtin_tables

    pci = subject.get("pci")
    device = pci.get("device_id") if isinstance(pci, Mapping) else None
    if not isinstance(device, str):
        return None
    tables = builtin_tables()
    arch = architecture_of_device(tables, device)
    row = tables.get("gpu_architectures", {}).get("rows", {}).get(arch or "")
    ccs = [c for c in (row or {}).get("compute_capabilities") or [] if isinstance(c, str) and CC_RE.fullmatch(c)]
    if arch is None or not ccs or len({c.split(".")[0] for c in ccs}) != 1:
        return None
    lowest = min(ccs, key=lambda c: tuple(int(p) for p in c.split(".")))
    chosen[arch] = lowest
    return lowest


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
    from_arch: dict[str, str] = {}  # architecture -> the compute capability it is judged at
    for s in subjects:
        vendor = s.get("vendor")
        if vendor == "nvidia":
            cc = known(s.get("compute_capability"))
            name = known(s.get("name"))
            good = isinstance(cc, str) and CC_RE.fullmatch(cc) is not None
            if isinstance(cc, str) and not good:
                malformed.append(f"{s.get('label')}: {shown_excerpt(cc)}")
            if cc is None and not o.compute_capabilities:
                cc = _cc_of_architecture(s, from_arch)
                good = cc is not None
            nvidia.append(
                {
                    "label": str(s.get("label")),
                    "name": name if isinstance(name, str) else "NVIDIA GPU",
                    "cc": cc if good else None,
                }
            )
        elif vendor == "amd":
            amd += 1
    for arch, cc in sorted(from_arch.items()):
        notes.append(
            f"NVML gives no compute capability for the {arch} GPU(s) (NVML status {status}): it is taken as "
            f"{cc}, the lowest of {arch} (from the PCI device id); a build with kernels for it runs on every "
            f"{arch} GPU of that major version. Pass --compute-capability X.Y to be exact"
        )
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
    odd = [
        shown_excerpt(g if isinstance(g, str) else repr(g))
        for g in gfx_list
        if not (isinstance(g, str) and _GFX_RE.fullmatch(g))
    ]
    if odd:
        notes.append(
            f"rocm.gfx_targets holds {len(odd)} value(s) that are no gfx target ({', '.join(odd[:3])}): ignored"
        )
    if amd and not amd_gfx and not o.gpu_archs and not o.no_gpu:
        notes.append(
            f"{amd} AMD GPU(s) on the PCI bus but no gfx target is known ({_why_unavailable(gfx_raw)}); "
            "pass --gpu-arch gfxNNN (rocminfo | grep gfx)"
        )

    # The driver version: NVML's, else the loaded kernel module's, else (no module loaded: it
    # refused the GPUs or was never built for this kernel) the installed one's, on disk or of the
    # user-space library. One that is not a version number (a hostile or corrupt snapshot) counts
    # as unknown, with a note saying so.
    modules = _section(facts, "modules")
    sources = (
        (nvml.get("driver_version"), "nvml.driver_version", "", "NVML's"),
        (modules.get("nvidia_version"), "modules.nvidia_version", "kernel module", "the kernel module's"),
        (
            _section(facts, "kernel_modules").get("nvidia_installed_version"),
            "kernel_modules.nvidia_installed_version",
            "the module on disk, none loaded",
            "the module on disk's",
        ),
        (
            modules.get("nvml_library_version"),
            "modules.nvml_library_version",
            "libnvidia-ml, no module loaded",
            "libnvidia-ml's",
        ),
    )
    driver: str | None = None
    driver_source = "unknown"
    driver_unknown_why = "NVML did not answer and no nvidia kernel module is loaded"
    bad_driver: list[str] = []
    # the installed versions stand in only for a module that is not loaded: a loaded one that
    # reports garbage leaves the driver unknown
    loaded = modules.get("nvidia_loaded") is True
    for raw, path, what, whose in sources[:2] if loaded else sources:
        raw = known(raw)
        if driver is not None or not isinstance(raw, str):
            continue
        driver = driver_version(raw)
        if not what:
            driver_source = path
        else:
            why = "nvml.driver_version is not a version" if bad_driver else "NVML did not answer"
            driver_source = f"{path} ({what}; {why})"
        if driver is None:
            bad_driver.append(f"{path} {shown_excerpt(raw)}")
        elif bad_driver:
            notes.append(f"{bad_driver[0]} is not a version number: {whose} {driver} is used instead")
    if driver is None:
        driver_source = "unknown"
        if bad_driver:
            driver_unknown_why = "; ".join(f"{bad} is not a version number" for bad in bad_driver)
    host = _section(facts, "host")
    py_raw = known(host.get("python_version"))
    python = _python_minor(py_raw) if isinstance(py_raw, str) else None
    python_source = "host.python_version" if python else "unknown"
    python_why = _why_unavailable(host.get("python_version"))
    if isinstance(py_raw, str) and python is None:
        python_why = f"host.python_version {shown_excerpt(py_raw)} is not a Python version"
    exe = known(host.get("python_executable"))
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
    if not CC_RE.fullmatch(value):
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


def public_version(text: Any) -> Version | None:
    """The public part of a torch or torch_npu version ("2.15.0+cu130" -> 2.15.0, "2.5.1.post3"
    -> 2.5.1, "2.4" -> 2.4); None when it is not one."""
    if not isinstance(text, str):
        return None
    m = re.fullmatch(r"([0-9]{1,3}\.[0-9]{1,3}(?:\.[0-9]{1,4})?)(?:[+a-z.][0-9A-Za-z.+]{0,40})?", text.strip())
    return Version(m.group(1)) if m else None
