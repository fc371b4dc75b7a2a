"""Rule files: a bad file is refused at load with file and line; a good one compiles."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from gpudoctor.engine.loader import RuleLoadError, load_rules, validate_paths

GOOD = """\
- id: my-check
  title: A custom check
  area: env
  severity: warning
  fail_if: host.env.MY_FLAG == "1"
  message: "MY_FLAG is {host.env.MY_FLAG}"
  fix: unset MY_FLAG
  why: because
  refs: [internal wiki]
"""


def write(tmp_path: Path, text: str, name: str = "custom.yaml") -> Path:
    d = tmp_path / "pack"
    d.mkdir(exist_ok=True)
    (d / name).write_text(textwrap.dedent(text))
    return d


def test_builtin_rules_load_and_have_unique_ids():
    ruleset = load_rules(include_plugins=False)
    ids = [r.id for r in ruleset.rules]
    assert len(ids) == len(set(ids)) >= 18
    areas = {r.area for r in ruleset.rules}
    assert areas == {"driver", "torch", "kernel", "rocm", "numa", "pcie", "thermal", "health", "env", "rdma"}
    for area in areas:
        assert sum(1 for r in ruleset.rules if r.area == area) >= 2, area


def test_extra_rules_dir_adds_rules(tmp_path):
    d = write(tmp_path, GOOD)
    ruleset = load_rules([d], include_plugins=False)
    rule = ruleset.by_id("my-check")
    assert rule is not None and rule.facts_used == ["host.env.MY_FLAG"]


@pytest.mark.parametrize(
    "text, line, needle",
    [
        ("- id: x\n  title: [unclosed\n", 3, "YAML error"),
        (GOOD.replace("  why: because\n", "  why: because\n  fial_if: x\n"), 1, "fial_if"),
        (GOOD.replace("severity: warning", "severity: fatal"), 1, "severity"),
        (GOOD.replace("  title: A custom check\n", "  title: A custom check\n  title: again\n"), 3, "duplicate key"),
        (GOOD + GOOD, 10, "duplicate rule id 'my-check'"),
        (GOOD.replace('host.env.MY_FLAG == "1"', "host.env.MY_FLAG =="), 1, "invalid syntax"),
        (GOOD.replace('host.env.MY_FLAG == "1"', "host.kernel_relase == 1"), 1, "did you mean host.kernel_release"),
        (GOOD.replace('host.env.MY_FLAG == "1"', 'lookup("nope", 1)'), 1, "no data table 'nope'"),
        (GOOD.replace('host.env.MY_FLAG == "1"', '__import__("os")'), 1, "not allowed"),
        (GOOD.replace("MY_FLAG is {host.env.MY_FLAG}", "{host.env.MY_FLAG.__class__}"), 1, "not allowed"),
        (GOOD.replace("id: my-check", "id: My_Check"), 1, "id"),
        ("just a string\n", None, "must be array"),
    ],
)
def test_bad_rule_file_is_refused_with_file_and_line(tmp_path, text, line, needle):
    d = write(tmp_path, text)
    with pytest.raises(RuleLoadError) as exc:
        load_rules([d], include_builtin=False, include_plugins=False)
    err = exc.value
    assert err.path.endswith("custom.yaml")
    assert needle in str(err), str(err)
    if line is not None:
        assert err.line == line, str(err)


def test_duplicate_id_across_builtin_and_extra(tmp_path):
    d = write(tmp_path, GOOD.replace("my-check", "pcie-width-degraded"))
    with pytest.raises(RuleLoadError, match="duplicate rule id 'pcie-width-degraded'"):
        load_rules([d], include_plugins=False)


def test_validate_paths_reports_each_bad_file(tmp_path):
    d = write(tmp_path, GOOD)
    write(tmp_path, "- id: broken\n", name="broken.yaml")
    count, errors = validate_paths([str(d)])
    assert count == 1
    assert len(errors) == 1 and "broken.yaml" in errors[0]


def test_bad_data_table_refused(tmp_path):
    d = write(tmp_path, GOOD)
    (d / "data").mkdir()
    (d / "data" / "t.yaml").write_text("name: t\ndescription: x\nrows: {a: 1}\n")
    with pytest.raises(RuleLoadError, match="source"):
        load_rules([d], include_builtin=False, include_plugins=False)
