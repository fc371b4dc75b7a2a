"""The torch build advice on machines from real reports, and its rules on a small made-up table.

Each case is a machine someone posted about: what they had, what broke, and the build that runs.
The facts are the real 2×H200 snapshot with its GPUs, driver or Python replaced, so the advice reads
them exactly as it reads a probed machine.
"""

from __future__ import annotations

import copy
import datetime
from typing import Any

import pytest

from gpudoctor.advice.torch_build import recommend
from gpudoctor.advice.torch_inputs import Overrides, TorchAdviceError, gather_inputs
from gpudoctor.facts import Unavailable, load_snapshot
from tests.conftest import SNAPSHOTS

H200 = load_snapshot(SNAPSHOTS / "h200-x2.json")


def machine(
    gpus: list[tuple[str, str]] = (),  # (name, compute capability) per NVIDIA GPU
    driver: str | None = "580.95.05",
    python: str = "3.12.3",
    amd_gfx: list[str] | None = None,
    torch: dict[str, Any] | None = None,
    nvml_down: bool = False,
) -> dict[str, Any]:
    facts = copy.deepcopy(H200)
    devices, nvml_gpus = [], []
    for i, (name, cc) in enumerate(gpus):
        bus = f"0000:{0x18 + i:02x}:00.0"
        devices.append({"bus_id": bus, "kind": "gpu", "vendor": "nvidia", "class_code": "0x030200"})
        nvml_gpus.append({"index": i, "name": name, "bus_id": bus, "compute_capability": cc})
    for i, _ in enumerate(amd_gfx or []):
        devices.append(
            {"bus_id": f"0000:{0xC1 + i:02x}:00.0", "kind": "gpu", "vendor": "amd", "class_code": "0x038000"}
        )
    facts["pci"] = {"devices": devices}
    if nvml_down:
        facts["nvml"] = {"status": "driver_not_loaded", "error": "NVML_ERROR_DRIVER_NOT_LOADED"}
        facts["nvml"]["gpus"] = Unavailable("driver_not_loaded", "NVML did not answer")
    else:
        facts["nvml"] = {"status": "ok", "error": "", "gpus": nvml_gpus, "device_count": len(nvml_gpus)}
        if driver:
            facts["nvml"]["driver_version"] = driver
    facts["modules"]["nvidia_version"] = driver if driver else Unavailable("not_found", "no nvidia module")
    if not driver:  # nothing installed either: no module on disk, no user-space library
        facts["modules"]["nvml_library_version"] = Unavailable("not_found", "no libnvidia-ml")
        facts.setdefault("kernel_modules", {})["nvidia_installed_version"] = Unavailable("not_found", "no module")
    facts["host"]["python_version"] = python
    facts["rocm"]["gfx_targets"] = list(amd_gfx) if amd_gfx else Unavailable("not_found", "no KFD")
    facts["torch"] = torch if torch is not None else {"installed": False}
    return facts


def verdict(rec, variant):
    return next(v for v in rec.verdicts if v.variant == variant)


# ---------------------------------------------------------------------------- real reports


def test_pascal_gtx_1080_ti_gets_cu126_not_the_cuda_13_default():
    # uv#14742: auto-detection gave a GTX 1080 Ti a build without sm_61 ("minimum capability 7.5").
    rec = recommend(machine([("NVIDIA GeForce GTX 1080 Ti", "6.1")], driver="580.95.05"))
    assert rec.working and rec.variant == "cu126"
    assert rec.release == "2.14" and rec.torch_version == "2.14.1"
    assert "no kernels for sm_61" in verdict(rec, "cu130").reason
    assert rec.argvs()["pip"] == [
        "pip",
        "install",
        "torch==2.14.1",
        "torchvision==0.29.1",
        "--index-url",
        "https://download.pytorch.org/whl/cu126",
    ]


def test_blackwell_rtx_5090_on_a_570_driver_gets_cu128_of_2_11():
    # pytorch#167244: RTX 5090 (sm_120) on driver 570.124.06 with a cu124 build: "no kernel image".
    rec = recommend(machine([("NVIDIA GeForce RTX 5090", "12.0")], driver="570.124.06"))
    assert rec.working and (rec.release, rec.variant) == ("2.11", "cu128")
    assert "needs driver ≥ 580.65.06" in verdict(rec, "cu130").reason
    assert "no kernels for sm_120" in verdict(rec, "cu126").reason
    assert [r for r, _ in rec.skipped] == ["2.15", "2.14", "2.13", "2.12"]
    assert "580.65.06" in rec.upgrade_hint


def test_blackwell_on_a_580_driver_gets_cuda_13():
    rec = recommend(machine([("NVIDIA GeForce RTX 5090", "12.0")], driver="580.95.05"))
    assert (rec.release, rec.variant) == ("2.14", "cu130")
    assert verdict(rec, "cu130").full_support is True


def test_driver_below_580_with_the_cuda_13_default_wheel_installed():
    # RLinf#1410: plain `pip install torch` (2.11, CUDA 13) on a 575 driver: the driver is too old.
    installed = {
        "installed": True,
        "version": "2.11.0+cu130",
        "build": "cuda",
        "cuda_version": "13.0",
        "arch_list": ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"],
    }
    rec = recommend(machine([("NVIDIA A100-SXM4-80GB", "8.0")], driver="575.57.08", torch=installed))
    assert rec.working and rec.variant == "cu126" and rec.release == "2.14"
    assert verdict(rec, "cu126").full_support is True
    assert rec.installed_ok is False
    assert rec.installed.startswith(
        "torch 2.11.0+cu130 needs driver ≥ 580.65.06; this host has 575.57.08; install: pip"
    )
    assert "whl/cu126" in rec.installed


def test_volta_v100_on_torch_2_11_needs_cu126():
    # pytorch#172352: Volta left cu128 in 2.11; cu126 keeps it.
    rec = recommend(machine([("Tesla V100-SXM2-32GB", "7.0")], driver="580.95.05"), Overrides(torch_version="2.11"))
    assert (rec.release, rec.variant) == ("2.11", "cu126")
    assert "no kernels for sm_70" in verdict(rec, "cu128").reason
    assert "no kernels for sm_70" in verdict(rec, "cu130").reason


def test_volta_on_torch_2_10_still_gets_cu128():
    rec = recommend(machine([("Tesla V100-SXM2-32GB", "7.0")], driver="580.95.05"), Overrides(torch_version="2.10"))
    assert rec.variant == "cu128"


def test_old_470_driver_gets_the_last_cuda_11_build_under_minor_version_compatibility():
    # Fooocus#1313: "The NVIDIA driver on your system is too old (found version 11040)" on 470.
    rec = recommend(machine([("Tesla T4", "7.5")], driver="470.82.01"))
    assert rec.working and (rec.release, rec.variant) == ("2.7", "cu118")
    assert verdict(rec, "cu118").full_support is False
    assert "needs driver ≥ 525.60.13" in verdict(rec, "cu126").reason
    assert any("minor-version compatibility" in w for w in rec.warnings)
    assert "560.28.03" in rec.upgrade_hint  # what the newest torch would need


def test_kepler_k80_on_470_keeps_a_build_with_sm_37():
    rec = recommend(machine([("Tesla K80", "3.7")], driver="470.82.01"))
    assert rec.variant == "cu118" and rec.working


def test_amd_mi300x_gets_the_newest_rocm_build_listing_gfx942():
    rec = recommend(machine([], driver=None, amd_gfx=["gfx942"]))
    assert rec.target == "amd" and rec.working
    assert (rec.release, rec.variant) == ("2.13", "rocm7.2")
    skipped = dict(rec.skipped)
    assert "not known" in skipped["2.14"]  # rocm7.14's gfx list is unknown: never chosen blindly
    assert rec.argvs()["pip"][-2:] == ["--index-url", "https://download.pytorch.org/whl/rocm7.2"]


def test_amd_gpu_no_rocm_build_supports_falls_back_to_cpu_with_exit_1():
    rec = recommend(machine([], driver=None, amd_gfx=["gfx1010"]))
    assert not rec.working and rec.variant == "cpu" and rec.exit_code == 1
    assert "no GPU build" in rec.why[0]


def test_no_gpu_gets_the_cpu_build_of_the_newest_release():
    rec = recommend(machine([], driver=None))
    assert rec.target == "cpu" and rec.working and rec.exit_code == 0
    assert (rec.release, rec.variant, rec.torch_version) == ("2.15", "cpu", "2.15.0")
    pins = ["torch==2.15.0", "torchvision==0.29.2", "torchaudio==2.11.1"]  # both uploaded with 2.15.0
    assert rec.argvs()["uv_backend"] == ["uv", "pip", "install", *pins, "--torch-backend=cpu"]


def test_python_3_10_cannot_have_torch_2_15():
    rec = recommend(machine([], driver=None, python="3.10.12"))
    assert rec.torch_version == "2.14.1"
    assert rec.skipped[0][0] == "2.15" and "Python 3.10" in rec.skipped[0][1]


def test_requested_release_without_a_wheel_for_this_python_is_not_working():
    rec = recommend(machine([("NVIDIA H100 80GB HBM3", "9.0")]), Overrides(torch_version="2.3", python_version="3.13"))
    assert not rec.working and "no wheel for Python 3.13" in rec.why[0]


def test_real_h200_snapshot_gets_cu130_and_the_installed_build_is_fine():
    rec = recommend(H200)
    assert rec.working and (rec.release, rec.variant) == ("2.14", "cu130")
    assert rec.inputs.driver == "580.159.04" and rec.inputs.ccs == ["9.0", "9.0"]
    assert rec.installed_ok is True and "2.11.0+cu130" in rec.installed
    assert verdict(rec, "cu132").ok and verdict(rec, "cu132").full_support is False  # 13.2 wants ≥ 595.45.04
    # 2.15's cu130 is known only from secondary sources: named, not chosen.
    assert any("torch 2.15.0 probably has a fitting cu130" in w for w in rec.warnings)


def test_nvml_down_uses_the_kernel_module_version_and_says_capabilities_are_unknown():
    facts = machine([("NVIDIA A100", "8.0")], driver="550.90.07", nvml_down=True)
    inputs = gather_inputs(facts)
    assert inputs.driver == "550.90.07" and inputs.driver_source.startswith("modules.nvidia_version")
    assert inputs.cc_unknown and any("--compute-capability" in n for n in inputs.notes)
    rec = recommend(facts)
    assert rec.working and rec.variant == "cu126"  # 550 runs CUDA 12 only through MVC; 13.x needs 580
    assert any("arch list was not checked" in w for w in rec.warnings)
    # With the capability given, the warning goes.
    rec = recommend(facts, Overrides(compute_capabilities=["8.0"]))
    assert not any("arch list was not checked" in w for w in rec.warnings)


def test_overrides_describe_another_machine():
    rec = recommend(H200, Overrides(compute_capabilities=["6.1", "6.1"], driver_version="535.183.01"))
    assert rec.inputs.driver_source == "--driver-version" and len(rec.inputs.nvidia_gpus) == 2
    assert rec.variant == "cu126" and verdict(rec, "cu126").full_support is False
    rec = recommend(H200, Overrides(no_gpu=True))
    assert rec.target == "cpu"


@pytest.mark.parametrize(
    "overrides, message",
    [
        (Overrides(compute_capabilities=["sm_90"]), "--compute-capability"),
        (Overrides(gpu_archs=["mi300"]), "--gpu-arch"),
        (Overrides(driver_version="latest"), "--driver-version"),
        (Overrides(torch_version="1.13"), "not in the release table"),
        (Overrides(torch_version="two"), "--torch-version"),
        (Overrides(python_version="py3"), "--python-version"),
    ],
)
def test_bad_overrides_are_refused(overrides, message):
    with pytest.raises(TorchAdviceError, match=message):
        recommend(H200, overrides)


# ---------------------------------------------------------------------------- the rules, on a made-up table

CUDA_ROWS = {
    "12.4": {"min_driver": "550.54.14", "mvc_floor": "525.60.13"},
    "12.8": {"min_driver": "570.26", "mvc_floor": "525.60.13"},
}


def small_table(arch_new: str) -> tuple[dict, dict]:
    releases = {
        "9.0": {
            "latest": "9.0.1",
            "python": ["3.12"],
            "pypi_default": "cu128",
            "torchvision": None,
            "torchaudio": None,
            "variants": {"cpu": {}, "cu124": {"arch": "8.0;9.0"}, "cu128": {"arch": arch_new}},
        }
    }
    return releases, CUDA_ROWS


def test_ptx_covers_a_newer_gpu_only_with_full_driver_support():
    tables = small_table("8.0;9.0+PTX")
    gpu = machine([("future GPU", "10.0")], driver="570.124.06")
    rec = recommend(gpu, tables=tables)
    assert rec.variant == "cu128" and verdict(rec, "cu128").via_ptx == ["sm_100"]
    assert "no kernels for sm_100" in verdict(rec, "cu124").reason
    # Below 12.8's own minimum the driver cannot JIT 12.8 PTX: not a working build.
    rec = recommend(machine([("future GPU", "10.0")], driver="550.90.07"), tables=tables)
    assert not rec.working and "only PTX" in verdict(rec, "cu128").reason


def test_sass_of_a_lower_minor_covers_the_same_major_only():
    tables = small_table("8.0;9.0")
    assert recommend(machine([("A10", "8.6")], driver="570.124.06"), tables=tables).variant == "cu128"
    assert not recommend(machine([("B200", "10.0")], driver="570.124.06"), tables=tables).working


def test_full_support_beats_a_newer_cuda_under_minor_version_compatibility():
    tables = small_table("8.0;9.0")
    rec = recommend(machine([("H100", "9.0")], driver="560.35.03"), tables=tables)
    assert rec.variant == "cu124"  # 12.4 fully supported; 12.8 only through MVC
    rec = recommend(machine([("H100", "9.0")], driver="575.57.08"), tables=tables)
    assert rec.variant == "cu128"


def test_unknown_driver_is_not_a_filter_but_a_stated_requirement():
    rec = recommend(machine([("H100", "9.0")], driver=None), tables=small_table("8.0;9.0"))
    assert rec.variant == "cu128" and rec.working
    assert any("needs an NVIDIA driver ≥ 525.60.13" in w for w in rec.warnings)


def test_with_no_module_loaded_the_installed_driver_is_read_from_disk_then_the_library():
    facts = machine([("H100", "9.0")], driver=None)
    facts["modules"]["nvidia_loaded"] = False
    facts["modules"]["nvml_library_version"] = "570.124.06"
    inputs = gather_inputs(facts)
    assert inputs.driver == "570.124.06" and inputs.driver_source.startswith("modules.nvml_library_version")
    facts["kernel_modules"]["nvidia_installed_version"] = "575.57.08"
    inputs = gather_inputs(facts)
    assert inputs.driver == "575.57.08" and inputs.driver_source.startswith("kernel_modules.nvidia_installed_version")
    facts["modules"]["nvidia_loaded"] = True  # loaded, but its version unreadable: the disk does not stand in
    assert gather_inputs(facts).driver is None


def test_a_gpu_nvml_does_not_list_is_judged_at_its_architectures_lowest_capability():
    facts = machine([], nvml_down=True)
    facts["pci"]["devices"] = [
        {"bus_id": "0000:18:00.0", "kind": "gpu", "vendor": "nvidia", "class_code": "0x030200", "device_id": "0x15f8"}
    ]
    inputs = gather_inputs(facts)  # a Tesla P100 (Pascal: 6.0, 6.1, 6.2): CUDA 13 builds have no kernels for it
    assert inputs.ccs == ["6.0"]
    assert any("taken as 6.0, the lowest of pascal" in note for note in inputs.notes)
    facts["pci"]["devices"][0]["device_id"] = "0x2b85"  # RTX 5090: Blackwell spans 10.x and 12.x, no guess
    assert gather_inputs(facts).ccs == [] or gather_inputs(facts).cc_unknown
    assert gather_inputs(facts, Overrides(compute_capabilities=["12.0"])).ccs == ["12.0"]


def test_unknown_python_is_said_and_an_override_settles_it():
    facts = machine([("H100", "9.0")])
    facts["host"]["python_version"] = Unavailable("not_found", "interpreter not recorded")
    rec = recommend(facts)
    assert rec.inputs.python is None and any("--python-version" in w for w in rec.warnings)
    rec = recommend(facts, Overrides(python_version="3.10"))
    assert rec.inputs.python == "3.10" and rec.torch_version == "2.14.1"
    assert not any("--python-version" in w for w in rec.warnings)


def test_a_variant_whose_arch_list_is_unknown_is_not_chosen_blindly():
    releases, cuda_rows = small_table("8.0;9.0")
    releases["9.0"]["variants"]["cu128"] = {"arch": None, "source": "whl/cu128 lists torch 9.0.1"}
    rec = recommend(machine([("H100", "9.0")], driver="575.57.08"), tables=(releases, cuda_rows))
    assert rec.variant == "cu124" and "arch list of this build is not known" in verdict(rec, "cu128").reason


# ---------------------------------------------------------------------------- the age of the release data


def test_the_release_data_says_how_old_it_is():
    rec = recommend(H200, today=datetime.date(2026, 12, 3))
    assert rec.data.retrieved == "2026-12-01" and rec.data.age_days == 2 and rec.data.newest == "2.15.0"
    assert not any("days old" in w for w in rec.warnings)
    old = recommend(H200, today=datetime.date(2027, 6, 1))
    assert any(w.startswith("the torch release data is 182 days old (retrieved 2026-12-01)") for w in old.warnings)
    # a table given by the caller has no retrieval date: said, not guessed
    assert recommend(H200, tables=small_table("8.0;9.0")).data.retrieved is None


def _cuda_torch(version: str, arch_list: list[str] | None) -> dict[str, Any]:
    t: dict[str, Any] = {"installed": True, "version": version, "build": "cuda", "cuda_version": "13.0"}
    if arch_list is not None:
        t["arch_list"] = arch_list
    return t


def test_an_installed_torch_newer_than_the_table_is_said_so_not_judged_by_a_guess():
    gpus = [("NVIDIA H200", "9.0")]
    rec = recommend(machine(gpus, driver="580.159.04", torch=_cuda_torch("2.16.0+cu130", ["sm_80", "sm_90"])))
    assert "newer than every release in the release table (newest 2.15.0, retrieved 2026-12-01)" in rec.installed
    assert "has kernels for these GPUs" in rec.installed and rec.installed_ok is True
    assert any("not a reason to downgrade" in w for w in rec.warnings)
    # without its arch list nothing says it has kernels for the GPUs: unknown, not fine
    rec = recommend(machine(gpus, driver="580.159.04", torch=_cuda_torch("2.15.1+cu130", None)))
    assert rec.installed_ok is None and "kernels were not checked" in rec.installed
    # what the build says of itself still counts: no sm_90 kernels is a problem whatever its version
    rec = recommend(machine(gpus, driver="580.159.04", torch=_cuda_torch("2.16.0+cu130", ["sm_100"])))
    assert rec.installed_ok is False and "no kernels for sm_90" in rec.installed


def test_an_installed_torch_newer_than_the_recommendation_is_kept():
    torch = _cuda_torch("2.15.0+cu130", ["sm_90"])
    rec = recommend(machine([("NVIDIA H200", "9.0")], driver="580.159.04", torch=torch))
    assert rec.torch_version == "2.14.1"
    assert rec.installed.endswith("it is newer than the recommendation (torch 2.14.1): keep it")
