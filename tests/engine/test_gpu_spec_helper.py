"""gpu_spec(gpu, field): a GPU's row of the gpu_specs table, as the rules see it."""

from __future__ import annotations

from gpudoctor.engine.helpers.registry import bind
from gpudoctor.engine.views import FactView

ROWS = {
    "h100-sxm5-80gb": {"pci_ids": ["10de:2330"], "nvml_names": ["NVIDIA H100 80GB HBM3"], "memory_gb": 80,
                       "nvlink_links": 18},
    "h100-pcie-80gb": {"pci_ids": ["10de:2331"], "nvml_names": ["NVIDIA H100 PCIe"], "memory_gb": 80},
}
GPU_SPEC = bind({"gpu_specs": {"rows": ROWS}})["gpu_spec"]


def view(gpu: dict) -> FactView:
    return FactView(gpu, "gpu", [])


def test_matched_by_the_sysfs_pci_id_first() -> None:
    gpu = {"pci": {"vendor_id": "0x10de", "device_id": "0x2330"}, "name": "renamed", "pci_device_id": "0x233110de"}
    assert GPU_SPEC(view(gpu), "nvlink_links") == 18


def test_nvml_id_or_name_when_sysfs_has_no_device() -> None:
    assert GPU_SPEC(view({"pci_device_id": "0x233010de"}), "nvlink_links") == 18
    assert GPU_SPEC(view({"name": "NVIDIA H100 80GB HBM3"}), "nvlink_links") == 18


def test_none_when_no_row_or_no_field() -> None:
    assert GPU_SPEC(view({"pci": {"vendor_id": "0x10de", "device_id": "0x2331"}}), "nvlink_links") is None
    assert GPU_SPEC(view({"name": "Some New GPU"}), "nvlink_links") is None
    assert GPU_SPEC(view({}), "memory_gb") is None  # nothing identifies the GPU
