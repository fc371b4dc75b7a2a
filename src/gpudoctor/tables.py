"""The data tables under rules/data (and a rule pack's data/ folder): read, schema-checked and
keyed by name.

A table is a YAML file with ``name``, ``description``, ``source``, ``retrieved`` and ``rows``
(src/gpudoctor/schemas/table.schema.json). Rules read tables through the engine's lookup
helpers; advice (the torch build, GPU specs) reads them here, without the rule engine.

Base layer: imports only gpudoctor.inputs (every table is read as an untrusted file: bounded,
safe YAML) and gpudoctor.schemas. Any problem is an :class:`gpudoctor.inputs.InputError`
naming the file and, where known, the line.
"""

from __future__ import annotations

import datetime
import functools
from pathlib import Path
from typing import Any, Mapping

from .inputs import InputError, load_yaml_file
from .schemas import validate


def builtin_rules_dir() -> Path:
    """The rules shipped in the wheel (gpudoctor/rules), else the repo's rules/ (editable install);
    its data/ folder holds the built-in tables."""
    here = Path(__file__).resolve().parent
    packaged = here / "rules"
    if packaged.is_dir():
        return packaged
    return here.parent.parent / "rules"


def read_table(path: Path) -> dict[str, Any]:
    """One table file, read and checked against the table schema."""
    data = load_yaml_file(path, "data table")
    if isinstance(data, dict) and isinstance(data.get("retrieved"), datetime.date):
        data["retrieved"] = data["retrieved"].isoformat()  # YAML reads unquoted dates as dates
    problem = validate("table", data)
    if problem:
        raise InputError(str(path), f"data table: {problem}", getattr(data, "line", None))
    return data  # type: ignore[no-any-return]


def load_tables(directory: Path) -> dict[str, Any]:
    """Every table in ``directory`` (none when it does not exist) by name, each with its rows keyed
    by string and the ``path`` it was read from."""
    tables: dict[str, Any] = {}
    if not directory.is_dir():
        return tables
    for path in sorted(directory.glob("*.yaml")):
        data = read_table(path)
        name = data["name"]
        if name in tables:
            raise InputError(str(path), f"duplicate data table name {name!r}", getattr(data, "line", None))
        rows = {str(k): v for k, v in data["rows"].items()}
        tables[name] = {**data, "rows": rows, "path": str(path)}
    return tables


@functools.lru_cache(maxsize=1)
def builtin_tables() -> dict[str, Any]:
    """The built-in tables (rules/data), read once per process: for advice, which reads them
    without the rule engine (the engine loads them with its rules, through its cache)."""
    return load_tables(builtin_rules_dir() / "data")


MAX_DEVICE_ID_CHARS = 10  # "0x" and at most 8 hex digits: a longer string is no PCI device id


def architecture_of_device(tables: Mapping[str, Any], device_id: str) -> str | None:
    """The architecture of an NVIDIA PCI device id ("0x2335" → "hopper") from the nvidia_pci_ids
    table of device-id ranges; None when the id is no hex number or in no range."""
    text = device_id.strip().lower()
    if len(text) > MAX_DEVICE_ID_CHARS:
        return None
    try:
        number = int(text, 16)
    except ValueError:
        return None
    for key, row in tables.get("nvidia_pci_ids", {}).get("rows", {}).items():
        low, _, high = str(key).partition("-")
        try:
            if int(low, 16) <= number <= int(high, 16):
                return str(row["architecture"])
        except (ValueError, KeyError, TypeError):
            continue
    return None
