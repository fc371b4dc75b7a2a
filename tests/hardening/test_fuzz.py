"""Property-based tests (hypothesis) of everything that reads outside input: the sysfs/procfs
parsers, the snapshot loader and the rule loader and language.

Settings are modest and derandomised, so CI runs the same examples every time in a few
seconds; GPUDOCTOR_FUZZ_EXAMPLES=5000 GPUDOCTOR_FUZZ_RANDOM=1 explores further by hand.
Whatever such a run finds goes into fuzz_corpus/ (see test_fuzz_corpus.py) once fixed.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import yaml
from hypothesis import given
from hypothesis import strategies as st

from gpudoctor.model.cpus import MAX_CPU_ID, format_cpulist, parse_cpulist
from gpudoctor.probes.pci import GEN_BY_SPEED
from tests.hardening import fuzzing
from tests.hardening.fuzzing import fuzz

# --- cpulists ---------------------------------------------------------------------------------

@fuzz(150)
@given(st.lists(st.integers(min_value=0, max_value=MAX_CPU_ID), max_size=200))
def test_cpulist_round_trip(cpus: list[int]) -> None:
    text = format_cpulist(cpus)
    assert parse_cpulist(text) == sorted(set(cpus))
    assert format_cpulist(parse_cpulist(text)) == text


@fuzz(100)
@given(st.lists(st.tuples(st.integers(0, 5000), st.integers(0, 64)), max_size=20))
def test_cpulist_ranges_in_any_order(ranges: list[tuple[int, int]]) -> None:
    text = ",".join(f"{lo}-{lo + span}" if span else str(lo) for lo, span in ranges)
    expected = sorted({cpu for lo, span in ranges for cpu in range(lo, lo + span + 1)})
    assert parse_cpulist(text) == expected


CPULIST_TOKENS = st.sampled_from(list("0123456789,- \n:/x\u00b2\u0663_+") + ["99999", "65535", "65536", "\x00"])


@fuzz(200)
@given(st.lists(CPULIST_TOKENS, max_size=20).map("".join) | st.text(max_size=40))
def test_cpulist_any_text(text: str) -> None:
    fuzzing.check_cpulist(text)


# --- PCIe link speed ------------------------------------------------------------------------

@fuzz(40)
@given(st.sampled_from(sorted(GEN_BY_SPEED)), st.sampled_from(["{} GT/s PCIe", "{} GT/s", "{:g} GT/s", "{}GT/s"]))
def test_link_speed_known_rates(rate: float, form: str) -> None:
    from gpudoctor.probes.pci import link_gen, parse_link_speed

    speed = parse_link_speed(form.format(rate))
    assert speed == rate and link_gen(speed) == GEN_BY_SPEED[rate]


@fuzz(200)
@given(st.lists(st.sampled_from([*"0123456789. \n", "GT/s", "PCIe", "Unknown", "\u00b2", "e", "-", "9" * 400]),
                max_size=12).map("".join)
       | st.text(max_size=30))
def test_link_speed_any_text(text: str) -> None:
    fuzzing.check_link_speed(text)


@fuzz(100)
@given(st.text(max_size=200))
def test_os_release_any_text(text: str) -> None:
    fuzzing.check_os_release(text)


@fuzz(100)
@given(st.text(st.sampled_from(list("0123456789kmgtKMGTb%-+ ") + ["\u00b2"]), max_size=25))
def test_shm_size_option(text: str) -> None:
    fuzzing.check_size_option(text)


# --- procfs and sysfs files read from a root --------------------------------------------------

def line_noise(*words: str) -> st.SearchStrategy[bytes]:
    """Lines mixing the file's own keywords with digits, units and junk, as bytes."""
    token = st.sampled_from([*words, ":", " ", "\t", "kB", "0", "1", "42", "-1", "0-3", ",", "\u00b2", "\u0663",
                             "9" * 30, "\x00", "\xff", "/", "\n"])
    text = st.lists(token, max_size=40).map("".join).map(lambda s: s.encode("utf-8", "surrogatepass"))
    return text | st.binary(max_size=200)


FILE_STRATEGIES = {
    "meminfo": line_noise("MemTotal", "MemFree", "Node 0 MemTotal"),
    "proc_status": line_noise("Cpus_allowed_list", "Mems_allowed_list", "Name"),
    "limits": line_noise("Max locked memory", "unlimited", "bytes", "Limit"),
    "mounts": line_noise("tmpfs", "/dev/shm", "rw,nosuid,size=", "65536k", "0 0"),
    "cgroup": line_noise("0::/", "12:cpuset:/", "kubepods", "/../..", "/./"),
    "os_release": line_noise('ID="', "VERSION_ID=", "PRETTY_NAME='", "\\", '"'),
    "node_meminfo": line_noise("Node", "MemTotal", "0"),
    "cpu_online": line_noise(),
    "ld_so_conf": line_noise("/usr/local/cuda/compat", "#", "include", "/"),
    "cuda_version_json": line_noise('{"cuda": {"version": "', "12.4.1", '"}}', "[", "]", "{", "}", "null"),
    "cuda_version_txt": line_noise("CUDA Version ", "12.4.131"),
}


@fuzz(40)
@given(st.sampled_from(sorted(FILE_STRATEGIES)).flatmap(lambda t: st.tuples(st.just(t), FILE_STRATEGIES[t])))
def test_file_readers_any_content(case: tuple[str, bytes]) -> None:
    target, data = case
    fuzzing.check_file(target, data)


def test_file_readers_each_get_examples() -> None:
    """The sampled test above spreads its examples; make sure every reader gets a quick run of its own."""
    for target, strategy in FILE_STRATEGIES.items():
        reader_fuzz(target, strategy)()


def reader_fuzz(target: str, strategy: st.SearchStrategy[bytes]) -> Any:
    @fuzz(15)
    @given(strategy)
    def one(data: bytes) -> None:
        fuzzing.check_file(target, data)

    return one


# --- snapshots ---------------------------------------------------------------------------------

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda children: st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=12), children, max_size=5),
    max_leaves=30,
)


@fuzz(100)
@given(JSON)
def test_snapshot_any_json(value: Any) -> None:
    fuzzing.check_snapshot_text(json.dumps(value))


@fuzz(100)
@given(st.binary(max_size=300))
def test_snapshot_any_bytes(data: bytes) -> None:
    fuzzing.check_snapshot_bytes(data)


REAL = json.loads(fuzzing.REAL_SNAPSHOT)
REAL_PATHS = fuzzing.paths(REAL)
REPLACEMENTS = (
    JSON
    | st.sampled_from([{"unavailable": "error", "detail": "x"}, {"unavailable": "nope"}, -1, 0, 2**70, "", "0-3",
                       [], {}, float("nan"), float("inf"), 1e308, "GPU-", ["sm_90"], True])
)


@fuzz(40)
@given(st.lists(st.tuples(st.sampled_from(REAL_PATHS), st.none() | REPLACEMENTS), min_size=1, max_size=4))
def test_real_snapshot_mutated(edits: list[tuple[tuple[Any, ...], Any]]) -> None:
    """Small edits to the real 2 x H200 snapshot (a value replaced or a key deleted): refused with
    a SnapshotError, or accepted and then judged and rendered without anything raising."""
    data = copy.deepcopy(REAL)
    for path, value in edits:
        parent: Any = data
        try:
            for key in path[:-1]:
                parent = parent[key]
            if value is None and isinstance(parent, dict):
                parent.pop(path[-1], None)
            else:
                parent[path[-1]] = value
        except (KeyError, IndexError, TypeError):
            continue  # an earlier edit changed the shape
    fuzzing.check_snapshot_text(json.dumps(data))


# --- rule files and the rule language -----------------------------------------------------------

FACTS = ["gpu.pcie_width", "gpu.pcie_max_width", "gpu.name", "gpu.temperature_c", "gpu.cpu_affinity", "gpu.index",
         "gpu.bus_id", "gpu.pci.numa_node", "host.env.CUDA_VISIBLE_DEVICES", "host.allowed_cpus", "host.cpu_count",
         "nvml.status", "nvml.driver_version", "gpus", "numa.nodes", "torch.arch_list", "modules.nvidia_version"]
LITERALS = ["0", "1", "-1", "16", "2.5", "18446744073709551615", '"a"', '""', '"12.4"', "True", "None", "[]",
            "[1, 2]", '["sm_90"]', "99999"]
FUNCTIONS = ["len", "version", "max", "min", "sorted", "str", "int", "round", "sum", "abs", "any", "all", "cpulist",
             "intersect", "difference", "contains", "lower", "gib", "has_bits", "available", "supported",
             "count_where", "values_of", "arch_supported", "sm", "major", "minor_version", "startswith",
             "visible_devices_problem", "lookup", "flag_names", "open", "__import__", "getattr", "eval"]
BINARY = ["+", "-", "*", "/", "//", "%", "<", "<=", "==", "!=", ">", ">=", "and", "or", "in", "not in", "is", "|",
          "&", "**", "<<", "^"]

EXPRESSIONS = st.recursive(
    st.sampled_from(FACTS + LITERALS),
    lambda inner: (
        st.tuples(inner, st.sampled_from(BINARY), inner).map(lambda t: f"({t[0]} {t[1]} {t[2]})")
        | st.tuples(st.sampled_from(FUNCTIONS), st.lists(inner, max_size=3)).map(lambda t: f"{t[0]}({', '.join(t[1])})")
        | inner.map(lambda e: f"not {e}")
        | inner.map(lambda e: f"-{e}")
        | st.lists(inner, max_size=3).map(lambda items: f"[{', '.join(items)}]")
        | st.tuples(inner, st.sampled_from(["0", "1", "-1", '"x"', "0:1"])).map(lambda t: f"{t[0]}[{t[1]}]")
        | st.tuples(inner, inner, inner).map(lambda t: f"({t[0]} if {t[1]} else {t[2]})")
        | inner.map(lambda e: f"{e}.__class__")
    ),
    max_leaves=12,
)


@fuzz(200)
@given(EXPRESSIONS)
def test_expression_grammar(source: str) -> None:
    fuzzing.check_expression(source)


@fuzz(150)
@given(st.text(max_size=80))
def test_expression_any_text(source: str) -> None:
    fuzzing.check_expression(source)


@fuzz(100)
@given(st.lists(st.text(st.characters(blacklist_characters="{}"), max_size=10) | EXPRESSIONS.map(lambda e: f"{{{e}}}")
                | st.sampled_from(["{", "}", "{{", "}}", "{:>5}", "{gpu.name:>99}", "{gpu.name!r}", "{0}"]),
                max_size=5).map("".join))
def test_template_any_text(source: str) -> None:
    fuzzing.check_template(source)


@fuzz(100)
@given(st.text(max_size=300))
def test_rule_file_any_text(text: str) -> None:
    fuzzing.check_rule_file(text.encode("utf-8", "surrogatepass"))


RULE_KEYS = ["id", "title", "area", "severity", "subject", "tags", "applies", "fail_if", "message", "pass_message",
             "fix", "why", "refs", "docs"]
VALUES = (
    st.sampled_from(["my-rule", "pcie", "env", "error", "warning", "gpu", "host", "numa_node", "nic", "title", "x"])
    | EXPRESSIONS
    | st.lists(st.text(max_size=8), max_size=3)
    | st.integers() | st.booleans() | st.none() | st.text(max_size=20)
)


@fuzz(80)
@given(
    st.lists(
        st.dictionaries(st.sampled_from(RULE_KEYS) | st.text(max_size=6), VALUES, max_size=14)
        | st.fixed_dictionaries(
            {"id": st.sampled_from(["r-one", "r-two"]), "title": st.just("t"), "area": st.sampled_from(["env", "pcie"]),
             "severity": st.sampled_from(["error", "info"]), "subject": st.sampled_from(["host", "gpu"]),
             "fail_if": EXPRESSIONS, "message": EXPRESSIONS.map(lambda e: f"m {{{e}}}"), "fix": st.just("f"),
             "why": st.just("w"), "refs": st.just(["r"])},
            optional={"applies": EXPRESSIONS, "pass_message": EXPRESSIONS.map(lambda e: f"{{{e}}}")},
        ),
        max_size=3,
    )
)
def test_rule_file_structured(rules: list[dict[str, Any]]) -> None:
    text = yaml.safe_dump(rules, allow_unicode=True)
    fuzzing.check_rule_file(text.encode("utf-8", "surrogatepass"))


# --- the fabric manager's dpkg record and proc/net/tcp ---------------------------------------

DPKG_TOKENS = st.sampled_from([
    "Package: ", "nvidia-fabricmanager", "-550", "Status: ", "install ok installed", "Version: ", "1:", "550.90.07",
    "-1", "\n", "\n\n", " ", "\t", ":", "\x00", "\u00b2", "9" * 300,
])


@fuzz(200)
@given(st.lists(DPKG_TOKENS, max_size=40).map("".join) | st.text(max_size=200))
def test_dpkg_status_any_text(text: str) -> None:
    from gpudoctor.probes.fabric import parse_dpkg_status

    found = parse_dpkg_status(text)
    assert found is None or (found[0].startswith("nvidia-fabricmanager") and isinstance(found[1], str))


TCP_TOKENS = st.sampled_from(
    ["0100007F:1A0A", "00000000:0016", ":", "0A", "01", " ", "\n", "   0: ", "x" * 200, "\x00"]
)


@fuzz(200)
@given(st.lists(TCP_TOKENS, max_size=40).map("".join) | st.text(max_size=200))
def test_proc_net_tcp_any_text(text: str) -> None:
    from gpudoctor.probes.fabric import FM_CMD_PORT, _listens

    assert _listens(text.splitlines(), FM_CMD_PORT) in (True, False)
