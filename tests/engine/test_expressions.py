"""The rule expression language: what it evaluates, what it refuses at load."""

from __future__ import annotations

import time

import pytest
from simpleeval import IterableTooLong

from gpudoctor.engine import factpaths
from gpudoctor.engine.expressions import (
    ExpressionError,
    FactUnavailable,
    compile_expression,
    compile_template,
    section_views,
    wrap,
)
from gpudoctor.engine.helpers import arch_supported, bind, version, visible_devices_problem
from gpudoctor.facts import Unavailable

ROOTS = dict(factpaths.section_roots())
ROOTS["gpu"] = factpaths.subject_schema("gpu")
ROOTS["gpus"] = {"type": "array"}

FACTS = {
    "host": {"cpu_count": 64, "allowed_cpus": [0, 1, 2], "env": {"CUDA_VISIBLE_DEVICES": "0,1"}},
    "nvml": {"status": "ok", "driver_version": "550.90.07", "cuda_driver_version": Unavailable("timeout", "hung")},
    "torch": Unavailable("not_found", "no torch"),
}
GPU = {"pcie_width": 8, "pcie_max_width": 16, "name": "H100", "temperature_c": Unavailable("not_supported", "n/a")}
TABLES = {
    "t": {"rows": {"12.4": {"min": "550.54.14"}}},
    "bits": {"rows": {"0x8": {"name": "HwSlowdown"}, "0x40": {"name": "HwThermalSlowdown"}}},
}
FUNCS = bind(TABLES)


def run(source: str, reads: list | None = None):
    reads = [] if reads is None else reads
    names = section_views(FACTS, factpaths.SECTIONS, reads)
    names["gpu"] = wrap(GPU, "gpu", reads)
    names["gpus"] = []
    return compile_expression(source, ROOTS).evaluate(names, FUNCS)


def test_compares_facts_and_records_evidence():
    reads: list = []
    assert run("gpu.pcie_width < gpu.pcie_max_width", reads) is True
    assert reads == [("gpu.pcie_width", 8), ("gpu.pcie_max_width", 16)]


def test_versions_compare_numerically_not_as_strings():
    assert run('version(nvml.driver_version) >= version("550.9")') is True
    assert version("580.65.06") > version("580.9")
    assert version("6.8.0-45-generic") == version("6.8.0")


def test_unavailable_fact_raises_for_unknown_status():
    with pytest.raises(FactUnavailable) as exc:
        run("gpu.temperature_c > 80")
    assert exc.value.path == "gpu.temperature_c"
    assert exc.value.unavailable.reason == "not_supported"


def test_unavailable_section_makes_any_path_unavailable():
    with pytest.raises(FactUnavailable) as exc:
        run('torch.build == "cpu"')
    assert exc.value.path == "torch.build"


def test_short_circuit_avoids_unneeded_unavailable_fact():
    assert run("gpu.pcie_width == 8 or gpu.temperature_c > 80") is True


def test_available_reports_known_facts_without_raising():
    assert run("available(nvml.driver_version)") is True
    assert run("available(nvml.cuda_driver_version)") is False
    assert run("available(torch.version)") is False


def test_env_is_an_open_map_where_unset_is_none():
    assert run("host.env.CUDA_LAUNCH_BLOCKING == None") is True
    assert run('host.env.CUDA_VISIBLE_DEVICES == "0,1"') is True


def test_lookup_and_flag_names():
    assert run('lookup("t", "12.4", "min")') == "550.54.14"
    assert run('lookup("t", "99.9", "min", "none")') == "none"
    assert FUNCS["flag_names"](0x48 | 0x1000, "bits") == ["HwSlowdown", "HwThermalSlowdown", "0x1000"]


@pytest.mark.parametrize(
    "source, message",
    [
        ("gpu.pcie_widht > 1", "did you mean gpu.pcie_width"),
        ("gpux.name", "unknown name"),
        ("gpu.__class__", "not allowed"),
        ('"".__class__.__mro__', "only be read from facts"),
        ("__import__('os').system('true')", "not allowed"),
        ("open('/etc/passwd')", "not allowed"),
        ("(lambda: 1)()", "not allowed"),
        ("[x for x in gpus]", "not allowed"),
        ("2 ** 100000000", "not allowed"),
        ("gpu.name.upper()", "not allowed"),
        ("f'{gpu.name}'", "not allowed"),
        ("len(gpus, key=1)", "keyword"),
        ("gpus[0:2]", "subscripts"),
        ("[" * 40 + "1" + "]" * 40, "nested deeper"),
        ("x" * 3000, "longer than"),
        ("gpu.pcie_width <", "invalid syntax"),
        ("nvml.status := 1", "invalid syntax"),
    ],
)
def test_refused_at_load(source, message):
    with pytest.raises(ExpressionError) as exc:
        compile_expression(source, ROOTS)
    assert message in str(exc.value)


def test_deep_nesting_refused():
    with pytest.raises(ExpressionError):
        compile_expression("not " * 50 + "True", ROOTS)


def test_string_repetition_bomb_stopped_quickly():
    expr = compile_expression('"a" * 1000000000', ROOTS)
    started = time.monotonic()
    with pytest.raises(IterableTooLong):  # simpleeval refuses results longer than its limit
        expr.evaluate({}, FUNCS)
    assert time.monotonic() - started < 1.0


def test_template_renders_and_refuses_tricks():
    tpl = compile_template("x{gpu.pcie_width} of x{gpu.pcie_max_width}; {gpu.temperature_c} C", ROOTS)
    names = {"gpu": wrap(GPU, "gpu", [])}
    assert tpl.render(names, FUNCS) == "x8 of x16; unknown C"
    with pytest.raises(ExpressionError):
        compile_template("{gpu.name!r}", ROOTS)
    with pytest.raises(ExpressionError):
        compile_template("{gpu.name:>999999999}", ROOTS)
    with pytest.raises(ExpressionError):
        compile_template("{gpu.name.__class__}", ROOTS)
    with pytest.raises(ExpressionError):
        compile_template("unbalanced {", ROOTS)


@pytest.mark.parametrize(
    "arch_list, cc, expected",
    [
        (["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"], "9.0", True),
        (["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"], "6.1", False),  # Pascal on cu128
        (["sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"], "12.0", False),  # 5090 on cu124
        (["sm_80", "sm_86", "compute_90"], "12.0", True),  # PTX JIT forward
        (["sm_80"], "8.9", True),  # same major, higher minor
        (["sm_86"], "8.0", False),  # lower minor cannot run sm_86 code
        (["sm_90a"], "9.0", True),
        (["sm_90a"], "10.0", False),
    ],
)
def test_arch_supported(arch_list, cc, expected):
    assert arch_supported(arch_list, cc) is expected


def test_visible_devices_problem():
    gpus = [{"vendor": "nvidia", "uuid": "GPU-aaaa-1"}, {"vendor": "nvidia", "uuid": "GPU-bbbb-2"}]
    assert visible_devices_problem("0,1", gpus) == ""
    assert visible_devices_problem("GPU-aaaa", gpus) == ""
    assert "does not exist" in visible_devices_problem("0,2", gpus)
    assert "matches no GPU" in visible_devices_problem("GPU-cccc", gpus)
    assert "empty" in visible_devices_problem("", gpus)
    assert "neither" in visible_devices_problem("gpu0", gpus)
    assert "twice" in visible_devices_problem("1,1", gpus)
