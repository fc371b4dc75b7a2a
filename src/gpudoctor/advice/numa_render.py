"""Render a NUMA binding plan for people (shell) or programs (json); the entry `fix --numa` calls.

``render_numa_plan(facts, strategy, fmt, membind, visible)`` is what ``gpudoctor fix --numa``
calls; :func:`numa_options` adds the options it needs to a click command. Standalone, until the
fix command uses it::

    python -m gpudoctor.advice.numa_render [--facts FILE | --root DIR] [--strategy S] [--format shell|json]

Shell output is a script of comments and one numactl line per GPU that a person can read and a
shell can run: prefix the GPU's process with its line. JSON output (``format: 1``) carries the
same plan with argv lists.
"""

from __future__ import annotations

import json
from typing import Any, Callable, Mapping

from ..inputs import shown_excerpt
from .fix_list import shell_comment
from .numa_plan import GIB, STRATEGIES, GpuBinding, NumaPlan, plan_numa
from .numa_topology import cpulist

FORMATS = ("shell", "json")
JSON_FORMAT_VERSION = 1


def numa_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """--strategy, --membind and --visible-devices, as `fix --numa` and `run --numa` take them."""
    import click

    options = [
        click.option(
            "--strategy",
            type=click.Choice(STRATEGIES),
            default="node",
            show_default=True,
            help="node: the GPU's NUMA node; socket: its CPU package; exclusive: GPUs on one node split its "
            "physical cores; core-complex: one last-level-cache group per GPU.",
        ),
        click.option(
            "--membind",
            is_flag=True,
            help="Bind memory strictly to the GPU's node (--membind) instead of preferring it; only where the "
            "node is allowed and has memory.",
        ),
        click.option(
            "--visible-devices",
            "visible",
            metavar="LIST",
            help="Plan for this CUDA_VISIBLE_DEVICES value (indices or GPU UUIDs) instead of the recorded one.",
        ),
    ]
    for option in reversed(options):
        f = option(f)
    return f


def render_numa_plan(
    facts: Mapping[str, Any],
    strategy: str = "node",
    fmt: str = "shell",
    membind: bool = False,
    visible: str | None = None,
) -> str:
    """The plan for the machine the facts describe, as shell (``text`` is taken as shell) or JSON.

    Raises ValueError for an unknown strategy or format."""
    if fmt == "text":
        fmt = "shell"
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")
    plan = plan_numa(facts, strategy=strategy, membind=membind, visible=visible)
    if fmt == "json":
        return render_json(plan, facts)
    return render_shell(plan, facts)


def _hostname(facts: Mapping[str, Any]) -> str:
    host = facts.get("host")
    name = host.get("hostname") if isinstance(host, Mapping) else None
    return name if isinstance(name, str) else "this host"


def render_json(plan: NumaPlan, facts: Mapping[str, Any]) -> str:
    data = {"format": JSON_FORMAT_VERSION, "hostname": _hostname(facts), "ok": plan.ok, **plan.to_json()}
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


def _wrap(prefix: str, text: str, width: int = 100) -> list[str]:
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


def render_shell(plan: NumaPlan, facts: Mapping[str, Any]) -> str:
    topo = plan.topology
    nodes = topo.cpu_nodes()
    # Every comment line goes through shell_comment (directly or by _wrap): hostname, GPU names,
    # UUIDs, bus ids, NIC names, CUDA_VISIBLE_DEVICES and the facts' own "why unknown" details are
    # text from the snapshot. The only live lines are the numactl commands (GpuBinding.command).
    lines = [
        shell_comment(
            f"gpudoctor NUMA binding plan · strategy {plan.strategy}{' · --membind' if plan.membind else ''} · "
            f"{_hostname(facts)} · {len(plan.all_gpus)} GPU(s) · {len(nodes)} NUMA node(s) with CPUs"
        ),
    ]
    for node in nodes:
        size = f", {node.memory_bytes / GIB:.0f} GiB" if node.memory_bytes is not None else ""
        lines.append(shell_comment(f"node {node.id}: CPUs {cpulist(node.cpus)}{size}", "#   "))
    lines.append(shell_comment(f"GPUs from {plan.gpu_source}; {_visibility_line(plan)}"))
    allowed = plan.allowed
    total = len(topo.online)
    lines.append(
        shell_comment(
            f"CPUs this process may use: {cpulist(allowed.cpus)} ({len(allowed.cpus)} of {total}; {allowed.detail})"
        )
    )
    for warning in plan.warnings:
        lines.extend(_wrap("# WARNING:", warning))
    for note in plan.notes:
        lines.extend(_wrap("# note:", note))
    for b in plan.bindings:
        lines.append("#")
        lines.append(shell_comment(_gpu_head(b)))
        lines.extend(_wrap("#   ", _gpu_detail(b, plan)))
        if b.nic is not None:
            env = " ".join(f"{k}={v}" for k, v in b.nic.env.items())
            lines.extend(
                _wrap(
                    "#   ",
                    f"nearest RDMA NIC: {b.nic.nic.name} ({b.nic.nic.bus_id}, {b.nic.relation}); if NCCL or UCX "
                    f"pick another: {env}",
                )
            )
        for warning in b.warnings:
            lines.extend(_wrap("#   WARNING:", warning))
        for note in b.notes:
            lines.extend(_wrap("#   note:", note))
        if b.bindable:
            lines.append(b.command)
        else:
            lines.append("#   (no binding for this GPU)")
    if plan.bindings and any(b.bindable for b in plan.bindings):
        lines.append("#")
        lines.append("# Prefix each GPU's process with its line, or let gpudoctor bind each rank of a launcher:")
        strategy = "" if plan.strategy == "node" else f" --strategy {plan.strategy}"
        membind = " --membind" if plan.membind else ""
        lines.append(
            f"#   torchrun --nproc-per-node {len(plan.bindings)} --no-python -- gpudoctor run --numa{strategy}{membind}"
            " -- python train.py"
        )
        lines.append(f"#   srun ... gpudoctor run --numa{strategy}{membind} -- python train.py   (uses SLURM_LOCALID)")
    return "\n".join(lines) + "\n"


def _standalone() -> Any:
    import click

    from ..cli.load import obtain_facts
    from ..cli.options import ProbeOptions, root_options
    from ..cli.output import write_output
    from ..cli.registry import EXIT_HELP

    @click.command(
        context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100}, epilog=EXIT_HELP
    )
    @click.option("--facts", "facts_file", type=click.Path(dir_okay=False), help="Plan for this snapshot.")
    @click.option("--format", "fmt", type=click.Choice(FORMATS), default="shell", show_default=True)
    @click.option(
        "-o",
        "--output",
        type=click.Path(dir_okay=False),
        help="Write the plan here (a file is replaced atomically; a device or FIFO written).",
    )
    @numa_options
    @root_options
    def numa_plan_command(
        facts_file: str | None,
        fmt: str,
        output: str | None,
        strategy: str,
        membind: bool,
        visible: str | None,
        probe: ProbeOptions,
    ) -> None:
        """Print the NUMA binding plan (what `gpudoctor fix --numa` prints)."""
        facts, _origin = obtain_facts(facts_file, probe)
        write_output(render_numa_plan(facts, strategy, fmt, membind, visible), output)

    return numa_plan_command


def main(argv: list[str] | None = None) -> int:
    from ..cli.root import run

    return run(argv, command=_standalone(), prog_name="python -m gpudoctor.advice.numa_render")


if __name__ == "__main__":
    import sys

    sys.exit(main())
