"""The rule expression language: what it evaluates, what it refuses at load."""

from __future__ import annotations

import time

import pytest
from simpleeval import IterableTooLong

from gpudoctor.engine import factpaths
from gpudoctor.engine.expressions import ExpressionError, compile_expression
from gpudoctor.engine.helpers.devices import (
    amd_visible_devices_problem,
    cuda_visible_count,
    gpus_per_node,
    os_support_problem,
    visible_devices_problem,
)
from gpudoctor.engine.helpers.registry import bind
from gpudoctor.engine.helpers.values import env_names, env_set, filter_by, shell_words
from gpudoctor.engine.helpers.versions import arch_supported, local_version, missing_gfx, version, wheel_family
from gpudoctor.engine.templates import compile_template
from gpudoctor.engine.views import FactUnavailable, section_views, wrap
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


# ---------------------------------------------------------------- helpers added for the rule packs


@pytest.mark.parametrize(
    "text, local, family",
    [
        ("2.4.1+cu121", "cu121", "cuda12"),
        ("0.26.0+cu130", "cu130", "cuda13"),
        ("2.0.1+cu118", "cu118", "cuda11"),
        ("1.7.1+cu92", "cu92", "cuda9"),
        ("2.6.0+rocm6.2.4", "rocm6.2.4", "rocm6"),
        ("2.8.0+cpu", "cpu", "cpu"),
        ("2.8.0+xpu", "xpu", "xpu"),
        ("2.5.1", "", ""),  # a PyPI wheel: no tag, family unknown
        ("2.5.0a0+git1234", "git1234", ""),  # a source build's tag says nothing about the accelerator
    ],
)
def test_local_version_and_wheel_family(text, local, family):
    assert local_version(text) == local
    assert wheel_family(text) == family


def test_missing_gfx_ignores_target_features_and_repeats():
    built = ["gfx90a:xnack-", "gfx942:sramecc+:xnack-", "gfx1100"]
    assert missing_gfx(["gfx942", "gfx942"], built) == []
    assert missing_gfx(["gfx950", "gfx942", "gfx950"], built) == ["gfx950"]
    assert missing_gfx(["gfx1151"], []) == ["gfx1151"]


def test_filter_by_and_env_set():
    xids = [{"bus_id": "0000:18:00.0", "code": 79}, {"bus_id": "0000:9a:00.0", "code": 13}, {"code": 31}]
    assert filter_by(xids, "bus_id", "0000:9a:00.0") == [{"bus_id": "0000:9a:00.0", "code": 13}]
    assert filter_by(xids, "bus_id", "0000:00:01.0") == []
    env = {"CUDA_PROFILE": "1", "COMPUTE_PROFILE": "0"}
    assert env_set(env, ["CUDA_INJECTION64_PATH", "COMPUTE_PROFILE", "CUDA_PROFILE"]) == [
        "COMPUTE_PROFILE=0",
        "CUDA_PROFILE=1",
    ]
    assert env_names(env, ["CUDA_INJECTION64_PATH", "COMPUTE_PROFILE", "CUDA_PROFILE"]) == [
        "COMPUTE_PROFILE",
        "CUDA_PROFILE",
    ]


def test_shell_words_quotes_what_a_shell_would_read_otherwise():
    assert shell_words(["unset", "CUDA_PROFILE", "COMPUTE_PROFILE"]) == "unset CUDA_PROFILE COMPUTE_PROFILE"
    assert shell_words(["echo", "a b", "$(reboot)", "x;y", 3]) == "echo 'a b' '$(reboot)' 'x;y' 3"
    assert shell_words([]) == ""


def test_cuda_visible_count_stops_at_the_first_bad_entry():
    gpus = [
        {"vendor": "nvidia", "in_nvml": True, "uuid": "GPU-aaaa-1"},
        {"vendor": "nvidia", "in_nvml": True, "uuid": "GPU-bbbb-2"},
        {"vendor": "nvidia", "in_nvml": False},  # on the bus but not in NVML (fell off, or another container's)
        {"vendor": "amd", "in_nvml": False},
    ]
    assert cuda_visible_count(None, gpus) == 2
    assert cuda_visible_count("1", gpus) == 1
    assert cuda_visible_count("1,0", gpus) == 2
    assert cuda_visible_count("0,7,1", gpus) == 1  # CUDA ignores 7 and everything after it
    assert cuda_visible_count("0,0", gpus) == 1
    assert cuda_visible_count("GPU-bbbb", gpus) == 1
    assert cuda_visible_count("GPU-cccc,0", gpus) == 0
    assert cuda_visible_count("", gpus) == 0


def test_amd_visible_devices_problem():
    gpus = [{"vendor": "amd"}, {"vendor": "amd"}, {"vendor": "nvidia"}]
    assert amd_visible_devices_problem("1,0", gpus) == ""
    assert amd_visible_devices_problem("GPU-4b2c0c1a38e9fd7b", gpus) == ""
    assert "does not exist" in amd_visible_devices_problem("0,2", gpus)
    assert "twice" in amd_visible_devices_problem("1,1", gpus)
    assert "empty" in amd_visible_devices_problem("", gpus)
    assert "neither" in amd_visible_devices_problem("card0", gpus)


def test_gpus_per_node_counts_only_nodes_with_cpus():
    nodes = [{"id": 0, "cpus": [0, 1]}, {"id": 1, "cpus": [2, 3]}, {"id": 2, "cpus": []}]
    gpus = [{"numa_node": 0}, {"numa_node": 0}, {"numa_node": 1}, {"numa_node": -1}, {"numa_node": 2}]
    assert gpus_per_node(gpus, nodes) == [2, 1]
    assert gpus_per_node([], nodes) == [0, 0]


def test_os_support_problem():
    row = {"os": {"ubuntu 22.04": ["5.15", "6.8"], "rhel 9.4": ["5.14"], "debian 12": []}}
    assert os_support_problem(row, "ubuntu", "22.04", "5.15.0-105-generic") == ""
    assert os_support_problem(row, "rhel", "9.4", "5.14.0-427.13.1.el9_4.x86_64") == ""
    assert os_support_problem(row, "debian", "12", "6.12.1-amd64") == ""  # no kernel list: the OS fixes it
    assert "kernel 6.11.0-26-generic" in os_support_problem(row, "ubuntu", "22.04", "6.11.0-26-generic")
    assert "not a listed operating system" in os_support_problem(row, "rocky", "9.4", "5.14.0")
    with pytest.raises(ValueError):
        os_support_problem({"rows": []}, "ubuntu", "22.04", "5.15.0")


BOUND_TABLES = {
    "nvidia_pci_ids": {
        "rows": {"0x2302-0x23f0": {"architecture": "hopper"}, "0x2900-0x323e": {"architecture": "blackwell"}}
    },
    "xid_errors": {
        "rows": {
            "79": {"severity": "error", "name": "GPU has fallen off the bus"},
            "13": {"severity": "warning", "name": "Graphics engine exception"},
            "43": {"severity": "info", "name": "GPU stopped processing"},
        }
    },
    "nested": {"rows": {"2.7": {"variants": {"rocm6.3": {"gfx": ["gfx942"]}, "cu126": {}}}}},
}


def test_gpu_arch_prefers_nvml_then_pci_device_id():
    funcs = bind(BOUND_TABLES)
    assert funcs["gpu_arch"]({"architecture": "ampere", "pci": {"device_id": "0x2901"}}) == "ampere"
    assert funcs["gpu_arch"]({"pci": {"device_id": "0x2901"}}) == "blackwell"
    assert funcs["gpu_arch"]({"pci": {"device_id": "0x2335"}}) == "hopper"
    reads: list = []
    with pytest.raises(FactUnavailable):  # unknown device id: the rule is unknown, not passed
        missing = Unavailable("not_found", "NVML does not list it")
        funcs["gpu_arch"](wrap({"architecture": missing, "pci": {"device_id": "0x3340"}}, "gpu", reads))
    assert ("gpu.architecture", Unavailable("not_found", "NVML does not list it")) in reads
    with pytest.raises(FactUnavailable):
        funcs["gpu_arch"]({"pci": None})


def test_xids_of_groups_by_table_severity():
    funcs = bind(BOUND_TABLES)
    entries = [
        {"code": 79, "count": 1, "message": "GPU has fallen off the bus."},
        {"code": 13, "count": 3, "message": "Graphics SM Warp Exception"},
        {"code": 57, "count": 1},
        {"code": 43, "count": 2},
    ]
    assert funcs["xids_of"](entries, "error") == ["Xid 79 (GPU has fallen off the bus) 1x: GPU has fallen off the bus."]
    assert funcs["xids_of"](entries, "warning") == [
        "Xid 13 (Graphics engine exception) 3x: Graphics SM Warp Exception",
        "Xid 57 (not in gpudoctor's Xid table) 1x",  # an unlisted Xid is worth a look, not a verdict
    ]
    assert funcs["xids_of"]([], "error") == []


def test_lookup_path_walks_nested_rows():
    funcs = bind(BOUND_TABLES)
    assert funcs["lookup_path"]("nested", "2.7", "variants", "rocm6.3", "gfx") == ["gfx942"]
    assert funcs["lookup_path"]("nested", "2.7", "variants", "cu126", "gfx") is None
    assert funcs["lookup_path"]("nested", "2.9", "variants") is None
    with pytest.raises(ValueError):
        funcs["lookup_path"]("no_such_table", "2.7")
