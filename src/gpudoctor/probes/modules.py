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
import time
from typing import Any

from ..context import ProbeContext, excerpt, shown
from ..facts import Unavailable
from ..lazy_re import LazyPattern
from . import device_access
from .files import exists, list_dir, read_bytes, read_text, resolve_path, search_dirs

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

_NVML_VERSIONED = LazyPattern(r"^libnvidia-ml\.so\.(\d+\.\d+(?:\.\d+)?)$")
# A driver version as its files print it; matched against one short word at a time, never a line.
_VERSION_WORD = LazyPattern(r"\d{1,9}\.\d{1,9}(?:\.\d{1,9})?")
# The driver's proc file is a few lines; only its start is read, and only so much of a line is
# searched (the real NVRM line is about 130 characters).
MAX_PROC_VERSION = 1 << 16
MAX_NVRM_LINE = 1024
# What the facts keep of the file's first line.
MAX_SHOWN_LINE = 256
# A module's version file and the kernel command line are short (COMMAND_LINE_SIZE is at most
# a few KiB); longer ones are not those files.
MAX_VERSION_FILE = 256
MAX_CMDLINE = 1 << 16
# Module names are at most 55 characters (MODULE_NAME_LEN); a kernel loads a few hundred.
MAX_MODULE_NAME = 64
MAX_MODULES = 8192
# Directory entries (modprobe.d files, IOMMU groups, library directories) looked at, at most.
MAX_ENTRIES = 4096

_TRACKED = ("nvidia", "nvidia_uvm", "nvidia_peermem", "nouveau", "amdgpu")


def parse_proc_modules(text: str) -> list[str]:
    """Module names, one per line of /proc/modules ("nvidia_uvm 1531904 0 - Live 0x0 (POE)")."""
    names: list[str] = []
    for line in text.splitlines():
        fields = line.split(None, 1)
        if fields and len(fields[0]) <= MAX_MODULE_NAME:
            names.append(fields[0])
    if not names:
        raise ValueError("no module lines")
    if len(names) > MAX_MODULES:
        raise ValueError(f"{len(names)} module lines, more than a kernel loads")
    return names


def parse_nvrm_version(text: str) -> str | None:
    """The driver version in /proc/driver/nvidia/version, or None when the text has none.

    "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  550.90.07  Release Build ..." or
    "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 01:15:15 UTC 2023":
    the first whitespace-separated word after "Kernel Module" that is a version. Linear in the
    text: a regex that let ``.*?`` search from every "Kernel Module" of a hostile line took
    minutes on 300 KB."""
    for line in text.splitlines():
        if not line.startswith("NVRM version"):
            continue
        line = line[:MAX_NVRM_LINE]
        at = line.find("Kernel Module")
        while at >= 0:
            rest = line[at + len("Kernel Module"):]
            if not rest[:1].isalnum() and rest[:1] != "_":  # a whole word, as \b had it
                for word in rest.split():
                    if _VERSION_WORD.fullmatch(word):
                        return word
                return None
            at = line.find("Kernel Module", at + 1)
    return None


def _shortened(line: str, limit: int) -> str:
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _module_loaded(ctx: ProbeContext, name: str, loaded: list[str] | Unavailable) -> bool | Unavailable:
    if not isinstance(loaded, Unavailable):
        return name in loaded
    # No /proc/modules (some sandboxes hide it): sysfs knows loadable modules by initstate.
    state = read_text(ctx, f"/sys/module/{name}/initstate", limit=MAX_VERSION_FILE)
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
    proc = read_text(ctx, "/proc/driver/nvidia/version", whole=False, limit=MAX_PROC_VERSION)
    if isinstance(proc, Unavailable):
        proc_missing = _absent_driver(nvidia_loaded, proc, "nvidia")
        out["nvidia_flavour"] = proc_missing
        out["nvidia_proc_version"] = proc_missing
        proc_version: str | Unavailable = proc_missing
    else:
        first = proc.splitlines()[0].strip()
        out["nvidia_proc_version"] = _shortened(first, MAX_SHOWN_LINE)
        parsed = parse_nvrm_version(proc)
        if parsed is None:
            where = ctx.path("/proc/driver/nvidia/version")
            bad = Unavailable("error", f"{where}: no NVRM version line in {excerpt(first, 80)}")
            out["nvidia_flavour"] = bad
            proc_version = bad
        else:
            nvrm = next(line for line in proc.splitlines() if line.startswith("NVRM version"))
            out["nvidia_flavour"] = "open" if "Open Kernel Module" in nvrm[:MAX_NVRM_LINE] else "proprietary"
            proc_version = parsed
    sys_version = read_text(ctx, "/sys/module/nvidia/version", limit=MAX_VERSION_FILE)
    if isinstance(sys_version, str) and len(sys_version) <= 32 and _VERSION_WORD.fullmatch(sys_version):
        out["nvidia_version"] = sys_version
    elif isinstance(proc_version, str):
        out["nvidia_version"] = proc_version
    elif isinstance(sys_version, str):
        out["nvidia_version"] = Unavailable(
            "error", f"{ctx.path('/sys/module/nvidia/version')}: not a version: {excerpt(sys_version, 40)}"
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
    dirs = search_dirs(ctx.env.get("LD_LIBRARY_PATH", ""), NVML_LIB_DIRS)
    first_problem: Unavailable | None = None
    stop = ctx.work_deadline()
    for directory in dirs:
        if time.monotonic() > stop:
            first_problem = first_problem or Unavailable(
                "timeout", "the deadline passed before every library directory was looked at"
            )
            break
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
    stop = ctx.work_deadline()
    for directory in MODPROBE_DIRS:
        names = list_dir(ctx, directory)
        if isinstance(names, Unavailable):
            if names.reason != "not_found":
                problem = problem or names
            continue
        seen_any = True
        confs = [name for name in names if name.endswith(".conf")]
        for i, name in enumerate(confs):
            if i >= MAX_ENTRIES or time.monotonic() > stop:
                problem = problem or Unavailable(
                    "timeout" if i < MAX_ENTRIES else "not_supported",
                    f"{len(confs) - i} of the {len(confs)} files in {ctx.path(directory)} were not read "
                    f"({'the deadline passed' if i < MAX_ENTRIES else f'at most {MAX_ENTRIES} are read'})",
                )
                break
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
        stop = ctx.work_deadline()
        for i, group in enumerate(groups):
            if i >= MAX_ENTRIES or time.monotonic() > stop:
                # a group not read may be translated: only a translated one already seen decides
                return Unavailable(
                    "timeout" if i < MAX_ENTRIES else "not_supported",
                    f"{len(groups) - i} of the {len(groups)} IOMMU groups were not read "
                    f"({'the deadline passed' if i < MAX_ENTRIES else f'at most {MAX_ENTRIES} are read'})",
                )
            kind = read_text(ctx, f"/sys/kernel/iommu_groups/{group}/type", limit=MAX_VERSION_FILE)
            if isinstance(kind, str):
                types.add(kind)
                if kind in ("DMA", "DMA-FQ"):
                    return "translated"  # one translated group is the answer
        if types & {"DMA", "DMA-FQ"}:
            return "translated"
        if "identity" in types:
            return "passthrough"
        if tokens & _IOMMU_PT:
            return "passthrough"
        listed = ", ".join(shown(t, 20) for t in sorted(types)[:8]) or "none"
        return Unavailable("not_supported", f"unrecognised IOMMU group types: {listed}")
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


_GPU_NODE = LazyPattern(r"^nvidia\d+$")


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
        except ValueError as exc:
            loaded = Unavailable("error", f"{ctx.path('/proc/modules')}: {exc}")
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

    amd = read_text(ctx, "/sys/module/amdgpu/version", limit=MAX_VERSION_FILE)
    if isinstance(amd, str) and not amd.isprintable():
        amd = Unavailable("error", f"{ctx.path('/sys/module/amdgpu/version')}: not a version: {excerpt(amd, 40)}")
    if isinstance(amd, Unavailable):
        amd = _absent_driver(flags["amdgpu"], amd, "amdgpu")
        if amd.reason == "not_found" and flags["amdgpu"] is True:
            amd = Unavailable("not_found", "amdgpu is loaded but has no version file (the in-kernel driver)")
    out["amdgpu_version"] = amd

    cmdline = read_text(ctx, "/proc/cmdline", limit=MAX_CMDLINE)
    out["nouveau_blacklisted"] = _nouveau_blacklisted(ctx, cmdline)
    out["secure_boot"] = _secure_boot(ctx)
    out["cmdline"] = cmdline
    out["iommu_mode"] = _iommu_mode(ctx, cmdline)
    out.update(_device_nodes(ctx))
    out.update(device_access.collect(ctx))
    return out
