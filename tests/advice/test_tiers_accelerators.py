"""`gpudoctor tiers` on nodes without NVIDIA GPUs: AMD GPUs and Ascend NPUs, which NVML does not
name, are matched to the spec table by PCI id and named from rules/data/accelerator_pci_ids.yaml."""

from __future__ import annotations

import re

from gpudoctor.advice.gpu_specs import load_specs, machine_gpus, pci_name, table_path
from gpudoctor.cli.root import run
from gpudoctor.context import make_context
from gpudoctor.inputs import load_yaml_file
from gpudoctor.probes import collect_all
from tests.conftest import HOSTS, probed
from tests.helpers.amd_pci import MI300X, RADEON_7900, amd_root

NAMES = load_yaml_file(table_path("accelerator_pci_ids"), "data table")["rows"]


def test_an_ascend_nodes_npus_are_marked_and_named(capsys):
    gpus = machine_gpus(probed("ascend-910b-healthy"))
    assert len(gpus) == 8 and {g.spec_id for g in gpus} == {"ascend-910b"}
    assert gpus[0].label == "NPU 0 (0000:42:00.0)" and gpus[0].name == "Huawei Ascend 910B"
    assert run(["tiers", "--root", str(HOSTS / "ascend-910b-healthy"), "--no-color"]) == 0
    out = capsys.readouterr().out
    assert "◀ this machine: NPU 0, 1, 2, 3, 4, 5, 6, 7" in out
    assert "NPU 0 (0000:42:00.0) Huawei Ascend 910B → ascend-910b (by pci id)" in out


def test_an_amd_nodes_gpus_are_marked_by_pci_id_and_a_radeon_is_named(tmp_path, capsys):
    root = amd_root(tmp_path / "amd", [(MI300X, "amdgpu"), (RADEON_7900, "amdgpu")])
    gpus = machine_gpus(collect_all(make_context(root=str(root), timeout=20.0, nvml_timeout=5.0)))
    instinct, radeon = gpus
    assert (instinct.spec_id, instinct.matched_by, instinct.name) == ("mi300x", "pci id", "AMD Instinct MI300X")
    assert radeon.spec_id is None and radeon.name == "AMD Radeon RX 7900 XT/7900 XTX/7900 GRE/7900M"
    assert run(["tiers", "--root", str(root), "--no-color"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "◀ this machine: GPU 0000:42:00.0" in out
    assert "AMD GPU (0000:52:00.0) AMD Radeon RX 7900 XT/7900 XTX/7900 GRE/7900M is not in the table" in out


def test_a_cloud_vms_mi300x_virtual_function_is_an_mi300x():
    rows = load_specs()["rows"]
    assert "1002:74b5" in rows["mi300x"]["pci_ids"] and pci_name("1002:74b5") == "AMD Instinct MI300X VF"


def test_the_name_table_covers_every_amd_and_ascend_spec_row_with_its_vendor():
    for key, row in NAMES.items():
        assert re.fullmatch(r"[0-9a-f]{4}:[0-9a-f]{4}", key), key
        assert row["vendor"] == {"1002": "amd", "19e5": "huawei"}[key[:4]], key
    for spec_id, row in load_specs()["rows"].items():
        if row["vendor"] in ("amd", "huawei"):
            for pci in row["pci_ids"]:
                assert pci in NAMES and NAMES[pci]["vendor"] == row["vendor"], (spec_id, pci)
                assert NAMES[pci]["name"].startswith(row["name"].replace(" VF", "")), (spec_id, pci)


def test_nvidia_gpus_are_named_by_nvml_only():
    assert pci_name("10de:2335") is None and pci_name(None) is None
