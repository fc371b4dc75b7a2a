"""JSON Schemas shipped with gpudoctor, and their (lazily compiled) validators.

facts.schema.json   the snapshot written by `gpudoctor probe`
rules.schema.json   a rule file under rules/ or --rules DIR
report.schema.json  the JSON report of `gpudoctor check --format json`
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent


@lru_cache(maxsize=None)
def load_schema(name: str) -> dict[str, Any]:
    with open(HERE / f"{name}.schema.json", encoding="utf-8") as fh:
        data: dict[str, Any] = json.load(fh)
    return data


@lru_cache(maxsize=None)
def _validator(name: str) -> Callable[[Any], Any]:
    import fastjsonschema

    return fastjsonschema.compile(load_schema(name))  # type: ignore[no-any-return]


def validate(name: str, data: Any) -> str | None:
    """Validate data against a shipped schema; return the first problem or None."""
    import fastjsonschema

    try:
        _validator(name)(data)
    except fastjsonschema.JsonSchemaValueException as exc:
        where = exc.name.replace("data.", "", 1) if exc.name else "top level"
        return f"{where}: {exc.message.replace(exc.name or '', '').strip() or exc.message}"
    return None


def validate_facts(data: Any) -> str | None:
    return validate("facts", data)
