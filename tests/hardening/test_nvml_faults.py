"""Every NVML error kind from nvmlInit and from each call the probe makes, one GPU at a time.

What a user depends on: the other GPU is still read in full; the facts the failed call feeds
are unavailable with the right reason (and nothing else is lost, unless the GPU itself is);
the rules that need those facts are unknown, never pass or fail; a lost GPU and a
driver/library mismatch get findings of their own. tests/probes/nvml/ has the
probe-level basics (one call, hangs, the recorder); this file sweeps every call and kind.
"""

from __future__ import annotations

import copy
import functools
import json
import re
from pathlib import Path
from typing import Any

import psutil
import pytest

from gpudoctor.cli.root import run
from gpudoctor.engine.loader import load_rules
from gpudoctor.engine.runner import run_rules
from gpudoctor.facts import Unavailable
from gpudoctor.findings import Cause, Finding, Status
from gpudoctor.probes.nvml.errors import error_name
from gpudoctor.probes.nvml.fields import GPU_FIELDS, read_nvml
from gpudoctor.probes.nvml.replay import ReplayNVML
from gpudoctor.probes.nvml.section import Assembler
from tests.conftest import probed
from tests.hardening.roots import light_copy
from tests.probes.nvml.answers import HEALTHY, healthy, probe, set_answer

# Which facts of a GPU entry each per-GPU call feeds (keys as recorded: name(args)).
CALL_FIELDS: dict[str, tuple[str, ...]] = {
    "nvmlDeviceGetName": ("name",),
    "nvmlDeviceGetUUID": ("uuid",),
    "nvmlDeviceGetSerial": ("serial",),
    "nvmlDeviceGetPciInfo": ("bus_id", "pci_device_id"),
    "nvmlDeviceGetCudaComputeCapability": ("compute_capability",),
    "nvmlDeviceGetArchitecture": ("architecture",),
    "nvmlDeviceGetMemoryInfo": ("memory_total_bytes", "memory_used_bytes"),
    "nvmlDeviceGetCurrPcieLinkGeneration": ("pcie_gen",),
    "nvmlDeviceGetMaxPcieLinkGeneration": ("pcie_max_gen",),
    "nvmlDeviceGetGpuMaxPcieLinkGeneration": ("pcie_gpu_max_gen",),
    "nvmlDeviceGetCurrPcieLinkWidth": ("pcie_width",),
    "nvmlDeviceGetMaxPcieLinkWidth": ("pcie_max_width",),
    "nvmlDeviceGetPcieReplayCounter": ("pcie_replay_counter",),
    "nvmlDeviceGetPerformanceState": ("pstate",),
    "nvmlDeviceGetCurrentClocksEventReasons": ("clocks_event_reasons",),
    "nvmlDeviceGetTemperature(0)": ("temperature_c",),
    "nvmlDeviceGetTemperatureThreshold(1)": ("temperature_slowdown_c",),
    "nvmlDeviceGetTemperatureThreshold(0)": ("temperature_shutdown_c",),
    "nvmlDeviceGetTemperatureThreshold(3)": ("temperature_max_operating_c",),
    "nvmlDeviceGetPowerUsage": ("power_draw_w",),
    "nvmlDeviceGetEnforcedPowerLimit": ("power_limit_w",),
    "nvmlDeviceGetPowerManagementDefaultLimit": ("power_default_limit_w",),
    "nvmlDeviceGetPersistenceMode": ("persistence_mode",),
    "nvmlDeviceGetEccMode": ("ecc_enabled", "ecc_pending_enabled"),
    "nvmlDeviceGetTotalEccErrors(1,0)": ("ecc_uncorrected_volatile",),
    "nvmlDeviceGetTotalEccErrors(1,1)": ("ecc_uncorrected_aggregate",),
    "nvmlDeviceGetTotalEccErrors(0,0)": ("ecc_corrected_volatile",),
    "nvmlDeviceGetRetiredPages(0)": ("retired_pages_sbe",),
    "nvmlDeviceGetRetiredPages(1)": ("retired_pages_dbe",),
    "nvmlDeviceGetRetiredPagesPendingStatus": ("retired_pages_pending",),
    "nvmlDeviceGetRemappedRows": (
        "remapped_rows_correctable", "remapped_rows_uncorrectable", "remapped_rows_pending", "remapped_rows_failed",
    ),
    "nvmlDeviceGetMigMode": ("mig_enabled", "mig_pending_enabled"),
    "nvmlDeviceGetFieldValues(230)": ("recovery_action",),
    **{
        f"nvmlDeviceGetNvLinkState({link})": (
            "nvlink_links", "nvlink_active", "nvlink_peers", "nvlink_errors", "nvlink_link_errors"
        )
        for link in range(18)
    },
    **{
        f"nvmlDeviceGetNvLinkErrorCounter({link},{c})": ("nvlink_errors", "nvlink_link_errors")
        for link in range(18)
        for c in range(4)
    },
    "nvmlDeviceGetGpuFabricInfoV(3)": (
        "fabric_state", "fabric_status", "fabric_clique_id", "fabric_cluster_uuid", "fabric_health",
    ),
    # asked of the other GPU: PEER stands for its index (see recorded_key)
    "nvmlDeviceGetP2PStatus(PEER,2)": ("nvlink_peers",),
    "nvmlDeviceGetComputeMode": ("compute_mode",),
    "nvmlDeviceGetCpuAffinityWithinScope(0)": ("cpu_affinity",),
    "nvmlDeviceGetMemoryAffinity(0)": ("memory_affinity",),
    "nvmlDeviceGetNumaNodeId": ("numa_node_id",),
    "nvmlDeviceGetUtilizationRates": ("utilization_gpu_pct",),
    "nvmlDeviceGetComputeRunningProcesses": ("processes",),
}
SYSTEM_CALLS = {
    "nvmlSystemGetDriverVersion": "driver_version",
    "nvmlSystemGetCudaDriverVersion": "cuda_driver_version",
    "nvmlSystemGetNVMLVersion": "nvml_version",
    "nvmlDeviceGetCount": "device_count",
}

# NVML error kind -> (reason of the facts it costs, the GPU counts as lost). The list
# first (library not found, driver not loaded, no permission, GPU lost, not supported, function
# not found, unknown, insufficient size, mismatch, timeout), then the other codes pynvml raises.
ERRORS: dict[str, tuple[str, bool]] = {
    "NVML_ERROR_LIBRARY_NOT_FOUND": ("error", False),
    "NVML_ERROR_DRIVER_NOT_LOADED": ("driver_not_loaded", False),
    "NVML_ERROR_NO_PERMISSION": ("no_permission", False),
    "NVML_ERROR_GPU_IS_LOST": ("error", True),
    "NVML_ERROR_NOT_SUPPORTED": ("not_supported", False),
    "NVML_ERROR_FUNCTION_NOT_FOUND": ("not_supported", False),
    "NVML_ERROR_UNKNOWN": ("error", True),
    "NVML_ERROR_INSUFFICIENT_SIZE": ("error", False),
    "NVML_ERROR_LIB_RM_VERSION_MISMATCH": ("error", False),
    "NVML_ERROR_TIMEOUT": ("timeout", False),
    "NVML_ERROR_UNINITIALIZED": ("error", False),
    "NVML_ERROR_INVALID_ARGUMENT": ("error", False),
    "NVML_ERROR_NOT_FOUND": ("error", False),
    "NVML_ERROR_INSUFFICIENT_POWER": ("error", False),
    "NVML_ERROR_IRQ_ISSUE": ("error", False),
    "NVML_ERROR_CORRUPTED_INFOROM": ("error", False),
    "NVML_ERROR_RESET_REQUIRED": ("error", True),
    "NVML_ERROR_OPERATING_SYSTEM": ("error", False),
}

# Calls with an older name to fall back to when the driver lacks the newer one.
FALLBACKS = {
    "nvmlDeviceGetCurrentClocksEventReasons": ("nvmlDeviceGetCurrentClocksThrottleReasons", 0x4, 0x4),
    "nvmlDeviceGetCpuAffinityWithinScope(0)": ("nvmlDeviceGetCpuAffinity", [0xF], [0, 1, 2, 3]),
}


def error(name: str) -> dict[str, str]:
    return {"error": name}


def recorded_key(call: str, gpu: int) -> str:
    """CALL_FIELDS' key as GPU `gpu` of the two asks it (PEER: the other GPU)."""
    return call.replace("PEER", str(1 - gpu))


def table_key(key: str) -> str:
    """A recorded key -> its CALL_FIELDS form."""
    return re.sub(r"^nvmlDeviceGetP2PStatus\(\d+,", "nvmlDeviceGetP2PStatus(PEER,", key)


def read(answers: dict[str, Any], parallel: bool = True) -> dict[str, Any]:
    """The nvml section, read in this process by the very code the probe's child runs."""
    sink = Assembler()
    read_nvml(ReplayNVML(answers), sink, 1, 1, parallel=parallel)
    sink.finished()
    return sink.result()


@functools.cache
def call_order() -> list[str]:
    backend = ReplayNVML(healthy())
    read_nvml(backend, Assembler(), 1, 1, parallel=False)
    return list(dict.fromkeys(table_key(call) for call in backend.calls))


@functools.cache
def field_order() -> list[str]:
    """GPU fields in the order the probe reads them."""
    out: list[str] = []
    for call in call_order():
        for field in CALL_FIELDS.get(call, ()):
            if field not in out:
                out.append(field)
    return out


def test_the_tables_cover_every_call_the_probe_makes() -> None:
    calls = set(call_order()) - {"nvmlInit", "nvmlDeviceGetHandleByIndex"}
    assert calls == set(CALL_FIELDS) | set(SYSTEM_CALLS)
    assert set(field_order()) == set(GPU_FIELDS)
    import pynvml  # type: ignore[import-untyped]

    for name in ERRORS:
        assert isinstance(getattr(pynvml, name), int), name
    # every code pynvml knows has its name in the probe's table, so a detail never says "error 6"
    codes = {v: k for k, v in vars(pynvml).items() if k.startswith("NVML_ERROR_") and isinstance(v, int)}
    assert {code: error_name(code) for code in codes} == codes


def check_gpu_call_fault(gpu: int, call: str, kind: str) -> list[str]:
    """The problems (empty: none) with the section read when `call` fails with `kind` on `gpu`."""
    answers = set_answer(healthy(), gpu, recorded_key(call, gpu), error(kind))
    fallback = FALLBACKS.get(call)
    if fallback and kind == "NVML_ERROR_FUNCTION_NOT_FOUND":
        answers["devices"][gpu][fallback[0]] = fallback[1]
    section = read(answers, parallel=False)  # (the GPU threads' own tests are in tests/probes)
    problems: list[str] = []
    if section["status"] != "ok":
        problems.append(f"status {section['status']}")
    if section["gpus"][1 - gpu] != HEALTHY["gpus"][1 - gpu]:
        problems.append("the other GPU was not read in full")
    entry, want = section["gpus"][gpu], HEALTHY["gpus"][gpu]
    reason, lost = ERRORS[kind]
    affected = CALL_FIELDS[call]
    link_absent = call.startswith("nvmlDeviceGetNvLinkState") and kind in (
        "NVML_ERROR_NOT_SUPPORTED", "NVML_ERROR_INVALID_ARGUMENT"
    )
    if entry["lost"] is not lost:
        problems.append(f"lost is {entry['lost']}")
    order = field_order()
    first = min(order.index(f) for f in affected)
    for field in order:
        got = entry[field]
        if field in affected:
            if fallback and kind == "NVML_ERROR_FUNCTION_NOT_FOUND":
                ok = got == fallback[2]  # an older driver: the older call answers
            elif link_absent:
                # that link does not exist on this GPU: one fewer, the same peers through the others
                if field == "nvlink_link_errors":  # that link's counters are not read
                    absent = int(call.split("(")[1].rstrip(")"))
                    ok = got == [e for e in want[field] if e["link"] != absent]
                else:
                    ok = got == (want[field] if field in ("nvlink_peers", "nvlink_errors") else want[field] - 1)
            else:
                ok = isinstance(got, Unavailable) and got.reason == reason and call.split("(")[0] in got.detail
                if reason == "error" or reason == "timeout" or reason == "driver_not_loaded":
                    ok = ok and kind in got.detail  # the NVML code is named for a person to look up
        elif lost and order.index(field) > first:
            ok = isinstance(got, Unavailable) and got.detail.startswith(f"not read: GPU {gpu} was lost")
        else:
            ok = got == want[field]
        if not ok:
            problems.append(f"{field} = {got!r}")
    return problems


@pytest.mark.parametrize("gpu", [0, 1])
def test_every_error_of_every_gpu_call(gpu: int) -> None:
    failures = []
    for call in CALL_FIELDS:
        for kind in ERRORS:
            problems = check_gpu_call_fault(gpu, call, kind)
            if problems:
                failures.append(f"{call} {kind}: {'; '.join(problems)}")
    assert not failures, "\n".join(failures[:20])


@pytest.mark.parametrize("gpu", [0, 1])
@pytest.mark.parametrize("kind", list(ERRORS))
def test_handle_failure_marks_only_that_gpu_lost(gpu: int, kind: str) -> None:
    section = read(set_answer(healthy(), gpu, "nvmlDeviceGetHandleByIndex", error(kind)))
    entry = section["gpus"][gpu]
    assert entry["lost"] is True and entry["index"] == gpu
    for field in GPU_FIELDS:
        fact = entry[field]
        assert isinstance(fact, Unavailable) and fact.reason == ERRORS[kind][0]
        assert fact.detail.startswith(f"no NVML handle for GPU {gpu}: ") and "nvmlDeviceGetHandleByIndex" in fact.detail
    # the other GPU is read in full; a GPU NVML cannot reach is not its NVLink peer
    assert section["gpus"][1 - gpu] == dict(HEALTHY["gpus"][1 - gpu], nvlink_peers=[])


@pytest.mark.parametrize("kind", list(ERRORS))
@pytest.mark.parametrize("call", list(SYSTEM_CALLS))
def test_system_call_errors(call: str, kind: str) -> None:
    section = read(set_answer(healthy(), None, call, error(kind)))
    fact = section[SYSTEM_CALLS[call]]
    assert isinstance(fact, Unavailable) and fact.reason == ERRORS[kind][0] and call in fact.detail
    if call == "nvmlDeviceGetCount":
        # without a count there are no GPUs to read: say why, do not report zero GPUs
        assert section["status"] == "error" and call in section["error"]
        assert isinstance(section["gpus"], Unavailable) and section["gpus"].reason == ERRORS[kind][0]
    else:
        assert section["status"] == "ok" and section["gpus"] == HEALTHY["gpus"]


# --- through the rules ----------------------------------------------------------------------

RULES = load_rules(include_plugins=False)


def snapshot_with(section: dict[str, Any]) -> dict[str, Any]:
    facts = probed("healthy-2gpu")
    facts["nvml"] = section
    return facts


def by_subject(findings: list[Finding]) -> dict[tuple[str, str], Finding]:
    return {(f.rule_id, f.subject.label): f for f in findings}


BASELINE = by_subject(run_rules(RULES, probed("healthy-2gpu")))
LABELS = {0: "GPU 0 (0000:18:00.0)", 1: "GPU 1 (0000:9a:00.0)"}


def test_baseline_has_no_unknowns_or_errors() -> None:
    statuses = {f.status for f in BASELINE.values()}
    assert Status.UNKNOWN not in statuses and Status.ERROR not in statuses
    assert {label for _, label in BASELINE} >= set(LABELS.values())


def rule_problems(findings: list[Finding], gpu: int, fields: tuple[str, ...], reason: str) -> list[str]:
    """Rules reading a failed fact of `gpu` are unknown; everything about the other GPU is as before."""
    problems = []
    got = by_subject(findings)
    assert set(got) == set(BASELINE)
    failed = {f"gpu.{field}" for field in fields}
    direct = {rule.id: set(rule.facts_used) for rule in RULES.rules}
    for key, finding in got.items():
        before = BASELINE[key]
        if finding.status is Status.ERROR:
            problems.append(f"{key}: rule error {finding.detail}")
        elif key[1] == LABELS[gpu] and failed & direct[key[0]] & {path for path, _ in before.evidence}:
            # the rule's conditions read the failed fact itself (helpers may fall back on others)
            rule = RULES.by_id(key[0])
            guarded = rule is not None and rule.applies is not None and (
                "supported(" in rule.applies.source or "available(" in rule.applies.source
            )
            allowed = {Status.UNKNOWN, Status.SKIP} if guarded else {Status.UNKNOWN}
            if finding.status not in allowed:
                problems.append(f"{key}: {finding.status.value} ({finding.message})")
            elif finding.status is Status.UNKNOWN and finding.cause != Cause("nvml", reason):
                problems.append(f"{key}: cause {finding.cause!r}")
        elif key[1] == LABELS[1 - gpu] and finding.status is not before.status:
            problems.append(f"{key} (other GPU): {before.status.value} -> {finding.status.value}")
    return problems


@pytest.mark.parametrize("gpu", [0, 1])
def test_rules_needing_a_failed_fact_are_unknown(gpu: int) -> None:
    """Every call failing (no permission) in turn: only the rules that read its facts, on that GPU,
    lose their verdict."""
    failures = []
    for call, fields in CALL_FIELDS.items():
        if call.startswith("nvmlDeviceGetNvLinkState(") and call != "nvmlDeviceGetNvLinkState(0)":
            continue
        section = read(set_answer(healthy(), gpu, call, error("NVML_ERROR_NO_PERMISSION")))
        problems = rule_problems(run_rules(RULES, snapshot_with(section)), gpu, fields, "no_permission")
        failures += [f"{call}: {p}" for p in problems]
    assert not failures, "\n".join(failures[:20])


@pytest.mark.parametrize("gpu", [0, 1])
@pytest.mark.parametrize("kind", [k for k, (_, lost) in ERRORS.items() if not lost])
def test_each_error_kind_makes_pcie_rules_unknown(gpu: int, kind: str) -> None:
    section = read(set_answer(healthy(), gpu, "nvmlDeviceGetCurrPcieLinkWidth", error(kind)))
    findings = run_rules(RULES, snapshot_with(section))
    assert not rule_problems(findings, gpu, ("pcie_width",), ERRORS[kind][0])
    width = by_subject(findings)[("pcie-width-degraded", LABELS[gpu])]
    assert width.status is Status.UNKNOWN and kind in width.detail or ERRORS[kind][0] in width.message


@pytest.mark.parametrize("gpu", [0, 1])
@pytest.mark.parametrize("kind", [k for k, (_, lost) in ERRORS.items() if lost])
@pytest.mark.parametrize("call", ["nvmlDeviceGetName", "nvmlDeviceGetPowerUsage", "nvmlDeviceGetNumaNodeId"])
def test_lost_gpu_gets_its_own_finding(gpu: int, kind: str, call: str) -> None:
    section = read(set_answer(healthy(), gpu, call, error(kind)))
    findings = by_subject(run_rules(RULES, snapshot_with(section)))
    lost = findings[("gpu-lost", LABELS[gpu])]
    assert lost.status is Status.FAIL and LABELS[gpu] in lost.message
    assert "dmesg" in lost.fix
    assert findings[("gpu-lost", LABELS[1 - gpu])].status is Status.PASS
    for (rule_id, label), finding in findings.items():
        assert finding.status is not Status.ERROR, (rule_id, finding.detail)
        if label == LABELS[1 - gpu]:
            assert finding.status is BASELINE[(rule_id, label)].status, rule_id


def test_lost_handle_gets_its_own_finding() -> None:
    section = read(set_answer(healthy(), 1, "nvmlDeviceGetHandleByIndex", error("NVML_ERROR_GPU_IS_LOST")))
    findings = by_subject(run_rules(RULES, snapshot_with(section)))
    assert findings[("gpu-lost", LABELS[1])].status is Status.FAIL
    assert findings[("gpu-lost", LABELS[0])].status is Status.PASS
    assert findings[("pcie-width-degraded", LABELS[1])].status is Status.UNKNOWN
    assert findings[("pcie-width-degraded", LABELS[0])].status is Status.PASS


# --- nvmlInit ---------------------------------------------------------------------------------

# kind -> (nvml.status, reason of every NVML fact, the rule that must fail on it, if any)
INIT: dict[str, tuple[str, str, str | None]] = {
    "NVML_ERROR_LIBRARY_NOT_FOUND": ("library_not_found", "not_found", None),
    "NVML_ERROR_DRIVER_NOT_LOADED": ("driver_not_loaded", "driver_not_loaded", None),
    "NVML_ERROR_NO_PERMISSION": ("no_permission", "no_permission", None),
    "NVML_ERROR_GPU_IS_LOST": ("error", "error", None),
    "NVML_ERROR_NOT_SUPPORTED": ("error", "error", None),
    "NVML_ERROR_FUNCTION_NOT_FOUND": ("error", "error", None),
    "NVML_ERROR_UNKNOWN": ("error", "error", None),
    "NVML_ERROR_INSUFFICIENT_SIZE": ("error", "error", None),
    "NVML_ERROR_LIB_RM_VERSION_MISMATCH": ("driver_library_mismatch", "error", "nvml-driver-library-mismatch"),
    "NVML_ERROR_TIMEOUT": ("timeout", "timeout", "nvml-not-responding"),
    "NVML_ERROR_UNINITIALIZED": ("error", "error", None),
}


@pytest.mark.parametrize("kind", list(INIT))
def test_init_error_end_to_end(tmp_path: Path, kind: str) -> None:
    status, reason, failing = INIT[kind]
    section = probe(tmp_path, dict(healthy(), init=error(kind)))  # through the forked child
    assert section["status"] == status and kind in section["error"]
    for key in ("driver_version", "cuda_driver_version", "nvml_version", "device_count", "gpus"):
        assert isinstance(section[key], Unavailable) and section[key].reason == reason
    findings = run_rules(RULES, snapshot_with(section))
    failed = {f.rule_id for f in findings if f.status is Status.FAIL}
    assert failed == ({failing} if failing else set())
    for finding in findings:
        assert finding.status is not Status.ERROR, (finding.rule_id, finding.detail)
        if finding.subject.kind == "gpu" and finding.rule_id != "nouveau-bound-to-gpu":
            # both GPUs are still on the PCI bus: judged from sysfs or unknown, never lost from view
            assert finding.status in (Status.UNKNOWN, Status.SKIP, Status.PASS), finding.rule_id
            if finding.status is Status.UNKNOWN and finding.cause and finding.cause.source == "nvml":
                assert finding.cause == Cause("nvml", reason) and kind in finding.detail
    gpus = {f.subject.label for f in findings if f.subject.kind == "gpu"}
    assert gpus == {"GPU 0000:18:00.0", "GPU 0000:9a:00.0"}


# --- the whole command, forked child and all --------------------------------------------------


@pytest.fixture
def root(tmp_path: Path) -> tuple[Path, Path]:
    return light_copy("healthy-2gpu", tmp_path / "host")


def check_json(capsys: pytest.CaptureFixture[str], root: tuple[Path, Path]) -> tuple[int, dict[str, Any]]:
    code = run(["check", "--root", str(root[0]), "--sysfs-root", str(root[1]), "--format", "json"])
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, json.loads(out)


def test_check_with_a_lost_gpu(root: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    answers = set_answer(healthy(), 1, "nvmlDeviceGetTemperature(0)", error("NVML_ERROR_GPU_IS_LOST"))
    (root[0] / "nvml.json").write_text(json.dumps(answers))
    code, report = check_json(capsys, root)
    assert code == 1
    failed = [(f["rule"], f["subject"]["bus_id"]) for f in report["findings"] if f["status"] == "fail"]
    assert failed == [("gpu-lost", "0000:9a:00.0")]
    assert psutil.Process().children() == []


def test_check_with_a_driver_library_mismatch(root: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    (root[0] / "nvml.json").write_text(json.dumps(dict(healthy(), init=error("NVML_ERROR_LIB_RM_VERSION_MISMATCH"))))
    code, report = check_json(capsys, root)
    assert code == 1
    failed = [f for f in report["findings"] if f["status"] == "fail"]
    assert [f["rule"] for f in failed] == ["nvml-driver-library-mismatch"]
    assert "reboot" in failed[0]["fix"].lower()
    assert report["summary"]["unknown"] > 0  # what NVML would have said is not guessed
    assert psutil.Process().children() == []


def test_sweep_leaves_the_healthy_answers_alone() -> None:
    before = copy.deepcopy(healthy())
    check_gpu_call_fault(0, "nvmlDeviceGetName", "NVML_ERROR_UNKNOWN")
    assert healthy() == before
