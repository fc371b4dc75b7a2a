"""The node profile file that `gpudoctor profile create` writes (fleet/profile.py makes the data).

Formatting only. Every scalar is written as JSON (a JSON string is a YAML double-quoted scalar),
so a version such as "13.0" stays text and a value from a snapshot can never become YAML
structure; every comment line passes through gpudoctor.escaping.printable, so a snapshot name or
value with a newline cannot end the comment and add keys. The file reads back with
fleet.profile.load_profile.
"""

from __future__ import annotations

import json
from typing import Any, Mapping

from ..escaping import printable
from ..model.profile_facts import BY_NAME, ENTRY_KEY, SCOPES, ProfileFact

HEAD = """\
# gpudoctor node profile: what a known-good node looks like (gpudoctor profile create).
# Check a node with it: gpudoctor check --profile FILE (or the gate policy's `profile: FILE`).
# A value is exact (memory_gib: give or take 2 % or 1 GiB); `one_of:` lists values that are all right;
# `min:`/`max:` is a range.
# A fact left out is not checked; edit the file to widen or drop one (it is validated when read).
"""


def _scalar(value: Any) -> str:
    return json.dumps(value, ensure_ascii=True)


def _comment(text: str, indent: str) -> str:
    return f"{indent}# {printable(text)}\n"


def _title(fact: ProfileFact) -> str:
    """The comment beside a value: what it is, and its unit ("PCIe link width: xN")."""
    return fact.title if fact.form == "{}" else f"{fact.title}: {fact.form.format('N')}"


def _fact(key: str, spec: Any, indent: str, note: str | None, title: str) -> str:
    out = _comment(note, indent) if note else ""
    if isinstance(spec, Mapping) and "one_of" in spec:
        values = ", ".join(_scalar(v) for v in spec["one_of"])
        return out + f"{indent}{key}: {{one_of: [{values}]}}  # {printable(title)}\n"
    if isinstance(spec, Mapping):
        return (
            out + f"{indent}{key}: {{min: {_scalar(spec['min'])}, max: {_scalar(spec['max'])}}}  # {printable(title)}\n"
        )
    return out + f"{indent}{key}: {_scalar(spec)}  # {printable(title)}\n"


def render(data: Mapping[str, Any], notes: Mapping[str, str]) -> str:
    made = data.get("made_from", [])
    lines = [HEAD, _comment(f"Made from {len(made)} snapshot(s):", "")]
    for m in made:
        said = ", ".join(str(v) for v in (m.get("hostname"), m.get("collected_at")) if v)
        lines.append(_comment(f"  {m['snapshot']}" + (f" ({said})" if said else ""), ""))
    lines.append(f"profile_version: {_scalar(data['profile_version'])}\n")
    lines.append("made_from:\n" if made else "made_from: []\n")
    for m in made:
        lines.append(f"  - snapshot: {_scalar(m['snapshot'])}\n")
        for key in ("hostname", "collected_at"):
            if key in m:
                lines.append(f"    {key}: {_scalar(m[key])}\n")
    for scope in SCOPES:
        if scope == "host":
            host = data.get("host", {})
            lines.append("host:\n" if host else "host: {}\n")
            for key, spec in host.items():
                lines.append(_fact(key, spec, "  ", notes.get(f"host.{key}"), _title(BY_NAME[("host", key)])))
            continue
        entries = data.get(scope, [])
        lines.append(f"{scope}:\n" if entries else f"{scope}: []\n")
        for entry in entries:
            name_key = ENTRY_KEY[scope]
            lines.append(f"  - {name_key}: {_scalar(entry[name_key])}\n")
            for key, spec in entry.items():
                if key == name_key:
                    continue
                note = notes.get(f"{scope}[{entry[name_key]}].{key}")
                lines.append(_fact(key, spec, "    ", note, _title(BY_NAME[(scope, key)])))
    return "".join(lines)
