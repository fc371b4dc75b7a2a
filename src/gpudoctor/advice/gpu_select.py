"""Which K GPUs a job on a shared machine should use (`gpudoctor select`), from the facts alone.

A GPU can be chosen when NVML lists it and it is not lost, no check failed on it at or above
``fail_on`` (the rules' findings about that GPU), its memory is known and at least
``min_free_gib`` of it is free, its compute mode allows another process (prohibited never;
exclusive_process only while no process uses it), and, when CUDA_VISIBLE_DEVICES is set, it is
among the GPUs listed there (a job must not leave its allocation).

Ranking: idle GPUs first (no compute process and at most 5 % utilisation), then most free
memory, then least utilisation, then NVML index. For K > 1 the K GPUs come from one NUMA node
when some node has K that can be chosen (the node whose K-th best GPU ranks best); otherwise
the best K overall, and the plan says that they span nodes. NVLink islands are not considered:
the facts record how many NVLink links each GPU has up, not which GPU is at the other end.

Indices are NVML's, which follow PCI bus order; CUDA numbers GPUs the same way only with
CUDA_DEVICE_ORDER=PCI_BUS_ID (its default puts the fastest first), so the plan's ``uuids`` are
the safe form for CUDA_VISIBLE_DEVICES.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from ..facts import Unavailable
from ..findings import Finding, Severity, Status

GIB = 1 << 30
IDLE_UTILISATION_PCT = 5


@dataclass
class Candidate:
    index: int
    uuid: str | None
    bus_id: str
    label: str
    name: str
    free_bytes: int
    total_bytes: int
    utilization_pct: int | None
    processes: int | None
    numa_node: int | None

    @property
    def idle(self) -> bool:
        busy_util = self.utilization_pct is not None and self.utilization_pct > IDLE_UTILISATION_PCT
        return not busy_util and not (self.processes or 0)

    def rank_key(self) -> tuple[Any, ...]:
        util = self.utilization_pct if self.utilization_pct is not None else 101
        return (not self.idle, -self.free_bytes, util, self.index)


@dataclass
class Selection:
    k: int
    chosen: list[Candidate] = field(default_factory=list)
    eligible: list[Candidate] = field(default_factory=list)
    excluded: list[tuple[str, str]] = field(default_factory=list)  # (GPU label, why)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return len(self.chosen) == self.k

    def value(self, uuids: bool = False) -> str:
        if uuids:
            return ",".join(c.uuid or str(c.index) for c in self.chosen)
        return ",".join(str(c.index) for c in self.chosen)


def _visible(env: Mapping[str, Any], gpus: Sequence[Mapping[str, Any]]) -> tuple[set[str] | None, str]:
    """Bus ids CUDA_VISIBLE_DEVICES allows (None: no restriction), and a note."""
    raw = env.get("CUDA_VISIBLE_DEVICES") if isinstance(env, Mapping) else None
    if not isinstance(raw, str):
        return None, ""
    allowed: set[str] = set()
    for entry in (e.strip() for e in raw.split(",")):
        if entry.isascii() and entry.isdigit():
            match = [g for g in gpus if g.get("index") == int(entry)]
        elif entry.startswith("GPU-"):
            match = [g for g in gpus if isinstance(g.get("uuid"), str) and g["uuid"].startswith(entry)]
        elif entry.startswith("MIG-"):
            return None, "CUDA_VISIBLE_DEVICES names MIG instances; it was not used to narrow the choice"
        else:
            match = []
        if len(match) != 1:
            break  # CUDA stops at the first entry it cannot use
        allowed.add(str(match[0]["bus_id"]))
    return allowed, f"only GPUs in CUDA_VISIBLE_DEVICES={raw} were considered"


def plan(
    facts: Mapping[str, Any],
    findings: Sequence[Finding],
    k: int,
    min_free_gib: float = 0.0,
    fail_on: Severity = Severity.ERROR,
) -> Selection:
    from ..engine.subjects import gpu_subjects

    result = Selection(k=k)
    gpus = [g for g in gpu_subjects(facts) if g.get("vendor") == "nvidia"]
    host = facts.get("host")
    env = host.get("env") if isinstance(host, Mapping) else None
    allowed, note = _visible(env if isinstance(env, Mapping) else {}, gpus)
    if note:
        result.notes.append(note)
    failed: dict[str, list[str]] = {}
    for f in findings:
        if f.subject.kind == "gpu" and f.status is Status.FAIL and f.severity.rank >= fail_on.rank and f.subject.bus_id:
            failed.setdefault(f.subject.bus_id, []).append(f.rule_id)

    for g in gpus:
        label = str(g.get("label"))
        bus = g.get("bus_id")
        index, total, used = g.get("index"), g.get("memory_total_bytes"), g.get("memory_used_bytes")
        why = ""
        if g.get("in_nvml") is not True or not isinstance(index, int):
            why = "not listed by NVML"
        elif g.get("lost") is True:
            why = "NVML lost it"
        elif allowed is not None and bus not in allowed:
            why = "not in CUDA_VISIBLE_DEVICES"
        elif isinstance(bus, str) and bus in failed:
            why = "failed " + ", ".join(failed[bus])
        elif not isinstance(total, int) or not isinstance(used, int):
            reason = next((v.reason for v in (total, used) if isinstance(v, Unavailable)), "unknown")
            why = f"memory unknown ({reason})"
        elif g.get("compute_mode") == "prohibited":
            why = "compute mode prohibited"
        elif g.get("compute_mode") == "exclusive_process" and (g.get("processes") or 0) > 0:
            why = "exclusive-process mode and already in use"
        elif total - used < min_free_gib * GIB:
            why = f"{(total - used) / GIB:.1f} GiB free, {min_free_gib:g} GiB needed"
        if why:
            result.excluded.append((label, why))
            continue
        assert isinstance(index, int) and isinstance(total, int) and isinstance(used, int)
        numa = g.get("numa_node")
        util, procs = g.get("utilization_gpu_pct"), g.get("processes")
        result.eligible.append(
            Candidate(
                index=index,
                uuid=g["uuid"] if isinstance(g.get("uuid"), str) else None,
                bus_id=str(bus),
                label=label,
                name=str(g.get("name")) if isinstance(g.get("name"), str) else "GPU",
                free_bytes=total - used,
                total_bytes=total,
                utilization_pct=util if isinstance(util, int) else None,
                processes=procs if isinstance(procs, int) else None,
                numa_node=numa if isinstance(numa, int) and numa >= 0 else None,
            )
        )
    ranked = sorted(result.eligible, key=Candidate.rank_key)
    result.eligible = ranked
    if len(ranked) < k:
        return result
    if k == 1:
        result.chosen = ranked[:1]
        return result
    by_node: dict[int, list[Candidate]] = {}
    for c in ranked:
        if c.numa_node is not None:
            by_node.setdefault(c.numa_node, []).append(c)
    fits = [members[:k] for members in by_node.values() if len(members) >= k]
    if fits:
        # the node whose K-th best GPU is best; ties by the sum of ranks
        position = {id(c): i for i, c in enumerate(ranked)}
        result.chosen = min(fits, key=lambda s: (position[id(s[-1])], sum(position[id(c)] for c in s)))
    else:
        result.chosen = ranked[:k]
        nodes = {c.numa_node for c in result.chosen}
        known = sorted(n for n in nodes if n is not None)
        if len(nodes) > 1 or None in nodes:
            where = "unknown NUMA nodes" if None in nodes else "NUMA nodes " + ", ".join(str(n) for n in known)
            result.notes.append(f"no single NUMA node has {k} usable GPUs; the chosen ones span {where}")
    result.chosen.sort(key=lambda c: c.index)
    return result
