"""The evaluator's programs (engine.program): one step per node of a checked tree, made
once per expression. What they may do is what the checked language allows: these tests run trees
the loader never lets through (built by hand) and attacks against the steps themselves."""

from __future__ import annotations

import ast
import os
import time
from typing import Any

import pytest
from simpleeval import FeatureNotAvailable, FunctionNotDefined, InvalidExpression, NameNotDefined

from gpudoctor.engine import factpaths, program
from gpudoctor.engine.bounds import LimitExceeded
from gpudoctor.engine.evaluator import DeadlineExceeded, Expression, RunCache
from gpudoctor.engine.expressions import ALLOWED_NODES, compile_expression
from gpudoctor.engine.helpers.registry import bind
from gpudoctor.engine.views import FactUnavailable, FactView, UnavailableSection, wrap

ROOTS = dict(factpaths.section_roots())
ROOTS["gpu"] = factpaths.subject_schema("gpu")
ROOTS["gpus"] = {"type": "array"}
FUNCS = bind({})
GPU = {"pcie_width": 8, "pcie_max_width": 16, "name": "H100", "index": 0}


def unchecked(source: str) -> Expression:
    """An expression as the loader would never make it: parsed, not checked."""
    return Expression(source=source, tree=ast.parse(source, mode="eval").body, paths=())


def names(reads: list[Any] | None = None) -> dict[str, Any]:
    reads = [] if reads is None else reads
    return {"gpu": wrap(GPU, "gpu", reads), "host": wrap({"kernel_release": "6.8.0", "cpu_count": 4}, "host", reads)}


def test_every_node_type_of_the_checked_language_has_a_step_and_no_other_does() -> None:
    with_children = {kind for kind in ALLOWED_NODES if kind._fields and kind is not ast.Expression}
    assert set(program.MAKERS) == with_children


@pytest.mark.parametrize(
    "source",
    [
        "(lambda: 1)()",
        "{1: 2}",
        "{1, 2}",
        "f'{gpu.name}'",
        "[*gpus]",
        "[x for x in gpus]",
        "gpus[0:1]",
        "gpu.name.upper()",
        "len(gpus, key=1)",
        "(x := 1)",
    ],
)
def test_a_node_outside_the_checked_language_is_refused_when_evaluated(source: str) -> None:
    with pytest.raises(FeatureNotAvailable):
        unchecked(source).evaluate({**names(), "gpus": [], "x": 1}, FUNCS)


def test_attribute_access_on_a_fact_view_reads_facts_never_python_attributes() -> None:
    for attr in ("_data", "_reads", "child", "__class__", "__dict__", "get"):
        with pytest.raises(FactUnavailable):
            unchecked(f"gpu.{attr}").evaluate(names(), FUNCS, RunCache())


def test_attribute_access_on_anything_but_a_fact_view_is_refused() -> None:
    for source in ("host.kernel_release.__class__", "'x'.__class__", "(1).real", "[gpu][0].pcie_width.bit_length"):
        with pytest.raises(InvalidExpression, match="only allowed on facts"):
            unchecked(source).evaluate(names(), FUNCS)


def test_only_the_function_table_is_called_never_a_callable_among_the_names() -> None:
    called: list[Any] = []

    def system(*args: Any) -> None:
        called.append(args)

    for run in (None, RunCache()):
        with pytest.raises(FunctionNotDefined):
            unchecked("system('true')").evaluate({"system": system}, FUNCS, run)
        with pytest.raises(FunctionNotDefined):
            unchecked("__import__('os')").evaluate({}, FUNCS, run)
    assert called == []


def test_a_helper_handing_out_a_module_or_a_forbidden_function_is_refused() -> None:
    functions = {**FUNCS, "module": lambda: os, "hidden": lambda: [1, [eval]]}
    for run in (None, RunCache()):
        with pytest.raises(FeatureNotAvailable):
            unchecked("module()").evaluate({}, functions, run)
        with pytest.raises(FeatureNotAvailable):
            unchecked("hidden()").evaluate({}, functions, run)


def test_fact_views_have_no_operators_to_overload() -> None:
    # what a fact view is, besides the reads: object's own operators (identity) and nothing more
    for method in ("__add__", "__mul__", "__mod__", "__neg__", "__getitem__", "__contains__", "__iter__", "__len__",
                   "__bool__", "__call__", "__index__", "__int__", "__getattr__", "__eq__", "__lt__", "__format__"):
        for cls in (FactView, UnavailableSection):
            assert all(method not in vars(base) for base in cls.__mro__ if base is not object), (cls, method)
    for source in ("gpu + 1", "gpu < 1", "-gpu", "1 in gpu", "gpu[0]", "gpu * 3", "gpu % 1"):
        with pytest.raises(TypeError):
            unchecked(source).evaluate(names(), FUNCS)
    assert unchecked("gpu == gpu").evaluate(names(), FUNCS) is True
    assert unchecked("gpu != host").evaluate(names(), FUNCS) is True


def test_format_tricks_stay_text() -> None:
    # a format string is only a string: no .format to call, and % of a string is refused at run time too
    assert compile_expression('"{0.__class__}" == gpu.name', ROOTS).evaluate(names(), FUNCS) is False
    with pytest.raises(InvalidExpression, match="%-formatting"):
        compile_expression("host.kernel_release % 1", ROOTS).evaluate(names(), FUNCS)
    with pytest.raises(FeatureNotAvailable):
        unchecked("'{}'.format(gpu)").evaluate(names(), FUNCS)


def test_bounds_hold_in_every_step() -> None:
    for source in ("[[1] * 99999] * 99999", "[gpu.name] * 200000", "(gpu.pcie_width, 1) * 100000"):
        with pytest.raises(LimitExceeded):
            compile_expression(source, ROOTS).evaluate(names(), FUNCS, RunCache())
    big = " * ".join(["18446744073709551616"] * 5)  # 2**64, the largest constant allowed, 5 times: 320 bits
    with pytest.raises(LimitExceeded):
        compile_expression(big, ROOTS).evaluate({}, FUNCS)
    with pytest.raises(LimitExceeded):
        compile_expression(f"-({big})", ROOTS).evaluate({}, FUNCS, RunCache())


def test_errors_name_the_expression_as_simpleeval_did() -> None:
    with pytest.raises(NameNotDefined, match="'gpu' is not defined for expression 'gpu.name == 1'"):
        compile_expression("gpu.name == 1", ROOTS).evaluate({}, FUNCS)


def test_a_program_is_made_once_per_expression_and_kind_of_evaluation() -> None:
    expr = compile_expression("max(gpu.pcie_width, 2) < gpu.pcie_max_width and gpu.name == 'H100'", ROOTS)
    assert expr.plain is None and expr.remembering is None
    assert expr.evaluate(names(), FUNCS) is True
    plain = expr.plain
    assert plain is not None
    assert expr.evaluate(names(), FUNCS, RunCache()) is True
    assert expr.plain is plain and expr.remembering is None  # a RunCache remembers by default,
    # but this expression has no node without the subject: nothing to remember
    free = compile_expression("gpu.pcie_width < len(gpus) + 1", ROOTS)
    assert free.free_nodes()
    run = RunCache()
    run.share([])
    assert free.evaluate({**names(), "gpus": []}, FUNCS, run) is False
    assert free.remembering is not None and free.plain is None
    run.remember = False
    assert free.evaluate({**names(), "gpus": []}, FUNCS, run) is False
    assert free.plain is not None and free.plain is not free.remembering


def test_the_deadline_is_looked_at_within_an_expression() -> None:
    expr = compile_expression("[" + ", ".join(["1"] * 300) + "]", ROOTS)  # 301 nodes
    assert len(expr.evaluate(names(), FUNCS, RunCache())) == 300
    with pytest.raises(DeadlineExceeded):
        expr.evaluate(names(), FUNCS, RunCache(deadline=time.monotonic() - 1))


def test_reads_and_values_are_those_of_the_tree_in_order() -> None:
    reads: list[Any] = []
    expr = compile_expression("gpu.pcie_width < 16 and gpu.name == 'H100' or host.cpu_count > 2", ROOTS)
    assert expr.evaluate(names(reads), FUNCS, RunCache()) is True
    assert reads == [("gpu.pcie_width", 8), ("gpu.name", "H100")]
    reads.clear()
    source = "(gpu.pcie_width if gpu.index == 1 else host.cpu_count, -gpu.pcie_max_width, [1, 2][1])"
    expr = compile_expression(source, ROOTS)
    assert expr.evaluate(names(reads), FUNCS) == (4, -16, 2)
    assert reads == [("gpu.index", 0), ("host.cpu_count", 4), ("gpu.pcie_max_width", 16)]


def test_the_programs_know_only_the_operators_the_checker_allows():
    # a hand-built tree (no loader makes one) meets no **, <<, >>, ^ or ~ either
    import ast as _ast

    from gpudoctor.engine.expressions import ALLOWED_NODES
    from gpudoctor.engine.program import OPERATORS

    assert set(OPERATORS) <= set(ALLOWED_NODES)
    assert not {_ast.Pow, _ast.LShift, _ast.RShift, _ast.BitXor, _ast.Invert} & set(OPERATORS)
