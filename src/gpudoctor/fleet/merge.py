"""Fleet summaries from many JSON reports (`gpudoctor report merge`): which nodes fail which
checks, how many nodes fail each check, and the same per GPU model.

Inputs are gate reports (``gate --json``, schemas/gate-report.schema.json) and check reports
(``check --format json``, schemas/report.schema.json), validated before use. Both carry the report
envelope (render/envelope.py): a node is named by its hostname and its GPUs by model from the
envelope's GPU list. Reports of gpudoctor versions before the envelope are still read: a gate
report's top-level ``hostname`` and ``gpus``, a check report's human host line (its first word,
and "2× NVIDIA H200" for the models). When several reports name the same node, the newest
(``generated_at`` of a gate report, else when the facts were read), compared as instants, counts;
where one of two has no time, the one later on the command line counts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Sequence

# "2× NVIDIA H200" in a check report's host line. The line comes from a report file (outside
# input): the count starts only where a run of digits starts and is at most 6 digits, so a
# line of 100 000 digits is one linear scan, not a quadratic one.
_MODELS = re.compile(r"(?<!\d)(\d{1,6})× ([^,]+)")


class ReportError(Exception):
    """A file that is not a usable gpudoctor report (exit status 2)."""


@dataclass
class NodeResult:
    node: str
    source: str
    kind: str  # gate | check
    verdict: str  # go | no-go
    generated_at: str
    failed: dict[str, list[str]] = field(default_factory=dict)  # rule -> subjects
    unjudged: dict[str, list[str]] = field(default_factory=dict)
    blocking: list[str] = field(default_factory=list)  # printed lines (gate) or failed rule ids (check)
    models: dict[str, int] = field(default_factory=dict)  # GPU model -> count
    failed_gpus: dict[str, set[str]] = field(default_factory=dict)  # model -> GPU bus ids with a failure
    # the envelope's profile facts (model/profile_facts.py); None in reports of older versions
    profile: dict[str, Any] | None = None
    # rank 0's gate --distributed report: what its localisation named (localized()); else None
    localized: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "source": self.source,
            "kind": self.kind,
            "verdict": self.verdict,
            "generated_at": self.generated_at,
            "failed_checks": self.failed,
            "unjudged_checks": self.unjudged,
            "blocking": self.blocking,
            "gpu_models": self.models,
            "localized": self.localized,
        }


def _node_from_host_line(host: str) -> str:
    return host.split(" (", 1)[0].split(" · ", 1)[0].strip() or "unknown"


def _models_from_host_line(host: str) -> dict[str, int]:
    """GPU models and counts from the human header line of a check report without an envelope."""
    models: dict[str, int] = {}
    for segment in host.split(" · "):
        for count, model in _MODELS.findall(segment):
            models[model.strip()] = models.get(model.strip(), 0) + int(count)
    return models


def _identity(data: dict[str, Any], kind: str) -> tuple[str, list[dict[str, Any]] | None, str]:
    """(node, GPU rows or None when the report has no list of them, when the node was looked at).

    Reports of this version carry the envelope (render/envelope.py). Older gate reports name the
    node and list the GPUs at the top level; older check reports only in their human header line,
    read by the caller (linear, bounded regular expression)."""
    env = data.get("envelope")
    # a check report's generated_at is when check ran, perhaps over an old snapshot: its facts'
    # time says when the node was looked at
    stamp = (data.get("generated_at") or "") if kind == "gate" else ""
    if isinstance(env, dict):
        name = env["host"]["hostname"]
        return (name if name else "unknown"), env["gpus"], stamp or (env["collected_at"] or "")
    if kind == "gate":
        return data["hostname"], data["gpus"], stamp
    return _node_from_host_line(data["host"]), None, stamp


def localized(data: dict[str, Any]) -> dict[str, Any] | None:
    """What the localisation of a gate --distributed report (rank 0's, distributed.localize)
    named: its status, the slow nodes and pairs, and each slow node's pair figures beside the
    best pair's; None for a report without one. The schema has checked the shape."""
    dist = data.get("distributed")
    if not isinstance(dist, dict) or not isinstance(dist.get("localize"), dict):
        return None
    found = dist["localize"]
    pairs = [p["busbw_gbps"] for n in found["nodes"] for p in n["pairs"] if isinstance(p["busbw_gbps"], (int, float))]
    return {
        "world_size": dist["world_size"],
        "nodes": [n["node"] for n in found["nodes"]],
        "status": found["status"],
        "slow_nodes": list(found["slow_nodes"]),
        "slow_pairs": [list(p) for p in found["slow_pairs"]],
        "best_pair_busbw_gbps": max(pairs) if pairs else None,
        "slow_node_pairs": {
            n["node"]: [p["busbw_gbps"] for p in n["pairs"]] for n in found["nodes"] if n["node"] in found["slow_nodes"]
        },
    }


def _localized_line(found: dict[str, Any]) -> str:
    """The no-go line of a distributed report whose own node passed: what the job's gate named."""
    named = [*found["slow_nodes"], *(" – ".join(p) for p in found["slow_pairs"])]
    what = f"named slow: {', '.join(named)}" if named else f"localisation {found['status']}"
    return f"gate --distributed over {len(found['nodes'])} nodes is no-go; {what}"


def load_report(path: str) -> NodeResult:
    from ..inputs import MAX_REPORT_BYTES, InputError, load_json_file
    from ..schemas import validate

    try:
        data = load_json_file(path, MAX_REPORT_BYTES, "gpudoctor report")
    except InputError as exc:
        raise ReportError(str(exc)) from None
    if not isinstance(data, dict) or "report_schema_version" not in data:
        raise ReportError(f"{path}: not a gpudoctor report (no report_schema_version; a facts snapshot?)")
    kind = "gate" if data.get("kind") == "gate" else "check"
    problem = validate("gate-report" if kind == "gate" else "report", data)
    if problem:
        raise ReportError(f"{path}: not a valid gpudoctor {kind} report: {problem}")

    findings = data["findings"]
    failed: dict[str, list[str]] = {}
    unjudged: dict[str, list[str]] = {}
    for f in findings:
        label = f["subject"]["label"]
        if f["status"] == "fail":
            failed.setdefault(f["rule"], []).append(label)
        elif f["status"] in ("unknown", "error"):
            unjudged.setdefault(f["rule"], []).append(label)
    node, gpus, generated = _identity(data, kind)
    if kind == "gate":
        verdict = data["verdict"]
        blocking = [b["line"] for b in data["blocking"]]
    else:
        verdict = "go" if data["verdict"] == "pass" else "no-go"
        blocking = [f"{f['rule']}: {f['subject']['label']}: {f['message']}" for f in findings if f["status"] == "fail"]

    models: dict[str, int] = {}
    model_of: dict[str, tuple[str, str]] = {}  # bus id or uuid -> (model, the GPU's one key)
    for number, g in enumerate(gpus or ()):
        model = g["name"] or "unknown GPU"
        models[model] = models.get(model, 0) + 1
        # one key per GPU of the list, so findings naming it by bus id and by UUID count it once
        gpu_key = g["bus_id"] or g["uuid"] or f"#{number}"
        for key in (g["bus_id"], g["uuid"]):
            if key:
                model_of[key] = (model, gpu_key)
    if gpus is None:
        models = _models_from_host_line(data["host"])
    failed_gpus: dict[str, set[str]] = {}
    for f in findings:
        subject = f["subject"]
        if f["status"] != "fail" or subject["kind"] != "gpu":
            continue
        bus, uuid = subject.get("bus_id"), subject.get("uuid")
        known = model_of.get(bus or "") or model_of.get(uuid or "")
        if known is None and gpus is None and len(models) == 1:
            # an old check report does not say which model a failing GPU is; with one model it is clear
            known = (next(iter(models)), bus or uuid or subject["label"])
        if known is not None:
            failed_gpus.setdefault(known[0], set()).add(known[1])
    for model, failing in failed_gpus.items():
        # GPUs, not findings: never more failing GPUs of a model than the report lists (an old report
        # may name one GPU by bus id in one finding and by label in another)
        if len(failing) > models.get(model, 0):
            failed_gpus[model] = set(sorted(failing)[: models.get(model, 0)])
    env = data.get("envelope")
    profile = env.get("profile") if isinstance(env, dict) else None
    found = localized(data) if kind == "gate" else None
    if found is not None and verdict != "go" and not blocking:
        blocking = [_localized_line(found)]
    return NodeResult(
        node, path, kind, verdict, generated, failed, unjudged, blocking, models, failed_gpus, profile, found
    )


@dataclass
class Fleet:
    nodes: list[NodeResult]
    replaced: list[tuple[str, str, str]]  # (node, report that a newer one replaced, why it is the older)

    def checks(self) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        for n in self.nodes:
            for rule, subjects in n.failed.items():
                entry = out.setdefault(rule, {"failed_nodes": [], "failed_subjects": 0, "unjudged_nodes": []})
                entry["failed_nodes"].append(n.node)
                entry["failed_subjects"] += len(subjects)
            for rule in n.unjudged:
                entry = out.setdefault(rule, {"failed_nodes": [], "failed_subjects": 0, "unjudged_nodes": []})
                entry["unjudged_nodes"].append(n.node)
        return dict(
            sorted(out.items(), key=lambda kv: (-len(kv[1]["failed_nodes"]), -len(kv[1]["unjudged_nodes"]), kv[0]))
        )

    def models(self) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        for n in self.nodes:
            for model, count in n.models.items():
                entry = out.setdefault(model, {"nodes": 0, "gpus": 0, "no_go_nodes": 0, "failed_gpus": 0})
                entry["nodes"] += 1
                entry["gpus"] += count
                entry["no_go_nodes"] += 1 if n.verdict != "go" else 0
                entry["failed_gpus"] += len(n.failed_gpus.get(model, ()))
        return dict(sorted(out.items()))

    def localized(self) -> list[NodeResult]:
        """The nodes whose report is a gate --distributed report with a localisation (rank 0's)."""
        return [n for n in self.nodes if n.localized is not None]

    def to_json(self) -> dict[str, Any]:
        no_go = [n.node for n in self.nodes if n.verdict != "go"]
        return {
            "fleet_schema_version": 1,
            "totals": {"nodes": len(self.nodes), "go": len(self.nodes) - len(no_go), "no_go": len(no_go)},
            "no_go_nodes": no_go,
            "checks": self.checks(),
            "gpu_models": self.models(),
            "nodes": [n.to_json() for n in self.nodes],
            # each gate --distributed report's localisation: the nodes it named slow
            "localized": [{"reported_by": n.node, "source": n.source, **(n.localized or {})} for n in self.localized()],
            "replaced_reports": [{"node": node, "source": source} for node, source, _ in self.replaced],
        }


def _moment(stamp: str) -> datetime | None:
    """A report's time as an aware datetime (ISO 8601; a time without an offset is UTC), None
    when it has none or it does not parse: then the command-line position decides."""
    if not stamp:
        return None
    try:
        moment = datetime.fromisoformat(stamp.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


def merge(paths: Sequence[str]) -> Fleet:
    """The fleet of the reports at `paths`. Of several reports of one node the newest counts, by
    the reports' own times (compared as instants, so offsets do not matter); where either of
    two lacks a time, the one later on the command line counts."""
    by_node: dict[str, NodeResult] = {}
    replaced: list[tuple[str, str, str]] = []
    for path in paths:
        result = load_report(path)
        old = by_node.get(result.node)
        if old is not None:
            then, now = _moment(old.generated_at), _moment(result.generated_at)
            timed = then is not None and now is not None
            why = "an older report" if timed else "an earlier report on the command line (no time to compare)"
            if then is not None and now is not None and then > now:
                replaced.append((result.node, result.source, why))
                continue
            replaced.append((old.node, old.source, why))
        by_node[result.node] = result
    return Fleet(nodes=sorted(by_node.values(), key=lambda n: n.node), replaced=replaced)
