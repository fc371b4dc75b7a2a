"""Golden-node profiles: expectations made from known-good snapshots, and a machine judged by them.

`gpudoctor profile create good.json [more.json ...]` turns the snapshots' profile facts
(model/profile_facts.py) into a profile: a fact every snapshot agrees on is an exact value; one
that differs becomes ``{one_of: [...]}`` (or ``{min, max}`` for a ranged fact), and the note the
YAML carries beside it (render/profile_yaml.py) says which snapshot had which value.

`gpudoctor check --profile FILE` and the gate policy's ``profile:`` compare a machine's profile
facts with the file: each fact the profile names is a finding ``profile-<fact>`` (pass, fail with
the expected and the actual value, or unknown where the facts do not say) on the GPU, the NIC,
the NUMA node or the host it is about, of the fact's severity (error; memory per NUMA node:
warning). A value matches exactly, except for a fact with a tolerance (memory per NUMA node,
model/profile_facts.NUMA_MEMORY_TOLERANCE), which matches within it of the profile's value, of
a value of its set or of either end of its range. The file is outside input: read bounded, strict YAML
(gpudoctor.inputs), validated against schemas/profile.schema.json and refused with the file and
line (ProfileError, exit status 2), like a policy.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from ..engine.runner import chosen
from ..findings import HOST, Finding, Status, Subject, bounded_subject, cut_text
from ..inputs import InputError, load_yaml_file, type_name, yaml_line
from ..model.profile_facts import (
    BY_NAME,
    BY_RULE_ID,
    ENTRY_KEY,
    FACTS,
    PROFILE_AREA,
    PROFILE_FIX,
    SCOPES,
    ProfileFact,
    profile_facts,
)

PROFILE_VERSION = 1


class ProfileError(Exception):
    """A profile file that cannot be used: missing, unreadable, not YAML or not a valid profile."""


# --- profile create ---------------------------------------------------------------------------


@dataclass
class Draft:
    """A profile made from snapshots: the file's data, and for each fact whose value differed
    between them a note (keyed "gpus[1].pcie_width") saying which snapshot had which value."""

    data: dict[str, Any]
    notes: dict[str, str] = field(default_factory=dict)


def _shown(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def _spec(fact: ProfileFact, seen: dict[str, tuple[Any, list[str]]]) -> Any:
    """The expectation for the values ``seen`` (JSON text -> (value, snapshots with it))."""
    values = [v for v, _ in seen.values()]
    if len(values) == 1:
        return values[0]
    numbers = all(isinstance(v, (int, float)) for v in values)
    if fact.ranged and numbers:
        return {"min": min(values), "max": max(values)}
    return {"one_of": sorted(values, key=lambda v: (isinstance(v, str), v))}


def _entry_name(scope: str, entry: Mapping[str, Any]) -> str:
    return f"{scope}[{entry[ENTRY_KEY[scope]]}]" if scope in ENTRY_KEY else scope


def create(snapshots: Sequence[tuple[str, Mapping[str, Any]]]) -> Draft:
    """A profile from (name, facts) pairs. A fact no snapshot knows is left out (nothing to
    expect); one that some do not know is expected as the others have it."""
    made_from = []
    # (scope, entry key value or None) -> fact key -> JSON of the value -> (value, snapshot names)
    seen: dict[tuple[str, Any], dict[str, dict[str, tuple[Any, list[str]]]]] = {}
    for name, facts in snapshots:
        pf = profile_facts(facts)
        host = facts.get("host")
        meta = facts.get("meta")
        made_from.append(
            {
                "snapshot": name,
                "hostname": pf_text(host.get("hostname") if isinstance(host, Mapping) else None),
                "collected_at": pf_text(meta.get("collected_at") if isinstance(meta, Mapping) else None, 64),
            }
        )
        for scope in SCOPES:
            entries = [pf[scope]] if scope == "host" else pf[scope]
            for got in entries:
                key = got.get(ENTRY_KEY[scope]) if scope in ENTRY_KEY else None
                slot = seen.setdefault((scope, key), {})
                for fact_key, value in got.items():
                    if (scope, fact_key) not in BY_NAME or value is None:
                        continue
                    values = slot.setdefault(fact_key, {})
                    values.setdefault(json.dumps(value), (value, []))[1].append(name)
    data: dict[str, Any] = {"profile_version": PROFILE_VERSION, "made_from": made_from}
    notes: dict[str, str] = {}
    for scope in SCOPES:
        entries_out: list[dict[str, Any]] = []
        for (s, key), facts_seen in sorted(seen.items(), key=lambda kv: (str(kv[0][0]), entry_order(kv[0][1]))):
            if s != scope:
                continue
            entry: dict[str, Any] = {} if scope == "host" else {ENTRY_KEY[scope]: key}
            for fact in FACTS:
                if fact.scope != scope or fact.key not in facts_seen:
                    continue
                values = facts_seen[fact.key]
                entry[fact.key] = _spec(fact, values)
                if len(values) > 1:
                    where = "; ".join(f"{_shown(v)} on {', '.join(names)}" for v, names in values.values())
                    notes[f"{_entry_name(scope, entry)}.{fact.key}"] = f"differed between the snapshots: {where}"
            entries_out.append(entry)
        if scope == "host":
            data["host"] = entries_out[0] if entries_out else {}
        else:
            data[scope] = entries_out
    return Draft(data, notes)


def entry_order(key: Any) -> tuple[int, Any]:
    """How entries sort: by index (GPUs, NUMA nodes), else by name (NICs)."""
    return (0, key) if isinstance(key, int) else (1, str(key))


def pf_text(value: Any, limit: int = 1024) -> str | None:
    return value if isinstance(value, str) and len(value) <= limit else None


# --- loading ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Profile:
    source: str
    data: Mapping[str, Any]


def profile_from_mapping(data: Any, source: str) -> Profile:
    """Validate a profile mapping (from YAML) and build a Profile; ProfileError names the line."""
    from ..schemas import validate

    if not isinstance(data, dict):
        raise ProfileError(
            f"{source}: a profile is a mapping (profile_version, host, gpus, ...), not {type_name(data)}"
        )
    problem = validate("profile", data)
    if problem:
        raise ProfileError(f"{_at(source, data, problem.split(':', 1)[0])}: {problem}")
    _refuse_wrong_kinds(data, source)
    for scope, key in ENTRY_KEY.items():
        named = [e[key] for e in data.get(scope, [])]
        if len(set(map(json.dumps, named))) != len(named):
            raise ProfileError(f"{_at(source, data, scope)}: {scope}: two entries with the same {key}")
    return Profile(source, data)


def _at(source: str, data: Mapping[str, Any], where: str) -> str:
    """The file, and the line of ``where`` (a dotted path into the YAML) where it is known."""
    line = yaml_line(data, where)
    return f"{source}:{line}" if line else source


def _refuse_wrong_kinds(data: Mapping[str, Any], source: str) -> None:
    """A value of the wrong kind would fail on every node with a message no one can follow ("GPU
    count is 2; the profile expects 2"): refused with the line instead. A version written without
    quotes (cuda: 13.0) is a number to YAML, and 12.10 would be 12.1; a count or width in quotes
    ("16") is text, never equal to the number; a range whose min is above its max holds nothing."""
    for scope in SCOPES:
        entries = [data.get("host", {})] if scope == "host" else data.get(scope, [])
        for number, entry in enumerate(entries):
            for key, spec in entry.items():
                fact = BY_NAME.get((scope, key))
                if fact is None:
                    continue
                where = f"{scope}.{key}" if scope == "host" else f"{scope}[{number}].{key}"
                ranged = isinstance(spec, Mapping) and "one_of" not in spec
                values = spec.get("one_of", [spec]) if isinstance(spec, Mapping) else [spec]
                if fact.text and (ranged or any(not isinstance(v, str) for v in values)):
                    raise ProfileError(
                        f"{_at(source, data, where)}: {where}: {fact.title} is text; write the value "
                        'in quotes ("13.0"), a number would lose digits (12.10 is read as 12.1)'
                    )
                if not fact.text and any(isinstance(v, str) for v in values):
                    raise ProfileError(
                        f"{_at(source, data, where)}: {where}: {fact.title} is a number; write it "
                        'without quotes (16, not "16"): text never equals the number'
                    )
                if ranged and spec["min"] > spec["max"]:
                    raise ProfileError(f"{_at(source, data, where)}: {where}: min is above max: nothing is in it")


def load_profile(path: str | Path) -> Profile:
    """Read a profile file (bounded, strict YAML); ProfileError names the file and line of a problem."""
    try:
        data = load_yaml_file(Path(path), "profile file")
    except InputError as exc:
        raise ProfileError(str(exc)) from None
    return profile_from_mapping(data, str(path))


# --- check --profile --------------------------------------------------------------------------


def matches(spec: Any, actual: Any, fact: ProfileFact | None = None) -> bool:
    """Whether a node's value meets the profile's: equal to it, to one of its set or inside its
    range; for a fact with a tolerance (``fact.slack``), within that of it, of a value of the
    set, or of the range's ends."""
    slack = fact.slack if fact is not None else (lambda _: 0.0)
    if isinstance(spec, Mapping) and "one_of" in spec:
        return any(_same(v, actual, slack(v)) for v in spec["one_of"])
    if isinstance(spec, Mapping):
        return (
            _is_number(actual) and spec["min"] - slack(spec["min"]) <= actual <= spec["max"] + slack(spec["max"])
        )
    return _same(spec, actual, slack(spec))


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _same(expected: Any, actual: Any, slack: float = 0.0) -> bool:
    if isinstance(expected, str) or isinstance(actual, str):
        return expected == actual
    return _is_number(actual) and abs(expected - actual) <= slack


def expected_words(fact: ProfileFact, spec: Any) -> str:
    """An expectation for people: "x16", "one of x8, x16", "from 250 GiB to 256 GiB"; with the
    fact's tolerance, if it has one ("4 GiB, give or take 2 % of the profile's value, at least
    1 GiB")."""
    if isinstance(spec, Mapping) and "one_of" in spec:
        words = "one of " + ", ".join(fact.shown(v) for v in spec["one_of"])
    elif isinstance(spec, Mapping):
        words = f"from {fact.shown(spec['min'])} to {fact.shown(spec['max'])}"
    else:
        words = fact.shown(spec)
    return f"{words}, {fact.tolerance_words}" if fact.tolerance_words else words


def _subjects(facts: Mapping[str, Any]) -> dict[str, dict[Any, Subject]]:
    """The subjects the findings are about, by scope and entry key, labelled as the rules' are."""
    from ..model.gpus import gpus_of
    from ..model.nics import nics_from_facts
    from ..model.topology import Topology

    def known(value: Any) -> Any:
        return value if isinstance(value, (str, int)) and not isinstance(value, bool) else None

    gpus = {
        g.index: Subject("gpu", g.label, index=g.index, bus_id=known(g.bus_id), uuid=known(g.uuid))
        for g in gpus_of(facts)
        if isinstance(g.index, int)
    }
    topo = Topology(facts)
    nics = {n.name: Subject("nic", f"{n.name} ({n.bus_id})", bus_id=n.bus_id) for n in nics_from_facts(facts, topo)}
    nodes = {i: Subject("numa_node", f"node {i}", index=i) for i in topo.nodes}
    return {"gpus": gpus, "nics": nics, "numa_nodes": nodes}


def _finding(fact: ProfileFact, subject: Subject, status: Status, message: str, evidence: list[Any]) -> Finding:
    return Finding(
        rule_id=fact.rule_id,
        title=fact.check_title,
        area=PROFILE_AREA,
        severity=fact.severity,
        status=status,
        subject=bounded_subject(subject),
        message=cut_text(message),
        evidence=evidence,
        fix=PROFILE_FIX if status is Status.FAIL else "",
        docs=f"docs/rules.md#{fact.rule_id}",
        detail="the facts do not give this value" if status is Status.UNKNOWN else "",
        action=fact.action,
    )


def check(
    facts: Mapping[str, Any], profile: Profile, only: Iterable[str] = (), skip: Iterable[str] = ()
) -> list[Finding]:
    """One finding per fact the profile names (pass, fail or unknown), in the profile's order;
    an entry (GPU, NIC, NUMA node) the machine does not have fails on the host. ``only`` and
    ``skip`` choose the checks as --only/--skip and the policy's ignore choose rules (by id, the
    area profile or the fact's tag)."""
    actual = profile_facts(facts)
    subjects = _subjects(facts)
    out: list[Finding] = []
    where = Path(profile.source).name
    for scope in SCOPES:
        if scope == "host":
            pairs: Iterable[tuple[Mapping[str, Any], Mapping[str, Any] | None, Subject]] = [
                (profile.data.get("host", {}), actual["host"], HOST)
            ]
        else:
            key = ENTRY_KEY[scope]
            have = {e[key]: e for e in actual[scope]}
            pairs = [(e, have.get(e[key]), subjects[scope].get(e[key], HOST)) for e in profile.data.get(scope, [])]
        for expected, got, subject in pairs:
            out += _compare(scope, expected, got, subject, where)
    return [f for f in out if chosen(BY_RULE_ID[f.rule_id].keys, only, skip)]


def _compare(
    scope: str, expected: Mapping[str, Any], got: Mapping[str, Any] | None, subject: Subject, where: str
) -> list[Finding]:
    out = []
    name = _entry_name(scope, expected)
    for fact in FACTS:
        if fact.scope != scope or fact.key not in expected:
            continue
        spec = expected[fact.key]
        path = f"profile.{name}.{fact.key}"
        want = expected_words(fact, spec)
        if got is None:
            what = {"gpus": "GPU", "nics": "RDMA NIC", "numa_nodes": "NUMA node"}[scope]
            ident = expected[ENTRY_KEY[scope]]
            message = f"{what} {_shown(ident)} of the profile is not on this machine ({fact.title}: expected {want})"
            out.append(_finding(fact, subject, Status.FAIL, message, [(path, spec), (f"{name}", None)]))
            continue
        value = got.get(fact.key)
        evidence = [(path, spec), (f"{name}.{fact.key}", value)]
        if value is None:
            message = f"{fact.title}: unknown here; the profile ({where}) expects {want}"
            out.append(_finding(fact, subject, Status.UNKNOWN, message, evidence))
        elif matches(spec, value, fact):
            exact = matches(spec, value)
            said = "as the profile expects" if exact else f"within the tolerance: the profile expects {want}"
            out.append(_finding(fact, subject, Status.PASS, f"{fact.title} is {fact.shown(value)}, {said}", evidence))
        else:
            message = f"{fact.title} is {fact.shown(value)}; the profile ({where}) expects {want}"
            out.append(_finding(fact, subject, Status.FAIL, message, evidence))
    return out
