"""Every command against hostile input: random mutations of the real 2 x H200 snapshot, of real
rule files, of a gate policy, of check and gate reports and of a fixture root tree, each run
through the command line as a user would (in process, through gpudoctor.cli.root.run).

What must hold for every input, whatever it is: the exit status is 0, 1 or 2; nothing escapes
as an exception (a traceback); stdout and stderr stay bounded; the run ends within a bound (an
interval timer turns a hang into a failure here) and the test process's peak memory stays
bounded. Settings are derandomised like test_fuzz.py's; GPUDOCTOR_FUZZ_EXAMPLES and
GPUDOCTOR_FUZZ_RANDOM explore further by hand.
"""

from __future__ import annotations

import copy
import json
import os
import resource
import shutil
import signal
import tempfile
import time
from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from gpudoctor.cli.root import run
from tests.conftest import HOSTS, REPO, SNAPSHOTS
from tests.hardening.fuzzing import fuzz, paths
from tests.hardening.roots import light_copy

REAL_TEXT = (SNAPSHOTS / "h200-x2.json").read_text(encoding="utf-8")
REAL = json.loads(REAL_TEXT)
SCRATCH = Path(tempfile.mkdtemp(prefix="gpudoctor-fuzz-cmd-"))
# A file outside every root and snapshot whose content must never show up in any output.
SECRET = SCRATCH / "secret"
SECRET.write_text("SECRET-7f3a-not-for-output\n")
PAYLOAD_MARKER = SCRATCH / "pwned"

SECONDS_PER_RUN = 20
MAX_OUTPUT = 8 << 20  # bytes of stdout + stderr one run may print
MAX_RSS_KIB = 2 << 20  # 2 GiB peak for the whole test process

# Values an attacker would put into any string, number or list of a file gpudoctor reads.
HOSTILE_STRINGS = [
    f"x\ntouch {PAYLOAD_MARKER} #",
    f"$(touch {PAYLOAD_MARKER})",
    f"`touch {PAYLOAD_MARKER}`",
    "a;b|c&d",
    "\x1b]0;title\x07\x1b]52;c;Y2xpcA==\x07",
    "\x9b31m\x00\x7f\r",
    "\ud800",
    "9" * 5000,
    "{x:>999999999}",
    "%s%n" * 50,
    "é" * 20000,
    "..",
    "/etc/shadow",
    "0-65535",
    "GPU-" + "f" * 300,
]
HOSTILE_VALUES: list[Any] = [
    *HOSTILE_STRINGS,
    -1,
    0,
    2**63,
    10**39,
    1e308,
    -1e308,
    True,
    None,
    [],
    {},
    [[[[[[[[[[]]]]]]]]]],
    ["x"] * 1000,
    {"unavailable": "error", "detail": "\x1b[2J"},
    {"unavailable": "bogus"},
]
# JSON texts that the standard library would accept but a snapshot or report must refuse.
HOSTILE_NUMBERS = ["NaN", "Infinity", "-Infinity", "1e999", "9" * 5000]


REAL_PATHS = paths(REAL)
EDITS = st.lists(
    st.tuples(st.sampled_from(REAL_PATHS), st.sampled_from(range(len(HOSTILE_VALUES) + 1))), min_size=1, max_size=5
)


def mutate(data: Any, edits: list[tuple[tuple[Any, ...], int]], paths_ok: bool = True) -> Any:
    """Apply edits (path, index into HOSTILE_VALUES; one past the end deletes the key)."""
    data = copy.deepcopy(data)
    for path, choice in edits:
        parent: Any = data
        try:
            for key in path[:-1]:
                parent = parent[key]
            if choice == len(HOSTILE_VALUES) and isinstance(parent, dict):
                parent.pop(path[-1], None)
            else:
                parent[path[-1]] = copy.deepcopy(HOSTILE_VALUES[choice % len(HOSTILE_VALUES)])
        except (KeyError, IndexError, TypeError):
            continue  # an earlier edit changed the shape
    return data


def to_json(data: Any, number: int | None) -> str:
    text = json.dumps(data)
    if number is not None:  # one number in the text replaced by a non-JSON or over-long one
        text = text.replace("1", HOSTILE_NUMBERS[number], 1)
    return text


class TookTooLong(Exception):
    pass


def _alarm(signum: int, frame: Any) -> None:
    raise TookTooLong(f"a command ran past {SECONDS_PER_RUN} s")


def invoke(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str]:
    """Run one command line; assert what holds for every input; return (status, stdout+stderr)."""
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, SECONDS_PER_RUN)
    try:
        code = run(argv)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    out, err = capsys.readouterr()
    both = out + err
    assert code in (0, 1, 2), (argv, code, err[-2000:])
    assert "Traceback" not in both, (argv, err[-4000:])
    assert len(both.encode("utf-8", "surrogatepass")) <= MAX_OUTPUT, (argv, len(both))
    assert "SECRET-7f3a" not in both, argv
    assert not PAYLOAD_MARKER.exists(), argv
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss <= MAX_RSS_KIB, argv
    return code, both


@pytest.fixture(autouse=True)
def _no_cache(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    # mutated rule files must never be served from (or written into) the shared test cache
    monkeypatch.setenv("GPUDOCTOR_NO_CACHE", "1")
    yield


def _file(name: str, text: str) -> str:
    path = SCRATCH / name
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    return str(path)


# --- snapshots through every command that judges or advises --------------------------------------

FACTS_COMMANDS = [
    ["check", "--facts", "F"],
    ["check", "--facts", "F", "--format", "json", "-v"],
    ["fix", "--facts", "F"],
    ["fix", "--facts", "F", "--format", "shell"],
    ["fix", "--facts", "F", "--format", "json"],
    ["fix", "--numa", "--facts", "F"],
    ["fix", "--numa", "--facts", "F", "--format", "json"],
    ["fix", "--torch", "--facts", "F"],
    ["fix", "--torch", "--facts", "F", "--format", "shell"],
    ["topo", "--facts", "F"],
    ["topo", "--facts", "F", "--format", "json"],
    ["tiers", "--facts", "F"],
    ["gate", "--facts", "F"],
    ["gate", "--facts", "F", "--format", "json"],
    ["select", "--facts", "F", "-v"],
    ["bench", "--facts", "F"],
]


@fuzz(60)
@given(st.sampled_from(FACTS_COMMANDS), EDITS, st.none() | st.sampled_from(range(len(HOSTILE_NUMBERS))))
def test_mutated_snapshot_through_every_command(
    capsys: pytest.CaptureFixture[str], command: list[str], edits: list[tuple[tuple[Any, ...], int]], number: int | None
) -> None:
    path = _file("snapshot.json", to_json(mutate(REAL, edits), number))
    invoke(capsys, [path if part == "F" else part for part in command])


@fuzz(20)
@given(st.sampled_from(FACTS_COMMANDS), st.integers(0, len(REAL_TEXT) - 1), st.binary(max_size=40))
def test_corrupted_snapshot_bytes(capsys: pytest.CaptureFixture[str], command: list[str], at: int, junk: bytes) -> None:
    path = SCRATCH / "corrupt.json"
    raw = REAL_TEXT.encode()
    path.write_bytes(raw[:at] + junk + raw[at + len(junk) :])
    code, _ = invoke(capsys, [str(path) if part == "F" else part for part in command])


def test_a_snapshot_that_is_not_a_file_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    fifo = SCRATCH / "fifo.json"
    if not fifo.exists():
        os.mkfifo(fifo)
    for command in FACTS_COMMANDS:
        for target in (str(fifo), "/dev/zero", str(SCRATCH)):
            code, both = invoke(capsys, [target if part == "F" else part for part in command])
            assert code == 2 and target in both, (command, target)


# --- rule files, through check, rules list / show / validate ------------------------------------

RULE_FILES = sorted((REPO / "rules").glob("*.yaml"))
YAML_FRAGMENTS = [
    "? [a, b]\n: 1\n",
    "x: &a [" + ", ".join(["lol"] * 9) + "]\n"
    + "".join(f"y{i}: &b{i} [" + ", ".join([f"*{'a' if i == 0 else f'b{i - 1}'}"] * 9) + "]\n" for i in range(9)),
    "n: " + "9" * 5000 + "\n",
    "f: .nan\n",
    "s: \"\\ud800\\x1b]0;t\\x07\"\n",
    "- id: amp\n  message: \"" + "{gpu.name}" * 2000 + "\"\n",
    "\t- tab\n",
    "- " * 200 + "x\n",
    "[" * 500 + "\n",
    "a: *nope\n",
    "- !!python/object/apply:os.system ['touch " + str(PAYLOAD_MARKER) + "']\n",
]
RULE_COMMANDS = [
    ["check", "--facts", str(SNAPSHOTS / "h200-x2.json"), "--rules", "D"],
    ["check", "--facts", str(SNAPSHOTS / "h200-x2.json"), "--rules", "D", "--no-builtin-rules"],
    ["rules", "list", "--rules", "D"],
    ["rules", "show", "pcie-width-degraded", "--rules", "D"],
    ["rules", "validate", "D"],
]


@fuzz(40)
@given(
    st.sampled_from(RULE_FILES),
    st.sampled_from(RULE_COMMANDS),
    st.lists(st.tuples(st.floats(0, 1), st.sampled_from(YAML_FRAGMENTS + HOSTILE_STRINGS)), min_size=1, max_size=3),
)
def test_mutated_rule_file_through_every_rule_command(
    capsys: pytest.CaptureFixture[str], source: Path, command: list[str], inserts: list[tuple[float, str]]
) -> None:
    lines = source.read_text(encoding="utf-8").splitlines(keepends=True)
    for where, fragment in inserts:
        at = int(where * len(lines))
        lines[at:at] = [fragment if fragment.endswith("\n") else fragment + "\n"]
    directory = SCRATCH / "rules"
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir()
    (directory / "mutated.yaml").write_text("".join(lines), encoding="utf-8", errors="surrogatepass")
    invoke(capsys, [str(directory) if part == "D" else part for part in command])


# --- gate policies ------------------------------------------------------------------------------

POLICY = {
    "version": 1,
    "expect": {"gpus": 2, "model": "H200", "min_free_memory_gib": 10.5},
    "fail_on": "error",
    "on_cannot_check": "fail-open",
    "required": ["pcie-width-degraded", "health"],
    "ignore": ["persistence-mode-off"],
    "deadline_s": 20,
    "deep": {"enabled": False, "memory_mib": 512},
    "distributed": {"min_busbw_gbps": 100, "allreduce_mib": 128, "iterations": 10},
}
POLICY_PATHS = paths(POLICY)


@fuzz(30)
@given(
    st.lists(st.tuples(st.sampled_from(POLICY_PATHS), st.sampled_from(range(len(HOSTILE_VALUES) + 1))), max_size=4),
    st.none() | st.sampled_from(YAML_FRAGMENTS),
)
def test_mutated_policy_through_gate(
    capsys: pytest.CaptureFixture[str], edits: list[tuple[tuple[Any, ...], int]], fragment: str | None
) -> None:
    text = yaml.safe_dump(mutate(POLICY, edits), allow_unicode=True)
    if fragment is not None:
        text += fragment
    path = _file("policy.yaml", text)
    invoke(capsys, ["gate", "--facts", str(SNAPSHOTS / "h200-x2.json"), "--policy", path])


PROFILE = {
    "profile_version": 1,
    "made_from": [{"snapshot": "good.json", "hostname": "gpu-host", "collected_at": None}],
    "host": {"gpu_count": 2, "driver": {"one_of": ["580.159.04", "580.126.09"]}, "cuda": "13.0"},
    "gpus": [{"index": 0, "pcie_width": 16, "pcie_gen": 5}, {"index": 1, "nvlink_links": 18}],
    "nics": [{"name": "mlx5_0", "rate_gbps": 400, "link_layer": "InfiniBand"}],
    "numa_nodes": [{"id": 0, "memory_gib": {"min": 5, "max": 7}}],
}
PROFILE_PATHS = paths(PROFILE)


@fuzz(30)
@given(
    st.lists(st.tuples(st.sampled_from(PROFILE_PATHS), st.sampled_from(range(len(HOSTILE_VALUES) + 1))), max_size=4),
    st.none() | st.sampled_from(YAML_FRAGMENTS),
    st.booleans(),
)
def test_mutated_profile_through_check_and_gate(
    capsys: pytest.CaptureFixture[str], edits: list[tuple[tuple[Any, ...], int]], fragment: str | None, gate: bool
) -> None:
    text = yaml.safe_dump(mutate(PROFILE, edits), allow_unicode=True)
    if fragment is not None:
        text += fragment
    path = _file("profile.yaml", text)
    snapshot = str(SNAPSHOTS / "h200-x2.json")
    if gate:
        policy = _file("profile-policy.yaml", f"profile: {json.dumps(path)}\n")
        invoke(capsys, ["gate", "--facts", snapshot, "--policy", policy])
    else:
        invoke(capsys, ["check", "--facts", snapshot, "--profile", path, "--format", "json"])


# --- reports through report merge ---------------------------------------------------------------


def _report(capsys: pytest.CaptureFixture[str], argv: list[str]) -> Any:
    run(argv)
    return json.loads(capsys.readouterr().out)


@fuzz(30)
@given(st.booleans(), st.data())
def test_mutated_reports_through_merge(capsys: pytest.CaptureFixture[str], gate: bool, data: st.DataObject) -> None:
    snapshot = str(SNAPSHOTS / "h200-x2.json")
    report = _report(capsys, ["gate" if gate else "check", "--facts", snapshot, "--format", "json"])
    choices = st.sampled_from(range(len(HOSTILE_VALUES) + 1))
    edits = data.draw(st.lists(st.tuples(st.sampled_from(paths(report)), choices), max_size=4))
    number = data.draw(st.none() | st.sampled_from(range(len(HOSTILE_NUMBERS))))
    one = _file("one.json", to_json(mutate(report, edits), number))
    two = _file("two.json", json.dumps(report))
    fmt = data.draw(st.sampled_from(["text", "json"]))
    drift = ["--drift"] if data.draw(st.booleans()) else []
    invoke(capsys, ["report", "merge", *drift, "--format", fmt, one, two])


def test_report_merge_refuses_deep_and_long_input(capsys: pytest.CaptureFixture[str]) -> None:
    deep = _file("deep.json", "[" * 200_000 + "]" * 200_000)
    code, both = invoke(capsys, ["report", "merge", deep])
    assert code == 2 and "deep.json" in both
    report = _report(capsys, ["check", "--facts", str(SNAPSHOTS / "h200-x2.json"), "--format", "json"])
    report["host"] = "9" * 100_000
    del report["envelope"]  # a report of an older gpudoctor: merge reads its host line
    long_host = _file("long.json", json.dumps(report))
    started = time.monotonic()  # the host line's model regex was quadratic: 60 s for this one
    code, _ = invoke(capsys, ["report", "merge", long_host])
    assert code in (0, 1) and time.monotonic() - started < 5


def test_drift_over_one_report_of_thousands_of_entries_stays_quick_and_short(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A node's report may list 4096 GPUs and NICs and 1024 NUMA nodes that no other node has: the
    drift counts each entry once (it was entries × nodes: 40 s for this fleet) and its head names
    a few of the blocking facts, not all twenty thousand."""
    from gpudoctor.fleet.drift import drift
    from gpudoctor.fleet.merge import NodeResult
    from gpudoctor.render.fleet import HEAD_NAMES, render_drift

    report = _report(capsys, ["check", "--facts", str(SNAPSHOTS / "h200-x2.json"), "--format", "json"])
    usual = report["envelope"]["profile"]
    hostile = copy.deepcopy(usual)
    hostile["gpus"] = [dict(usual["gpus"][0], index=i, pcie_gen=4) for i in range(4096)]
    nic = {"rate_gbps": 400, "link_layer": "Ethernet", "numa_node": 0}
    hostile["nics"] = [dict(nic, name=f"mlx5_{i}") for i in range(4096)]
    hostile["numa_nodes"] = [{"id": i, "memory_gib": 1} for i in range(1024)]
    nodes = [NodeResult(f"node-{i:03}", "r.json", "check", "go", "", profile=usual) for i in range(300)]
    nodes.append(NodeResult("hostile", "h.json", "check", "go", "", profile=hostile))
    started = time.monotonic()
    found = drift(nodes)
    assert time.monotonic() - started < 10
    assert len(found.blocking) > 10_000 and found.exit_code == 1
    assert [f.differs for f in found.drifting][:1] == [[("hostile", 4)]]  # GPU 0 pcie_gen: Gen4 on one node
    head = render_drift(found, 100).split("\n\n")[0]
    assert len(head.splitlines()) <= 3 and f"and {len(found.blocking) - HEAD_NAMES} more (exit status 1)" in head


# --- root trees ----------------------------------------------------------------------------------

ROOT_COMMANDS = [
    ["probe", "--root", "R"],
    ["check", "--root", "R"],
    ["topo", "--root", "R"],
    ["fix", "--numa", "--root", "R"],
    ["select", "--root", "R"],
    ["run", "--numa", "--dry-run", "--root", "R", "--", "true"],
]
ROOT_FILES = sorted(
    str(p.relative_to(HOSTS / "healthy-2gpu"))
    for p in (HOSTS / "healthy-2gpu").rglob("*")
    if p.is_file() and not p.is_symlink() and p.parts[len((HOSTS / "healthy-2gpu").parts)] != "sys"
)
ROOT_DAMAGE = ["bytes", "symlink-out", "symlink-abs", "fifo", "empty", "huge-line"]


def _damage(root: Path, rel: str, how: str, junk: str) -> None:
    path = root / rel
    path.unlink()
    if how == "bytes":
        path.write_text(junk, encoding="utf-8", errors="surrogatepass")
    elif how == "symlink-out":
        path.symlink_to(os.path.relpath(SECRET, path.parent))
    elif how == "symlink-abs":
        path.symlink_to(SECRET)
    elif how == "fifo":
        os.mkfifo(path)
    elif how == "huge-line":
        path.write_text("NVRM version: " + "9" * 300_000 + "\n")
    else:
        path.write_text("")


@fuzz(30)
@given(
    st.sampled_from(ROOT_COMMANDS),
    st.lists(st.tuples(st.sampled_from(ROOT_FILES), st.sampled_from(ROOT_DAMAGE), st.sampled_from(HOSTILE_STRINGS)),
             min_size=1, max_size=3),
)
def test_damaged_root_through_every_probing_command(
    capsys: pytest.CaptureFixture[str], command: list[str], damage: list[tuple[str, str, str]]
) -> None:
    base = SCRATCH / "root"
    shutil.rmtree(base, ignore_errors=True)
    root, sysfs = light_copy("healthy-2gpu", base)
    for rel, how, junk in damage:
        if (root / rel).is_file() and not (root / rel).is_symlink():
            _damage(root, rel, how, junk)
    argv = [str(root) if part == "R" else part for part in command]
    insert = argv.index("--root") + 2
    invoke(capsys, [*argv[:insert], "--sysfs-root", str(sysfs), "--timeout", "10", *argv[insert:]])
