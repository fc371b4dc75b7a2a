"""The module-on-disk rules and nvidia-driver-not-loaded: one finding for one cause, and the
kernel-minimum table's shape."""

from __future__ import annotations

import re
from typing import Any

import pytest

from gpudoctor.engine.loader import load_rules
from gpudoctor.engine.runner import run_rules
from gpudoctor.findings import Status
from gpudoctor.tables import builtin_rules_dir, load_tables
from tests.conftest import probed
from tests.rules.cases import apply

RULESET = load_rules(include_plugins=False)
MODULE_RULES = ("nvidia-driver-not-loaded", "nvidia-module-missing-for-running-kernel", "nvidia-dkms-headers-missing")


def statuses(facts: Any) -> dict[str, Status]:
    rules = [r for r in RULESET.rules if r.id in MODULE_RULES]
    return {f.rule_id: f.status for f in run_rules(RULESET, facts, rules)}


@pytest.mark.parametrize("scenario, failing", [
    ("kernel-upgrade-no-module", "nvidia-module-missing-for-running-kernel"),
    ("dkms-headers-missing", "nvidia-dkms-headers-missing"),
    ("no-driver", "nvidia-driver-not-loaded"),
])
def test_one_cause_one_finding(scenario: str, failing: str) -> None:
    found = statuses(probed(scenario))
    assert [r for r, s in found.items() if s is Status.FAIL] == [failing], found


def test_the_generic_rule_speaks_in_a_container() -> None:
    # a container sees its image's /lib/modules, not the host's: no claim about the host's module
    facts = apply(probed("kernel-upgrade-no-module"), {"set": {"host.in_container": True}})
    found = statuses(facts)
    assert [r for r, s in found.items() if s is Status.FAIL] == ["nvidia-driver-not-loaded"], found


def test_the_generic_rule_speaks_when_nothing_is_installed() -> None:
    gone = {"unavailable": "not_found", "detail": "no /var/lib/dkms/nvidia"}
    facts = apply(probed("kernel-upgrade-no-module"), {"set": {
        "kernel_modules.other_kernels_with_module": [],
        **{f"kernel_modules.{k}": gone for k in ("dkms_versions", "dkms_version", "dkms_built_for_running",
                                                 "dkms_built_kernels", "dkms_make_log_error")},
    }})
    found = statuses(facts)
    assert [r for r, s in found.items() if s is Status.FAIL] == ["nvidia-driver-not-loaded"], found


def test_the_fix_names_the_dkms_step_and_the_log_line() -> None:
    (finding,) = [f for f in run_rules(RULESET, probed("kernel-upgrade-no-module"))
                  if f.rule_id == "nvidia-module-missing-for-running-kernel"]
    assert "sudo dkms install nvidia/550.90.07 -k $(uname -r)" in finding.fix
    assert "linux-headers-$(uname -r)" in finding.fix and "kernel-devel-$(uname -r)" in finding.fix
    assert "error: 'struct drm_driver' has no member named 'gem_prime_mmap'" in finding.message
    assert "5.15.0-105-generic" in finding.message


def test_kernel_minimum_rows() -> None:
    table = load_tables(builtin_rules_dir() / "data")["nvidia_kernel_minimums"]
    rows = table["rows"]
    branches = [int(k) for k in rows]
    assert branches == sorted(branches)
    floors = []
    for branch, row in rows.items():
        assert re.fullmatch(r"\d+\.\d+", row["min_kernel"]), branch
        assert row["release_checked"].split(".")[0] == branch
        floors.append(tuple(int(p) for p in row["min_kernel"].split(".")))
    assert floors == sorted(floors), "a newer branch never supports an older kernel"
    assert rows["550"]["min_kernel"] == "3.10" and rows["555"]["min_kernel"] == "4.15"


def test_secure_boot_is_not_blamed_for_a_module_that_is_not_there() -> None:
    rules = [r for r in RULESET.rules if r.id in (*MODULE_RULES, "secure-boot-blocks-nvidia-module")]
    facts = apply(probed("kernel-upgrade-no-module"), {"set": {"modules.secure_boot": True}})
    found = {f.rule_id: f.status for f in run_rules(RULESET, facts, rules)}
    assert [r for r, s in found.items() if s is Status.FAIL] == ["nvidia-module-missing-for-running-kernel"], found
    # the module is there for this kernel and still not loaded: then Secure Boot is the suspect
    module = "/lib/modules/5.15.0-112-generic/updates/dkms/nvidia.ko"
    facts = apply(facts, {"set": {"kernel_modules.running_has_module": True, "kernel_modules.running_module": module}})
    found = {f.rule_id: f.status for f in run_rules(RULESET, facts, rules)}
    assert found["secure-boot-blocks-nvidia-module"] is Status.FAIL, found
