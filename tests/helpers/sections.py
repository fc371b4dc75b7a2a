"""Check one probe section against its part of the facts schema."""

from __future__ import annotations

from functools import cache
from typing import Any, Callable

from gpudoctor.facts import to_jsonable
from gpudoctor.schemas import load_schema


@cache
def _section_validator(name: str) -> Callable[[Any], Any]:
    import fastjsonschema

    schema = load_schema("facts")
    # The section's own schema with the shared $defs beside it, so its "#/$defs/..." refs resolve.
    sub = dict(schema["properties"][name])
    sub["$defs"] = schema["$defs"]
    return fastjsonschema.compile(sub)  # type: ignore[no-any-return]


def validate_section(name: str, data: Any) -> None:
    """Raise fastjsonschema.JsonSchemaValueException when data does not fit the section."""
    _section_validator(name)(to_jsonable(data))


def section_keys(name: str) -> set[str]:
    """The property names the schema defines for a section (its object form)."""
    schema = load_schema("facts")["properties"][name]
    for option in schema.get("anyOf", [schema]):
        if option.get("type") == "object":
            return set(option["properties"])
    return set(schema.get("properties", {}))


def def_keys(name: str) -> set[str]:
    """The property names of a $defs entry (pci_device, numa_node, cpu)."""
    return set(load_schema("facts")["$defs"][name]["properties"])
