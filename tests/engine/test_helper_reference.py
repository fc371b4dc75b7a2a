"""docs/rules-helpers.md: every function a rule may call is documented from its own docstring,
with examples that are true, and the generated documents are current."""

from __future__ import annotations

import ast
import importlib.util
import sys
from typing import Any

import pytest

from gpudoctor.engine import factpaths
from gpudoctor.engine.expressions import compile_expression
from gpudoctor.engine.factpaths import SECTIONS
from gpudoctor.engine.helpers.registry import FORMS, FUNCTIONS, STATIC, bind
from gpudoctor.engine.subjects import gpu_subjects
from gpudoctor.engine.templates import format_value
from gpudoctor.engine.views import section_views, wrap
from gpudoctor.tables import builtin_rules_dir, load_tables
from tests.conftest import REPO, probed


def _generator() -> Any:
    spec = importlib.util.spec_from_file_location("gen_rules_doc", REPO / "scripts" / "gen_rules_doc.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("gen_rules_doc", module)
    spec.loader.exec_module(module)
    return module


GEN = _generator()
FUNCS = bind(load_tables(builtin_rules_dir() / "data"))
DOCS = GEN.helper_docs(FUNCS)
EXAMPLES = [(name, expr, result) for name, _, doc in DOCS for expr, result in GEN.split_doc(doc)[2]]


def test_every_function_a_rule_may_call_is_documented_with_an_example():
    assert [name for name, _, _ in DOCS] == sorted(FUNCTIONS)
    for name, signature, doc in DOCS:
        summary, _, examples = GEN.split_doc(doc)
        assert signature.startswith(f"{name}(") and summary, name
        assert examples, f"{name}: no 'Example: EXPRESSION → RESULT' line in its docstring"
        assert all(name in expression for expression, _ in examples), name


def test_the_forms_are_what_the_evaluator_evaluates_itself():
    assert set(FORMS) == {"available", "supported"} and set(FORMS) <= FUNCTIONS and not set(FORMS) & set(STATIC)


def _names() -> dict[str, Any]:
    facts = probed("healthy-2gpu")
    gpus = gpu_subjects(facts)
    reads: list[Any] = []
    names = section_views(facts, SECTIONS, reads)
    names["gpus"] = [wrap(g, f"gpus[{i}]", reads) for i, g in enumerate(gpus)]
    names["gpu"] = wrap(gpus[0], "gpu", reads)
    return names


ROOTS = {**factpaths.section_roots(), "gpus": {"type": "array"}, "gpu": factpaths.subject_schema("gpu")}


@pytest.mark.parametrize("name, expression, result", EXAMPLES, ids=[f"{n}: {e}" for n, e, _ in EXAMPLES])
def test_every_example_gives_what_it_says(name, expression, result):
    value = compile_expression(expression, ROOTS).evaluate(_names(), FUNCS)
    try:
        expected = ast.literal_eval(result)
    except (ValueError, SyntaxError):  # not a Python literal (a version): compared as shown
        assert format_value(value) == result, (expression, value)
    else:
        assert value == expected and type(value) is type(expected), (expression, value)


@pytest.mark.parametrize("target", ["rules.md", "rules-helpers.md"])
def test_the_generated_documents_are_current(target):
    generated = {path.name: text for path, text in GEN.outputs().items()}
    current = (REPO / "docs" / target).read_text(encoding="utf-8")
    assert current == generated[target], f"docs/{target} is stale: run python scripts/gen_rules_doc.py"


def test_a_docstring_example_is_split_from_its_summary():
    summary, rest, examples = GEN.split_doc("One line.\n\nMore words\nhere.\n\nExample: f(1) → 2\nExample: f(2) → 3")
    assert (summary, rest, examples) == ("One line.", "More words here.", [("f(1)", "2"), ("f(2)", "3")])
    assert GEN.signature("lookup", FUNCS["lookup"]) == "lookup(table, key[, field[, default]])"
    assert GEN.signature("min", FUNCS["min"]) == "min(*values)"
