"""A small hand-made AMD host root: healthy-2gpu's machine with its two H100s taken out and AMD
GPUs put in on the PCI bus (sysfs only: vendor 0x1002, class, device id, driver link), for the
tests of what reads the PCI bus on a node without NVIDIA GPUs (tiers, gate --expect-gpus,
select). Full MI300X fixture hosts with amdgpu's own sysfs files are tests/fixtures' business.

Device ids are pci.ids' (pciutils/pciids): 0x74a1 Instinct MI300X, 0x744c Radeon RX 7900 XT/XTX.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from tests.helpers.hosts import make_hosts
from tests.helpers.tree import write_tree

NVIDIA_GPUS = ("0000:18:00.0", "0000:9a:00.0")
MI300X = "0x74a1"
RADEON_7900 = "0x744c"


def amd_root(root: Path, gpus: Sequence[tuple[str, str]] = ((MI300X, "amdgpu"), (MI300X, "amdgpu"))) -> Path:
    """Write the host under root: one AMD GPU per (device id, driver) in gpus ("" for no driver),
    each behind its own root port on buses 0x41, 0x51, ..., half of them on each NUMA node."""
    mh = make_hosts()
    spec = {k: v for k, v in mh.healthy_2gpu().items() if not any(bdf in k for bdf in NVIDIA_GPUS)}
    for i, (device, driver) in enumerate(gpus):
        bus = f"{0x41 + 0x10 * i:02x}"
        node = 0 if i < max(len(gpus) // 2, 1) else 1
        cpus = mh.cpulist(list(range(16 * node, 16 * node + 16)))
        port = f"sys/devices/pci0000:{bus}/0000:{bus}:00.0"
        spec.update(mh.pci_function(port, cls="0x060400", vendor="0x8086", device="0x352a", numa_node=node,
                                    local_cpus=cpus, speed=mh.GEN4, width=16, driver="pcieport"))
        below = f"{int(bus, 16) + 1:02x}"
        spec.update(mh.pci_function(f"{port}/0000:{below}:00.0", cls="0x120000" if device == MI300X else "0x030000",
                                    vendor="0x1002", device=device, numa_node=node, local_cpus=cpus,
                                    speed=mh.GEN4, width=16, driver=driver or None))
    write_tree(root, spec)
    return root
