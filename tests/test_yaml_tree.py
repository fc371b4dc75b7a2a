"""gpudoctor.yaml_tree builds exactly what PyYAML's constructor and inputs' checks made before.

parse_yaml takes the fast builder for plain documents and PyYAML's constructor for the rest; each
case here is parsed both ways (the slow way by making the builder decline) and must give the same
value, the same types, the same lines, or the same one-line error. The cases: every YAML file of
the project (rules, data tables, fixtures), the documents that must take the slow way, and
generated documents.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpudoctor import inputs, yaml_tree
from gpudoctor.inputs import InputError, LineDict, LineList, parse_yaml

REPO = Path(__file__).resolve().parents[1]


def shape(value: Any) -> Any:
    """The value with its types and lines spelled out, so that == compares them too."""
    if isinstance(value, dict):
        items = [(shape(k), shape(v)) for k, v in value.items()]
        return ("dict", type(value).__name__, getattr(value, "line", None), items)
    if isinstance(value, list):
        lines = (getattr(value, "line", None), getattr(value, "item_lines", None))
        return ("list", type(value).__name__, lines, [shape(v) for v in value])
    return (type(value).__name__, value)


def both_ways(text: str, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Any]:
    """(fast, slow): each the shape of the value or ("error", message)."""

    def parsed() -> Any:
        try:
            return shape(parse_yaml(text, "doc.yaml"))
        except InputError as exc:
            return ("error", str(exc))
        except Exception as exc:  # noqa: BLE001 - what a caller would print as a traceback
            return ("escaped", type(exc).__name__, str(exc))

    fast = parsed()
    with monkeypatch.context() as patch:
        patch.setattr(inputs, "_built", lambda node, loader: yaml_tree.SLOW)
        slow = parsed()
    return fast, slow


def project_yaml() -> list[Path]:
    found = sorted(REPO.joinpath("rules").rglob("*.yaml")) + sorted(REPO.joinpath("tests").rglob("*.yaml"))
    return [p for p in found if p.is_file() and p.stat().st_size < (1 << 20)]


def test_every_yaml_file_of_the_project_builds_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    files = project_yaml()
    assert len(files) > 30
    fast_built = 0
    for path in files:
        text = path.read_text(encoding="utf-8", errors="surrogateescape")
        fast, slow = both_ways(text, monkeypatch)
        assert fast == slow, path
        fast_built += fast[0] != "error"
    assert fast_built > 30


SLOW_CASES = {
    "alias": "a: &x [1, 2]\nb: *x\n",
    "merge key": "base: &b {x: 1}\nother:\n  <<: *b\n  y: 2\n",
    "duplicate key": "a: 1\nb: 2\na: 3\n",
    "equal keys of two types": "1: one\ntrue: yes\n",
    "list as key": "? [1, 2]\n: x\n",
    "timestamp": "when: 2026-12-02\n",
    "binary": "data: !!binary aGVsbG8=\n",
    "set": "s: !!set {a, b}\n",
    "custom tag": "x: !python/object:os.system ls\n",
    "too many digits": "n: " + "9" * 5000 + "\n",
    "not finite": "f: .inf\n",
    "recursive alias": "a: &x [*x]\n",
    "alias bomb": "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
    + "".join(f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 10)}]\n" for i in range(6)),
    "deep block nesting": "".join("  " * i + "- \n" for i in range(70)) + "  " * 70 + "- x\n",
    "value key": "=: x\n",
    "sexagesimal and hex": "a: 1:30\nb: 0x1f\nc: +12_000\nd: 0o17\n",
    "booleans and nulls": "a: yes\nb: Off\nc: ~\nd: null\ne:\n",
    "empty": "",
    "a scalar": "just text\n",
    "surrogate": 'a: "\\ud800x"\n',
    "two documents": "a: 1\n---\nb: 2\n",
    "bad syntax": "a: [1, 2\n",
    # a scalar its explicit tag refuses, before a problem the slow path finds first (its keys)
    "bad bool, then a duplicate key": "rules:\n  - id: x\n    enabled: !!bool foo\n    id: y\n",
    "empty int, then a duplicate key": "a: !!int ''\na: 2\n",
    "bad bool, then a list key": "a: !!bool foo\n? [k]\n: 1\n",
    "bad bool in a nested mapping": "x: {a: !!bool foo}\nx: 1\n",
    "bad int": "a: !!int 1.5\n",
    "bad float": "a: !!float '-'\n",
    "bad timestamp": "a: !!timestamp x\n",
    "set of a list": "a: !!set [1]\n",
    "map of a list": "a: !!map [1, 2]\n",
    "bad bool alone": "a: !!bool foo\n",
    "empty int alone": "a: !!int ''\n",
}


@pytest.mark.parametrize("name", sorted(SLOW_CASES))
def test_documents_off_the_plain_case_give_what_they_gave(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    fast, slow = both_ways(SLOW_CASES[name], monkeypatch)
    assert fast == slow


@pytest.mark.parametrize(
    "name", [n for n in sorted(SLOW_CASES) if n.startswith(("bad ", "empty int", "set of", "map of"))]
)
def test_a_value_its_tag_does_not_fit_is_a_one_line_error(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    fast, slow = both_ways(SLOW_CASES[name], monkeypatch)
    assert fast[0] == "error" and slow[0] == "error", (fast, slow)


def test_a_document_over_the_size_limit_is_refused_as_before(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(inputs, "MAX_YAML_EXPANDED", 50)
    text = "items:\n" + "".join(f"  - {i}\n" for i in range(60))
    fast, slow = both_ways(text, monkeypatch)
    assert fast == slow and fast[0] == "error" and "more than 50 values" in fast[1]


def test_the_plain_case_takes_the_builder(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    real = yaml_tree.Builder.document

    def counting(builder: yaml_tree.Builder, root: Any) -> Any:
        value = real(builder, root)
        calls.append("slow" if value is yaml_tree.SLOW else "fast")
        return value

    monkeypatch.setattr(yaml_tree.Builder, "document", counting)
    data = parse_yaml("id: x\nfail_if: a == 1\ntags: [gpu, numa]\n", "r.yaml")
    assert calls == ["fast"]
    assert isinstance(data, LineDict) and isinstance(data["tags"], LineList) and data["tags"].item_lines == (3, 3)
    parse_yaml("a: &x 1\nb: *x\n", "r.yaml")
    assert calls == ["fast", "slow"]


_scalars = st.one_of(
    st.integers(-(10**20), 10**20),
    st.floats(allow_nan=False, allow_infinity=False),
    st.booleans(),
    st.none(),
    st.text(max_size=40),
)
_values = st.recursive(
    _scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=5), st.dictionaries(st.one_of(st.text(max_size=10), st.integers()), inner, max_size=5)
    ),
    max_leaves=30,
)


@settings(max_examples=150, deadline=None)
@given(value=_values, flow=st.booleans())
def test_generated_documents_build_the_same(value: Any, flow: bool) -> None:
    import yaml

    text = yaml.safe_dump(value, default_flow_style=flow, allow_unicode=True)
    with pytest.MonkeyPatch.context() as monkeypatch:
        fast, slow = both_ways(text, monkeypatch)
    assert fast == slow


_KEYS = st.sampled_from(["a", "b", "id", "1", "1.0", "true", "~", "[k]", "<<", "=", "'a'"])
_TAGS = st.sampled_from(["", "!!str ", "!!int ", "!!float ", "!!bool ", "!!null ", "!!timestamp ", "!!set ", "!!map "])
_TEXTS = st.sampled_from(
    [
        "",
        "''",
        "1",
        "-1_000",
        "1:30",
        "0x1f",
        "1.5",
        ".nan",
        "-.inf",
        "foo",
        "yes",
        "Off",
        "~",
        "[1]",
        "{a: 1}",
        "-",
        "2026-12-02",
        "&x 1",
        "*x",
        "'\\ud800'",
        '"\\ud800"',
        "[[1, [2]], {b: [3]}]",
    ]
)


@settings(max_examples=400, deadline=None)
@given(entries=st.lists(st.tuples(_KEYS, _TAGS, _TEXTS), max_size=6), nested=st.booleans())
def test_tagged_and_odd_scalars_build_the_same(entries: list[tuple[str, str, str]], nested: bool) -> None:
    # explicit tags on values they may not fit, equal keys of several types, aliases: the fast
    # path declines what it does not take, and the answer (value or error) is the slow path's
    body = "".join(f"{key}: {tag}{text}\n" for key, tag, text in entries)
    text = "top:\n" + "".join("  " + line + "\n" for line in body.splitlines()) if nested else body
    with pytest.MonkeyPatch.context() as monkeypatch:
        fast, slow = both_ways(text, monkeypatch)
    assert fast == slow
    assert fast[0] != "escaped", fast
