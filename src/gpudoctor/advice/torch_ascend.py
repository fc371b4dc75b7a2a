"""fix --torch on a Huawei Ascend host: torch reaches the NPUs only through torch_npu, which is built
for one torch release (its first three numbers: torch_npu 2.1.0.post17 is for torch 2.1.0, as the
version table of Ascend Extension for PyTorch, github.com/Ascend/pytorch, pairs them) and one CANN."""

from __future__ import annotations

from typing import Any, Mapping

from ..escaping import printable
from ..model.gpus import pci_gpus
from .torch_inputs import public_version


def ascend_npus(facts: Mapping[str, Any]) -> int:
    """How many Ascend NPUs (Huawei processing accelerators) are on the PCI bus."""
    return sum(1 for dev in pci_gpus(facts).values() if dev.get("vendor") == "huawei")


def _built_for(torch_npu: Any) -> str | None:
    """The torch release (X.Y.Z) a torch_npu version names ("2.5.1.post3" -> "2.5.1"); None when
    it names no three-number release."""
    built_for = public_version(torch_npu)
    return str(built_for) if built_for is not None and len(built_for.release) == 3 else None


def npu_torch(facts: Mapping[str, Any]) -> str | None:
    """The torch release (X.Y.Z) the installed torch_npu was built for, if one is installed."""
    torch = facts.get("torch")
    return _built_for(torch.get("torch_npu_version") if isinstance(torch, Mapping) else None)


def ascend_note(facts: Mapping[str, Any], npus: int) -> str:
    """What to install on an Ascend host: torch_npu is built for one torch release (its first three
    numbers) and one CANN; this advice knows torch's releases, not Ascend's pairing table."""
    torch = facts.get("torch") if isinstance(facts.get("torch"), Mapping) else {}
    ascend = facts.get("ascend") if isinstance(facts.get("ascend"), Mapping) else {}
    torch_npu = torch.get("torch_npu_version") if isinstance(torch, Mapping) else None
    cann = ascend.get("cann_version") if isinstance(ascend, Mapping) else None
    for_cann = f" for CANN {printable(cann)}" if isinstance(cann, str) else " for the CANN installed"
    if isinstance(torch_npu, str):
        built_for = _built_for(torch_npu)
        have = f"torch_npu {printable(torch_npu)} is installed, built for torch {built_for or 'unknown'}: "
        pin = f"keep torch=={built_for} with it, or " if built_for else ""
    else:
        have, pin = "torch_npu is not installed: ", ""
    return (
        f"{npus} Ascend NPU(s): torch reaches them only through torch_npu, built for one torch release; "
        f"{have}{pin}install the torch and torch-npu pair{for_cann} from Ascend/pytorch's version table "
        "(https://github.com/Ascend/pytorch), not the newest torch"
    )
