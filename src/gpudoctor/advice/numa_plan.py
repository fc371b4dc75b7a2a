"""NUMA binding plan: for each GPU a job sees, the CPUs and memory node to bind to, and the numactl line.

Computed from the facts alone (see model.topology for where each GPU's node comes from), so a
snapshot or fixture root yields the plan for that machine.

Strategies (the CPUs one GPU's process gets; all of them only ever within the allowed CPUs):

- ``node`` (default): every allowed CPU of the GPU's NUMA node. ``numactl --cpunodebind=N
  --preferred=N`` when the whole node is allowed, else ``--physcpubind=<node ∩ allowed>`` so that
  no disallowed CPU is named (numactl fails with "Invalid argument" on one).
- ``socket``: the allowed CPUs of every node in the GPU's CPU package (differs from ``node`` on
  sub-NUMA-clustered or NPS2/NPS4 machines).
- ``exclusive``: GPUs (of this job) on one node split its allowed physical cores into contiguous,
  balanced blocks, lowest bus id first; leftover cores go to the first GPUs; SMT siblings stay
  together. A GPU left without a core gets a warning, not a command.
- ``core-complex``: the node's allowed CPUs grouped by shared last-level cache (fullest group
  first); GPU i of the node gets group i mod groups, and GPUs that must share a group split its
  cores as ``exclusive`` does, so no two GPUs share a core.

Memory: ``--preferred=N`` (falls back to other nodes when N is full) unless the node is outside
the allowed memory nodes (Mems_allowed_list; numactl would fail) or has no memory, in which case
no memory option is given. ``--membind=N`` only when asked, and only after checking both.

CUDA device order: CUDA_VISIBLE_DEVICES indices count in CUDA's order. With
``CUDA_DEVICE_ORDER=PCI_BUS_ID`` that is PCI bus order, the order of NVML and nvidia-smi. CUDA's
default, FASTEST_FIRST, puts faster GPUs first; among identical GPUs it keeps PCI bus order in
practice (NVIDIA does not document the tie order). So on a host whose GPUs are all one model
indices are mapped in PCI bus order; on a mixed host without PCI_BUS_ID the plan warns that the
mapping may be wrong. UUIDs (``GPU-…``, unique prefixes allowed) are matched exactly. As CUDA
does, an entry that names no GPU hides it and every entry after it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from ..inputs import shown_excerpt
from ..lazy_re import LazyPattern
from ..model.nics import NicChoice, nics_from_facts, pair_nics
from ..model.topology import (
    MAX_BYTES,
    AllowedSet,
    GpuInfo,
    Topology,
    allowed_cpus,
    allowed_mems,
    cpulist,
    gpus_from_facts,
)

STRATEGIES = ("node", "socket", "exclusive", "core-complex")

GIB = 1 << 30


@dataclass
class GpuBinding:
    """The plan for one GPU the job sees."""

    gpu: GpuInfo
    cuda_index: int  # the device index inside the job (cuda:N, LOCAL_RANK)
    cpus: list[int] = field(default_factory=list)
    cores: int = 0
    cpu_note: str = ""
    cpu_nodes: list[int] | None = None  # whole nodes bound with --cpunodebind; None: --physcpubind
    mem_policy: str | None = None  # "preferred" | "membind" | None (left to the default policy)
    argv: list[str] = field(default_factory=list)  # numactl and its options; empty: no binding
    nic: NicChoice | None = None
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def node(self) -> int | None:
        return self.gpu.node

    @property
    def bindable(self) -> bool:
        return bool(self.argv)

    @property
    def label(self) -> str:
        return self.gpu.label


@dataclass
class NumaPlan:
    strategy: str
    membind: bool
    bindings: list[GpuBinding]
    gpu_source: str  # "NVML" | "sysfs"
    visible: str | None  # the CUDA_VISIBLE_DEVICES value planned for (None: unset)
    visible_from: str  # "environment" | "option"
    allowed: AllowedSet
    allowed_mems: frozenset[int] | None
    topology: Topology
    all_gpus: list[GpuInfo]
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Every GPU the job sees got a binding, and there is at least one."""
        return bool(self.bindings) and all(b.bindable for b in self.bindings)


# --- CUDA_VISIBLE_DEVICES ------------------------------------------------------------------------


def _cuda_order(gpus: list[GpuInfo], device_order: str | None, warnings: list[str]) -> list[GpuInfo]:
    ordered = sorted(gpus, key=lambda g: g.bus_id)
    order = (device_order or "").strip().upper()
    if order == "PCI_BUS_ID":
        return ordered
    models = {g.model for g in ordered}
    if len(ordered) > 1 and (len(models) > 1 or None in models):
        warnings.append(
            "CUDA_DEVICE_ORDER is not PCI_BUS_ID and the GPUs are not all one model: CUDA's default order "
            "(FASTEST_FIRST) may differ from PCI bus order, which this plan assumes; export "
            "CUDA_DEVICE_ORDER=PCI_BUS_ID (or use GPU UUIDs) so that indices mean what the plan says"
        )
    return ordered


_INDEX_RE = LazyPattern(r"-?[0-9]+")
_MAX_LISTED = 8  # GPUs named in one warning; the rest are counted


def _visible(
    gpus: list[GpuInfo], value: str | None, device_order: str | None, warnings: list[str], notes: list[str]
) -> list[GpuInfo]:
    """The GPUs in the order the job enumerates them."""
    order = _cuda_order(gpus, device_order, warnings)
    if value is None:
        return order
    if value.strip() == "":
        warnings.append("CUDA_VISIBLE_DEVICES is empty: the job sees no GPU")
        return []
    out: list[GpuInfo] = []
    # A repeated GPU is said once, however often the value repeats it: the value comes from
    # outside (the environment, a snapshot), and its length is not bounded.
    repeated: list[GpuInfo] = []
    repeats = 0
    hidden = ""
    for position, raw in enumerate(value.split(",")):
        entry = raw.strip()
        shown = shown_excerpt(entry)
        target: GpuInfo | None = None
        problem = ""
        mig = False
        if _INDEX_RE.fullmatch(entry):
            # ASCII digits only (int() takes other scripts' digits, CUDA does not), and no int()
            # of a string past any GPU count (int() refuses more than 4300 digits).
            idx = int(entry) if len(entry) <= 12 else None
            if idx is not None and 0 <= idx < len(order):
                target = order[idx]
            else:
                shown = entry if len(entry) <= 24 else f"{entry[:20]}… ({len(entry)} digits)"
                problem = f"index {shown} names no GPU (this job can see {len(order)})"
        elif entry.upper().startswith("GPU-") or entry.upper().startswith("MIG-GPU-"):
            prefix = entry[4:] if entry.upper().startswith("MIG-") else entry
            prefix = prefix.split("/", 1)[0].lower()
            if any(g.uuid is None for g in order):
                problem = f"{shown} is a UUID but the GPUs' UUIDs are unknown (NVML unavailable)"
            else:
                matches = [g for g in order if g.uuid and g.uuid.lower().startswith(prefix)]
                if len(matches) == 1:
                    target = matches[0]
                    mig = entry.upper().startswith("MIG-")
                elif matches:
                    problem = f"{shown} is a prefix of {len(matches)} GPU UUIDs"
                else:
                    problem = f"{shown} matches no GPU UUID"
        elif entry.upper().startswith("MIG-"):
            problem = f"{shown} is a MIG device UUID, which the facts cannot map to its GPU"
        else:
            problem = f"{shown} is neither an index nor a GPU UUID"
        if target is not None and target in out:
            repeats += 1
            if target not in repeated:
                repeated.append(target)
            continue
        if target is None:
            hidden = f"CUDA_VISIBLE_DEVICES entry {position + 1}: {problem}; CUDA hides it and every entry after it"
            break
        if mig:
            notes.append(f"{shown} is a MIG instance: the plan binds for its parent GPU {target.label}")
        out.append(target)
    if repeated:
        listed = ", ".join(g.label for g in repeated[:_MAX_LISTED])
        if len(repeated) > _MAX_LISTED:
            listed += f" and {len(repeated) - _MAX_LISTED} more"
        warnings.append(
            f"CUDA_VISIBLE_DEVICES names {listed} more than once ({repeats} repeated "
            f"entr{'y' if repeats == 1 else 'ies'}); each GPU is planned once"
        )
    if hidden:
        warnings.append(hidden)
    return out


# --- CPU sets per strategy -----------------------------------------------------------------------


def _no_local_cpus(b: GpuBinding, node_cpus: frozenset[int], allowed: AllowedSet, scope: str) -> None:
    if not node_cpus:
        b.warnings.append(f"{b.label} is on NUMA node {b.node}, which has no CPUs: no binding is given")
        return
    b.warnings.append(
        f"{b.label} is on NUMA node {b.node} ({scope} CPUs {cpulist(node_cpus)}), but this process may only use "
        f"CPUs {cpulist(allowed.cpus)} ({allowed.detail}): none is near this GPU, so no binding is given. Ask for "
        f"CPUs on node {b.node}: Slurm srun --gpu-bind=closest or --cpu-bind=ldoms; Kubernetes topology manager "
        "policy single-numa-node; or widen the taskset/cpuset"
    )


def _node_or_socket(b: GpuBinding, topo: Topology, allowed: AllowedSet, strategy: str) -> None:
    node = b.node
    assert node is not None
    nodes = [node]
    if strategy == "socket":
        socket = topo.socket_nodes(node)
        if socket is None:
            b.notes.append(f"the CPU package of node {node} is unknown: bound to the node instead of the socket")
        else:
            nodes = socket
    whole = frozenset().union(*(topo.nodes[n].cpus for n in nodes))
    own = topo.nodes[node].cpus
    cpus = whole & allowed.cpus
    if not cpus:
        _no_local_cpus(b, whole, allowed, "its socket's" if len(nodes) > 1 else "its")
        return
    b.cpus = sorted(cpus)
    where = f"node {node}" if len(nodes) == 1 else f"the socket of node {node} (nodes {', '.join(map(str, nodes))})"
    if cpus == whole:
        b.cpu_nodes = nodes
        b.cpu_note = f"all of {where}"
    else:
        b.cpu_note = f"the allowed CPUs of {where}, {len(cpus)} of {len(whole)}"
        if not own & allowed.cpus:
            b.notes.append(f"none of node {node}'s own CPUs is allowed: using the rest of its socket")


def _split(cores: list[tuple[int, ...]], count: int) -> list[list[tuple[int, ...]]]:
    base, extra = divmod(len(cores), count)
    out = []
    start = 0
    for i in range(count):
        size = base + (1 if i < extra else 0)
        out.append(cores[start : start + size])
        start += size
    return out


def _give_cores(
    group: list[GpuBinding], cores: list[tuple[int, ...]], where: str, topo: Topology, strategy: str
) -> None:
    if not topo.siblings_known():
        for b in group:
            b.notes.append("SMT siblings unknown: each CPU counted as a core")
    for b, share in zip(group, _split(cores, len(group))):
        if not share:
            b.warnings.append(
                f"{b.label}: {where} has only {len(cores)} allowed physical core(s) for {len(group)} GPUs, none left "
                f"for this one; use --strategy node (shared CPUs) or run fewer ranks on node {b.node}"
            )
            continue
        b.cpus = sorted(c for core in share for c in core)
        b.cores = len(share)
        b.cpu_note = f"{len(share)} of the {len(cores)} allowed cores of {where}, not shared with another GPU"


def _exclusive(group: list[GpuBinding], node: int, topo: Topology, allowed: AllowedSet, strategy: str) -> None:
    pool = topo.nodes[node].cpus & allowed.cpus
    if not pool:
        for b in group:
            _no_local_cpus(b, topo.nodes[node].cpus, allowed, "its")
        return
    if strategy == "exclusive":
        _give_cores(group, topo.core_groups(pool), f"node {node}", topo, strategy)
        return
    caches = topo.llc_groups(pool)
    if caches is None:
        for b in group:
            b.notes.append("last-level cache groups unknown: cores split as --strategy exclusive does")
        _give_cores(group, topo.core_groups(pool), f"node {node}", topo, "exclusive")
        return
    sharing: dict[int, list[GpuBinding]] = {}
    for i, b in enumerate(group):
        sharing.setdefault(i % len(caches), []).append(b)
    for slot, members in sorted(sharing.items()):
        cache = caches[slot]
        where = f"last-level cache group {slot} of node {node}"
        _give_cores(members, topo.core_groups(cache), where, topo, strategy)
        for b in members:
            if b.cpus and len(members) == 1:
                b.cpu_note = f"one of the {len(caches)} last-level cache groups of node {node}"


# --- memory and the command line -----------------------------------------------------------------


def _memory(b: GpuBinding, topo: Topology, mems: frozenset[int] | None, mems_why: str, membind: bool) -> str | None:
    node = b.node
    assert node is not None
    size = topo.nodes[node].memory_bytes
    allowed = mems is None or node in mems
    has_memory = size is None or size > 0
    if membind:
        problem = ""
        if mems is None:
            problem = f"the allowed memory nodes are unknown ({mems_why})"
        elif not allowed:
            problem = (
                f"node {node} is not in the allowed memory nodes (Mems_allowed_list {cpulist(mems)}); numactl "
                "would fail with 'Invalid argument'"
            )
        elif size is None:
            problem = f"node {node}'s memory size is unknown"
        elif size == 0:
            problem = f"node {node} has no memory of its own"
        if problem:
            b.warnings.append(f"--membind not used for {b.label}: {problem}")
        else:
            b.notes.append(
                f"--membind is strict: allocations fail when node {node} ({(size or 0) / GIB:.0f} GiB) is full, "
                "even with memory free on other nodes"
            )
            return "membind"
    if not allowed:
        assert mems is not None
        b.notes.append(
            f"node {node} is not in the allowed memory nodes (Mems_allowed_list {cpulist(mems)}): memory placement "
            "left to the cpuset"
        )
        return None
    if not has_memory:
        b.notes.append(f"node {node} has no memory of its own: memory placement left to the kernel")
        return None
    return "preferred"


def _node_memory_gap(facts: Mapping[str, Any], topo: Topology) -> str:
    """A warning when the nodes' memory adds up to far less than the host's: per-node figures
    that cannot be trusted make a strict --membind risky (seen in VMs)."""
    host = facts.get("host")
    total = host.get("memory_total_bytes") if isinstance(host, Mapping) else None
    sizes = [n.memory_bytes for n in topo.nodes.values()]
    if not isinstance(total, int) or not 0 < total < MAX_BYTES or any(s is None for s in sizes):
        return ""
    summed = sum(s for s in sizes if s is not None)
    if summed >= total // 2:
        return ""
    return (
        f"the NUMA nodes' memory adds up to {summed / GIB:.0f} GiB of the host's {total / GIB:.0f} GiB "
        "(MemTotal): --membind would confine the job to what the node reports; check numactl --hardware first"
    )


def _command(b: GpuBinding) -> list[str]:
    argv = ["numactl"]
    if b.cpu_nodes:
        argv.append("--cpunodebind=" + ",".join(str(n) for n in b.cpu_nodes))
    else:
        argv.append("--physcpubind=" + cpulist(b.cpus))
    if b.mem_policy == "membind":
        argv.append(f"--membind={b.node}")
    elif b.mem_policy == "preferred":
        argv.append(f"--preferred={b.node}")
    return argv


# --- the plan ------------------------------------------------------------------------------------


def plan_numa(
    facts: Mapping[str, Any],
    strategy: str = "node",
    membind: bool = False,
    visible: str | None = None,
) -> NumaPlan:
    """The binding plan for the GPUs a job on this machine sees.

    ``visible``: a CUDA_VISIBLE_DEVICES value to plan for; None uses the one recorded in the
    facts (host.env), and plans for every GPU when that is unset too."""
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}; choose one of {', '.join(STRATEGIES)}")
    topo = Topology(facts)
    gpus, source, notes = gpus_from_facts(facts, topo)
    warnings: list[str] = []
    host = facts.get("host")
    env = host.get("env") if isinstance(host, Mapping) else None
    env = env if isinstance(env, Mapping) else {}
    visible_from = "option" if visible is not None else "environment"
    value = visible if visible is not None else env.get("CUDA_VISIBLE_DEVICES")
    seen = _visible(gpus, value, env.get("CUDA_DEVICE_ORDER"), warnings, notes)
    allowed = allowed_cpus(facts, topo)
    mems, mems_why = allowed_mems(facts)
    plan = NumaPlan(
        strategy=strategy,
        membind=membind,
        bindings=[GpuBinding(gpu=g, cuda_index=i) for i, g in enumerate(seen)],
        gpu_source=source,
        visible=value,
        visible_from=visible_from,
        allowed=allowed,
        allowed_mems=mems,
        topology=topo,
        all_gpus=gpus,
        warnings=warnings,
        notes=notes,
    )
    if not gpus:
        warnings.append("no GPU found (NVML, the PCI bus and amdgpu list no NVIDIA or AMD GPU): nothing to bind")
    if topo.problem:
        warnings.append(f"{topo.problem}: no binding can be planned")
        for b in plan.bindings:
            b.warnings.append(f"{b.label}: {topo.problem}: no binding")
        return plan
    if not allowed.known:
        warnings.append(f"{allowed.detail}: the plan assumes every online CPU may be used")
    if len(topo.cpu_nodes()) == 1 and plan.bindings:
        notes.append(
            "one NUMA node: memory is local whatever the binding, and --strategy node only keeps ranks on the "
            "allowed CPUs; --strategy exclusive or core-complex gives each rank cores of its own"
        )

    toolkit = facts.get("toolkit")
    numactl = toolkit.get("numactl_path") if isinstance(toolkit, Mapping) else None
    if plan.bindings and not isinstance(numactl, str):
        notes.append(
            "numactl was not found on this machine's PATH: install it (apt-get install numactl, dnf install "
            "numactl) to use these lines, or bind with `gpudoctor run --numa`, which falls back to the "
            "process's own CPU affinity and memory policy"
        )
    memory_gap = _node_memory_gap(facts, topo)
    in_container = isinstance(host, Mapping) and host.get("in_container") is True

    located = []
    for b in plan.bindings:
        if b.node is None:
            b.warnings.append(
                f"{b.label}: NUMA node unknown ({b.gpu.node_source}) on a {len(topo.cpu_nodes())}-node machine: "
                "no binding is given rather than a guess; see `nvidia-smi topo -m` (CPU Affinity) and the BIOS "
                "ACPI/SRAT settings"
            )
        elif b.node not in topo.nodes:
            b.warnings.append(f"{b.label}: NUMA node {b.node} is not among this machine's nodes: no binding")
        else:
            located.append(b)
    if strategy in ("node", "socket"):
        for b in located:
            _node_or_socket(b, topo, allowed, strategy)
    else:
        by_node: dict[int, list[GpuBinding]] = {}
        for b in sorted(located, key=lambda b: b.gpu.bus_id):
            by_node.setdefault(int(b.node), []).append(b)  # type: ignore[arg-type]
        for node, group in sorted(by_node.items()):
            _exclusive(group, node, topo, allowed, strategy)

    for b in located:
        if not b.cpus:
            continue
        if not b.cores:
            b.cores = len(topo.core_groups(b.cpus))
        b.mem_policy = _memory(b, topo, mems, mems_why, membind)
        if b.mem_policy == "membind" and memory_gap:
            b.warnings.append(memory_gap)
        b.argv = _command(b)

    if in_container and any(b.mem_policy for b in plan.bindings):
        notes.append(
            "in a container, --preferred/--membind need CAP_SYS_NICE under Docker's and containerd's default "
            "seccomp profiles; without it numactl stops with 'set_mempolicy: Operation not permitted' and runs "
            "nothing: drop the memory option there, or use `gpudoctor run --numa`, which checks first"
        )
    pairs = pair_nics([b.gpu for b in plan.bindings], nics_from_facts(facts, topo))
    for b in plan.bindings:
        b.nic = pairs.get(b.gpu.bus_id)
    return plan
