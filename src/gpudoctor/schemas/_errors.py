"""The error the generated validators (scripts/gen_validators.py) raise.

fastjsonschema's generated code raises its JsonSchemaValueException, which the generated modules
imported from the fastjsonschema package: importing that package loads its whole code generator
(about 10 ms of every `check` start-up) only to name an exception. The generated modules name
this class instead; it carries what gpudoctor.schemas.validate reads of the error.
"""

from __future__ import annotations

from typing import Any


class SchemaValueError(ValueError):
    """A value that does not match the schema: the message, the value, its path in the data
    ("data.gpus[0].name"), the schema node it failed and which keyword of it (anyOf, type, ...)."""

    def __init__(
        self, message: str, value: Any = None, name: str | None = None, definition: Any = None, rule: str | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.value = value
        self.name = name
        self.definition = definition
        self.rule = rule


class SchemaValuesError(ValueError):
    """Several values that do not match, all at once: what fastjsonschema's generated code
    raises when compiled without fast_fail. gpudoctor's validators are compiled with it (the
    first problem ends validation), so this is never raised; their anyOf branches name it."""

    def __init__(self, errors: list[SchemaValueError]) -> None:
        super().__init__("; ".join(error.message for error in errors))
        self.errors = errors
