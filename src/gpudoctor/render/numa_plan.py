"""A NUMA binding plan (advice/numa_plan.py) for people (shell) or programs (JSON); what `fix --numa` prints.

Shell output is a script of comments and one numactl line per GPU that a person can read and a
shell can run: prefix the GPU's process with its line. JSON output (``format: 1``) carries the
same plan with argv lists, and each numactl line as the script writes it.
"""

from __future__ import annotations

import json
from typing import Any, Mapping

from ..advice.numa_plan import GIB, GpuBinding, NumaPlan
from ..inputs import shown_excerpt
from ..model.topology import cpulist
from .shell import shell_command, shell_comment

WIDTH = 100  # pipes and files (the plan is mostly written to a file); the command passes the terminal's

FORMATS = ("shell", "json")
JSON_FORMAT_VERSION = 1


def render_numa_plan(plan: NumaPlan, facts: Mapping[str, Any], fmt: str = "shell", width: int = WIDTH) -> str:
    """The plan for the machine the facts describe, as shell (``text`` is taken as shell) or JSON;
    the shell's comments wrap to `width`, its command lines never do.

    Raises ValueError for an unknown format."""
    if fmt == "text":
        fmt = "shell"
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")
    if fmt == "json":
        return render_json(plan, facts)
    return render_shell(plan, facts, width)


def _hostname(facts: Mapping[str, Any]) -> str:
    host = facts.get("host")
    name = host.get("hostname") if isinstance(host, Mapping) else None
    return name if isinstance(name, str) else "this host"


def _binding_json(b: GpuBinding) -> dict[str, Any]:
    g = b.gpu
    return {
        "cuda_index": b.cuda_index,
        "index": g.index,
        "bus_id": g.bus_id,
        "uuid": g.uuid,
        "name": g.name,
        "numa_node": g.node,
        "numa_node_source": g.node_source,
        "cpus": cpulist(b.cpus) if b.cpus else "",
        "cpu_count": len(b.cpus),
        "cores": b.cores,
        "cpu_note": b.cpu_note,
        "memory_policy": b.mem_policy,
        "memory_node": g.node if b.mem_policy else None,
        "command": shell_command(b.argv) if b.argv else None,
        "argv": list(b.argv),
        "nic": None
        if b.nic is None
        else {
            "rdma_device": b.nic.nic.name,
            "bus_id": b.nic.nic.bus_id,
            "net_devices": b.nic.nic.net,
            "relation": b.nic.relation,
            "env": b.nic.env,
        },
        "warnings": list(b.warnings),
        "notes": list(b.notes),
    }


def _plan_json(plan: NumaPlan) -> dict[str, Any]:
    topo = plan.topology
    return {
        "strategy": plan.strategy,
        "membind": plan.membind,
        "gpu_source": plan.gpu_source,
        "cuda_visible_devices": plan.visible,
        "numa_nodes": [
            {
                "id": n.id,
                "cpus": cpulist(n.cpus) if n.cpus else "",
                "memory_bytes": n.memory_bytes,
            }
            for n in sorted(topo.nodes.values(), key=lambda n: n.id)
        ],
        "allowed_cpus": cpulist(plan.allowed.cpus) if plan.allowed.cpus else "",
        "allowed_cpus_source": plan.allowed.detail,
        "allowed_mems": sorted(plan.allowed_mems) if plan.allowed_mems is not None else None,
        "gpus": [_binding_json(b) for b in plan.bindings],
        "warnings": list(plan.warnings),
        "notes": list(plan.notes),
    }


def render_json(plan: NumaPlan, facts: Mapping[str, Any]) -> str:
    data = {"format": JSON_FORMAT_VERSION, "hostname": _hostname(facts), "ok": plan.ok, **_plan_json(plan)}
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


def _wrap(prefix: str, text: str, width: int = WIDTH) -> list[str]:
    """text on comment lines of about width characters: the first starts with prefix (a "#..."),
    the others with "#     ". Each line is made by shell_comment, so whatever the facts put in
    text stays on comment lines (the split on whitespace drops line breaks; shell_comment escapes
    the control characters left)."""
    rows: list[tuple[str, list[str]]] = [(prefix if prefix.endswith(" ") else prefix + " ", [])]
    used = len(rows[0][0])
    for word in text.split():
        lead, words = rows[-1]
        if words and used + len(word) + 1 > width:
            rows.append(("#     ", []))
            lead, words = rows[-1]
            used = len(lead)
        used += len(word) + (1 if words else 0)
        words.append(word)
    return [shell_comment(" ".join(words), lead) for lead, words in rows]


_MAX_SHOWN = 80  # characters of a CUDA_VISIBLE_DEVICES value shown


def _visibility_line(plan: NumaPlan) -> str:
    count = len(plan.all_gpus)
    if plan.visible is None:
        if not count:
            return "CUDA_VISIBLE_DEVICES is not set"
        return f"CUDA_VISIBLE_DEVICES is not set: the job sees all {count} GPU(s), cuda:N = GPU N (PCI bus order)"
    where = "given with --visible-devices" if plan.visible_from == "option" else "from the environment"
    value = plan.visible
    if len(value) > _MAX_SHOWN:  # outside text of any length: an excerpt, and how long it is
        value = f"{shown_excerpt(value, _MAX_SHOWN)} ({len(plan.visible)} characters)"
    return f"CUDA_VISIBLE_DEVICES={value} ({where}): the job sees {len(plan.bindings)} of {count} GPU(s)"


def _gpu_head(b: GpuBinding) -> str:
    g = b.gpu
    parts = [f"cuda:{b.cuda_index} = GPU {g.index if g.index is not None else '?'}", g.bus_id]
    if g.name:
        parts.append(g.name)
    if g.uuid:
        parts.append(g.uuid)
    return " · ".join(parts)


def _gpu_detail(b: GpuBinding, plan: NumaPlan) -> str:
    g = b.gpu
    if g.node is None:
        return f"NUMA node unknown ({g.node_source})"
    text = f"NUMA node {g.node} ({g.node_source})"
    if b.cpus:
        threads = len(b.cpus)
        text += f" · CPUs {cpulist(b.cpus)} ({b.cores} cores, {threads} threads): {b.cpu_note}"
        if b.mem_policy == "membind":
            text += f" · memory only on node {g.node}"
        elif b.mem_policy == "preferred":
            text += f" · memory preferred on node {g.node}"
        else:
            text += " · no memory policy"
    return text


def render_shell(plan: NumaPlan, facts: Mapping[str, Any], width: int = WIDTH) -> str:
    topo = plan.topology
    nodes = topo.cpu_nodes()
    # Every comment line goes through shell_comment (directly or by _wrap): hostname, GPU names,
    # UUIDs, bus ids, NIC names, CUDA_VISIBLE_DEVICES and the facts' own "why unknown" details are
    # text from the snapshot. The only live lines are the numactl commands (GpuBinding.argv).
    # the comment lines wrap to `width`; the numactl lines and the launcher examples never do
    lines = _wrap(
        "#",
        f"gpudoctor NUMA binding plan · strategy {plan.strategy}{' · --membind' if plan.membind else ''} · "
        f"{_hostname(facts)} · {len(plan.all_gpus)} GPU(s) · {len(nodes)} NUMA node(s) with CPUs",
        width,
    )
    for node in nodes:
        size = f", {node.memory_bytes / GIB:.0f} GiB" if node.memory_bytes is not None else ""
        lines.extend(_wrap("#   ", f"node {node.id}: CPUs {cpulist(node.cpus)}{size}", width))
    lines.extend(_wrap("#", f"GPUs from {plan.gpu_source}; {_visibility_line(plan)}", width))
    allowed = plan.allowed
    total = len(topo.online)
    lines.extend(
        _wrap(
            "#",
            f"CPUs this process may use: {cpulist(allowed.cpus)} ({len(allowed.cpus)} of {total}; {allowed.detail})",
            width,
        )
    )
    for warning in plan.warnings:
        lines.extend(_wrap("# WARNING:", warning, width))
    for note in plan.notes:
        lines.extend(_wrap("# note:", note, width))
    for b in plan.bindings:
        lines.append("#")
        lines.extend(_wrap("#", _gpu_head(b), width))
        lines.extend(_wrap("#   ", _gpu_detail(b, plan), width))
        if b.nic is not None:
            env = " ".join(f"{k}={v}" for k, v in b.nic.env.items())
            lines.extend(
                _wrap(
                    "#   ",
                    f"nearest RDMA NIC: {b.nic.nic.name} ({b.nic.nic.bus_id}, {b.nic.relation}); if NCCL or UCX "
                    f"pick another: {env}",
                    width,
                )
            )
        for warning in b.warnings:
            lines.extend(_wrap("#   WARNING:", warning, width))
        for note in b.notes:
            lines.extend(_wrap("#   note:", note, width))
        if b.bindable:
            lines.append(shell_command(b.argv))
        else:
            lines.append("#   (no binding for this GPU)")
    if plan.bindings and any(b.bindable for b in plan.bindings):
        lines.append("#")
        how = "Prefix each GPU's process with its line, or let gpudoctor bind each rank of a launcher:"
        lines.extend(_wrap("#", how, width))
        strategy = "" if plan.strategy == "node" else f" --strategy {plan.strategy}"
        membind = " --membind" if plan.membind else ""
        lines.append(
            f"#   torchrun --nproc-per-node {len(plan.bindings)} --no-python -- gpudoctor run --numa{strategy}{membind}"
            " -- python train.py"
        )
        lines.append(f"#   srun ... gpudoctor run --numa{strategy}{membind} -- python train.py   (uses SLURM_LOCALID)")
    return "\n".join(lines) + "\n"
