"""Fleet summaries from many JSON reports (`gpudoctor report merge`): which nodes fail which
checks, how many nodes fail each check, and the same per GPU model.

Inputs are gate reports (``gate --json``, schemas/gate-report.schema.json) and check reports
(``check --format json``, schemas/report.schema.json), validated before use (fleet/reading.py;
load_reports reads many in several processes). Both carry the report
envelope (render/envelope.py): a node is named by its hostname and its GPUs by model from the
envelope's GPU list. Reports of gpudoctor versions before the envelope are still read: a gate
report's top-level ``hostname`` and ``gpus``, a check report's human host line (its first word,
and "2× NVIDIA H200" for the models). When several reports name the same node, the newest
(``generated_at`` of a gate report, else when the facts were read), compared as instants, counts;
where one of two has no time, the one later on the command line counts.
"""

from __future__ import annotations

import re
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Iterator, Sequence

from .reading import ReportError, read_report

__all__ = ["Fleet", "NodeResult", "ReportError", "load_report", "merge", "node_result"]

# "2× NVIDIA H200" in a check report's host line. The line comes from a report file (outside
# input): the count starts only where a run of digits starts and is at most 6 digits, so a
# line of 100 000 digits is one linear scan, not a quadratic one.
_MODELS = re.compile(r"(?<!\d)(\d{1,6})× ([^,]+)")


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


def load_report(path: str, *, follow: bool = True) -> NodeResult:
    """What merge reads of the report at ``path`` (fleet/reading.read_report: bounded, strict,
    valid); ReportError naming the file when it is not one. ``follow=False``: a symbolic link is
    refused, not followed (a file found in a directory)."""
    data, kind = read_report(path, follow=follow)
    return node_result(path, data, kind)


def node_result(path: str, data: dict[str, Any], kind: str) -> NodeResult:
    """The NodeResult of a report that read_report has read and checked."""
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


# Reports one process reads before it hands their results back (when several read them), and
# the fewest reports for which starting processes is worth it.
CHUNK = 32
PARALLEL_MIN = 2 * CHUNK


def _read_chunk(items: list[tuple[str, bool]]) -> list[NodeResult | str]:
    """A reading process's share: each report's NodeResult in order, up to the first that is not
    one, whose message ends the list (the merge stops there: the reports after it are not read)."""
    out: list[NodeResult | str] = []
    with _collector_paused():
        for path, follow in items:
            try:
                out.append(load_report(path, follow=follow))
            except ReportError as exc:
                out.append(str(exc))
                break
    return out


@contextmanager
def _collector_paused() -> Iterator[None]:
    """The cyclic garbage collector off while reports are read: a parsed report is some 5000
    containers, freed by reference counting (JSON holds no cycles), and the collections they
    set off found nothing to free yet were a tenth of the time. As it was, after."""
    import gc

    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _reader_start() -> None:
    """A reading process leaves Ctrl-C to the merge, which stops it (no traceback from each)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _can_fork() -> bool:
    """Reading processes are forked (they start at once, with gpudoctor already imported), and
    only from a process of one thread: a fork copies locks other threads may hold."""
    import os
    import threading

    return hasattr(os, "fork") and threading.active_count() == 1


def load_reports(items: Sequence[tuple[str, bool]], jobs: int = 1) -> list[NodeResult]:
    """The NodeResult of each (path, follow) in order, read by ``jobs`` processes (one: this
    one); ReportError for the first, in order, that is not a usable report. Each process reads
    one report at a time and sends back only what merge keeps (NodeResult), so memory is
    bounded by the processes' number, not the reports'."""
    if jobs > 1 and len(items) >= PARALLEL_MIN and _can_fork():
        chunks = [list(items[start : start + CHUNK]) for start in range(0, len(items), CHUNK)]
        results = _read_in_processes(chunks, jobs)
        if results is not None:
            return results
    out = []
    with _collector_paused():
        for path, follow in items:
            out.append(load_report(path, follow=follow))
    return out


def _read_in_processes(chunks: list[list[tuple[str, bool]]], jobs: int) -> list[NodeResult] | None:
    """load_reports in ``jobs`` forked processes; None where they cannot be started (no
    working semaphores, as in a container without /dev/shm; no more processes allowed), and
    the caller reads the reports itself."""
    import multiprocessing
    import sys
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    for stream in (sys.stdout, sys.stderr):  # nothing buffered is copied into the processes
        stream.flush()
    try:
        pool = ProcessPoolExecutor(
            max_workers=min(jobs, len(chunks)), mp_context=multiprocessing.get_context("fork"),
            initializer=_reader_start,
        )
    except (OSError, ImportError, NotImplementedError):
        return None
    try:
        try:
            shares = pool.map(_read_chunk, chunks)  # every chunk handed out, the processes started
        except (OSError, ImportError, NotImplementedError):
            return None
        results: list[NodeResult] = []
        for chunk in shares:
            for item in chunk:
                if isinstance(item, str):
                    raise ReportError(item)
                results.append(item)
        return results
    except BrokenProcessPool:
        raise ReportError(
            "a process reading the reports ended before it was done (out of memory?); --jobs 1 reads them in one"
        ) from None
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def merge(paths: Sequence[str], *, jobs: int = 1, follow: Sequence[bool] | None = None) -> Fleet:
    """The fleet of the reports at `paths`. Of several reports of one node the newest counts, by
    the reports' own times (compared as instants, so offsets do not matter); where either of
    two lacks a time, the one later on the command line counts. ``jobs`` processes read them
    (load_reports); where ``follow`` says False for a path (a file found in a directory), it is
    not read through a symbolic link."""
    by_node: dict[str, NodeResult] = {}
    replaced: list[tuple[str, str, str]] = []
    follows = [True] * len(paths) if follow is None else list(follow)
    for result in load_reports(list(zip(paths, follows)), jobs):
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
