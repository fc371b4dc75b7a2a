"""Broken rule files are refused when they load: file and line named, exit status 2, no traceback."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from gpudoctor.cli.root import run
from gpudoctor.engine.loader import RuleLoadError, load_rules
from tests.conftest import HOSTS, SNAPSHOTS

HEALTHY = str(HOSTS / "healthy-2gpu")
SNAPSHOT = str(SNAPSHOTS / "h200-x2.json")

RULE = """\
- id: my-check
  title: A custom check
  area: env
  severity: warning
  subject: gpu
  fail_if: gpu.pcie_width < gpu.pcie_max_width
  message: "{gpu.label} links at x{gpu.pcie_width}"
  fix: reseat it
  why: because
  refs: [internal wiki]
"""
SECOND = RULE.replace("my-check", "other-check")


def edit(old: str, new: str, text: str = RULE) -> str:
    assert old in text, old
    return text.replace(old, new, 1)


# (case id, file text, line the error must name (None: the file only), words the message must hold)
CASES = [
    # YAML syntax
    ("unclosed-flow", edit("refs: [internal wiki]", "refs: [internal wiki"), 11, "YAML error"),
    ("unterminated-quote", edit('x{gpu.pcie_width}"', "x{gpu.pcie_width}"), 11, "YAML error"),
    ("bad-indent", edit("  fix: reseat it", " fix: reseat it"), 8, "YAML error"),
    ("tab-indent", edit("  why: because", "\twhy: because"), 9, "YAML error"),
    ("two-documents", RULE + "---\n" + SECOND, 11, "YAML error"),
    ("duplicate-key", edit("  fix: reseat it\n", "  fix: reseat it\n  fix: again\n"), 9, "duplicate key 'fix'"),
    ("scalar-document", "just words\n", None, "must be array"),
    ("mapping-document", "id: x\ntitle: y\n", None, "must be array"),
    # fields
    ("unknown-field", edit("  why: because\n", "  why: because\n  fial_if: x\n"), 1, "fial_if"),
    ("missing-field", edit("  fix: reseat it\n", ""), 1, "fix"),
    ("unknown-severity", edit("severity: warning", "severity: fatal"), 1, "severity"),
    ("unknown-area", edit("area: env", "area: spaceship"), 1, "area"),
    ("unknown-subject", edit("subject: gpu", "subject: toaster"), 1, "subject"),
    ("bad-id", edit("id: my-check", "id: My_Check"), 1, "id"),
    # types
    ("severity-number", edit("severity: warning", "severity: 3"), 1, "severity"),
    ("id-number", edit("id: my-check", "id: 12"), 1, "id"),
    ("refs-string", edit("refs: [internal wiki]", "refs: internal wiki"), 1, "refs"),
    ("refs-of-maps", edit("refs: [internal wiki]", "refs: [{a: 1}]"), 1, "refs"),
    ("title-list", edit("title: A custom check", "title: [a, b]"), 1, "title"),
    ("fail-if-number", edit("fail_if: gpu.pcie_width < gpu.pcie_max_width", "fail_if: 1"), 1, "fail_if"),
    ("fail-if-null", edit("fail_if: gpu.pcie_width < gpu.pcie_max_width", "fail_if: null"), 1, "fail_if"),
    ("message-map", edit('message: "{gpu.label} links at x{gpu.pcie_width}"', "message: {a: 1}"), 1, "message"),
    ("tags-map", edit("  why: because\n", "  why: because\n  tags: {a: 1}\n"), 1, "tags"),
    ("rule-is-a-list", "- [a, b]\n", 1, "top level[0]"),
    # ids
    ("duplicate-id", RULE + RULE, 11, "duplicate rule id 'my-check'"),
    ("builtin-id", edit("id: my-check", "id: pcie-width-degraded"), 1, "duplicate rule id 'pcie-width-degraded'"),
    # facts
    ("unknown-fact", edit("gpu.pcie_width < gpu.pcie_max_width", "gpu.pcie_widht < 16"), 1,
     "unknown fact gpu.pcie_widht (did you mean gpu.pcie_width?)"),
    ("unknown-section-fact", edit("gpu.pcie_width < gpu.pcie_max_width", "host.kernel.version"), 1,
     "unknown fact host.kernel"),
    ("unknown-name", edit("gpu.pcie_width < gpu.pcie_max_width", "gpuu.name"), 1, "unknown name 'gpuu'"),
    ("host-rule-reads-gpu", edit("subject: gpu", "subject: host"), 1, "unknown name 'gpu'"),
    ("unknown-fact-in-message", edit("x{gpu.pcie_width}", "x{gpu.widht}"), 1, "in placeholder {gpu.widht}"),
    ("unknown-table", edit("gpu.pcie_width < gpu.pcie_max_width", 'lookup("nope", 1)'), 1, "no data table 'nope'"),
    # expressions that do not parse
    ("dangling-operator", edit("gpu.pcie_width < gpu.pcie_max_width", '"gpu.pcie_width <"'), 1, "invalid syntax"),
    ("unbalanced-paren", edit("gpu.pcie_width < gpu.pcie_max_width", '"(gpu.pcie_width"'), 1, "invalid syntax"),
    ("two-statements", edit("gpu.pcie_width < gpu.pcie_max_width", '"1; 2"'), 1, "invalid syntax"),
    ("nul-in-expression", edit("gpu.pcie_width < gpu.pcie_max_width", '"gpu.name == \\"a\\0\\""'), 1, "fail_if"),
    ("empty-expression", edit("gpu.pcie_width < gpu.pcie_max_width", '" "'), 1, "empty expression"),
    ("bad-template", edit('message: "{gpu.label} links', 'message: "{gpu.label links'), 1, "message"),
    ("template-conversion", edit("{gpu.label}", "{gpu.label!r}"), 1, "conversion !r"),
]


def write(tmp_path: Path, text: str | bytes, name: str = "custom.yaml") -> tuple[Path, Path]:
    directory = tmp_path / "pack"
    directory.mkdir(exist_ok=True)
    path = directory / name
    path.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8"))
    return directory, path


@pytest.mark.parametrize(("text", "line", "needle"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_rule_file_refused_at_load(tmp_path: Path, text: str, line: int | None, needle: str) -> None:
    directory, path = write(tmp_path, text)
    with pytest.raises(RuleLoadError) as caught:
        load_rules([directory], include_builtin="pcie-width-degraded" in text, include_plugins=False)
    error = caught.value
    assert error.path == str(path), str(error)
    assert error.line == line, str(error)
    assert needle in error.message, str(error)


@pytest.mark.parametrize(("text", "line", "needle"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_rule_file_exits_2_naming_file_and_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, text: str, line: int | None, needle: str
) -> None:
    directory, path = write(tmp_path, text)
    where = f"{path}:{line}:" if line else f"{path}:"
    builtin = [] if "pcie-width-degraded" in text else ["--no-builtin-rules"]  # (saves compiling them)
    code = run(["check", "--facts", SNAPSHOT, "--rules", str(directory), *builtin])
    out, err = capsys.readouterr()
    assert code == 2
    assert out == ""
    assert err.startswith("gpudoctor: error: bad rule file: ") and err.count("\n") == 1, err
    assert where in err and needle in err, err
    assert "Traceback" not in err
    if "duplicate rule id 'pcie-width-degraded'" in needle:
        return  # validate checks a file on its own; the clash is with the built-in rules
    code = run(["rules", "validate", str(path)])
    out, err = capsys.readouterr()
    assert code == 2 and where in err and needle in err and "Traceback" not in err, err


def test_duplicate_id_across_files_names_both(tmp_path: Path) -> None:
    directory, first = write(tmp_path, RULE, "a.yaml")
    _, second = write(tmp_path, SECOND + RULE.replace("- id:", "- id:"), "b.yaml")
    with pytest.raises(RuleLoadError) as caught:
        load_rules([directory], include_plugins=False)
    assert caught.value.path == str(second) and caught.value.line == 11
    assert f"first defined at {first}:1" in str(caught.value)


def test_duplicate_id_across_rule_directories(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir()
    two.mkdir()
    (one / "a.yaml").write_text(RULE)
    (two / "b.yaml").write_text(RULE)
    code = run(["check", "--root", HEALTHY, "--rules", str(one), "--rules", str(two)])
    err = capsys.readouterr().err
    assert code == 2 and f"{two / 'b.yaml'}:1: duplicate rule id 'my-check'" in err


def test_not_utf8_names_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    directory, path = write(tmp_path, b"- id: x\n  title: \xff\xfe\n")
    code = run(["check", "--root", HEALTHY, "--rules", str(directory)])
    err = capsys.readouterr().err
    assert code == 2 and f"{path}:2: not UTF-8 text" in err and "Traceback" not in err


def test_unreadable_rule_file_names_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    directory, path = write(tmp_path, RULE)
    real_open = os.open

    def deny(name: Any, *args: Any, **kwargs: Any) -> int:
        if str(name) == str(path):  # tests run as root, where a mode-000 file is still readable
            raise PermissionError(13, "Permission denied", str(name))
        return real_open(name, *args, **kwargs)

    monkeypatch.setattr(os, "open", deny)
    monkeypatch.setenv("GPUDOCTOR_NO_CACHE", "1")
    code = run(["check", "--root", HEALTHY, "--rules", str(directory)])
    err = capsys.readouterr().err
    assert code == 2 and f"{path}: cannot open rule file" in err and "ermission denied" in err


def test_directory_named_like_a_rule_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    directory, _ = write(tmp_path, RULE)
    (directory / "sub.yaml").mkdir()
    code = run(["check", "--root", HEALTHY, "--rules", str(directory)])
    err = capsys.readouterr().err
    assert code == 2 and "sub.yaml: a directory, not a regular file" in err and "Traceback" not in err


def test_bad_data_table_names_file_and_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    directory, _ = write(tmp_path, RULE)
    (directory / "data").mkdir()
    table = directory / "data" / "t.yaml"
    table.write_text("name: t\ndescription: x\nsource: s\nretrieved: 2025-01-01\nrows: [1, 2]\n")
    code = run(["check", "--root", HEALTHY, "--rules", str(directory)])
    err = capsys.readouterr().err
    assert code == 2 and f"{table}:1: data table:" in err and "rows" in err


def test_alias_bomb_in_a_data_table_stays_cheap(tmp_path: Path) -> None:
    """YAML aliases share one object; a table row of 10**9 items by aliases is refused at load,
    before validation or any rule walks it, and quickly."""
    import time

    rule = edit("gpu.pcie_width < gpu.pcie_max_width", 'len(lookup("bomb", "a")) > 0')
    rule = edit("subject: gpu", "subject: host", rule)
    rule = rule.replace("{gpu.label} links at x{gpu.pcie_width}", "bomb")
    directory, _ = write(tmp_path, rule)
    (directory / "data").mkdir()
    rows = ["  l0: &l0 [" + ", ".join(["x"] * 10) + "]"]
    rows += [f"  l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 10) + "]" for i in range(1, 9)]
    rows.append("  a: *l8")
    text = "name: bomb\ndescription: x\nsource: s\nretrieved: 2025-01-01\nrows:\n" + "\n".join(rows) + "\n"
    (directory / "data" / "bomb.yaml").write_text(text)
    started = time.monotonic()
    with pytest.raises(RuleLoadError, match="unfolds into more than .* values through its aliases"):
        load_rules([directory], include_builtin=False, include_plugins=False)
    assert time.monotonic() - started < 2.0
