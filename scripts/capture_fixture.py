#!/usr/bin/env python3
"""Capture a fixture root from a live machine: the sysfs/procfs/etc files
gpudoctor's probes read, copied into DEST with the same layout (symlinks
kept as relative symlinks), plus recorded NVML answers (nvml.json) and the
environment (proc/self/environ, filtered to GPU-relevant variables).

    python scripts/capture_fixture.py DEST [--scrub]

The result is a directory usable as `gpudoctor check --root DEST`. Device
nodes under /dev are recorded as empty regular files (their existence is
what the probes look at). --scrub replaces the hostname. UUIDs and serials
never appear in the files copied here; nvml.json is scrubbed by the NVML
recorder.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import shutil
import sys
from pathlib import Path

PCI_ATTRS = [
    "class",
    "vendor",
    "device",
    "subsystem_vendor",
    "subsystem_device",
    "numa_node",
    "local_cpulist",
    "current_link_speed",
    "current_link_width",
    "max_link_speed",
    "max_link_width",
    "enable",
    "revision",
]

FILE_GLOBS = [
    "/proc/meminfo",
    "/proc/modules",
    "/proc/cmdline",
    "/proc/mounts",
    "/proc/sys/kernel/osrelease",
    "/proc/sys/kernel/hostname",
    "/proc/sys/kernel/numa_balancing",
    "/proc/self/status",
    "/proc/self/cgroup",
    "/proc/self/mountinfo",
    "/proc/self/limits",
    "/proc/self/mounts",
    "/proc/1/cgroup",
    "/proc/sys/kernel/arch",
    "/.dockerenv",
    "/run/.containerenv",
    "/proc/driver/nvidia/version",
    "/proc/driver/nvidia/gpus/*/information",
    "/etc/os-release",
    "/usr/lib/os-release",
    "/etc/modprobe.d/*",
    "/usr/lib/modprobe.d/*",
    "/lib/modprobe.d/*",
    "/sys/devices/system/node/possible",
    "/sys/devices/system/node/online",
    "/sys/devices/system/node/node*/cpulist",
    "/sys/devices/system/node/node*/meminfo",
    "/sys/devices/system/node/node*/distance",
    "/sys/devices/system/cpu/online",
    "/sys/devices/system/cpu/possible",
    "/sys/devices/system/cpu/present",
    "/sys/devices/system/cpu/smt/active",
    "/sys/devices/system/cpu/smt/control",
    "/sys/devices/system/cpu/cpu*/topology/physical_package_id",
    "/sys/devices/system/cpu/cpu*/topology/core_id",
    "/sys/devices/system/cpu/cpu*/topology/thread_siblings_list",
    "/sys/devices/system/cpu/cpu*/topology/core_cpus_list",
    "/sys/devices/system/cpu/cpu*/cache/index*/level",
    "/sys/devices/system/cpu/cpu*/cache/index*/type",
    "/sys/devices/system/cpu/cpu*/cache/index*/shared_cpu_list",
    "/sys/devices/system/cpu/cpu*/cache/index*/size",
    "/sys/module/nvidia/version",
    "/sys/module/nvidia_uvm/version",
    "/sys/module/nouveau/version",
    "/sys/module/amdgpu/version",
    "/sys/module/nvidia_peermem/version",
    "/sys/kernel/iommu_groups/*/type",
    "/sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c",
    "/sys/fs/cgroup/cpuset.cpus.effective",
    "/sys/fs/cgroup/cpuset.mems.effective",
    "/sys/class/kfd/kfd/topology/nodes/*/properties",
    "/usr/local/cuda/version.json",
]

DEV_GLOBS = ["/dev/nvidia*", "/dev/kfd", "/dev/dri/renderD*"]

# Driver libraries are recorded as empty files: their names carry the user-space driver version.
LIB_GLOBS = [
    f"{d}/libnvidia-ml.so*"
    for d in (
        "/usr/lib/x86_64-linux-gnu",
        "/usr/lib/aarch64-linux-gnu",
        "/usr/lib64",
        "/usr/lib",
        "/usr/local/nvidia/lib64",
        "/lib/x86_64-linux-gnu",
    )
]

ENV_PREFIXES = (
    "CUDA_",
    "NCCL_",
    "HIP_",
    "ROCR_",
    "ROCM_",
    "PYTORCH_",
    "TORCH_",
    "NVIDIA_",
    "UCX_",
    "OMP_",
    "SLURM_",
    "LOCAL_RANK",
    "KMP_",
    "NSIGHT_",
    "COMPUTE_PROFILE",
    "OPENCL_PROFILE",
    "LD_LIBRARY_PATH",
)


def copy_file(src: str, dest_root: Path) -> None:
    target = dest_root / src.lstrip("/")
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        with open(src, "rb") as fh:
            data = fh.read(1 << 20)
    except OSError:
        return
    target.write_bytes(data)


def copy_link(src: str, dest_root: Path) -> None:
    """Recreate a symlink under dest_root pointing to the same relative target."""
    target = dest_root / src.lstrip("/")
    target.parent.mkdir(parents=True, exist_ok=True)
    link = os.readlink(src)
    if os.path.isabs(link):
        link = os.path.relpath(dest_root / link.lstrip("/"), target.parent)
    if target.is_symlink() or target.exists():
        return
    os.symlink(link, target)


def capture_pci(dest: Path) -> None:
    for dev_link in sorted(glob.glob("/sys/bus/pci/devices/*")):
        copy_link(dev_link, dest)
        real = os.path.realpath(dev_link)
        # the device and every ancestor up to the root bus: parents carry the slot's limits
        node = real
        while node.startswith("/sys/devices/pci") and os.path.basename(node) != "":
            for attr in PCI_ATTRS:
                path = os.path.join(node, attr)
                if os.path.isfile(path) and not (dest / path.lstrip("/")).exists():
                    copy_file(path, dest)
            driver = os.path.join(node, "driver")
            if os.path.islink(driver):
                copy_link(driver, dest)
            parent = os.path.dirname(node)
            if parent == node:
                break
            node = parent
        for sub in ("infiniband", "net"):
            for entry in glob.glob(os.path.join(real, sub, "*")):
                (dest / entry.lstrip("/")).mkdir(parents=True, exist_ok=True)
    for cls in ("infiniband", "net"):
        for entry in glob.glob(f"/sys/class/{cls}/*"):
            if os.path.islink(entry):
                copy_link(entry, dest)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dest")
    parser.add_argument("--scrub", action="store_true", help="replace the hostname")
    parser.add_argument("--no-nvml", action="store_true", help="do not record NVML answers")
    args = parser.parse_args()
    dest = Path(args.dest)
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    for pattern in FILE_GLOBS:
        for path in sorted(glob.glob(pattern)):
            if os.path.isfile(path):
                copy_file(path, dest)
    capture_pci(dest)
    for pattern in DEV_GLOBS:
        for path in glob.glob(pattern):
            target = dest / path.lstrip("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.touch()
    env = {k: v for k, v in os.environ.items() if k.startswith(ENV_PREFIXES)}
    (dest / "proc/self").mkdir(parents=True, exist_ok=True)
    (dest / "proc/self/environ").write_bytes(b"".join(f"{k}={v}".encode() + b"\0" for k, v in sorted(env.items())))
    if os.path.isdir("/sys/kernel"):
        (dest / "sys/kernel").mkdir(
            parents=True, exist_ok=True
        )  # its presence tells "no IOMMU groups" from "unreadable"
    for lib in LIB_GLOBS + [
        os.path.join(d, "libnvidia-ml.so*") for d in os.environ.get("LD_LIBRARY_PATH", "").split(":") if d
    ]:
        for path in glob.glob(lib):
            if os.path.islink(path):
                copy_link(path, dest)
            elif os.path.isfile(path):
                target = dest / path.lstrip("/")
                target.parent.mkdir(parents=True, exist_ok=True)
                target.touch()  # the name carries the version; the contents do not matter
    if args.scrub:
        hostname = dest / "proc/sys/kernel/hostname"
        if hostname.exists():
            hostname.write_text("gpu-host\n")
        for i, info in enumerate(sorted(dest.glob("proc/driver/nvidia/gpus/*/information"))):
            text = re.sub(r"GPU-[0-9a-fA-F-]{36}", f"GPU-00000000-0000-0000-0000-{i:012d}", info.read_text())
            info.write_text(text)
    if not args.no_nvml:
        try:
            sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
            from gpudoctor.probes.nvml import record  # type: ignore[import-not-found]

            (dest / "nvml.json").write_text(json.dumps(record(scrub=True), indent=1) + "\n")
        except Exception as exc:  # the capture of files is still useful
            print(f"capture_fixture: NVML answers not recorded: {exc}", file=sys.stderr)
    print(f"captured into {dest}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
