"""findings.Cause: why an unknown finding could not be judged, said once for people and once as JSON."""

from __future__ import annotations

from gpudoctor.engine.loader import load_rules
from gpudoctor.engine.runner import run_rules
from gpudoctor.findings import HOST, MAX_LABEL_CHARS, Cause, Finding, ReportBudget, Severity, Status
from tests.conftest import probed


def test_a_cause_in_words_names_the_source_and_the_reason():
    assert Cause("nvml", "driver_not_loaded").words() == "NVML facts unavailable (driver_not_loaded)"
    assert Cause("torch", "timeout").words() == "torch facts unavailable (timeout)"
    assert Cause("kernel_log", "no_permission").words() == "kernel_log facts unavailable (no_permission)"
    # the device test is not a facts section: its cause says what happened to it
    assert Cause("deep", "timeout", "hung").words() == "the device test: timeout (hung)"
    assert Cause("deep", "timeout", "hung").said == "timeout (hung)" and Cause("pci", "error").name == "PCI"


def test_a_cause_as_json_is_its_parts():
    assert Cause("nvml", "timeout").to_json() == {"source": "nvml", "reason": "timeout"}
    assert Cause("deep", "timeout", "hung").to_json() == {"source": "deep", "reason": "timeout", "note": "hung"}


def test_equal_causes_fold_and_a_note_tells_them_apart():
    assert len({Cause("nvml", "timeout"), Cause("nvml", "timeout")}) == 1
    assert Cause("deep", "timeout") != Cause("deep", "timeout", "hung")


def test_a_long_cause_is_bounded_with_the_finding():
    finding = Finding("r", "t", "driver", Severity.ERROR, Status.UNKNOWN, HOST, "m", cause=Cause("x" * 10_000, "y"))
    admitted = ReportBudget().admit(finding)
    assert admitted.cause is not None and len(admitted.cause.source) < MAX_LABEL_CHARS + 64
    assert admitted.cause.reason == "y"


def test_the_engine_gives_unknown_findings_the_source_and_reason_of_the_missing_fact():
    findings = run_rules(load_rules(include_plugins=False), probed("no-driver"))
    unknown = [f for f in findings if f.status is Status.UNKNOWN]
    assert unknown and all(f.cause is not None for f in unknown)
    assert Cause("nvml", "driver_not_loaded") in {f.cause for f in unknown}
    judged = [f for f in findings if f.status is not Status.UNKNOWN]
    assert all(f.cause is None and f.to_json()["cause"] is None for f in judged)
    first = next(f for f in unknown if f.cause == Cause("nvml", "driver_not_loaded"))
    assert first.to_json()["cause"] == {"source": "nvml", "reason": "driver_not_loaded"}
