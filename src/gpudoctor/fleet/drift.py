"""Drift across a fleet (`report merge --drift`): for each fact a profile fixes, the value most
nodes have and the nodes that differ.

Reads the profile facts each report's envelope carries (model/profile_facts.py), so a report of
a gpudoctor version before them has none: its node is named among those without, and counts for
no fact. A fact is named as people read it: ``driver``, ``GPU 1 pcie_width``,
``NIC mlx5_0 rate_gbps``, ``NUMA node 0 memory_gib``. A node that lacks the entry (a GPU fewer)
or whose facts do not say has the value None ("unknown" in the text) and differs like any other.
A fact with a tolerance (memory per NUMA node: ProfileFact.slack, as `check --profile` judges it)
differs only beyond it: a node within it of the majority value is listed apart, as within the
tolerance (whole GiB rounded down flip between two readings a few MiB apart).

The majority is the value most nodes have; between equally common values, the one whose first
node comes first by name, so the result does not depend on the order of the files. Nodes are
sorted by name, facts in the order of model/profile_facts.FACTS, entries by index or name.
A node differing on a blocking fact (ProfileFact.blocking) makes the exit status 1.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Sequence

from ..model.profile_facts import ENTRY_KEY, FACTS, ProfileFact
from .merge import NodeResult
from .profile import entry_order, matches

_ENTRY_WORD = {"gpus": "GPU", "nics": "NIC", "numa_nodes": "NUMA node"}


@dataclass
class FactDrift:
    name: str  # "GPU 1 pcie_width"
    fact: ProfileFact
    majority: Any
    majority_nodes: int
    differs: list[tuple[str, Any]] = field(default_factory=list)  # (node, its value), by node
    # (node, its value), by node: not the majority value, but within the fact's tolerance of it
    within: list[tuple[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "fact": self.name,
            "scope": self.fact.scope,
            "key": self.fact.key,
            "blocking": self.fact.blocking,
            "majority": self.majority,
            "majority_nodes": self.majority_nodes,
            "differs": [{"node": node, "value": value} for node, value in self.differs],
            "within_tolerance": [{"node": node, "value": value} for node, value in self.within],
        }


@dataclass
class Drift:
    nodes: list[str]  # nodes with profile facts, by name
    without: list[str]  # nodes whose reports carry none (older gpudoctor)
    facts: list[FactDrift]
    # the nodes whose report is a gate --distributed report with a localisation (its slow nodes)
    localized: list[NodeResult] = field(default_factory=list)

    @property
    def drifting(self) -> list[FactDrift]:
        return [f for f in self.facts if f.differs]

    @property
    def blocking(self) -> list[FactDrift]:
        return [f for f in self.drifting if f.fact.blocking]

    @property
    def exit_code(self) -> int:
        return 1 if self.blocking else 0

    def to_json(self) -> dict[str, Any]:
        return {
            "drift_schema_version": 1,
            "nodes": self.nodes,
            "nodes_without_profile_facts": self.without,
            "blocking_facts": [f.key for f in FACTS if f.blocking],
            "drifting_facts": len(self.drifting),
            "blocking_drift": [f.name for f in self.blocking],
            "facts": [f.to_json() for f in self.facts],
            "localized": [{"reported_by": n.node, "source": n.source, **(n.localized or {})} for n in self.localized],
        }


def _values(node: NodeResult) -> dict[tuple[str, Any], dict[str, Any]]:
    """(scope, entry key or None) -> the entry's facts, of one node's profile facts."""
    assert node.profile is not None
    out: dict[tuple[str, Any], dict[str, Any]] = {("host", None): dict(node.profile["host"])}
    for scope, key in ENTRY_KEY.items():
        for entry in node.profile[scope]:
            out[(scope, entry[key])] = entry
    return out


def _tolerated(
    fact: ProfileFact, majority: Any, differs: list[tuple[str, Any]]
) -> tuple[list[tuple[str, Any]], list[tuple[str, Any]]]:
    """(the nodes that differ, those within the fact's tolerance of the majority value, as
    `check --profile` would pass them against a profile of that value): for a fact without a
    tolerance, every node that differs."""
    if not fact.slack(majority):
        return differs, []
    kept: list[tuple[str, Any]] = []
    close: list[tuple[str, Any]] = []
    for node, value in differs:
        (close if value is not None and matches(majority, value, fact) else kept).append((node, value))
    return kept, close


def drift(nodes: Sequence[NodeResult]) -> Drift:
    with_facts = sorted((n for n in nodes if n.profile is not None), key=lambda n: n.node)
    without = sorted(n.node for n in nodes if n.profile is None)
    names = [n.node for n in with_facts]
    # (scope, entry key) -> [(position of the node by name, its entry)]: a fact is counted over the
    # nodes that have its entry, and the others are "unknown" together, so one report of thousands
    # of GPUs or NICs no other node has costs its own entries, not entries × the fleet's nodes
    holders: dict[tuple[str, Any], list[tuple[int, dict[str, Any]]]] = {}
    for position, node in enumerate(with_facts):
        for where, entry in _values(node).items():
            holders.setdefault(where, []).append((position, entry))
    out: list[FactDrift] = []
    for fact in FACTS:
        keys = [None] if fact.scope == "host" else sorted((k for s, k in holders if s == fact.scope), key=entry_order)
        for key in keys:
            name = fact.key if key is None else f"{_ENTRY_WORD[fact.scope]} {key} {fact.key}"
            known = [(p, e[fact.key]) for p, e in holders.get((fact.scope, key), []) if e.get(fact.key) is not None]
            if not known:
                continue  # no node knows it: nothing to compare
            counts: dict[str, list[Any]] = {}  # JSON of a value -> [value, positions of the nodes with it]
            for position, value in known:
                counts.setdefault(json.dumps(value), [value, []])[1].append(position)
            unknown = len(names) - len(known)
            if unknown:
                have = {p for p, _ in known}
                first = next(p for p in range(len(names)) if p not in have)
                counts[json.dumps(None)] = [None, [first]]  # the first is all the tie-break needs
            # most nodes first; a tie goes to the value whose first node sorts first
            sizes = {text: unknown if c[0] is None else len(c[1]) for text, c in counts.items()}
            text = min(counts, key=lambda t: (-sizes[t], counts[t][1][0]))
            majority = counts[text][0]
            if majority is None:
                differs = [(names[p], v) for p, v in known]
            else:
                same = set(counts[text][1])
                value_of = dict(known)
                differs = [(names[p], value_of.get(p)) for p in range(len(names)) if p not in same]
            differs, within = _tolerated(fact, majority, differs)
            out.append(FactDrift(name, fact, majority, sizes[text], differs, within))
    localized = sorted((n for n in nodes if n.localized is not None), key=lambda n: n.node)
    return Drift(names, without, out, localized)
