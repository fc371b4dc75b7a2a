"""Checkers shared by the property-based tests (test_fuzz.py) and the replay of the committed
regression corpus (fuzz_corpus/, test_fuzz_corpus.py): each takes one input and asserts what
must hold for every input whatever its content — a value or an Unavailable with a reason, a
snapshot or a SnapshotError, rules or a RuleLoadError — never another exception, never a hang.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from hypothesis import HealthCheck, settings

from gpudoctor.context import ProbeContext
from gpudoctor.engine import factpaths
from gpudoctor.engine.expressions import ExpressionError, compile_expression
from gpudoctor.engine.helpers.registry import bind
from gpudoctor.engine.loader import RuleLoadError, RuleSet, load_rule_file
from gpudoctor.engine.runner import run_rules
from gpudoctor.engine.subjects import gpu_subjects
from gpudoctor.engine.templates import compile_template
from gpudoctor.engine.views import section_views, wrap
from gpudoctor.facts import REASONS, SnapshotError, Unavailable, load_snapshot, parse_snapshot, walk
from gpudoctor.findings import Report, Status
from gpudoctor.model.cpus import MAX_CPU_ID, format_cpulist, parse_cpulist
from gpudoctor.probes import host, numa, nvml, pci, toolkit, torch
from gpudoctor.render.json_report import render as render_json
from gpudoctor.render.text import render as render_text
from gpudoctor.tables import builtin_rules_dir, load_tables
from tests.conftest import SNAPSHOTS, probed

SCALE = int(os.environ.get("GPUDOCTOR_FUZZ_EXAMPLES", "0"))


def fuzz(examples: int) -> Any:
    """Modest, derandomised hypothesis settings (the same examples on every CI run);
    GPUDOCTOR_FUZZ_EXAMPLES=5000 GPUDOCTOR_FUZZ_RANDOM=1 explores further by hand."""
    return settings(
        max_examples=SCALE or examples,
        deadline=None,
        database=None,
        derandomize=not os.environ.get("GPUDOCTOR_FUZZ_RANDOM"),
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture],
    )


def paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every key/index path in a JSON tree (the places a mutation may edit)."""
    out = [prefix] if prefix else []
    if isinstance(value, dict):
        for key, child in value.items():
            out += paths(child, (*prefix, key))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            out += paths(child, (*prefix, index))
    return out


TABLES = load_tables(builtin_rules_dir() / "data")
RULES = None  # loaded on first use (tests that never run rules do not pay for it)
REAL_SNAPSHOT = (SNAPSHOTS / "h200-x2.json").read_text(encoding="utf-8")

# One scratch host root per process: hypothesis runs many examples per test, and pytest's
# tmp_path is per test, not per example.
_SCRATCH = Path(tempfile.mkdtemp(prefix="gpudoctor-fuzz-"))


def _ruleset() -> RuleSet:
    global RULES
    if RULES is None:
        from gpudoctor.engine.loader import load_rules

        RULES = load_rules(include_plugins=False)
    return RULES


def assert_fact(value: Any) -> None:
    """A fact tree: plain values, with every Unavailable carrying a known reason and a detail."""
    plain = list(value) if isinstance(value, tuple) else value  # readers of two facts return a pair
    for path, leaf in walk({"x": plain}):
        if isinstance(leaf, Unavailable):
            assert leaf.reason in REASONS and leaf.detail, (path, leaf)
        else:
            assert leaf is None or isinstance(leaf, (str, int, float, bool)), (path, leaf)


# --- pure parsers -------------------------------------------------------------------------------

def check_cpulist(text: str) -> None:
    try:
        cpus = parse_cpulist(text)
    except ValueError:
        return
    # only what the kernel writes is accepted: int() alone would also take "+3", "1_0", "\u0663"
    assert all(c in "0123456789,-" or c.isspace() for c in text), text
    assert cpus == sorted(set(cpus))
    assert all(type(c) is int and 0 <= c <= MAX_CPU_ID for c in cpus)
    assert parse_cpulist(format_cpulist(cpus)) == cpus


def check_link_speed(text: str) -> None:
    try:
        speed = pci.parse_link_speed(text)
    except ValueError:
        return
    if isinstance(speed, Unavailable):
        assert speed.reason == "not_supported"
    else:
        assert isinstance(speed, float) and speed >= 0
    gen = pci.link_gen(speed)
    assert isinstance(gen, Unavailable) or gen in pci.GEN_BY_SPEED.values()


def check_os_release(text: str) -> None:
    fields = host.parse_os_release(text)
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in fields.items())


def check_size_option(text: str) -> None:
    size = host._parse_size(text)
    assert size is None or (isinstance(size, int) and size >= 0)


# --- readers of files under a root ---------------------------------------------------------------

# target -> (file it reads, the reader)
FILE_READERS: dict[str, tuple[str, Callable[[ProbeContext], Any]]] = {
    "meminfo": ("proc/meminfo", host._mem_total),
    "proc_status": (
        "proc/self/status",
        lambda ctx: [host._status_list(host._proc_status(ctx), key) for key in ("Cpus_allowed_list", "Mems_allowed")],
    ),
    "limits": ("proc/self/limits", host._memlock),
    "mounts": ("proc/self/mounts", host._shm_bytes),
    "cgroup": ("proc/self/cgroup", host._cgroup_cpus),
    "os_release": ("etc/os-release", host._os_release),
    "node_meminfo": ("sys/devices/system/node/node0/meminfo", lambda ctx: numa._node_mem_total(ctx, 0)),
    "cpu_online": ("sys/devices/system/cpu/online", host._cpu_count),
    "ld_so_conf": ("etc/ld.so.conf.d/cuda.conf", toolkit._cuda_compat),
    "cuda_version_json": ("usr/local/cuda/version.json", lambda ctx: toolkit.cuda_dir_version(ctx, "/usr/local/cuda")),
    "cuda_version_txt": ("usr/local/cuda/version.txt", lambda ctx: toolkit.cuda_dir_version(ctx, "/usr/local/cuda")),
    # the NVML child's plan sizes the affinity masks from the highest possible CPU
    "cpu_possible": ("sys/devices/system/cpu/possible", lambda ctx: list(nvml.make_plan(ctx).values())),
    "torch_json": ("torch.json", lambda ctx: torch.recorded_facts(str(ctx.root / "torch.json"))),
}


def check_file(target: str, data: bytes) -> None:
    rel, reader = FILE_READERS[target]
    root = _SCRATCH / "root"
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists() or path.is_symlink():
        path.unlink()
    path.write_bytes(data)
    ctx = ProbeContext(root=root, env={"PATH": "/usr/bin"}, deadline=time.monotonic() + 5.0)
    try:
        assert_fact(reader(ctx))
    finally:
        path.unlink()


# --- snapshots ----------------------------------------------------------------------------------

def judge(snapshot: dict[str, Any]) -> None:
    """An accepted snapshot is judged and rendered without anything raising."""
    rules = _ruleset()
    findings = run_rules(rules, snapshot)
    assert all(isinstance(f.status, Status) for f in findings)
    report = Report(findings=findings, facts_origin="fuzz", rules_loaded=len(rules.rules))
    render_text(report, snapshot)
    json.loads(render_json(report, snapshot))
    gpu_subjects(snapshot)


def check_snapshot_text(text: str, run_rules_too: bool = True) -> None:
    try:
        snapshot = parse_snapshot(text, "fuzz.json")
    except SnapshotError as exc:
        assert str(exc).startswith("fuzz.json: ")
        return
    assert isinstance(snapshot, dict)
    if run_rules_too:
        judge(snapshot)


def check_snapshot_bytes(data: bytes) -> None:
    path = _SCRATCH / "snapshot.json"
    path.write_bytes(data)
    try:
        snapshot = load_snapshot(path)
    except SnapshotError as exc:
        assert str(exc).startswith(str(path))
        return
    judge(snapshot)


# --- rules and expressions ----------------------------------------------------------------------

ROOTS: dict[str, Any] = dict(factpaths.section_roots())
ROOTS["gpu"] = factpaths.subject_schema("gpu")
ROOTS["gpus"] = {"type": "array"}
FUNCTIONS = bind(TABLES)


def _names() -> dict[str, Any]:
    facts = probed("healthy-2gpu")
    reads: list[Any] = []
    names = section_views(facts, factpaths.SECTIONS, reads)
    gpus = gpu_subjects(facts)
    names["gpus"] = [wrap(g, f"gpus[{i}]", reads) for i, g in enumerate(gpus)]
    names["gpu"] = wrap(gpus[0], "gpu", reads)
    return names


def check_expression(source: str) -> None:
    """Refused with an ExpressionError, or evaluated (whatever it raises, the runner reports it
    as a broken rule) in well under a second."""
    try:
        expression = compile_expression(source, ROOTS)
    except ExpressionError:
        return
    started = time.monotonic()
    try:
        expression.evaluate(_names(), FUNCTIONS)
    except Exception:
        pass
    assert time.monotonic() - started < 1.0, source


def check_template(source: str) -> None:
    try:
        template = compile_template(source, ROOTS)
    except ExpressionError:
        return
    started = time.monotonic()
    try:
        text = template.render(_names(), FUNCTIONS)
        assert isinstance(text, str)
    except Exception:
        pass
    assert time.monotonic() - started < 1.0, source


def check_rule_file(data: bytes) -> None:
    directory = _SCRATCH / "rules"
    directory.mkdir(exist_ok=True)
    path = directory / "fuzz.yaml"
    path.write_bytes(data)
    try:
        rules = load_rule_file(path, TABLES)
    except RuleLoadError as exc:
        assert exc.path == str(path) and (exc.line is None or exc.line >= 1), str(exc)
        return
    started = time.monotonic()
    findings = run_rules(RuleSet(rules=rules, tables=TABLES, sources=[str(path)]), probed("healthy-2gpu"))
    assert time.monotonic() - started < 2.0
    assert all(isinstance(f.status, Status) for f in findings)


CHECKERS: dict[str, Callable[[bytes], None]] = {
    "cpulist": lambda data: check_cpulist(data.decode("utf-8", "surrogateescape")),
    "link_speed": lambda data: check_link_speed(data.decode("utf-8", "surrogateescape")),
    "os_release_text": lambda data: check_os_release(data.decode("utf-8", "surrogateescape")),
    "shm_size": lambda data: check_size_option(data.decode("utf-8", "surrogateescape")),
    **{target: (lambda data, target=target: check_file(target, data)) for target in FILE_READERS},
    "snapshot": check_snapshot_bytes,
    "expression": lambda data: check_expression(data.decode("utf-8")),
    "template": lambda data: check_template(data.decode("utf-8")),
    "rule_file": check_rule_file,
}

