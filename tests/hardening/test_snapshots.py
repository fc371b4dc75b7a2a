"""Snapshots that cannot be used are refused: one clear line naming the file, exit status 2,
never a traceback and never a report built on half a snapshot.

The real 2 x H200 snapshot (tests/fixtures/snapshots/h200-x2.json) is cut, garbled and retyped
every way below and handed to `gpudoctor check --facts`.
"""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path
from typing import Any

import pytest

from gpudoctor.cli.root import run
from gpudoctor.facts import SCHEMA_VERSION
from tests.conftest import SNAPSHOTS

REAL = SNAPSHOTS / "h200-x2.json"
TEXT = REAL.read_text(encoding="utf-8")
DATA: dict[str, Any] = json.loads(TEXT)
SECTIONS = ("host", "pci", "numa", "modules", "rocm", "toolkit", "torch", "nvml")


def check(capsys: pytest.CaptureFixture[str], path: Path, *extra: str) -> tuple[int, str]:
    code = run(["check", "--facts", str(path), *extra])
    out, err = capsys.readouterr()
    return code, out + err


def assert_refused(code: int, output: str, path: Path, *needles: str) -> None:
    assert code == 2, output
    assert "Traceback" not in output
    lines = output.splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpudoctor: error: "), output  # one line, nothing else
    assert str(path) in lines[0], output
    for needle in needles:
        assert needle in lines[0], output


def test_the_real_snapshot_is_accepted(capsys: pytest.CaptureFixture[str]) -> None:
    code, output = check(capsys, REAL)
    assert code == 0, output


@pytest.mark.parametrize("fraction", [0.0, 0.001, 0.1, 0.25, 0.5, 0.75, 0.9, 0.999])
def test_truncated(capsys: pytest.CaptureFixture[str], tmp_path: Path, fraction: float) -> None:
    path = tmp_path / "cut.json"
    path.write_text(TEXT[: int(len(TEXT.rstrip()) * fraction)])
    code, output = check(capsys, path)
    assert_refused(code, output, path, "not a gpudoctor snapshot: invalid JSON at line")


def test_truncated_by_one_byte_at_every_line_end(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """A copy interrupted anywhere: cut at every line end (bounded, so this stays quick)."""
    path = tmp_path / "cut.json"
    ends = [i for i, ch in enumerate(TEXT) if ch == "\n"][:-1]
    for end in ends[:: max(1, len(ends) // 25)]:
        path.write_text(TEXT[:end])
        code, output = check(capsys, path)
        assert_refused(code, output, path, "invalid JSON")


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (b"", "invalid JSON at line 1 column 1"),
        (b"   \n\n", "invalid JSON"),
        (b"hello", "invalid JSON"),
        (b"schema_version: 1\nhost: {}\n", "invalid JSON"),  # YAML, not JSON
        (b"<html><body>502 Bad Gateway</body></html>", "invalid JSON"),
        (b"\x89PNG\r\n\x1a\n\x00\x00", "not UTF-8 text (byte 0x89)"),
        (b"\xff\xfe{\x00}\x00", "not UTF-8 text"),  # UTF-16
        (b"\xef\xbb\xbf{}", "no schema_version"),  # a UTF-8 byte order mark is read past
        (b"\x00" * 64, "invalid JSON"),
        (b"null", "top level is null"),
        (b"[1, 2]", "top level is a list"),
        (b'"a string"', "top level is a string"),
        (b"42", "top level is an integer"),
        (b"NaN", "NaN is not JSON"),
        (b"{}", "no schema_version"),
        (b'{"hello": 1}', "no schema_version"),
        (b"[" * 100000, "nested too deeply"),
        (b"[" * 5000 + b"]" * 5000, "nested too deeply"),
    ],
)
def test_not_a_snapshot(capsys: pytest.CaptureFixture[str], tmp_path: Path, content: bytes, needle: str) -> None:
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    code, output = check(capsys, path)
    assert_refused(code, output, path, needle)


def write(tmp_path: Path, data: Any) -> Path:
    path = tmp_path / "snap.json"
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize(
    ("version", "needle"),
    [
        (SCHEMA_VERSION + 1, f"newer than this gpudoctor understands ({SCHEMA_VERSION}); upgrade gpudoctor"),
        (99, "newer than this gpudoctor understands"),
        (2**70, "newer than this gpudoctor understands"),
        (0, "schema_version 0 is not supported"),
        (-1, "schema_version -1 is not supported"),
        ("1", "schema_version must be an integer, got '1'"),
        (1.0, "schema_version must be an integer, got 1.0"),
        (1.5, "schema_version must be an integer"),
        (True, "schema_version must be an integer, got True"),
        (None, "no schema_version"),
        ([1], "schema_version must be an integer"),
        ({"major": 1}, "schema_version must be an integer"),
    ],
)
def test_schema_versions(capsys: pytest.CaptureFixture[str], tmp_path: Path, version: Any, needle: str) -> None:
    data = dict(DATA, schema_version=version)
    path = write(tmp_path, data)
    code, output = check(capsys, path)
    assert_refused(code, output, path, needle)


def test_newer_snapshot_names_the_version_that_wrote_it(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = write(tmp_path, dict(DATA, schema_version=SCHEMA_VERSION + 1, gpudoctor_version="9.9.9"))
    code, output = check(capsys, path)
    assert_refused(code, output, path, "written by gpudoctor 9.9.9")


@pytest.mark.parametrize("section", [*SECTIONS, "meta", "gpudoctor_version"])
def test_missing_section(capsys: pytest.CaptureFixture[str], tmp_path: Path, section: str) -> None:
    data = copy.deepcopy(DATA)
    del data[section]
    path = write(tmp_path, data)
    code, output = check(capsys, path)
    assert_refused(code, output, path, "does not match the facts schema", section)


@pytest.mark.parametrize("section", SECTIONS)
@pytest.mark.parametrize("value", [[], "host", None])
def test_section_of_the_wrong_type(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, section: str, value: Any
) -> None:
    data = dict(DATA, **{section: value})
    path = write(tmp_path, data)
    code, output = check(capsys, path)
    assert_refused(code, output, path, "does not match the facts schema", section)


WRONG_TYPES = [
    (("nvml", "gpus", 0, "pcie_width"), "sixteen", "pcie_width"),
    (("nvml", "gpus", 0, "pcie_width"), 16.5, "pcie_width"),
    (("nvml", "gpus", 0, "pcie_width"), [16], "pcie_width"),
    (("nvml", "gpus", 0, "lost"), "no", "lost"),
    (("nvml", "gpus", 0), "GPU 0", "gpus"),
    (("nvml", "gpus"), {"0": {}}, "gpus"),
    (("nvml", "status"), 0, "status"),
    (("nvml", "driver_version"), 580, "driver_version"),
    (("host", "env"), ["CUDA_VISIBLE_DEVICES=0"], "env"),
    (("host", "env", "CUDA_VISIBLE_DEVICES"), 0, "CUDA_VISIBLE_DEVICES"),
    (("host", "cpu_count"), "32", "cpu_count"),
    (("host", "allowed_cpus"), "0-31", "allowed_cpus"),
    (("host", "allowed_cpus"), [0, "1"], "allowed_cpus"),
    (("numa", "nodes"), {"0": {}}, "nodes"),
    (("pci", "devices", 0, "bus_id"), 0, "bus_id"),
    (("torch", "installed"), "yes", "installed"),
    (("host", "memory_total_bytes"), {"unavailable": "gone", "detail": "x"}, "memory_total_bytes"),
    (("host", "memory_total_bytes"), {"unavailable": 3}, "memory_total_bytes"),
    (("host", "memory_total_bytes"), {"unavailable": "error", "detail": "x", "extra": 1}, "memory_total_bytes"),
]


def set_path(data: Any, path: tuple[Any, ...], value: Any) -> None:
    for key in path[:-1]:
        data = data[key]
    data[path[-1]] = value


@pytest.mark.parametrize(
    ("path", "value", "needle"), WRONG_TYPES, ids=[f"{'.'.join(map(str, p))}={v!r}" for p, v, _ in WRONG_TYPES]
)
def test_wrong_types_inside(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, path: tuple[Any, ...], value: Any, needle: str
) -> None:
    data = copy.deepcopy(DATA)
    set_path(data, path, value)
    snap = write(tmp_path, data)
    code, output = check(capsys, snap)
    assert_refused(code, output, snap, needle)


def test_unknown_unavailable_reason_named(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    data = copy.deepcopy(DATA)
    data["host"]["env"] = {"unavailable": "exploded", "detail": "x"}
    snap = write(tmp_path, data)
    code, output = check(capsys, snap)
    assert_refused(code, output, snap)


def test_deeply_nested_value_where_anything_goes(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """meta takes extra keys: a value nested 900 deep there once crashed the snapshot reader."""
    data = copy.deepcopy(DATA)
    data["meta"]["extra"] = "DEEP"
    snap = tmp_path / "snap.json"
    snap.write_text(json.dumps(data).replace('"DEEP"', "[" * 900 + "]" * 900))
    code, output = check(capsys, snap)
    assert_refused(code, output, snap, "nested too deeply (more than")


def test_unreadable_and_missing_files(capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: Any) -> None:
    missing = tmp_path / "nope.json"
    code, output = check(capsys, missing)
    assert_refused(code, output, missing, "no such file")
    denied = write(tmp_path, DATA)
    real = os.open

    def deny(path: Any, *args: Any, **kwargs: Any) -> int:
        if str(path) == str(denied):  # tests run as root, where mode 000 denies nothing
            raise PermissionError(13, "Permission denied", str(path))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", deny)
    code, output = check(capsys, denied)
    assert_refused(code, output, denied, "cannot open snapshot", "Permission denied")


def test_a_directory_is_not_a_snapshot(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code = run(["check", "--facts", str(tmp_path)])
    out, err = capsys.readouterr()
    assert code == 2 and "Traceback" not in out + err and "directory" in err


@pytest.mark.parametrize("command", [["check", "--format", "json"], ["check", "-o", "REPORT"]])
def test_refused_snapshot_writes_no_report(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, command: list[str]
) -> None:
    report = tmp_path / "report.json"
    bad = tmp_path / "bad.json"
    bad.write_text(TEXT[: len(TEXT) // 2])
    argv = [report.as_posix() if part == "REPORT" else part for part in command]
    code = run([*argv, "--facts", str(bad)])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and not report.exists() and "invalid JSON" in err
