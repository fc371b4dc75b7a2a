"""Which K GPUs a job on a shared machine should use (`gpudoctor select`), from the facts alone.

Only NVIDIA GPUs are chosen; Ascend NPUs are listed as left out, with a note saying why.
A GPU can be chosen when NVML lists it and it is not lost, no check failed on it at or above
``fail_on`` (the rules' findings about that GPU), its memory is known and at least
``min_free_gib`` of it is free, its compute mode allows another process (prohibited never;
exclusive_process only while no process uses it), and, when CUDA_VISIBLE_DEVICES is set, it is
among the GPUs listed there (a job must not leave its allocation).

Ranking: idle GPUs first (no compute process and at most 5 % utilisation), then most free
memory, then least utilisation, then NVML index. For K > 1 the K GPUs come, where possible,
from one group of GPUs that work well together, tried in this order: one NVLink island and one
NUMA node; one NVLink island (peer traffic over NVLink matters more to a multi-GPU job than which
socket feeds it); one NUMA node; else the best K overall. Inside a grouping the group whose K-th
best GPU ranks best wins. An NVLink island is a set of GPUs connected by NVLink peer-to-peer
(the ``nvlink_peers`` fact, from NVML's P2P status: direct links and NVSwitch alike). The plan
says when the chosen GPUs span NUMA nodes or, on a machine with NVLink, NVLink islands.

Indices are NVML's, which follow PCI bus order; CUDA numbers GPUs the same way only with
CUDA_DEVICE_ORDER=PCI_BUS_ID (its default puts the fastest first), so the plan's ``uuids`` are
the safe form for CUDA_VISIBLE_DEVICES.

On a host with no NVIDIA GPU the candidates are its AMD GPUs, numbered as ROCm numbers them
(model/topology.py: KFD topology order), their free memory amdgpu's mem_info_vram_total less
mem_info_vram_used. They have no UUID in the facts, utilisation or process count: they rank by
free memory. The ROCm runtime applies ROCR_VISIBLE_DEVICES first (indices into all its GPUs, or
UUIDs) and HIP numbers the GPUs it leaves 0, 1, ... in its order; HIP_VISIBLE_DEVICES and
CUDA_VISIBLE_DEVICES index that list (ROCm documentation, "GPU isolation techniques":
https://rocm.docs.amd.com/en/docs-6.1.2/conceptual/gpu-isolation.html). So a set
ROCR_VISIBLE_DEVICES narrows the choice and renumbers it (the printed indices are HIP's, for
HIP_VISIBLE_DEVICES or CUDA_VISIBLE_DEVICES), and either of the other two narrows it further.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from ..facts import Unavailable
from ..findings import Finding, Severity, Status
from ..inputs import shown_excerpt
from ..lazy_re import LazyPattern
from ..model.gpus import nvlink_islands

GIB = 1 << 30
IDLE_UTILISATION_PCT = 5
# Facts are input from whoever wrote the snapshot: memory figures are used only in [0, MAX_BYTES)
# (past 1e308 a division by GIB overflows), and a UUID is printed only when it looks like one, as
# `CUDA_VISIBLE_DEVICES=$(gpudoctor select --uuid)` takes the output whole: a comma, space or
# line break in it would change what the job sees.
MAX_BYTES = 1 << 64
_UUID_RE = LazyPattern(r"GPU-[0-9A-Za-z][0-9A-Za-z-]{0,79}")
_INDEX_RE = LazyPattern(r"[0-9]{1,12}")  # ASCII digits only, short enough for int()


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
    island: int | None = None  # lowest NVML index of the GPU's NVLink island; None: no NVLink peers known

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
            match = [g for g in gpus if g.get("index") == int(entry)] if _INDEX_RE.fullmatch(entry) else []
        elif entry.startswith("GPU-"):
            match = [g for g in gpus if isinstance(g.get("uuid"), str) and g["uuid"].startswith(entry)]
        elif entry.startswith("MIG-"):
            return None, "CUDA_VISIBLE_DEVICES names MIG instances; it was not used to narrow the choice"
        else:
            match = []
        if len(match) != 1:
            break  # CUDA stops at the first entry it cannot use
        allowed.add(str(match[0]["bus_id"]))
    return allowed, f"only GPUs in CUDA_VISIBLE_DEVICES={_shown(raw)} were considered"


def _shown(raw: str) -> str:
    return raw if len(raw) <= 80 else f"{shown_excerpt(raw, 80)} ({len(raw)} characters)"  # of any length


@dataclass
class AmdVisible:
    """What the visible-devices variables leave of an AMD host's GPUs: per GPU they hide, the
    variable that hides it; the index HIP gives each GPU it sees (ROCm's own when
    ROCR_VISIBLE_DEVICES is unset); why no GPU can be numbered (ROCR_VISIBLE_DEVICES names GPUs by
    UUID, which the facts do not have), and notes."""

    hidden: dict[str, str] = field(default_factory=dict)
    hip_index: dict[str, int] = field(default_factory=dict)
    unnumbered: str = ""
    notes: list[str] = field(default_factory=list)


def _amd_visible(env: Mapping[str, Any], gpus: Sequence[Mapping[str, Any]]) -> AmdVisible:
    from ..engine.helpers.devices import amd_visible_entries  # as plan imports the engine: when used

    out = AmdVisible()
    order = sorted((g for g in gpus if isinstance(g.get("index"), int)), key=lambda g: int(g["index"]))
    out.hip_index = {str(g["bus_id"]): int(g["index"]) for g in order}
    for name in ("ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"):
        raw = env.get(name)
        if not isinstance(raw, str):
            continue
        entries, problem = amd_visible_entries(raw, len(order))
        said = f"{name}={_shown(raw)}"
        if any(not e.isdecimal() for e in entries):  # a GPU- UUID
            if name == "ROCR_VISIBLE_DEVICES":
                out.unnumbered = f"{name} names GPUs by UUID: which GPUs HIP sees, and their indices, are unknown"
                return out
            out.notes.append(f"{said} names GPUs by UUID; it was not used to narrow the choice")
            continue
        picked = [order[int(e)] for e in entries]
        kept = {str(g["bus_id"]) for g in picked}
        for g in order:
            if str(g["bus_id"]) not in kept:
                out.hidden.setdefault(str(g["bus_id"]), name)
        note = f"only GPUs in {said} were considered"
        if not raw.strip():
            note += " (it is empty, which hides every GPU)"
        elif problem:
            note += f" (the runtime ignores the entries from the one it cannot use: {problem})"
        if name == "ROCR_VISIBLE_DEVICES":
            order = picked  # HIP sees these only, and numbers them in this order
            out.hip_index = {str(g["bus_id"]): i for i, g in enumerate(order)}
            renumbered = ", ".join(f"GPU {g['index']} is {i}" for i, g in enumerate(order))
            note += "; HIP numbers them from 0, and so does what is printed" + (f": {renumbered}" if renumbered else "")
        out.notes.append(note)
    return out


def plan(
    facts: Mapping[str, Any],
    findings: Sequence[Finding],
    k: int,
    min_free_gib: float = 0.0,
    fail_on: Severity = Severity.ERROR,
) -> Selection:
    from ..engine.subjects import gpu_subjects

    result = Selection(k=k)
    subjects = gpu_subjects(facts)
    gpus = [g for g in subjects if g.get("vendor") == "nvidia"]
    npus = [str(g.get("label")) for g in subjects if g.get("vendor") == "huawei"]
    if npus:
        # The choice rests on NVML's free memory and load; for an Ascend NPU gpudoctor reads
        # neither (it does not run npu-smi), so it says so rather than choose blind.
        result.notes.append(
            f"{len(npus)} Ascend NPU(s) here cannot be chosen: their free memory and load are unknown "
            "(gpudoctor does not run npu-smi); pick NPUs with `npu-smi info` and set ASCEND_RT_VISIBLE_DEVICES"
        )
        result.excluded.extend((label, "an Ascend NPU: free memory unknown") for label in npus)
    amd = not gpus
    if amd:
        gpus = _amd_candidates(facts, subjects)
    host = facts.get("host")
    env = host.get("env") if isinstance(host, Mapping) else None
    env = env if isinstance(env, Mapping) else {}
    visible = _amd_visible(env, gpus) if amd else None
    allowed: set[str] | None = None
    if visible is not None:
        result.notes.extend(visible.notes)
    else:
        allowed, note = _visible(env, gpus)
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
        if amd and not isinstance(index, int):
            why = "not numbered by ROCm (no KFD topology node)"
        elif visible is not None and visible.unnumbered:
            why = visible.unnumbered
        elif not amd and (g.get("in_nvml") is not True or not isinstance(index, int)):
            why = "not listed by NVML"
        elif g.get("lost") is True:
            why = "NVML lost it"
        elif visible is not None and bus in visible.hidden:
            why = f"not in {visible.hidden[bus]}"
        elif allowed is not None and bus not in allowed:
            why = "not in CUDA_VISIBLE_DEVICES"
        elif isinstance(bus, str) and bus in failed:
            why = "failed " + ", ".join(failed[bus])
        elif not isinstance(total, int) or not isinstance(used, int):
            reason = next((v.reason for v in (total, used) if isinstance(v, Unavailable)), "unknown")
            why = f"memory unknown ({reason})"
        elif not (0 <= used <= total < MAX_BYTES):
            why = "memory unknown (the total and used figures are impossible)"
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
        if visible is not None:
            index = visible.hip_index.get(str(bus), index)
        numa = g.get("numa_node")
        util, procs = g.get("utilization_gpu_pct"), g.get("processes")
        uuid = g.get("uuid")
        if isinstance(uuid, str) and not _UUID_RE.fullmatch(uuid):
            result.notes.append(f"{label}: its UUID in the facts is not a GPU UUID; its index is used instead")
            uuid = None
        result.eligible.append(
            Candidate(
                index=index,
                uuid=uuid if isinstance(uuid, str) else None,
                bus_id=str(bus),
                label=label,
                name=str(g.get("name")) if isinstance(g.get("name"), str) else "GPU",
                free_bytes=total - used,
                total_bytes=total,
                utilization_pct=util if isinstance(util, int) and 0 <= util <= 100 else None,
                processes=procs if isinstance(procs, int) and 0 <= procs < 1 << 32 else None,
                numa_node=numa if isinstance(numa, int) and 0 <= numa < 1 << 22 else None,
            )
        )
    islands = nvlink_islands(gpus)
    for c in result.eligible:
        c.island = islands.get(c.index)
    ranked = sorted(result.eligible, key=Candidate.rank_key)
    result.eligible = ranked
    if len(ranked) < k:
        return result
    if k == 1:
        result.chosen = ranked[:1]
        return result
    result.chosen = _best_group(ranked, k)
    nodes = {c.numa_node for c in result.chosen}
    if len(nodes) > 1 or None in nodes:
        known = sorted(n for n in nodes if n is not None)
        where = "unknown NUMA nodes" if None in nodes else "NUMA nodes " + ", ".join(str(n) for n in known)
        result.notes.append(f"no single NUMA node has {k} usable GPUs together; the chosen ones span {where}")
    chosen_islands = {c.island for c in result.chosen}
    if islands and (len(chosen_islands) > 1 or None in chosen_islands):
        result.notes.append(
            f"no NVLink island has {k} usable GPUs; the chosen ones talk to each other partly over PCIe"
        )
    result.chosen.sort(key=lambda c: c.index)
    return result


def _amd_candidates(facts: Mapping[str, Any], subjects: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The AMD GPUs' subjects with ROCm's index and amdgpu's used VRAM, as the NVIDIA ones have NVML's."""
    from ..model.topology import Topology, gpus_from_facts

    index_of = {g.bus_id: g.index for g in gpus_from_facts(facts, Topology(facts))[0]}
    out: list[dict[str, Any]] = []
    for subject in subjects:
        record = subject.get("amd")
        if subject.get("vendor") != "amd" or not isinstance(record, Mapping):
            continue
        bus = subject.get("bus_id")
        index = index_of.get(bus) if isinstance(bus, str) else None
        out.append({
            **subject,
            "index": index,
            "label": f"GPU {index} ({bus})" if index is not None else subject.get("label"),
            "memory_used_bytes": record.get("vram_used_bytes"),
            "uuid": None,
            "utilization_gpu_pct": None,
            "processes": None,
            "compute_mode": None,
        })
    return out


# Groupings tried in order for K > 1: GPUs with the same key form a group (None: in no group).
GROUPINGS = (
    lambda c: (c.island, c.numa_node) if c.island is not None and c.numa_node is not None else None,
    lambda c: c.island,
    lambda c: c.numa_node,
)


def _best_group(ranked: list[Candidate], k: int) -> list[Candidate]:
    position = {id(c): i for i, c in enumerate(ranked)}
    for key in GROUPINGS:
        groups: dict[Any, list[Candidate]] = {}
        for c in ranked:
            value = key(c)
            if value is not None:
                groups.setdefault(value, []).append(c)
        fits = [members[:k] for members in groups.values() if len(members) >= k]
        if fits:
            # the group whose K-th best GPU is best; ties by the sum of ranks
            return min(fits, key=lambda s: (position[id(s[-1])], sum(position[id(c)] for c in s)))
    return ranked[:k]


