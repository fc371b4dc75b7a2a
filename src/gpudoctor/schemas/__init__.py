"""JSON Schemas shipped with gpudoctor, and their (lazily compiled) validators.

facts.schema.json   the snapshot written by `gpudoctor probe`
rules.schema.json   a rule file under rules/ or --rules DIR
report.schema.json  the JSON report of `gpudoctor check --format json`

Base layer: imports the standard library and the generated validators beside it (fastjsonschema
only to describe data that failed, or where a validator was not generated);
nothing else of gpudoctor.
"""

from __future__ import annotations

import json
import sys
from functools import cache
from pathlib import Path
from typing import Any, Callable

from ._errors import SchemaValueError

HERE = Path(__file__).resolve().parent


@cache
def load_schema(name: str) -> dict[str, Any]:
    with open(HERE / f"{name}.schema.json", encoding="utf-8") as fh:
        data: dict[str, Any] = json.load(fh)
    return data


@cache
def _validator(name: str) -> Callable[[Any], Any]:
    """The generated validator module (scripts/gen_validators.py), else compile at run time."""
    import importlib

    try:
        # the module name as scripts/gen_validators.py writes it (gate-report -> _validate_gate_report)
        module = importlib.import_module(f"{__name__}._validate_{name.replace('-', '_')}")
        return module.validate  # type: ignore[no-any-return]
    except ImportError:
        import fastjsonschema

        return fastjsonschema.compile(load_schema(name))  # type: ignore[no-any-return]


def validate(name: str, data: Any) -> str | None:
    """Validate data against a shipped schema; return the first problem or None.

    Where a value fails an anyOf (a fact that is "a value or unavailable"), the
    branch that is not the unavailable marker is checked again on that value, so
    the message names the innermost field that is wrong, not the whole list.
    """
    validator = _validator(name)
    try:
        validator(data)
        return None
    except ValueError as exc:
        if not isinstance(exc, _value_errors()):
            raise
        return _describe(name, exc)


def _value_errors() -> tuple[type[ValueError], ...]:
    """What a validator raises for data that does not match: a generated one SchemaValueError,
    one fastjsonschema compiled at run time its own class (only once fastjsonschema is imported)."""
    compiler = sys.modules.get("fastjsonschema")
    return (SchemaValueError,) if compiler is None else (SchemaValueError, compiler.JsonSchemaValueException)


def _describe(name: str, exc: Any) -> str | None:
    """The first problem, named at the innermost field (see validate). Only data that failed comes
    here: the schema is read and fastjsonschema imported for it alone."""
    import fastjsonschema

    schema = load_schema(name)
    prefix = "data"
    for _ in range(11):  # with the first validation, at most 12 (as many levels of anyOf)
        definition = exc.definition if isinstance(exc.definition, dict) else {}
        branches = [
            b
            for b in definition.get("anyOf", [])
            if b.get("$ref") != "#/$defs/unavailable" and b.get("required") != ["unavailable"]
        ]
        if not (exc.rule == "anyOf" and len(branches) == 1 and exc.name):
            full = exc.name.replace("data", prefix, 1) if exc.name else prefix
            where = full.replace("data.", "", 1).replace("data", "top level", 1) or "top level"
            message = exc.message.replace(exc.name or "", "").strip() or exc.message
            return f"{where}: {message}"
        # descend: validate the failing value against the real branch
        prefix = exc.name.replace("data", prefix, 1)
        sub = dict(branches[0])
        sub["$defs"] = schema.get("$defs", {})
        # never fetch anything: every reference is inside the shipped schema
        validator = fastjsonschema.compile(sub, handlers={"https": lambda _uri: schema, "http": lambda _uri: schema})
        try:
            validator(exc.value)
        except fastjsonschema.JsonSchemaValueException as inner:
            exc = inner
            continue
        return None  # the branch alone takes it
    return "does not match the schema"


def validate_facts(data: Any) -> str | None:
    return validate("facts", data)
