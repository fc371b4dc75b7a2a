"""The Python API for job scripts: `from gpudoctor import gate`, GateFailed, and `python -m gpudoctor gate`."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.preflight.helpers import DEGRADED, HEALTHY, hung_nvml_root, write_policy


def test_gate_returns_the_report_on_go():
    from gpudoctor import gate

    report = gate(root=HEALTHY, expect_gpus=2, min_free_memory_gib=10)
    assert report.go and report.exit_code == 0
    assert {f.rule_id for f in report.findings} >= {"gate-gpu-count", "gate-free-memory", "pcie-width-degraded"}


def test_gate_raises_gate_failed_carrying_the_blocking_findings():
    from gpudoctor import GateFailed, gate

    with pytest.raises(GateFailed) as exc:
        gate(root=DEGRADED)
    assert [f.rule_id for f in exc.value.findings] == ["pcie-width-degraded"]
    assert exc.value.findings[0].subject.bus_id == "0000:9a:00.0"
    assert "pcie-width-degraded" in str(exc.value) and not exc.value.report.go


def test_no_raise_returns_the_no_go_report():
    from gpudoctor import gate

    report = gate(root=DEGRADED, raise_on_no_go=False)
    assert not report.go and report.lines[0].rule == "pcie-width-degraded"


def test_policy_from_a_file_a_mapping_and_keywords(tmp_path):
    from gpudoctor import GateFailed, gate

    path = write_policy(tmp_path, "expect:\n  gpus: 4\n")
    with pytest.raises(GateFailed):
        gate(root=HEALTHY, policy=path)
    assert gate(root=HEALTHY, policy=path, expect_gpus=2).go  # keywords override the file
    assert gate(root=DEGRADED, policy={"ignore": ["pcie"]}).go


def test_bad_input_raises_gate_error_not_gate_failed(tmp_path):
    from gpudoctor import GateError, GateFailed, gate

    with pytest.raises(GateError):
        gate(root=str(tmp_path / "missing"))
    with pytest.raises(GateError, match="gpu"):
        gate(root=HEALTHY, policy={"expect": {"gpu": 2}})
    with pytest.raises(GateError):
        gate(root=HEALTHY, fail_on="info")
    assert not issubclass(GateError, GateFailed)


def test_hung_nvml_fails_closed_through_the_api_within_the_deadline(tmp_path):
    import time

    from gpudoctor import GateFailed, gate

    started = time.monotonic()
    with pytest.raises(GateFailed) as exc:
        gate(root=hung_nvml_root(tmp_path), nvml_timeout=1)
    assert time.monotonic() - started < 3
    assert exc.value.findings[0].rule_id == "nvml-not-responding"
    assert gate(root=hung_nvml_root(tmp_path / "again"), nvml_timeout=1, fail_open=True).go


def _python(code: str) -> str:
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def test_importing_gpudoctor_does_not_load_the_gate():
    assert _python("import gpudoctor, sys; print('gpudoctor.preflight' in sys.modules)") == "False"


def test_gate_is_the_function_whichever_way_it_was_imported_first():
    code = (
        "import gpudoctor.preflight.api\n"  # the package first: the name `gate` is still the function
        "from gpudoctor import gate\n"
        f"print(gate(root={HEALTHY!r}).verdict)\n"
    )
    assert _python(code) == "go"


@pytest.mark.parametrize("root, status", [(HEALTHY, 0), (DEGRADED, 1)])
def test_python_m_gpudoctor_gate(root, status):
    proc = subprocess.run(
        [sys.executable, "-m", "gpudoctor", "gate", "--root", root], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == status, proc.stderr
    if status:
        assert proc.stdout.startswith("NO-GO  pcie-width-degraded")
