"""gpudoctor.tables: the data tables read without the rule engine, every problem an InputError
naming the file."""

from __future__ import annotations

import pytest

from gpudoctor.inputs import InputError
from gpudoctor.tables import builtin_rules_dir, load_tables

TABLE = "name: {name}\ndescription: d\nsource: s\nretrieved: 2026-01-02\nrows: {{a: 1, 2: x}}\n"


def test_the_built_in_tables_load_by_name_with_their_path():
    tables = load_tables(builtin_rules_dir() / "data")
    assert {"cuda_driver", "torch_releases", "gpu_specs", "xid_errors"} <= set(tables)
    for name, table in tables.items():
        assert table["name"] == name and table["path"].endswith(f"{name}.yaml")
        assert all(isinstance(key, str) for key in table["rows"])


def test_keys_become_strings_and_dates_iso_text(tmp_path):
    (tmp_path / "t.yaml").write_text(TABLE.format(name="t"))
    table = load_tables(tmp_path)["t"]
    assert table["rows"] == {"a": 1, "2": "x"} and table["retrieved"] == "2026-01-02"


def test_no_directory_is_no_tables(tmp_path):
    assert load_tables(tmp_path / "missing") == {}


@pytest.mark.parametrize(
    "files, needle",
    [
        ({"t.yaml": "name: t\ndescription: x\nrows: {a: 1}\n"}, "t.yaml:1: data table: top level: must contain"),
        ({"a.yaml": TABLE.format(name="t"), "b.yaml": TABLE.format(name="t")}, "b.yaml:1: duplicate data table"),
        ({"t.yaml": "name: t\nname: u\n"}, "t.yaml:2: "),
    ],
)
def test_a_bad_table_is_an_input_error_naming_the_file(tmp_path, files, needle):
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    with pytest.raises(InputError) as caught:
        load_tables(tmp_path)
    assert needle in str(caught.value)
