"""Kernel modules, the NVIDIA driver's versions, and boot settings that matter to GPUs.

Reads (all through the context root, no subprocess):

- ``/proc/modules`` (loaded module names), else ``/sys/module/<name>/initstate``
- ``/sys/module/nvidia/version``, ``/proc/driver/nvidia/version`` (version, open/proprietary)
- ``libnvidia-ml.so.1`` and ``libnvidia-ml.so.<version>`` in the directories of
  ``LD_LIBRARY_PATH`` (from ``ctx.env``) and the usual library directories: the user-space
  NVML library, whose version must equal the kernel module's
- ``/sys/module/amdgpu/version`` (amdgpu-dkms only)
- ``*.conf`` under ``/etc/modprobe.d``, ``/run/modprobe.d``, ``/usr/local/lib/modprobe.d``,
  ``/lib/modprobe.d``, ``/usr/lib/modprobe.d`` (``blacklist nouveau``)
- ``/sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c`` (4 attribute
  bytes, then one data byte: 1 is on), else the legacy ``/sys/firmware/efi/vars/.../data``
- ``/proc/cmdline`` and ``/sys/kernel/iommu_groups/*/type`` (IOMMU mode)
- ``/dev`` (``nvidia<N>``, ``nvidiactl``, ``nvidia-uvm``: the device files CUDA and NVML open;
  read-write access is checked with ``os.access`` on the live machine only)
"""

from __future__ import annotations

import os
import re
from typing import Any

from ..context import ProbeContext
from ..facts import Unavailable
from .files import exists, list_dir, read_bytes, read_text, resolve_path

# Directories the dynamic loader searches for libnvidia-ml.so.1 on common distributions,
# in a fixed order after LD_LIBRARY_PATH (WSL puts the driver's libraries in /usr/lib/wsl/lib).
NVML_LIB_DIRS = (
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/usr/lib64",
    "/usr/lib",
    "/usr/local/nvidia/lib64",
    "/usr/local/nvidia/lib",
    "/usr/lib/wsl/lib",
    "/lib/x86_64-linux-gnu",
)

MODPROBE_DIRS = (
    "/etc/modprobe.d",
    "/run/modprobe.d",
    "/usr/local/lib/modprobe.d",
    "/lib/modprobe.d",
    "/usr/lib/modprobe.d",
)

SECURE_BOOT_GUID = "8be4df61-93ca-11d2-aa0d-00e098032b8c"

_NVML_VERSIONED = re.compile(r"^libnvidia-ml\.so\.(\d+\.\d+(?:\.\d+)?)$")
# "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  550.90.07  Release Build ..."
# "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 01:15:15 UTC 2023"
_NVRM_VERSION = re.compile(r"Kernel Module\b.*?\s(\d+\.\d+(?:\.\d+)?)(?:\s|$)")

_TRACKED = ("nvidia", "nvidia_uvm", "nvidia_peermem", "nouveau", "amdgpu")


def parse_proc_modules(text: str) -> list[str]:
    """Module names, one per line of /proc/modules ("nvidia_uvm 1531904 0 - Live 0x0 (POE)")."""
    names: list[str] = []
    for line in text.splitlines():
        fields = line.split()
        if fields:
            names.append(fields[0])
    if not names:
        raise ValueError("no module lines")
    return names


def parse_nvrm_version(text: str) -> str | None:
    """The driver version in /proc/driver/nvidia/version, or None when the text has none."""
    for line in text.splitlines():
        if line.startswith("NVRM version"):
            match = _NVRM_VERSION.search(line)
            if match:
                return match.group(1)
    return None


def _module_loaded(ctx: ProbeContext, name: str, loaded: list[str] | Unavailable) -> bool | Unavailable:
    if not isinstance(loaded, Unavailable):
        return name in loaded
    # No /proc/modules (some sandboxes hide it): sysfs knows loadable modules by initstate.
    state = read_text(ctx, f"/sys/module/{name}/initstate")
    if isinstance(state, str):
        return state == "live"
    if exists(ctx, f"/sys/module/{name}"):
        return True  # built in: no initstate, but the directory is there
    if exists(ctx, "/sys/module"):
        return False
    return Unavailable(loaded.reason, f"{loaded.detail}; /sys/module is not there either")


def _absent_driver(loaded: bool | Unavailable, found: Unavailable, module: str) -> Unavailable:
    """A missing driver file means 'driver not loaded' when the module is known not to be."""
    if loaded is False and found.reason == "not_found":
        return Unavailable("driver_not_loaded", f"the {module} kernel module is not loaded")
    return found


def _nvidia_facts(ctx: ProbeContext, nvidia_loaded: bool | Unavailable) -> dict[str, Any]:
    out: dict[str, Any] = {}
    proc = read_text(ctx, "/proc/driver/nvidia/version")
    if isinstance(proc, Unavailable):
        proc_missing = _absent_driver(nvidia_loaded, proc, "nvidia")
        out["nvidia_flavour"] = proc_missing
        out["nvidia_proc_version"] = proc_missing
        proc_version: str | Unavailable = proc_missing
    else:
        first = proc.splitlines()[0].strip()
        out["nvidia_proc_version"] = first
        parsed = parse_nvrm_version(proc)
        if parsed is None:
            shown = first if len(first) <= 80 else first[:77] + "..."
            bad = Unavailable("error", f"{ctx.path('/proc/driver/nvidia/version')}: no NVRM version line in {shown!r}")
            out["nvidia_flavour"] = bad
            proc_version = bad
        else:
            out["nvidia_flavour"] = "open" if "Open Kernel Module" in proc else "proprietary"
            proc_version = parsed
    sys_version = read_text(ctx, "/sys/module/nvidia/version")
    if isinstance(sys_version, str) and re.fullmatch(r"\d+\.\d+(?:\.\d+)?", sys_version):
        out["nvidia_version"] = sys_version
    elif isinstance(proc_version, str):
        out["nvidia_version"] = proc_version
    elif isinstance(sys_version, str):
        out["nvidia_version"] = Unavailable(
            "error", f"{ctx.path('/sys/module/nvidia/version')}: not a version: {sys_version[:40]!r}"
        )
    elif sys_version.reason == "not_found":
        out["nvidia_version"] = proc_version  # says why the fallback failed too
    else:
        out["nvidia_version"] = sys_version
    return out


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split("."))


def _nvml_in_dir(ctx: ProbeContext, directory: str) -> tuple[str, str] | Unavailable | None:
    """(version, system path) of libnvidia-ml in one directory; None when it has none."""
    soname = f"{directory}/libnvidia-ml.so.1"
    if exists(ctx, soname):
        real = resolve_path(ctx, soname)
        if isinstance(real, Unavailable):
            return real  # dangling link or loop: the loader would fail here too
        match = _NVML_VERSIONED.match(os.path.basename(real))
        if match:
            return match.group(1), real
    if not exists(ctx, soname) and not exists(ctx, f"{directory}/libnvidia-ml.so"):
        return None  # spare listing big library directories that hold no NVML at all
    entries = list_dir(ctx, directory)
    if isinstance(entries, Unavailable):
        return None
    versions = [m.group(1) for m in map(_NVML_VERSIONED.match, entries) if m]
    if versions:
        best = max(versions, key=_version_key)
        return best, f"{directory}/libnvidia-ml.so.{best}"
    if exists(ctx, soname):
        return Unavailable("not_found", f"{soname} is there but no file names its version (WSL passes it through)")
    return None


def _nvml_library(ctx: ProbeContext) -> tuple[str | Unavailable, str | Unavailable]:
    dirs: list[str] = []
    for entry in ctx.env.get("LD_LIBRARY_PATH", "").split(":"):
        entry = entry.rstrip("/")
        if entry.startswith("/") and entry not in dirs:
            dirs.append(entry)
    dirs.extend(d for d in NVML_LIB_DIRS if d not in dirs)
    first_problem: Unavailable | None = None
    for directory in dirs:
        found = _nvml_in_dir(ctx, directory)
        if found is None:
            continue
        if isinstance(found, Unavailable):
            first_problem = first_problem or found
            continue
        return found
    missing = first_problem or Unavailable(
        "not_found", "no libnvidia-ml.so.<version> in LD_LIBRARY_PATH or the usual library directories"
    )
    return missing, missing


_BLACKLIST_KEYS = ("modprobe.blacklist", "rd.driver.blacklist", "module_blacklist")


def _nouveau_blacklisted(ctx: ProbeContext, cmdline: str | Unavailable) -> bool | Unavailable:
    if isinstance(cmdline, str):
        for token in cmdline.split():
            key, _, value = token.partition("=")
            if key in _BLACKLIST_KEYS and "nouveau" in value.split(","):
                return True
    seen_any = isinstance(cmdline, str)
    problem: Unavailable | None = None
    for directory in MODPROBE_DIRS:
        names = list_dir(ctx, directory)
        if isinstance(names, Unavailable):
            if names.reason != "not_found":
                problem = problem or names
            continue
        seen_any = True
        for name in names:
            if not name.endswith(".conf"):
                continue
            text = read_text(ctx, f"{directory}/{name}")
            if isinstance(text, Unavailable):
                if text.reason != "not_found":  # an empty file is no problem
                    problem = problem or text
                continue
            for line in text.splitlines():
                words = line.split("#", 1)[0].split()
                if len(words) >= 2 and words[0] == "blacklist" and words[1] == "nouveau":
                    return True
    if problem is not None:
        return problem
    if not seen_any:
        return Unavailable("not_found", "no modprobe.d directory and no kernel command line")
    return False


def _secure_boot(ctx: ProbeContext) -> bool | Unavailable:
    if not exists(ctx, "/sys/firmware/efi"):
        return Unavailable("not_supported", "not an EFI boot")
    var = f"/sys/firmware/efi/efivars/SecureBoot-{SECURE_BOOT_GUID}"
    raw = read_bytes(ctx, var, 64)
    if isinstance(raw, bytes):
        if len(raw) < 5:
            return Unavailable("error", f"{ctx.path(var)}: {len(raw)} bytes, expected 4 attribute bytes + 1 data byte")
        return raw[4] == 1
    legacy = read_bytes(ctx, f"/sys/firmware/efi/vars/SecureBoot-{SECURE_BOOT_GUID}/data", 64)
    if isinstance(legacy, bytes) and len(legacy) >= 1:
        return legacy[0] == 1
    if raw.reason == "not_found":
        return Unavailable("not_found", "no SecureBoot EFI variable (efivarfs not mounted, or the firmware has none)")
    return raw


_IOMMU_OFF = {"intel_iommu=off", "amd_iommu=off", "iommu=off"}
_IOMMU_PT = {"iommu=pt", "iommu.passthrough=1", "iommu.passthrough=on", "iommu.passthrough=y"}


def _iommu_mode(ctx: ProbeContext, cmdline: str | Unavailable) -> str | Unavailable:
    tokens = set(cmdline.split()) if isinstance(cmdline, str) else set()
    groups = list_dir(ctx, "/sys/kernel/iommu_groups")
    if isinstance(groups, list) and groups:
        # The groups' default domain types are what the kernel actually did; the
        # command line only says what was asked for.
        types = set()
        for group in groups:
            kind = read_text(ctx, f"/sys/kernel/iommu_groups/{group}/type")
            if isinstance(kind, str):
                types.add(kind)
        if types & {"DMA", "DMA-FQ"}:
            return "translated"
        if "identity" in types:
            return "passthrough"
        if tokens & _IOMMU_PT:
            return "passthrough"
        return Unavailable("not_supported", f"unrecognised IOMMU group types: {', '.join(sorted(types)) or 'none'}")
    if tokens & _IOMMU_OFF:
        return "off"
    if isinstance(groups, list):
        return "off"  # IOMMU support built in but no groups: it is not enabled
    if groups.reason == "not_found":
        if exists(ctx, "/sys/kernel"):
            return "off"  # kernel built without IOMMU support
        if isinstance(cmdline, Unavailable):
            return Unavailable("not_found", "neither /sys/kernel/iommu_groups nor /proc/cmdline could be read")
        if tokens & _IOMMU_PT:
            return "passthrough"
        return Unavailable("not_found", "no IOMMU groups readable and no iommu= option on the kernel command line")
    return groups


_GPU_NODE = re.compile(r"^nvidia\d+$")


def _device_nodes(ctx: ProbeContext) -> dict[str, Any]:
    names = list_dir(ctx, "/dev")
    if isinstance(names, Unavailable):
        if names.reason == "not_found":
            # Only a captured tree can lack /dev; it says nothing about the machine's devices.
            names = Unavailable("not_supported", "no /dev in this root: the capture has no device files")
        keys = (
            "nvidia_device_nodes",
            "nvidia_device_nodes_accessible",
            "nvidiactl_present",
            "nvidiactl_accessible",
            "nvidia_uvm_present",
        )
        return {key: names for key in keys}
    gpu_nodes = [n for n in names if _GPU_NODE.match(n)]
    out: dict[str, Any] = {
        "nvidia_device_nodes": len(gpu_nodes),
        "nvidiactl_present": "nvidiactl" in names,
        "nvidia_uvm_present": "nvidia-uvm" in names,
    }
    if not ctx.live:
        live_only = Unavailable("not_supported", "access is checked on the live machine only")
        out["nvidia_device_nodes_accessible"] = live_only
        out["nvidiactl_accessible"] = live_only
        return out
    rw = os.R_OK | os.W_OK
    out["nvidia_device_nodes_accessible"] = sum(1 for n in gpu_nodes if os.access(ctx.path(f"/dev/{n}"), rw))
    out["nvidiactl_accessible"] = (
        os.access(ctx.path("/dev/nvidiactl"), rw)
        if out["nvidiactl_present"]
        else Unavailable("not_found", "no /dev/nvidiactl")
    )
    return out


def collect(ctx: ProbeContext) -> dict[str, Any]:
    modules_text = read_text(ctx, "/proc/modules")
    loaded: list[str] | Unavailable
    if isinstance(modules_text, Unavailable):
        loaded = modules_text
    else:
        try:
            loaded = parse_proc_modules(modules_text)
        except ValueError:
            loaded = Unavailable("error", f"{ctx.path('/proc/modules')}: no module lines")
    flags = {name: _module_loaded(ctx, name, loaded) for name in _TRACKED}

    out: dict[str, Any] = {
        "loaded": loaded,
        "nvidia_loaded": flags["nvidia"],
        "nvidia_uvm_loaded": flags["nvidia_uvm"],
        "nvidia_peermem_loaded": flags["nvidia_peermem"],
        "nouveau_loaded": flags["nouveau"],
        "amdgpu_loaded": flags["amdgpu"],
    }
    nvidia = _nvidia_facts(ctx, flags["nvidia"])
    out["nvidia_version"] = nvidia["nvidia_version"]
    out["nvidia_flavour"] = nvidia["nvidia_flavour"]
    out["nvidia_proc_version"] = nvidia["nvidia_proc_version"]
    nvml = _nvml_library(ctx)
    if isinstance(nvml[0], str):
        out["nvml_library_version"], out["nvml_library_path"] = nvml
    else:
        out["nvml_library_version"] = out["nvml_library_path"] = nvml[0]

    amd = read_text(ctx, "/sys/module/amdgpu/version")
    if isinstance(amd, Unavailable):
        amd = _absent_driver(flags["amdgpu"], amd, "amdgpu")
        if amd.reason == "not_found" and flags["amdgpu"] is True:
            amd = Unavailable("not_found", "amdgpu is loaded but has no version file (the in-kernel driver)")
    out["amdgpu_version"] = amd

    cmdline = read_text(ctx, "/proc/cmdline")
    out["nouveau_blacklisted"] = _nouveau_blacklisted(ctx, cmdline)
    out["secure_boot"] = _secure_boot(ctx)
    out["cmdline"] = cmdline
    out["iommu_mode"] = _iommu_mode(ctx, cmdline)
    out.update(_device_nodes(ctx))
    return out
