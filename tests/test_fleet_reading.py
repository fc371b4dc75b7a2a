"""How `report merge` reads reports (fleet/reading.py): the hand-written check agrees with the
schemas and the nesting bound, bad files are named as before, several processes read what one
reads, and nothing in a reports directory is followed or waited on."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpudoctor.fleet import reading, report_check
from gpudoctor.inputs import MAX_DEPTH, _walk_check
from gpudoctor.schemas import _validator, load_schema
from tests.conftest import REPO
from tests.hardening.fuzzing import fuzz
from tests.preflight.helpers import cli

FLEET = REPO / "tests" / "fixtures" / "fleet"
GATE = REPO / "tests" / "golden" / "gate"


def _bases() -> list[tuple[str, dict[str, Any]]]:
    """Reports of every shape merge reads: a check report with its envelope and profile facts,
    one of an older version (no envelope), gate reports go and no-go, with the deep test and
    rank 0's gate --distributed with its localisation."""
    check = json.loads((FLEET / "node-01.json").read_text())
    old = copy.deepcopy(check)
    del old["envelope"]
    out = [("check", check), ("check", old), ("gate", json.loads((FLEET / "gate-distributed.json").read_text()))]
    for name in ("go-deep.json", "no-go-deep-hung.json", "no-go-unknown-required.json"):
        out.append(("gate", json.loads((GATE / name).read_text())))
    return out


BASES = _bases()


def reference(data: Any, kind: str) -> bool:
    """What reading a report always took: nesting within the bound, then the schema."""
    if isinstance(data, (dict, list)) and _walk_check(data, MAX_DEPTH, "") is not None:
        return False
    try:
        _validator("gate-report" if kind == "gate" else "report")(data)
    except ValueError:
        return False
    return True


def nested(levels: int) -> Any:
    """``levels`` containers, each in the one before (dicts and lists in turn)."""
    value: Any = "x"
    for number in range(levels):
        value = [value] if number % 2 else {"k": value}
    return value


# Values put at every place of a report: each of JSON's types, numbers at and past the schemas'
# bounds, integers spelt as floats, strings past the schemas' lengths; and at each place the
# containers that reach the nesting bound exactly and one past it.
VALUES: list[Any] = [
    None, True, 0, 1, -1, -2, 1.0, 1.5, 3, 4194305, 10**12 + 1, -0.5,
    "", "x", "gate", "fail", "x" * 1025, [], ["x", "y"], [1], {}, {"a": 1},
]


def _shapes(value: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every path in a report with lists read at their first two items only: the places a
    value may be, without each of a hundred findings of one shape."""
    if prefix:
        yield prefix
    if isinstance(value, dict):
        for key, child in value.items():
            yield from _shapes(child, (*prefix, key))
    elif isinstance(value, list):
        for index, child in enumerate(value[:2]):
            yield from _shapes(child, (*prefix, index))


def _at(data: Any, path: tuple[Any, ...]) -> Any:
    for key in path:
        data = data[key]
    return data


def _agrees(data: Any, kind: str, what: str) -> None:
    assert report_check.plain_report(data, kind) == reference(data, kind), what


def _try(base: dict[str, Any], kind: str, path: tuple[Any, ...], value: Any) -> None:
    """``value`` at ``path`` (in place, then put back: a copy of the report each time is slow)."""
    parent, key = _at(base, path[:-1]), path[-1]
    missing = isinstance(parent, dict) and key not in parent
    old = None if missing else parent[key]
    parent[key] = value
    try:
        _agrees(base, kind, f"{path} = {str(value)[:40]}")
    finally:
        if missing:
            del parent[key]
        else:
            parent[key] = old


def test_the_reports_merge_reads_pass_the_check():
    for kind, data in BASES:
        assert reference(data, kind) and report_check.plain_report(data, kind)


@pytest.mark.parametrize("number", range(len(BASES)))
def test_the_check_agrees_with_the_schema_at_every_place(number):
    kind, base = copy.deepcopy(BASES[number])
    for path in list(_shapes(base)):
        depth = len(path)  # of a container put here
        for value in [*VALUES, nested(MAX_DEPTH + 1 - depth), nested(MAX_DEPTH + 2 - depth)]:
            _try(base, kind, path, value)
        parent = _at(base, path[:-1])
        if isinstance(parent, dict):
            old = parent.pop(path[-1])
            _agrees(base, kind, f"without {path}")
            parent[path[-1]] = old
        if isinstance(_at(base, path), dict):
            for value in (None, 1, nested(MAX_DEPTH - depth), nested(MAX_DEPTH + 1 - depth)):
                _try(base, kind, (*path, "an_extra_key"), value)
    assert base == BASES[number][1]  # every change was put back


@pytest.mark.parametrize("number", range(len(BASES)))
def test_the_check_agrees_with_the_schema_on_the_whole(number):
    kind, base = BASES[number]
    for key in list(base):
        _agrees({k: v for k, v in base.items() if k != key}, kind, f"without {key}")
    for value in [*VALUES, nested(MAX_DEPTH), nested(MAX_DEPTH + 1)]:
        _agrees({**base, "an_extra_key": value}, kind, f"an extra key = {str(value)[:40]}")
    for other in ("gate", "check"):
        _agrees(base, other, f"read as a {other} report")
    for value in [*VALUES, nested(MAX_DEPTH + 1), nested(MAX_DEPTH + 2)]:
        _agrees(value, kind, f"a report that is {str(value)[:40]}")


def test_the_check_names_what_the_schemas_name():
    """The check's lists of fields are the schemas' (a field added to a schema and not here
    would be refused by the check: the validator would then read every report, slowly)."""
    check, gate = load_schema("report"), load_schema("gate-report")

    def shape(node: dict[str, Any]) -> tuple[set[str], set[str]]:
        return set(node.get("required", [])), set(node["properties"])

    assert shape(check) == (report_check.CHECK_REQUIRED, report_check.CHECK_FIELDS)
    assert shape(gate) == (report_check.GATE_REQUIRED, report_check.GATE_FIELDS)
    for schema in (check, gate):
        env = schema["properties"]["envelope"]
        assert shape(env) == (report_check.ENVELOPE_REQUIRED, report_check.ENVELOPE_FIELDS)
        assert shape(env["properties"]["host"])[1] == report_check.ENVELOPE_HOST_FIELDS
        assert shape(env["properties"]["gpus"]["items"])[1] == report_check.ENVELOPE_GPU_FIELDS
        assert shape(env["properties"]["versions"])[1] == report_check.VERSIONS_FIELDS
        assert env["properties"]["gpus"]["maxItems"] == report_check.ENVELOPE_GPUS_MAX
        profile = env["properties"]["profile"]
        assert shape(profile)[1] == report_check.PROFILE_FIELDS
        parts = profile["properties"]
        assert shape(parts["host"])[1] == report_check.PROFILE_HOST_FIELDS
        assert shape(parts["gpus"]["items"])[1] == report_check.PROFILE_GPU_FIELDS
        assert shape(parts["nics"]["items"])[1] == report_check.PROFILE_NIC_FIELDS
        assert shape(parts["numa_nodes"]["items"])[1] == report_check.PROFILE_NUMA_FIELDS
        limits = (parts["gpus"]["maxItems"], parts["nics"]["maxItems"], parts["numa_nodes"]["maxItems"])
        assert limits == (report_check.PROFILE_GPUS_MAX, report_check.PROFILE_NICS_MAX, report_check.PROFILE_NUMA_MAX)
        assert shape(schema["properties"]["gpus"]["items"])[1] == report_check.GPU_ROW_FIELDS
        finding = schema["properties"]["findings"]["items"]
        gated = schema is gate
        assert shape(finding) == (
            report_check.GATE_FINDING_REQUIRED if gated else report_check.FINDING_REQUIRED,
            report_check.GATE_FINDING_FIELDS if gated else report_check.FINDING_FIELDS,
        )
        props = finding["properties"]
        assert set(props["severity"]["enum"]) == report_check.SEVERITIES
        assert set(props["status"]["enum"]) == report_check.STATUSES
        assert set(props["recommended_action"]["enum"]) == report_check.ACTIONS
        refs = props["refs"]
        assert (refs["maxItems"], refs["items"]["maxLength"]) == (report_check.REFS_MAX, report_check.REF_LONGEST)
        assert shape(props["cause"]["anyOf"][1]) == (report_check.CAUSE_REQUIRED, report_check.CAUSE_FIELDS)
        subject = props["subject"] if not gated else schema["$defs"]["subject"]
        assert set(subject["properties"]) == report_check.SUBJECT_FIELDS
        assert set(subject["properties"]["kind"]["enum"]) == report_check.SUBJECT_KINDS
    props = check["properties"]
    assert set(props["verdict"]["enum"]) == report_check.CHECK_VERDICTS
    assert tuple(props["exit_code"]["enum"]) == report_check.CHECK_EXIT_CODES
    assert set(props["summary"]["properties"]) == report_check.CHECK_SUMMARY
    props = gate["properties"]
    assert set(props["verdict"]["enum"]) == report_check.GATE_VERDICTS
    assert tuple(props["exit_code"]["enum"]) == report_check.GATE_EXIT_CODES
    assert set(props["summary"]["properties"]) == report_check.GATE_SUMMARY
    assert shape(props["policy"]) == (report_check.POLICY_REQUIRED, report_check.POLICY_FIELDS)
    assert set(props["policy"]["properties"]["expect"]["properties"]) == report_check.EXPECT_FIELDS
    assert shape(props["blocking"]["items"])[1] == report_check.BLOCKING_FIELDS
    assert set(props["blocking"]["items"]["properties"]["status"]["enum"]) == report_check.BLOCKING_STATUSES
    assert shape(props["deep"]) == (report_check.DEEP_REQUIRED, report_check.DEEP_FIELDS)
    assert shape(props["distributed"]) == (report_check.DISTRIBUTED_REQUIRED, report_check.DISTRIBUTED_FIELDS)
    localize = props["distributed"]["properties"]["localize"]["oneOf"][1]
    assert shape(localize) == (report_check.LOCALIZE_REQUIRED, report_check.LOCALIZE_FIELDS)
    assert set(localize["properties"]["status"]["enum"]) == report_check.LOCALIZE_STATUSES
    node = localize["properties"]["nodes"]["items"]
    assert shape(node) == (report_check.LOCAL_NODE_FIELDS, report_check.LOCAL_NODE_FIELDS)
    assert shape(node["properties"]["pairs"]["items"]) == (report_check.PAIR_FIELDS, report_check.PAIR_FIELDS)


def test_a_surrogate_escape_is_read_the_old_way(tmp_path):
    data = json.loads((FLEET / "node-01.json").read_text())
    data["envelope"]["host"]["hostname"] = "node\ud800x"
    path = tmp_path / "r.json"
    path.write_text(json.dumps(data), encoding="utf-8")  # ensure_ascii: the surrogate as \ud800
    report, _ = reading.read_report(str(path))
    assert report["envelope"]["host"]["hostname"] == "node\ufffdx"
    many = "\\n" * 100 + "\\ud800"  # past the backslashes looked at one by one
    assert reading._surrogate_escape(f'"{many}"'.encode())
    assert not reading._surrogate_escape(b'"\\\\ud800"' * 10)  # an escaped backslash, then text
    assert reading._surrogate_escape(b'"\\\\ud800"' * 10 + b'"\\uD800"')
    assert reading._surrogate_escape(b'"\\\\ud800"' * 100)  # past 64: searched outright (as parse_json)


def test_long_runs_of_digits_are_read_as_every_input_reads_them(tmp_path):
    data = json.loads((FLEET / "node-01.json").read_text())
    evidence = data["findings"][0]["evidence"][0]
    path = tmp_path / "r.json"
    for value, refused in ((10**39, False), ("9" * 41, False), (10**40, True), (-(10**40), True)):
        evidence["value"] = value
        path.write_text(json.dumps(data))
        if refused:
            with pytest.raises(reading.ReportError, match="an integer with 41 digits"):
                reading.read_report(str(path))
        else:
            assert reading.read_report(str(path))[0]["findings"][0]["evidence"][0]["value"] == value


@pytest.mark.parametrize(
    "text, needle",
    [
        ("\ufeff" + (FLEET / "node-01.json").read_text(), None),
        ("not json", "invalid JSON"),
        ("[1]", "not a gpudoctor report"),
        ('{"report_schema_version": 1, "x": ' + "[" * 100 + "]" * 100 + "}", "nested too deeply"),
        ('{"report_schema_version": 1, "x": ' + "[" * 100_000 + "]" * 100_000 + "}", "nested too deeply"),
        ('{"report_schema_version": 1, "kind": "gate"}', "not a valid gpudoctor gate report: top level: must contain"),
        ('{"report_schema_version": 1e999}', "too large to be a float"),
        ('{"report_schema_version": NaN}', "NaN is not JSON"),
        ('{"report_schema_version": ' + "9" * 50 + "}", "an integer with 50 digits"),
    ],
)
def test_bad_files_are_named_as_every_input_is(tmp_path, text, needle):
    path = tmp_path / "r.json"
    path.write_text(text, encoding="utf-8")
    if needle is None:
        assert reading.read_report(str(path))[1] == "check"
        return
    with pytest.raises(reading.ReportError) as caught:
        reading.read_report(str(path))
    assert str(caught.value).startswith(f"{path}: ") and needle in str(caught.value)
    path.write_bytes(b'{"report_schema_version": "\xff"}')
    with pytest.raises(reading.ReportError, match="not UTF-8 text"):
        reading.read_report(str(path))


def _fleet_dir(directory: Path, count: int) -> list[Path]:
    """``count`` check and gate reports under their own node names (as scripts/bench_merge.py)."""
    sys.path.insert(0, str(REPO / "scripts"))
    try:
        import bench_merge
    finally:
        sys.path.pop(0)
    return [Path(p) for p in bench_merge.write_reports(directory, count)]


def _merge(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(REPO / "src"), COLUMNS="100")
    return subprocess.run(
        [sys.executable, "-m", "gpudoctor", "report", "merge", *args],
        capture_output=True, text=True, env=env, timeout=300, check=False,
    )


def test_several_processes_merge_what_one_merges(tmp_path):
    from gpudoctor.fleet.merge import PARALLEL_MIN

    paths = _fleet_dir(tmp_path, PARALLEL_MIN + 40)
    for extra in ([], ["--format", "json"], ["--drift"], ["--drift", "--format", "json"]):
        one, three = _merge("--jobs", "1", *extra, str(tmp_path)), _merge("--jobs", "3", *extra, str(tmp_path))
        assert (one.returncode, one.stdout, one.stderr) == (three.returncode, three.stdout, three.stderr), extra
        assert one.returncode == 1 and one.stdout and not one.stderr
    # the first bad report in order is the one named, however many processes read them
    for bad in (paths[5], paths[-3]):
        bad.write_text("{")
    for jobs in ("1", "3"):
        done = _merge("--jobs", jobs, str(tmp_path))
        assert done.returncode == 2 and done.stdout == "" and done.stderr.count("\n") == 1
        assert str(paths[5]) in done.stderr and "invalid JSON" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_fifo_or_a_link_in_a_reports_directory_is_refused_not_waited_on_or_followed(tmp_path):
    from gpudoctor.fleet.merge import PARALLEL_MIN

    _fleet_dir(tmp_path, PARALLEL_MIN)
    os.mkfifo(tmp_path / "node-000003.json.fifo.json")
    done = _merge("--jobs", "2", str(tmp_path))
    assert done.returncode == 2 and "a FIFO, not a regular file" in done.stderr
    os.unlink(tmp_path / "node-000003.json.fifo.json")
    outside = tmp_path.parent / f"{tmp_path.name}-outside.json"
    outside.write_text((FLEET / "node-01.json").read_text())
    (tmp_path / "elsewhere.json").symlink_to(outside)
    done = _merge("--jobs", "2", str(tmp_path))
    assert done.returncode == 2 and "symbolic link" in done.stderr and "elsewhere.json" in done.stderr
    assert _merge(str(outside)).returncode == 0  # named on the command line, it is read


def test_more_reports_than_a_merge_reads_are_refused(capsys, monkeypatch, tmp_path):
    from gpudoctor.cli.commands import report

    for number in range(5):
        (tmp_path / f"r{number}.json").write_text("{}")
    monkeypatch.setattr(report, "MAX_REPORTS", 3)
    code, out, err = cli(capsys, "report", "merge", str(tmp_path))
    assert code == 2 and out == "" and "more than 3 reports" in err
    code, out, err = cli(capsys, "report", "merge", *(str(tmp_path / f"r{n}.json") for n in range(4)))
    assert code == 2 and "more than 3 reports" in err


def test_a_reading_process_that_dies_ends_the_merge_with_a_message_not_a_hang(tmp_path):
    from gpudoctor.fleet.merge import PARALLEL_MIN

    paths = _fleet_dir(tmp_path, PARALLEL_MIN)
    script = (
        "import os, sys\n"
        "from gpudoctor.fleet import merge\n"
        "def _read_chunk(items):\n"
        "    os._exit(9)  # as the kernel's OOM killer would end it\n"
        "merge._read_chunk = _read_chunk\n"
        "try:\n"
        "    merge.load_reports([(p, True) for p in sys.argv[1:]], jobs=2)\n"
        "except merge.ReportError as exc:\n"
        "    print(exc)\n"
    )
    env = dict(os.environ, PYTHONPATH=str(REPO / "src"))
    done = subprocess.run(
        [sys.executable, "-c", script, *map(str, paths)], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0 and "ended before it was done" in done.stdout, done.stderr


@fuzz(150)
@given(st.data())
def test_the_check_agrees_with_the_schema_on_several_changes_at_once(data: st.DataObject) -> None:
    kind, base = copy.deepcopy(data.draw(st.sampled_from(BASES)))
    places = list(_shapes(base))
    for path, value in data.draw(st.lists(st.tuples(st.sampled_from(places), st.sampled_from(VALUES)), max_size=4)):
        try:
            parent = _at(base, path[:-1])
            parent[path[-1]] = copy.deepcopy(value)
        except (KeyError, IndexError, TypeError):
            continue  # an earlier change took the place away
    _agrees(base, kind, "several changes")
