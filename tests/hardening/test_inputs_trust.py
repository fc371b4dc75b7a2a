"""The files gpudoctor is handed (snapshots, reports, rule files, data tables, policies) are read
as untrusted input (gpudoctor.inputs): bounded, regular files only, strict JSON, safe and bounded
YAML. Each test here is a finding of the red-team run against the landed tree (issue 11: items
6, 8, 13, 14, 15, 16, 23, 24), through the command line a user types.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from gpudoctor.cli.root import run
from tests.conftest import HOSTS, SNAPSHOTS

REAL = SNAPSHOTS / "h200-x2.json"
HEALTHY = str(HOSTS / "healthy-2gpu")
BIG = "9" * 5000
BOMB = "x: &a [" + ", ".join(["lol"] * 9) + "]\n" + "".join(
    f"y{i}: &b{i} [" + ", ".join([f"*{'a' if i == 0 else f'b{i - 1}'}"] * 9) + "]\n" for i in range(9)
)


@pytest.fixture(autouse=True)
def _no_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUDOCTOR_NO_CACHE", "1")


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = run(list(argv))
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out, err


def refused(capsys: pytest.CaptureFixture[str], needle: str, *argv: str) -> str:
    """The command exits 2 with one line on stderr that names the file and contains needle."""
    started = time.monotonic()
    code, _, err = cli(capsys, *argv)
    assert time.monotonic() - started < 5, argv
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("gpudoctor: "), err
    assert needle in lines[0], err
    return lines[0]


def snapshot_with(tmp_path: Path, edit: Any) -> str:
    data = json.loads(REAL.read_text())
    edit(data)
    path = tmp_path / "snap.json"
    path.write_text(json.dumps(data))
    return str(path)


def rule_dir(tmp_path: Path, text: str) -> str:
    directory = tmp_path / "rules"
    directory.mkdir(exist_ok=True)
    (directory / "r.yaml").write_text(text)
    return str(directory)


RULE = """\
- id: my-check
  title: My check
  area: pcie
  severity: warning
  subject: gpu
  fail_if: gpu.pcie_width < 16
  message: "{gpu.label} is narrow"
  fix: Reseat it.
  why: Because.
  refs: [me]
"""


# --- 6: YAML alias bombs ----------------------------------------------------------------------


def test_alias_bomb_in_a_rules_tags_is_refused_at_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bomb = "".join(f"  {line}\n" for line in BOMB.splitlines())
    directory = rule_dir(tmp_path, RULE + bomb + "  tags: *b8\n")
    refused(capsys, "through its aliases", "check", "--facts", str(REAL), "--rules", directory)
    refused(capsys, "through its aliases", "rules", "validate", directory)


@pytest.mark.parametrize("key", ["required", "ignore"])
def test_alias_bomb_in_a_policy_is_refused_at_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], key: str
) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text("bombs:\n" + "".join("  " + line + "\n" for line in BOMB.splitlines()) + f"{key}: *b8\n")
    refused(capsys, "through its aliases", "gate", "--facts", str(REAL), "--policy", str(policy))


def test_recursive_alias_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text("required: &a [*a]\n")
    refused(capsys, str(policy), "gate", "--facts", str(REAL), "--policy", str(policy))


def test_modest_aliases_still_load(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = RULE.replace("  refs: [me]\n", "  refs: &refs [me, you]\n") + RULE.replace("my-check", "two").replace(
        "  refs: [me]\n", "  refs: *refs\n"
    )
    code, out, _ = cli(capsys, "rules", "validate", rule_dir(tmp_path, text))
    assert code == 0 and "2 rule(s) OK" in out


# --- 8: FIFOs, devices, huge files --------------------------------------------------------------


def _fifo(tmp_path: Path, name: str) -> str:
    path = tmp_path / name
    os.mkfifo(path)
    return str(path)


def test_a_fifo_or_device_as_any_input_is_refused_without_waiting(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fifo = _fifo(tmp_path, "in.json")
    for target in (fifo, "/dev/zero"):
        refused(capsys, "not a regular file", "check", "--facts", target)
        refused(capsys, "not a regular file", "report", "merge", target)
        refused(capsys, "not a regular file", "gate", "--facts", str(REAL), "--policy", target)
        refused(capsys, "not a regular file", "check", "--facts", str(REAL), "--profile", target)
        refused(capsys, "not a regular file", "report", "merge", "--drift", target)
        refused(capsys, "not a regular file", "profile", "create", target, "-o", str(tmp_path / "p.yaml"))
        # a policy's profile: is read like the profile option
        policy = tmp_path / "with-profile.yaml"
        policy.write_text(f"profile: {json.dumps(target)}\n")
        refused(capsys, "not a regular file", "gate", "--facts", str(REAL), "--policy", str(policy))
    assert not (tmp_path / "p.yaml").exists()
    rules = tmp_path / "rules"
    rules.mkdir()
    os.mkfifo(rules / "r.yaml")
    refused(capsys, "a FIFO, not a regular file", "check", "--facts", str(REAL), "--rules", str(rules))
    # the message says what the path is, not "no such policy file"
    line = refused(capsys, "a FIFO", "gate", "--facts", str(REAL), "--policy", fifo)
    assert "no such" not in line


def test_a_file_larger_than_any_real_input_is_refused_unread(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    huge = tmp_path / "huge.json"
    with open(huge, "wb") as fh:  # sparse: costs no disk
        fh.truncate(200 << 20)
    refused(capsys, "larger than", "check", "--facts", str(huge))
    refused(capsys, "larger than", "report", "merge", str(huge))
    policy = tmp_path / "policy.yaml"
    with open(policy, "wb") as fh:
        fh.truncate(50 << 20)
    refused(capsys, "larger than", "gate", "--facts", str(REAL), "--policy", str(policy))
    refused(capsys, "larger than", "check", "--facts", str(REAL), "--profile", str(policy))
    refused(capsys, "larger than", "profile", "create", str(huge), "-o", str(tmp_path / "p.yaml"))
    refused(capsys, "larger than", "report", "merge", "--drift", str(huge))


def test_alias_bomb_and_deep_nesting_in_a_profile_are_refused_at_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    profile = tmp_path / "profile.yaml"
    profile.write_text("profile_version: 1\nbombs:\n" + "".join(f"  {line}\n" for line in BOMB.splitlines()))
    refused(capsys, "through its aliases", "check", "--facts", str(REAL), "--profile", str(profile))
    profile.write_text("profile_version: 1\nhost: " + "[" * 100_000 + "]" * 100_000 + "\n")
    refused(capsys, "nesting", "check", "--facts", str(REAL), "--profile", str(profile))


def test_a_fifo_with_a_writer_is_still_not_read(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fifo = _fifo(tmp_path, "stream.json")
    stop = threading.Event()

    def feed() -> None:  # a writer that never stops: reading it whole would never end
        fd = os.open(fifo, os.O_WRONLY)
        try:
            while not stop.is_set():
                os.write(fd, b"0" * 65536)
        except OSError:
            pass
        finally:
            os.close(fd)

    thread = threading.Thread(target=feed, daemon=True)
    thread.start()
    try:
        refused(capsys, "a FIFO", "check", "--facts", fifo)
    finally:
        stop.set()
        try:  # unblock the writer if nothing ever opened the FIFO for reading
            os.close(os.open(fifo, os.O_RDONLY | os.O_NONBLOCK))
        except OSError:
            pass


# --- 13: integers over 4300 digits --------------------------------------------------------------


def test_huge_integers_in_a_snapshot_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "snap.json"
    path.write_text(REAL.read_text().replace('"schema_version": 1', f'"schema_version": {BIG}', 1))
    refused(capsys, "5000 digits", "check", "--facts", str(path))


def test_huge_integers_in_a_report_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(capsys, "check", "--facts", str(REAL), "--format", "json")
    report = tmp_path / "r.json"
    report.write_text(out.replace('"report_schema_version": 1', f'"report_schema_version": {BIG}', 1))
    refused(capsys, "5000 digits", "report", "merge", str(report))


def test_huge_integers_in_yaml_are_refused_with_the_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    directory = rule_dir(tmp_path, RULE.replace("gpu.pcie_width < 16", f"gpu.pcie_width < {BIG}").replace(
        '  message: "{gpu.label} is narrow"', f"  message: x\n  line_of_digits: {BIG}"
    ))
    refused(capsys, "r.yaml:", "rules", "validate", directory)
    policy = tmp_path / "policy.yaml"
    policy.write_text(f"version: 1\nexpect:\n  gpus: {BIG}\n")
    line = refused(capsys, "5000 digits", "gate", "--facts", str(REAL), "--policy", str(policy))
    assert "policy.yaml:3:" in line
    (tmp_path / "rules" / "data").mkdir()
    (tmp_path / "rules" / "data" / "t.yaml").write_text(f"name: t\nrows:\n  a: {BIG}\n")
    refused(capsys, "t.yaml:3:", "check", "--facts", str(REAL), "--rules", directory)


@pytest.mark.parametrize(
    "argv, env",
    [
        (["run", "--numa", "--dry-run", "--root", HEALTHY, "--gpu", BIG, "--", "true"], {}),
        (["run", "--numa", "--dry-run", "--root", HEALTHY, "--", "true"], {"LOCAL_RANK": BIG}),
        (["bench", "--facts", str(REAL), "--gpus", BIG], {}),
        (["bench", "--facts", str(REAL), "--gpus", "0-99999999999"], {}),
    ],
)
def test_huge_integers_on_the_command_line_are_refused(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, argv: list[str], env: dict[str, str]
) -> None:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    line = refused(capsys, "", *argv)
    assert len(line) < 300  # the 5000 digits are not echoed back


# --- 14: complex YAML keys ----------------------------------------------------------------------


def test_complex_keys_are_refused_with_the_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    directory = rule_dir(tmp_path, RULE.replace("  why: Because.\n", "  why: Because.\n  ? [a, b]\n  : 1\n"))
    refused(capsys, "r.yaml:", "rules", "validate", directory)
    refused(capsys, "a key must be a plain value", "check", "--facts", str(REAL), "--rules", directory)
    policy = tmp_path / "policy.yaml"
    policy.write_text("version: 1\n? {a: 1}\n: x\n")
    refused(capsys, "policy.yaml:2: YAML error: a key must be a plain value", "gate", "--facts", str(REAL),
            "--policy", str(policy))
    (tmp_path / "rules" / "r.yaml").write_text(RULE)
    (tmp_path / "rules" / "data").mkdir()
    (tmp_path / "rules" / "data" / "t.yaml").write_text("name: t\nrows:\n  ? [x]\n  : 1\n")
    refused(capsys, "t.yaml:3: YAML error: a key must be a plain value", "check", "--facts", str(REAL),
            "--rules", directory)


# --- 15: deeply nested JSON in reports ------------------------------------------------------------


def test_deeply_nested_report_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for depth in (100, 100_000):
        path = tmp_path / f"deep{depth}.json"
        path.write_text('{"report_schema_version": 1, "x": ' + "[" * depth + "]" * depth + "}")
        refused(capsys, "nested", "report", "merge", str(path))


# --- 16: lone surrogates --------------------------------------------------------------------------


def test_a_lone_surrogate_in_a_snapshot_reaches_no_renderer(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "snap.json"
    path.write_text(REAL.read_text().replace('"hostname": "gpu-host"', '"hostname": "gpu\\ud800host"', 1))
    for argv in (["check"], ["check", "--format", "json"], ["topo"], ["fix", "--numa"], ["fix", "--format", "shell"],
                 ["gate"], ["tiers"]):
        code, out, err = cli(capsys, *argv, "--facts", str(path))
        assert code in (0, 1), (argv, err)
        assert "\ud800" not in out
    code, out, _ = cli(capsys, "check", "--facts", str(path))
    assert "gpu\ufffdhost" in out


# --- 23: NaN and Infinity in snapshots ------------------------------------------------------------


@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity", "1e999"])
def test_non_finite_numbers_in_a_snapshot_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], number: str
) -> None:
    data = json.loads(REAL.read_text())
    limit = data["nvml"]["gpus"][0]["power_limit_w"]
    text = REAL.read_text().replace(f'"power_limit_w": {json.dumps(limit)}', f'"power_limit_w": {number}', 1)
    assert number in text
    path = tmp_path / "snap.json"
    path.write_text(text)
    refused(capsys, "snap.json", "check", "--facts", str(path))
    refused(capsys, "snap.json", "check", "--facts", str(path), "--format", "json")
    refused(capsys, "snap.json", "report", "merge", str(path))


def test_non_finite_numbers_in_a_policy_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for key, value in (("deadline_s", ".nan"), ("deadline_s", ".inf"), ("expect:\n  min_free_memory_gib", ".NaN")):
        policy = tmp_path / "policy.yaml"
        policy.write_text(f"version: 1\n{key}: {value}\n")
        refused(capsys, "not a finite number", "gate", "--facts", str(REAL), "--policy", str(policy))


# --- 24: messages ---------------------------------------------------------------------------------


def test_schema_problems_name_the_full_path(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def edit(data: dict[str, Any]) -> None:
        data["nvml"]["gpus"][0]["temperature_c"] = "hot"

    line = refused(capsys, "nvml.gpus[0].temperature_c", "check", "--facts", snapshot_with(tmp_path, edit))
    assert "top level[" not in line


def test_yaml_errors_are_one_line_with_the_line_number(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    directory = rule_dir(tmp_path, RULE + "- id: [unclosed\n")
    line = refused(capsys, "YAML error:", "rules", "validate", directory)
    assert re.search(r"r\.yaml:1[12]: YAML error: ", line) and "<unicode string>" not in line
    # a character YAML does not allow: PyYAML's message for it is two lines with no line number
    (tmp_path / "rules" / "r.yaml").write_text(RULE.replace("Because.", "Be\x1bcause."))
    line = refused(capsys, "r.yaml:9: YAML error: character '\\x1b' is not allowed", "rules", "validate", directory)
    assert "position" not in line


def test_no_internal_class_names_in_messages(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text("- a\n- b\n")
    line = refused(capsys, "not a list", "gate", "--facts", str(REAL), "--policy", str(policy))
    assert "LineList" not in line


def test_yaml_flow_nesting_is_refused_before_the_parser_sees_it(monkeypatch: pytest.MonkeyPatch) -> None:
    # a libyaml without a nesting limit recursed once per "[" and crashed the H200 host's Python
    import yaml

    from gpudoctor.inputs import MAX_DEPTH, InputError, parse_yaml

    def never(*args: object, **kwargs: object) -> None:
        raise AssertionError("the parser was reached")

    monkeypatch.setattr(yaml, "load", never)
    text = "version: 1\nhost:\n  x: " + "[" * 100_000 + "]" * 100_000 + "\n"
    with pytest.raises(InputError, match=r"policy.yaml:3: YAML error: nesting deeper than 64 levels"):
        parse_yaml(text, "policy.yaml")
    monkeypatch.undo()
    ok = "a: " + "[" * MAX_DEPTH + "]" * MAX_DEPTH + "\n"  # as deep as allowed, and brackets in text
    assert parse_yaml(ok, "ok.yaml")["a"] is not None
    assert parse_yaml('b: "]]]] [x]"\n', "ok.yaml") == {"b": "]]]] [x]"}
