"""The hand-written check of a report `report merge` reads (fleet/reading.py): plain_report is
as strict as schemas/report.schema.json and schemas/gate-report.schema.json and the nesting
bound of inputs (MAX_DEPTH) together, in one pass and without the generated validator (which
cost more than parsing the report). tests/test_fleet_reading.py holds it in agreement with
them: the field lists below are compared with the schemas', and the check with the validator
and the nesting walk on every place of real reports changed to every kind of value.
"""

from __future__ import annotations

import operator
from typing import Any

from ..inputs import MAX_DEPTH

# JSON gives dict, list, str, int, float, bool and None, so types are
# compared exactly (type(x) is int is never a bool). As fastjsonschema reads the schemas: an
# "integer" is an int or a float with no fraction, a "number" an int or a float, a numeric
# const or enum matches by value (1.0 is 1). Each function returns True only where the schema
# accepts the value and no container in it is deeper than MAX_DEPTH; `depth` is the value's own.


def _int(v: Any) -> bool:
    t = type(v)
    return t is int or (t is float and v.is_integer())


def _int_or_none(v: Any) -> bool:
    return v is None or _int(v)


def _num(v: Any) -> bool:
    t = type(v)
    return t is int or t is float


def _num_or_none(v: Any) -> bool:
    t = type(v)
    return v is None or t is int or t is float


def _str_or_none(v: Any) -> bool:
    return v is None or type(v) is str


def _member(v: Any, allowed: frozenset[str]) -> bool:
    return type(v) is str and v in allowed


def _strs(v: Any) -> bool:
    return type(v) is list and all(type(s) is str for s in v)


def _shallow(value: Any, depth: int) -> bool:
    """No container in ``value`` (itself at ``depth``) deeper than MAX_DEPTH (as inputs._walk_check)."""
    level = [value] if type(value) is dict or type(value) is list else []
    while level:
        if depth > MAX_DEPTH:
            return False
        below: list[Any] = []
        for item in level:
            children = item.values() if type(item) is dict else item
            below += [c for c in children if type(c) is dict or type(c) is list]
        level = below
        depth += 1
    return True


def _extras_shallow(obj: dict[str, Any], known: frozenset[str], depth: int) -> bool:
    """The values of ``obj``'s keys the schema does not name (any value) are shallow enough."""
    return obj.keys() <= known or all(_shallow(v, depth + 1) for k, v in obj.items() if k not in known)


def _ranged(v: Any, low: float, high: float) -> bool:
    """An "integer or null" with a minimum and a maximum."""
    return v is None or (_int(v) and low <= v <= high)


def _text(v: Any, longest: int) -> bool:
    """A "string or null" of at most ``longest`` characters."""
    return v is None or (type(v) is str and len(v) <= longest)


SEVERITIES = frozenset({"error", "warning", "info"})
STATUSES = frozenset({"pass", "fail", "unknown", "error", "skip"})
SUBJECT_KINDS = frozenset({"host", "gpu", "numa_node", "nic", "pci_port", "rdma_port"})
ACTIONS = frozenset({"none", "restart-job", "fix-software", "reset-gpu", "reboot-node", "drain-and-inspect-hardware"})
SUBJECT_FIELDS = frozenset({"kind", "label", "index", "bus_id", "uuid"})
FINDING_REQUIRED = frozenset(
    {"rule", "title", "area", "severity", "status", "subject", "message", "evidence", "fix", "detail", "docs"}
)
FINDING_FIELDS = FINDING_REQUIRED | {"cause", "recommended_action", "refs"}
GATE_FINDING_REQUIRED = FINDING_REQUIRED | {"blocking"}
GATE_FINDING_FIELDS = FINDING_FIELDS | {"blocking"}
EVIDENCE_FIELDS = frozenset({"fact", "value"})
CAUSE_REQUIRED = frozenset({"source", "reason"})
CAUSE_FIELDS = CAUSE_REQUIRED | {"note"}
REFS_MAX, REF_LONGEST = 8, 512
GPU_ROW_FIELDS = frozenset(
    {"index", "bus_id", "uuid", "name", "memory_total_bytes", "memory_used_bytes", "utilization_gpu_pct",
     "failed_checks", "blocking"}
)
ENVELOPE_REQUIRED = frozenset({"host", "collected_at", "gpus", "versions"})
ENVELOPE_FIELDS = ENVELOPE_REQUIRED | {"profile"}
ENVELOPE_HOST_FIELDS = frozenset({"hostname", "os", "kernel"})
ENVELOPE_GPU_FIELDS = frozenset({"index", "name", "bus_id", "uuid"})
VERSIONS_FIELDS = frozenset({"gpudoctor", "driver", "cuda", "torch"})
ENVELOPE_GPUS_MAX = 4096
PROFILE_FIELDS = frozenset({"host", "gpus", "nics", "numa_nodes"})
PROFILE_HOST_INTS = ("gpu_count", "rdma_nics")
PROFILE_HOST_TEXTS = ("gpu_model", "driver", "cuda", "torch", "kernel", "nvlink_islands")
PROFILE_HOST_FIELDS = frozenset(PROFILE_HOST_INTS + PROFILE_HOST_TEXTS)
PROFILE_GPU_INTS = ("pcie_gen", "pcie_width", "nvlink_links", "numa_node")
PROFILE_GPU_FIELDS = frozenset(("index", "nic") + PROFILE_GPU_INTS)
PROFILE_NIC_FIELDS = frozenset({"name", "rate_gbps", "link_layer", "numa_node"})
PROFILE_NUMA_FIELDS = frozenset({"id", "memory_gib"})
PROFILE_GPUS_MAX, PROFILE_NICS_MAX, PROFILE_NUMA_MAX = 4096, 4096, 1024
PROFILE_LOW, PROFILE_HIGH = -1, 4194304  # an integer fact: -1 ... 4194304
PROFILE_TEXT_LONGEST = 1024
PROFILE_AMOUNT_HIGH = 1000000000000  # rate_gbps, memory_gib: 0 ... 10**12
CHECK_REQUIRED = frozenset(
    {"report_schema_version", "gpudoctor_version", "host", "facts_origin", "verdict", "exit_code", "fail_on",
     "summary", "findings"}
)
CHECK_FIELDS = CHECK_REQUIRED | {"generated_at", "hostname", "envelope", "gpus"}
CHECK_VERDICTS = frozenset({"pass", "fail", "not_judged"})
CHECK_EXIT_CODES = (0, 1, 3)
CHECK_SUMMARY = frozenset({"pass", "fail", "unknown", "error", "skip"})
GATE_REQUIRED = frozenset(
    {"report_schema_version", "kind", "gpudoctor_version", "generated_at", "hostname", "host", "facts_origin",
     "verdict", "exit_code", "duration_s", "policy", "summary", "blocking", "gpus", "findings"}
)
GATE_FIELDS = GATE_REQUIRED | {"envelope", "deep", "distributed"}
GATE_VERDICTS = frozenset({"go", "no-go"})
GATE_EXIT_CODES = (0, 1)
GATE_SUMMARY = CHECK_SUMMARY | {"blocking", "not_judged"}
POLICY_REQUIRED = frozenset(
    {"source", "fail_on", "on_cannot_check", "deadline_s", "required", "ignore", "expect", "deep"}
)
POLICY_FIELDS = POLICY_REQUIRED | {"min_busbw_gbps", "profile"}
POLICY_FAIL_ON = frozenset({"error", "warning"})
POLICY_CANNOT_CHECK = frozenset({"fail-closed", "fail-open"})
EXPECT_INTS = ("gpus", "nics", "nvlink_links")
EXPECT_NUMBERS = ("min_free_memory_gib", "nic_rate_gbps")
EXPECT_FIELDS = frozenset(EXPECT_INTS + EXPECT_NUMBERS + ("model",))
BLOCKING_FIELDS = frozenset({"rule", "subject", "status", "line", "fix", "count"})
BLOCKING_STATUSES = frozenset({"fail", "unknown", "error"})
DEEP_REQUIRED = frozenset({"ran", "duration_s", "timed_out"})
DEEP_FIELDS = DEEP_REQUIRED | {"python", "torch_version", "devices", "import_s", "steps"}
DISTRIBUTED_REQUIRED = frozenset({"world_size", "backend", "ranks"})
DISTRIBUTED_FIELDS = DISTRIBUTED_REQUIRED | {"allreduce", "allreduce_not_measured", "localize"}
LOCALIZE_REQUIRED = frozenset(
    {"status", "fraction", "slow_nodes", "slow_pairs", "nodes", "rounds_run", "rounds_planned", "unknown_because",
     "why"}
)
LOCALIZE_FIELDS = LOCALIZE_REQUIRED | {
    "best_intra_busbw_gbps", "best_pair_busbw_gbps", "test_delay", "mib", "iterations", "seconds"
}
LOCALIZE_STATUSES = frozenset({"slow", "even", "unknown", "inconclusive"})
LOCAL_NODE_FIELDS = frozenset({"node", "ranks", "intra_busbw_gbps", "pairs", "slow"})
PAIR_FIELDS = frozenset({"with", "busbw_gbps"})
_FINDING_TEXTS = operator.itemgetter("rule", "title", "area", "message", "fix", "detail", "docs")
_SEVEN_STRINGS = (str,) * 7


def _subject(s: Any, depth: int) -> bool:
    if type(s) is not dict or "kind" not in s or "label" not in s:
        return False
    if not (_member(s["kind"], SUBJECT_KINDS) and type(s["label"]) is str):
        return False
    if s.keys() <= {"kind", "label"}:
        return True
    return (
        ("index" not in s or _int(s["index"]))
        and ("bus_id" not in s or type(s["bus_id"]) is str)
        and ("uuid" not in s or type(s["uuid"]) is str)
        and _extras_shallow(s, SUBJECT_FIELDS, depth)
    )


def _findings(findings: Any, gate: bool) -> bool:
    """The findings list (at depth 1): each finding at 2, its subject, evidence, cause at 3.
    The hottest loop of a merge (a report holds a hundred findings or more): the seven strings
    of a finding are fetched and typed in one go, each evidence item by the fewest look-ups."""
    if type(findings) is not list:
        return False
    required = GATE_FINDING_REQUIRED if gate else FINDING_REQUIRED
    fields = GATE_FINDING_FIELDS if gate else FINDING_FIELDS
    texts = _FINDING_TEXTS
    strings = _SEVEN_STRINGS
    for f in findings:
        if type(f) is not dict:
            return False
        keys = f.keys()
        if not (keys >= required and keys <= fields):
            return False
        if tuple(map(type, texts(f))) != strings:
            return False
        severity, status = f["severity"], f["status"]
        if not (
            type(severity) is str
            and severity in SEVERITIES
            and type(status) is str
            and status in STATUSES
            and _subject(f["subject"], 3)
        ):
            return False
        evidence = f["evidence"]
        if type(evidence) is not list:
            return False
        for e in evidence:
            if type(e) is not dict or type(e.get("fact")) is not str or "value" not in e:
                return False
            value = e["value"]
            if (type(value) is dict or type(value) is list) and not _shallow(value, 5):
                return False
            if len(e) != 2 and not _extras_shallow(e, EVIDENCE_FIELDS, 4):
                return False
        if len(keys) != len(required):  # the optional fields
            if "cause" in f:
                cause = f["cause"]
                if cause is not None and not (
                    type(cause) is dict
                    and cause.keys() >= CAUSE_REQUIRED
                    and cause.keys() <= CAUSE_FIELDS
                    and type(cause["source"]) is str
                    and type(cause["reason"]) is str
                    and ("note" not in cause or type(cause["note"]) is str)
                ):
                    return False
            if "recommended_action" in f and not _member(f["recommended_action"], ACTIONS):
                return False
            if "refs" in f:
                refs = f["refs"]
                if not (
                    type(refs) is list
                    and len(refs) <= REFS_MAX
                    and all(type(r) is str and len(r) <= REF_LONGEST for r in refs)
                ):
                    return False
        if gate and type(f["blocking"]) is not bool:
            return False
    return True


def _gpu_rows(rows: Any) -> bool:
    """The top-level ``gpus`` rows (check and gate reports alike)."""
    if type(rows) is not list:
        return False
    for g in rows:
        if not (
            type(g) is dict
            and g.keys() == GPU_ROW_FIELDS
            and _int_or_none(g["index"])
            and _str_or_none(g["bus_id"])
            and _str_or_none(g["uuid"])
            and _str_or_none(g["name"])
            and _int_or_none(g["memory_total_bytes"])
            and _int_or_none(g["memory_used_bytes"])
            and _int_or_none(g["utilization_gpu_pct"])
            and _strs(g["failed_checks"])
            and type(g["blocking"]) is bool
        ):
            return False
    return True


def _profile(p: Any) -> bool:
    if not (type(p) is dict and p.keys() == PROFILE_FIELDS):
        return False
    host, gpus, nics, numa = p["host"], p["gpus"], p["nics"], p["numa_nodes"]
    if not (
        type(host) is dict
        and host.keys() == PROFILE_HOST_FIELDS
        and all(_ranged(host[k], PROFILE_LOW, PROFILE_HIGH) for k in PROFILE_HOST_INTS)
        and all(_text(host[k], PROFILE_TEXT_LONGEST) for k in PROFILE_HOST_TEXTS)
    ):
        return False
    if not (type(gpus) is list and len(gpus) <= PROFILE_GPUS_MAX):
        return False
    for g in gpus:
        if not (
            type(g) is dict
            and g.keys() == PROFILE_GPU_FIELDS
            and g["index"] is not None
            and _ranged(g["index"], 0, PROFILE_HIGH)
            and all(_ranged(g[k], PROFILE_LOW, PROFILE_HIGH) for k in PROFILE_GPU_INTS)
            and _text(g["nic"], PROFILE_TEXT_LONGEST)
        ):
            return False
    if not (type(nics) is list and len(nics) <= PROFILE_NICS_MAX):
        return False
    for n in nics:
        if not (
            type(n) is dict
            and n.keys() == PROFILE_NIC_FIELDS
            and type(n["name"]) is str
            and len(n["name"]) <= PROFILE_TEXT_LONGEST
            and (n["rate_gbps"] is None or (_num(n["rate_gbps"]) and 0 <= n["rate_gbps"] <= PROFILE_AMOUNT_HIGH))
            and _text(n["link_layer"], PROFILE_TEXT_LONGEST)
            and _ranged(n["numa_node"], PROFILE_LOW, PROFILE_HIGH)
        ):
            return False
    if not (type(numa) is list and len(numa) <= PROFILE_NUMA_MAX):
        return False
    for m in numa:
        if not (
            type(m) is dict
            and m.keys() == PROFILE_NUMA_FIELDS
            and m["id"] is not None
            and _ranged(m["id"], 0, PROFILE_HIGH)
            and (m["memory_gib"] is None or (_num(m["memory_gib"]) and 0 <= m["memory_gib"] <= PROFILE_AMOUNT_HIGH))
        ):
            return False
    return True


def _envelope(env: Any) -> bool:
    if not (type(env) is dict and env.keys() >= ENVELOPE_REQUIRED and env.keys() <= ENVELOPE_FIELDS):
        return False
    host, gpus, versions = env["host"], env["gpus"], env["versions"]
    if not (
        type(host) is dict
        and host.keys() == ENVELOPE_HOST_FIELDS
        and _str_or_none(host["hostname"])
        and _str_or_none(host["os"])
        and _str_or_none(host["kernel"])
        and _str_or_none(env["collected_at"])
        and type(versions) is dict
        and versions.keys() == VERSIONS_FIELDS
        and type(versions["gpudoctor"]) is str
        and _str_or_none(versions["driver"])
        and _str_or_none(versions["cuda"])
        and _str_or_none(versions["torch"])
        and type(gpus) is list
        and len(gpus) <= ENVELOPE_GPUS_MAX
    ):
        return False
    for g in gpus:
        if not (
            type(g) is dict
            and g.keys() == ENVELOPE_GPU_FIELDS
            and _int_or_none(g["index"])
            and _str_or_none(g["name"])
            and _str_or_none(g["bus_id"])
            and _str_or_none(g["uuid"])
        ):
            return False
    return "profile" not in env or _profile(env["profile"])


def _policy(p: Any) -> bool:
    if not (type(p) is dict and p.keys() >= POLICY_REQUIRED and p.keys() <= POLICY_FIELDS):
        return False
    expect = p["expect"]
    return (
        type(p["source"]) is str
        and _member(p["fail_on"], POLICY_FAIL_ON)
        and _member(p["on_cannot_check"], POLICY_CANNOT_CHECK)
        and _num(p["deadline_s"])
        and _strs(p["required"])
        and _strs(p["ignore"])
        and type(p["deep"]) is bool
        and ("min_busbw_gbps" not in p or _num_or_none(p["min_busbw_gbps"]))
        and ("profile" not in p or type(p["profile"]) is str)
        and type(expect) is dict
        and expect.keys() == EXPECT_FIELDS
        and all(_int_or_none(expect[k]) for k in EXPECT_INTS)
        and all(_num_or_none(expect[k]) for k in EXPECT_NUMBERS)
        and _str_or_none(expect["model"])
    )


def _blocking(rows: Any) -> bool:
    if type(rows) is not list:
        return False
    for b in rows:
        if not (
            type(b) is dict
            and b.keys() == BLOCKING_FIELDS
            and type(b["rule"]) is str
            and _subject(b["subject"], 3)
            and _member(b["status"], BLOCKING_STATUSES)
            and type(b["line"]) is str
            and type(b["fix"]) is str
            and _int(b["count"])
            and b["count"] >= 1
        ):
            return False
    return True


def _deep(d: Any) -> bool:
    if not (type(d) is dict and d.keys() >= DEEP_REQUIRED and d.keys() <= DEEP_FIELDS):
        return False
    return (
        type(d["ran"]) is bool
        and _num(d["duration_s"])
        and type(d["timed_out"]) is bool
        and ("python" not in d or type(d["python"]) is str)
        and ("torch_version" not in d or _str_or_none(d["torch_version"]))
        and ("devices" not in d or _int_or_none(d["devices"]))
        and ("import_s" not in d or _num_or_none(d["import_s"]))
        and (
            "steps" not in d
            or (type(d["steps"]) is list and all(type(s) is dict and _shallow(s, 3) for s in d["steps"]))
        )
    )


def _localize(found: Any) -> bool:
    """distributed.localize (at depth 2), when it is not null."""
    if not (type(found) is dict and found.keys() >= LOCALIZE_REQUIRED):
        return False
    pairs = found["slow_pairs"]
    nodes = found["nodes"]
    if not (
        _member(found["status"], LOCALIZE_STATUSES)
        and _num(found["fraction"])
        and _strs(found["slow_nodes"])
        and type(pairs) is list
        and all(_strs(p) and len(p) == 2 for p in pairs)
        and _int(found["rounds_run"])
        and _int(found["rounds_planned"])
        and _str_or_none(found["unknown_because"])
        and type(found["why"]) is str
        and ("best_intra_busbw_gbps" not in found or _num_or_none(found["best_intra_busbw_gbps"]))
        and ("best_pair_busbw_gbps" not in found or _num_or_none(found["best_pair_busbw_gbps"]))
        and ("test_delay" not in found or type(found["test_delay"]) is bool)
        and ("mib" not in found or _int(found["mib"]))
        and ("iterations" not in found or _int(found["iterations"]))
        and ("seconds" not in found or _num(found["seconds"]))
        and _extras_shallow(found, LOCALIZE_FIELDS, 2)
        and type(nodes) is list
    ):
        return False
    for n in nodes:  # each at depth 4, its pairs list at 5 and each pair at 6
        if not (
            type(n) is dict
            and n.keys() >= LOCAL_NODE_FIELDS
            and type(n["node"]) is str
            and type(n["ranks"]) is list
            and all(_int(r) for r in n["ranks"])
            and _num_or_none(n["intra_busbw_gbps"])
            and type(n["slow"]) is bool
            and type(n["pairs"]) is list
            and _extras_shallow(n, LOCAL_NODE_FIELDS, 4)
        ):
            return False
        for p in n["pairs"]:
            if not (
                type(p) is dict
                and p.keys() >= PAIR_FIELDS
                and type(p["with"]) is str
                and _num_or_none(p["busbw_gbps"])
                and _extras_shallow(p, PAIR_FIELDS, 6)
            ):
                return False
    return True


def _distributed(d: Any) -> bool:
    if not (type(d) is dict and d.keys() >= DISTRIBUTED_REQUIRED):
        return False
    ranks = d["ranks"]
    return (
        _int(d["world_size"])
        and type(d["backend"]) is str
        and type(ranks) is list
        and all(type(r) is dict and _shallow(r, 3) for r in ranks)
        and (
            "allreduce" not in d
            or d["allreduce"] is None
            or (type(d["allreduce"]) is dict and _shallow(d["allreduce"], 2))
        )
        and ("allreduce_not_measured" not in d or _str_or_none(d["allreduce_not_measured"]))
        and ("localize" not in d or d["localize"] is None or _localize(d["localize"]))
        and _extras_shallow(d, DISTRIBUTED_FIELDS, 1)
    )


def _summary(s: Any, fields: frozenset[str]) -> bool:
    return type(s) is dict and s.keys() == fields and all(_int(v) for v in s.values())


def _common(data: dict[str, Any]) -> bool:
    """What check and gate reports share (their fields of the same name and schema)."""
    v = data["report_schema_version"]
    return (
        _num(v)
        and v == 1
        and type(data["gpudoctor_version"]) is str
        and type(data["host"]) is str
        and type(data["facts_origin"]) is str
        and ("generated_at" not in data or type(data["generated_at"]) is str)
        and ("hostname" not in data or type(data["hostname"]) is str)
        and ("envelope" not in data or _envelope(data["envelope"]))
        and ("gpus" not in data or _gpu_rows(data["gpus"]))
    )


def plain_report(data: Any, kind: str) -> bool:
    """True where ``data`` is a valid report of ``kind`` ("gate": gate-report.schema.json, else
    report.schema.json) nested no deeper than MAX_DEPTH; False where it is not, or on any doubt
    (the caller then asks the schema validator, which names the problem)."""
    try:
        if type(data) is not dict:
            return False
        keys = data.keys()
        if kind == "gate":
            code = data.get("exit_code")
            return bool(
                keys >= GATE_REQUIRED
                and keys <= GATE_FIELDS
                and data["kind"] == "gate"  # read_report's kind says it is the string
                and _common(data)
                and _member(data["verdict"], GATE_VERDICTS)
                and _num(code)
                and code in GATE_EXIT_CODES
                and _num(data["duration_s"])
                and data["duration_s"] >= 0
                and _policy(data["policy"])
                and _summary(data["summary"], GATE_SUMMARY)
                and _blocking(data["blocking"])
                and _findings(data["findings"], True)
                and ("deep" not in data or _deep(data["deep"]))
                and ("distributed" not in data or _distributed(data["distributed"]))
            )
        code = data.get("exit_code")
        return bool(
            keys >= CHECK_REQUIRED
            and keys <= CHECK_FIELDS
            and _common(data)
            and _member(data["verdict"], CHECK_VERDICTS)
            and _num(code)
            and code in CHECK_EXIT_CODES
            and _member(data["fail_on"], SEVERITIES)
            and _summary(data["summary"], CHECK_SUMMARY)
            and _findings(data["findings"], False)
        )
    except Exception:  # noqa: BLE001 - any doubt: the schema validator decides and names it
        return False
