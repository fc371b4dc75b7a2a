"""Reading node reports for `report merge`: bounded, strict, and quick enough for a fleet.

Every report is read as gpudoctor reads any file it is given (inputs.read_input: opened
O_NONBLOCK, a regular file only, at most inputs.MAX_REPORT_BYTES) and parsed as strict JSON
(inputs.STRICT_JSON: no NaN or Infinity, no integer over 40 digits). What it must then pass is
what it always had to: nesting at most inputs.MAX_DEPTH levels, a ``report_schema_version``, and
schemas/gate-report.schema.json (``"kind": "gate"``) or schemas/report.schema.json. Walking a
report for its depth and running the generated schema validator cost more than parsing it (about
0.9 and 1–3 ms of a 100 KB report); report_check.plain_report is a hand-written check of both, as
strict as the two schemas and the nesting bound together and in one pass
(tests/test_fleet_reading.py checks that it accepts what they accept and refuses what either
refuses). A report it does not accept, or whose text has a \\uD... escape (a lone surrogate
to replace, inputs.parse_json), is read the old way from the same bytes: the messages are the
ones gpudoctor always gave, from inputs.parse_json and schemas.validate.

Files found in a directory (`report merge DIR`) are opened without following a symbolic link: a
node that writes into a shared reports directory cannot make the merge read a file elsewhere.
"""

from __future__ import annotations

import json
import os
from typing import Any

from ..inputs import MAX_REPORT_BYTES, STRICT_JSON, InputError, parse_json, read_input
from .report_check import plain_report

WHAT = "gpudoctor report"


class ReportError(Exception):
    """A file that is not a usable gpudoctor report (exit status 2)."""


def read_report(path: str, *, follow: bool = True) -> tuple[dict[str, Any], str]:
    """(the report, "gate" or "check") of the file at ``path``; ReportError naming the file
    for anything else. ``follow=False``: a symbolic link is refused, not followed."""
    try:
        raw = read_input(path, MAX_REPORT_BYTES, WHAT, follow=follow)
    except InputError as exc:
        raise ReportError(str(exc)) from None
    if not _surrogate_escape(raw):
        try:
            text = raw.decode("utf-8")
            data = json.loads(text[1:] if text.startswith("\ufeff") else text, **STRICT_JSON)
        except (ValueError, RecursionError):
            pass  # the slow path below names the problem
        else:
            if type(data) is dict and "report_schema_version" in data:
                kind = "gate" if data.get("kind") == "gate" else "check"
                if plain_report(data, kind):
                    return data, kind
    return _strict(path, raw)


def _surrogate_escape(raw: bytes) -> bool:
    """Whether the text may hold a \\uD... escape (a lone surrogate parse_json replaces): the
    first 64 backslashes are looked at one by one (found by memchr; each one's escaped character
    stepped over, so an escaped backslash does not start one), and a text with more of them is
    searched for the escape outright, as parse_json does."""
    at = raw.find(b"\\")
    for _ in range(64):
        if at < 0:
            return False
        if raw[at + 1 : at + 3] in (b"ud", b"uD"):
            return True
        at = raw.find(b"\\", at + 2)
    return b"\\ud" in raw or b"\\uD" in raw


def _strict(path: str, raw: bytes) -> tuple[dict[str, Any], str]:
    """read_report the way every other gpudoctor input is read (inputs.read_text_input and
    parse_json, then the schema validator), for the message that names what is wrong."""
    from ..schemas import validate

    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:  # inputs.read_text_input's words
        line = raw.count(b"\n", 0, exc.start) + 1
        raise ReportError(str(InputError(path, f"not UTF-8 text (byte 0x{raw[exc.start]:02x})", line))) from None
    try:
        data = parse_json(text[1:] if text.startswith("\ufeff") else text, path, WHAT)
    except InputError as exc:
        raise ReportError(str(exc)) from None
    if not isinstance(data, dict) or "report_schema_version" not in data:
        raise ReportError(f"{path}: not a gpudoctor report (no report_schema_version; a facts snapshot?)")
    kind = "gate" if data.get("kind") == "gate" else "check"
    problem = validate("gate-report" if kind == "gate" else "report", data)
    if problem:
        raise ReportError(f"{path}: not a valid gpudoctor {kind} report: {problem}")
    return data, kind


def jobs_default() -> int:
    """Processes `report merge` reads reports in: one per CPU this process may run on, at most 16."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    return max(1, min(cpus, 16))
