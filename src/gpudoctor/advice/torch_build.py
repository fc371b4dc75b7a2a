"""Which torch wheel to install on the machine the facts describe, and the exact command (as argv).

Computed from the facts alone (a snapshot or a fixture root gives the answer for that machine;
torch_inputs reads them) and from two data tables: rules/data/torch_releases.yaml (each release's
wheel variants, Pythons, arch lists and gfx lists) and rules/data/cuda_driver.yaml (the driver
each CUDA release needs). render/torch_build.py writes the answer as text, JSON or a script.

The choice, for the requested release or else the newest one that has wheels for the target Python,
among the variants that run here (torch_variants says when one does):

- NVIDIA: full driver support beats minor-version compatibility, then the newest CUDA wins.
- AMD: the newest ROCm wins.
- No GPU: cpu.
When no release was requested and the newest release has nothing for these GPUs, older releases are
tried newest first (a Pascal card or an old driver gets the newest torch that still runs on it);
when nothing fits, the answer is cpu with the reason, and ``working`` is False.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from typing import Any, Mapping

from packaging.version import Version

from ..lazy_re import LazyPattern
from .torch_ascend import ascend_note, ascend_npus, npu_torch
from .torch_inputs import Inputs, Overrides, TorchAdviceError, gather_inputs, known, public_version
from .torch_variants import (
    Verdict,
    cuda_of,
    judge_release,
    load_release_tables,
    newest_first,
    pick_variant,
    python_fit,
    release_key,
    sm_name,
    summarise,
)

INDEX_BASE = "https://download.pytorch.org/whl"
STALE_DAYS = 90  # older release data gets a note: PyTorch publishes a minor release about every 2-3 months

_ARCH_RE = LazyPattern(r"(?:sm|compute)_[0-9]{2,4}[a-z]?")


# ---------------------------------------------------------------------------- recommendation


@dataclass
class ReleaseData:
    """How old the release table is: the date it was last checked against its sources, and its newest release."""

    retrieved: str | None  # YYYY-MM-DD; None for a table given by the caller without one
    age_days: int | None
    newest: str | None  # the latest patch of the newest release row, "2.15.0"

    def to_json(self) -> dict[str, Any]:
        return {"retrieved": self.retrieved, "age_days": self.age_days, "newest_release": self.newest}


def release_data(releases: Mapping[str, Any], retrieved: str | None, today: datetime.date) -> ReleaseData:
    newest = newest_first(releases)[0] if releases else None
    latest = str(releases[newest].get("latest") or newest) if newest else None
    age: int | None = None
    if retrieved:
        try:
            age = (today - datetime.date.fromisoformat(retrieved)).days
        except ValueError:
            retrieved = None
    return ReleaseData(retrieved, age, latest)


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
    data: ReleaseData = field(default_factory=lambda: ReleaseData(None, None, None))

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


def recommend(
    facts: Mapping[str, Any],
    overrides: Overrides | None = None,
    tables: tuple[Mapping[str, Any], Mapping[str, Any]] | None = None,
    today: datetime.date | None = None,
) -> Recommendation:
    """The torch build for the machine the facts describe (see the module docstring). ``today``
    (default: the UTC date) is what the age of the release data is counted to."""
    o = overrides or Overrides()
    retrieved: str | None = None
    if tables is not None:
        releases, cuda_rows = tables
    else:
        releases, cuda_rows, retrieved = load_release_tables()
    inputs = gather_inputs(facts, o)
    if inputs.nvidia_gpus:
        target = "nvidia"
    elif inputs.amd_gpus or inputs.amd_gfx:
        target = "amd"
    else:
        target = "cpu"
    rec = Recommendation(inputs=inputs, target=target, release=None, torch_version=None, variant=None, working=False)
    rec.data = release_data(releases, retrieved, today or datetime.datetime.now(datetime.timezone.utc).date())
    if rec.data.age_days is not None and rec.data.age_days > STALE_DAYS:
        rec.warnings.append(
            f"the torch release data is {rec.data.age_days} days old (retrieved {rec.data.retrieved}): releases "
            "published since are not known here; scripts/refresh_torch_releases.py in gpudoctor's source refreshes it"
        )
    if target == "nvidia" and inputs.amd_gpus:
        rec.warnings.append(f"{inputs.amd_gpus} AMD GPU(s) are present too; this advice is for the NVIDIA GPUs")
    npus = ascend_npus(facts)
    if target == "cpu" and npus:
        rec.warnings.append(ascend_note(facts, npus))

    requested_patch: str | None = None
    if o.torch_version:
        key = release_key(o.torch_version)
        if key not in releases:
            known = ", ".join(newest_first(releases)[::-1])
            raise TorchAdviceError(
                f"--torch-version {o.torch_version}: torch {key} is not in the release table ({known})"
            )
        candidates = [key]
        if o.torch_version.strip().count(".") == 2:
            requested_patch = o.torch_version.strip()
    else:
        candidates = newest_first(releases)
        npu_release = npu_torch(facts) if target == "cpu" and npus else None
        if npu_release is not None and release_key(npu_release) in releases:
            # torch_npu works with the one torch release it was built for: that release, not the newest
            candidates = [release_key(npu_release)]
            requested_patch = npu_release

    fitting = [k for k in candidates if python_fit(releases[k], inputs.python)]
    if not fitting:
        rel = candidates[0]
        pys = ", ".join(releases[rel].get("python", []))
        if o.torch_version:
            rec.why.append(f"torch {rel} has no wheel for Python {inputs.python} (it has {pys})")
        else:
            rec.why.append(f"no torch release in the table has a wheel for Python {inputs.python}")
        rec.release = rel
        rec.verdicts = judge_release(releases[rel], target, inputs, cuda_rows)
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
        verdicts = judge_release(releases[key], target, inputs, cuda_rows)
        pick = pick_variant(verdicts, target)
        if pick is not None and not pick.lead:
            chosen_release, chosen = key, pick
            rec.verdicts = verdicts
            break
        lead_pick = pick
        if lead_pick is not None:
            if lead_fallback is None:
                lead_fallback = (key, lead_pick, verdicts)
            verified = [v for v in verdicts if v.ok and not v.lead and v.relevant]
            also = ""
            if verified:
                mvc = all(v.full_support is False for v in verified)
                names = ", ".join(v.variant for v in verified)
                run = "runs" if len(verified) == 1 else "run"
                also = f"; verified: {names}"
                if mvc:
                    also += f", which {run} here only through minor-version compatibility"
            lead_skips.append(
                (key, f"{lead_pick.variant} would fit, but it is known from secondary sources only{also}")
            )
            rec.skipped.append(lead_skips[-1])
            continue
        rec.skipped.append((key, summarise(verdicts)))
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
        rec.verdicts = judge_release(releases[key], target, inputs, cuda_rows)
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
    py_fit = python_fit(row, inputs.python)
    newest_note = (
        "the requested release"
        if o.torch_version
        else "the release the installed torch_npu was built for"
        if requested_patch
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
        cover = ", ".join(sorted({sm_name(c) for c in inputs.ccs})) or "the GPUs"
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
    elif npus:
        rec.why.append(f"{npus} Ascend NPU(s): torch's CPU build, which torch_npu extends with the npu device")
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
            f"no torchaudio release was published with torch {rec.torch_version} (the table pins none); left out"
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
    for v in judge_release(releases[newest], "nvidia", no_driver, cuda_rows):
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
    version = known(t.get("version")) or "?"
    build = known(t.get("build"))
    base = public_version(version)
    beyond = base is not None and rec.data.newest is not None and base > Version(rec.data.newest)
    # The install command as prose in the verdict: its words (pins and the index URL from the data
    # tables and checked options) need no quoting, so joined they read as the script writes them.
    install = " ".join(rec.argvs().get("pip", []))
    target = rec.target
    problem = ""
    if target == "nvidia":
        if build != "cuda":
            problem = f"torch {version} is a {build or 'non-CUDA'} build: it cannot use the NVIDIA GPUs"
        else:
            cuda = known(t.get("cuda_version"))
            key = ".".join(str(cuda).split(".")[:2]) if isinstance(cuda, str) else None
            row = cuda_rows.get(key) if key else None
            if isinstance(row, Mapping) and rec.inputs.driver is not None:
                floor = str(row.get("mvc_floor"))
                if Version(rec.inputs.driver) < Version(floor):
                    problem = f"torch {version} needs driver ≥ {floor}; this host has {rec.inputs.driver}"
            archs = _arch_names(known(t.get("arch_list")))
            if not problem and archs:
                from ..engine.helpers.versions import arch_supported

                lacking = sorted({sm_name(c) for c in rec.inputs.ccs if not arch_supported(archs, c)})
                if lacking:
                    problem = f"torch {version} has no kernels for {', '.join(lacking)} (built for {', '.join(archs)})"
    elif target == "amd":
        if build != "rocm":
            problem = f"torch {version} is a {build or 'non-ROCm'} build: it cannot use the AMD GPUs"
        else:
            archs = known(t.get("arch_list"))
            if isinstance(archs, list) and rec.inputs.amd_gfx:
                lacking = [g for g in rec.inputs.amd_gfx if g not in archs]
                if lacking:
                    problem = f"torch {version} has no code for {', '.join(lacking)}"
    if problem:
        rec.installed_ok = False
        rec.installed = problem + (f"; install: {install}" if install and rec.working else "")
        return
    if beyond:
        # Newer than anything the table knows: judged only by what the installed build says of
        # itself (its CUDA against the driver, its arch list against the GPUs), never by a guess.
        when = f", retrieved {rec.data.retrieved}" if rec.data.retrieved else ""
        rec.installed = (
            f"torch {version}{where} is newer than every release in the release table (newest {rec.data.newest}"
            f"{when}): it is not judged against the table"
        )
        rec.warnings.append(
            f"the installed torch {version} is newer than the release table knows: the recommendation is the "
            f"newest build the table can vouch for, not a reason to downgrade"
        )
        checked, ok = _self_checks(rec, t, cuda_rows)
        rec.installed += f"; {checked}" if checked else ""
        rec.installed_ok = ok
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
        rec_v = public_version(rec.torch_version)
        newer = ""
        if rec_v is not None and base is not None and rec_v > base:
            newer = f"; torch {rec.torch_version} ({rec.variant}) is newer"
        elif rec_v is not None and base is not None and base > rec_v:
            newer = f"; it is newer than the recommendation (torch {rec.torch_version}): keep it"
        rec.installed = (
            f"the installed build works here: torch {version}{where} runs on this driver "
            f"and has kernels for these GPUs{newer}"
        )


def _self_checks(rec: Recommendation, t: Mapping[str, Any], cuda_rows: Mapping[str, Any]) -> tuple[str, bool | None]:
    """What an installed CUDA build newer than the table says of itself, checked against this host
    (a build whose problems were found never gets here): the text, and True when both were checked."""
    if rec.target != "nvidia":
        return "", None
    parts: list[str] = []
    archs = _arch_names(known(t.get("arch_list")))
    if archs is None:
        parts.append("its arch list is unknown (--torch-import reads it), so its kernels were not checked")
    else:
        parts.append(f"its arch list ({', '.join(archs)}) has kernels for these GPUs")
    cuda = known(t.get("cuda_version"))
    key = ".".join(str(cuda).split(".")[:2]) if isinstance(cuda, str) else None
    driver_checked = bool(key) and isinstance(cuda_rows.get(key or ""), Mapping) and rec.inputs.driver is not None
    if driver_checked:
        parts.append(f"its CUDA {cuda} runs on driver {rec.inputs.driver}")
    else:
        parts.append(f"whether its CUDA {cuda or '(unknown)'} runs on this driver is not known here")
    return "; ".join(parts), (True if archs is not None and driver_checked else None)
