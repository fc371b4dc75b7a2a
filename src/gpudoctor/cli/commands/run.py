"""`gpudoctor run --numa -- CMD ARGS...`: bind this process near its GPU, then become CMD.

Meant to sit between a launcher and each worker::

    torchrun --nproc-per-node 8 --no-python -- gpudoctor run --numa -- python train.py
    srun --ntasks-per-node 8 gpudoctor run --numa -- python train.py

The `--` after --no-python matters: torchrun 2.9 and newer has a --numa-binding option, and
without it torchrun rejects the `--numa` meant for gpudoctor as an ambiguous abbreviation
(seen on a 2 x H200 host with torch 2.11).

The GPU is --gpu N, else LOCAL_RANK (torchrun), else SLURM_LOCALID, else the first GPU the job
sees; N counts the GPUs the job sees (cuda:N, after CUDA_VISIBLE_DEVICES). Where a rank
variable exceeds the visible GPUs but exactly one is visible (a scheduler that gives each task
its own GPU), that one is used.

Runs once per rank, so it reads only what the plan needs: the PCI devices and the NUMA/CPU
topology from sysfs, this process's allowed CPUs and memory nodes (/proc/self/status), and NVML
(in its child process, under --nvml-timeout) only when sysfs cannot place a GPU on a multi-node
machine or CUDA_VISIBLE_DEVICES names GPUs by UUID. Where the NVIDIA driver lists its GPUs in
/proc/driver/nvidia/gpus (a container sees only the GPUs it was given there, while sysfs shows
the whole host), PCI GPUs missing from that list are left out.

Binding: with numactl on PATH, exec numactl with the plan's options and CMD. Otherwise set this
process's CPU affinity (sched_setaffinity) and, on x86_64 and aarch64, its memory policy with
the set_mempolicy system call; both survive exec. If the memory policy cannot be set, CPU
affinity alone is applied and stderr says so. Then exec CMD (argv, never a shell). Before
handing numactl a memory option, run checks that this process may set a memory policy at all:
Docker's and containerd's default seccomp profiles refuse set_mempolicy without CAP_SYS_NICE
(moby/moby#37241), and numactl then exits without running CMD.

Exit status: CMD's own, once it runs; 2 when gpudoctor cannot bind or run it (no command, no
such GPU, the GPU's CPUs all disallowed, its NUMA node unknown, CMD not found).
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from typing import Any, Mapping, Sequence

import click

from ...escaping import printable
from ..errors import UserError
from ..options import membind_option, nvml_timeout_option, strategy_option, tree_options
from ..output import write_output
from ..registry import help_text

RANK_VARIABLES = ("LOCAL_RANK", "SLURM_LOCALID")

# linux/mempolicy.h
MPOL_PREFERRED = 1
MPOL_BIND = 2
# set_mempolicy(2) system call numbers (arch/x86/entry/syscalls/syscall_64.tbl; the generic table
# include/uapi/asm-generic/unistd.h used by arm64).
SYS_SET_MEMPOLICY = {"x86_64": 238, "aarch64": 237}

HELP_EPILOG = """\b
Exit status: the command's own once it runs; 2 when gpudoctor cannot bind or start it
(no command, no such GPU, the GPU's CPUs all disallowed, its NUMA node unknown)."""


RUN_HELP = "CMD is exec'd as an argument list, never through a shell."


def _tree_options(f: Any) -> Any:
    for option in reversed(
        tree_options(
            "Read the topology and allowed sets from this tree instead of / (tests, a mounted host /sys); "
            "the binding still applies to this process."
        )
    ):
        f = option(f)
    return f


@click.command(
    "run",
    help=help_text("run", RUN_HELP),
    context_settings={"allow_interspersed_args": False},
    epilog=HELP_EPILOG,
)
@click.option("--numa", is_flag=True, help="Bind to the GPU's NUMA node (CPUs and memory) before running CMD.")
@strategy_option()
@membind_option()
@click.option(
    "--gpu", "gpu", metavar="N", help="The GPU, as the job counts them (cuda:N). Default: LOCAL_RANK, SLURM_LOCALID, 0."
)
@click.option(
    "--export-nic", is_flag=True, help="Also set NCCL_IB_HCA and UCX_NET_DEVICES to the GPU's nearest RDMA NIC."
)
@click.option(
    "--no-numactl", is_flag=True, help="Bind with sched_setaffinity/set_mempolicy even when numactl is installed."
)
@click.option("--dry-run", is_flag=True, help="Print the binding and the command that would run, and exit.")
@click.option("-q", "--quiet", is_flag=True, help="Do not print the binding on stderr.")
@_tree_options
@nvml_timeout_option("Seconds NVML may take, when it is needed at all.")
@click.argument("cmd", nargs=-1, type=click.UNPROCESSED, metavar="-- CMD [ARGS]...")
def command(
    numa: bool,
    strategy: str,
    membind: bool,
    gpu: str | None,
    export_nic: bool,
    no_numactl: bool,
    dry_run: bool,
    quiet: bool,
    root: str | None,
    sysfs_root: str | None,
    procfs_root: str | None,
    nvml_timeout: float,
    cmd: tuple[str, ...],
) -> None:
    if not numa:
        raise UserError("nothing to bind: use gpudoctor run --numa -- CMD [ARGS...]")
    if not cmd:
        raise UserError("no command given: gpudoctor run --numa -- CMD [ARGS...]")
    executable = _resolve(cmd[0])
    for label, path in (("--root", root), ("--sysfs-root", sysfs_root), ("--procfs-root", procfs_root)):
        if path is not None and not os.path.isdir(path):
            raise UserError(f"{label} {path}: no such directory")

    from ...advice.numa_plan import plan_numa
    from ...model.topology import cpulist

    facts = probe_for_run(root, sysfs_root, procfs_root, nvml_timeout, os.environ)
    plan = plan_numa(facts, strategy=strategy, membind=membind)
    binding, how = _pick(plan, gpu, os.environ)
    if not binding.bindable:
        raise UserError(binding.warnings[0] if binding.warnings else f"no binding for {binding.label}")

    if not quiet:
        for warning in [*plan.warnings, *binding.warnings]:
            click.echo(f"gpudoctor run: warning: {printable(warning)}", err=True)
    env = dict(os.environ)
    if export_nic and binding.nic is not None:
        env.update(binding.nic.env)
    numactl = None if no_numactl else shutil.which("numactl")
    blocked = None
    if binding.mem_policy and not dry_run:
        # numactl stops without running CMD when it may not set the policy (containers under the
        # default seccomp profile without CAP_SYS_NICE): ask the kernel first, bind CPUs only if so.
        blocked = mempolicy_blocked()
        if blocked and numactl:
            binding.argv = [a for a in binding.argv if not a.startswith(("--preferred=", "--membind="))]
    memory = {"membind": f"memory only on node {binding.node}", "preferred": f"memory preferred on node {binding.node}"}
    summary = (
        f"cuda:{binding.cuda_index} = {binding.label}{how} on NUMA node {binding.node}: CPUs {cpulist(binding.cpus)}, "
        f"{memory.get(binding.mem_policy or '', 'no memory policy')}"
    )
    if numactl:
        argv = [numactl, *binding.argv[1:], "--", executable, *cmd[1:]]
        if dry_run:
            write_output(f"# {printable(summary)} (numactl)\n{_env_prefix(env)}{shlex.join(argv)}\n", None)
            return
        if not quiet:
            how = f"; memory policy NOT set ({blocked}): CPUs only" if blocked else ""
            click.echo(f"gpudoctor run: {printable(summary + how)} (numactl)", err=True)
        _exec(numactl, argv, env)

    if dry_run:
        policy = binding.mem_policy or "none"
        write_output(
            f"# {printable(summary)} (sched_setaffinity and set_mempolicy {policy}; numactl not used)\n"
            f"{_env_prefix(env)}{shlex.join([executable, *cmd[1:]])}\n",
            None,
        )
        return
    try:
        os.sched_setaffinity(0, binding.cpus)
    except OSError as exc:
        why = exc.strerror or exc
        raise UserError(f"cannot bind to CPUs {cpulist(binding.cpus)}: sched_setaffinity: {why}") from None
    problem = blocked
    if binding.mem_policy and binding.node is not None and not blocked:
        problem = set_mempolicy(MPOL_BIND if binding.mem_policy == "membind" else MPOL_PREFERRED, binding.node)
    if not quiet:
        if problem:
            click.echo(
                f"gpudoctor run: {printable(summary)}; memory policy NOT set ({printable(problem)}): CPU affinity only",
                err=True,
            )
        else:
            click.echo(f"gpudoctor run: {printable(summary)} (sched_setaffinity, set_mempolicy; no numactl)", err=True)
    _exec(executable, [cmd[0], *cmd[1:]], env)


def _env_prefix(env: Mapping[str, str]) -> str:
    keys = [k for k in ("NCCL_IB_HCA", "UCX_NET_DEVICES") if env.get(k) != os.environ.get(k)]
    return "".join(f"{k}={shlex.quote(env[k])} " for k in keys)


def _resolve(name: str) -> str:
    if os.sep in name:
        if os.path.isfile(name) and os.access(name, os.X_OK):
            return name
        raise UserError(f"{name}: not an executable file")
    found = shutil.which(name)
    if found is None:
        raise UserError(f"{name}: command not found on PATH")
    return found


def _exec(path: str, argv: Sequence[str], env: Mapping[str, str]) -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execve(path, list(argv), dict(env))
    except OSError as exc:
        raise UserError(f"cannot run {path}: {exc.strerror or exc}") from None


def _pick(plan: Any, gpu: str | None, env: Mapping[str, str]) -> tuple[Any, str]:
    """The binding of the GPU this rank uses, and how it was chosen (for the stderr line)."""
    seen = plan.bindings
    if not seen:
        why = "; ".join(plan.warnings) or "no GPU found"
        raise UserError(f"no GPU to bind to: {why}")
    count = len(seen)
    if gpu is not None:
        index = _index("--gpu", gpu)
        if index >= count:
            raise UserError(f"--gpu {index}: this job sees {count} GPU(s) (cuda:0-{count - 1})")
        return seen[index], ""
    for name in RANK_VARIABLES:
        value = env.get(name)
        if value is None or value.strip() == "":
            continue
        index = _index(name, value)
        if index < count:
            return seen[index], f" (from {name}={index})"
        if count == 1:
            return seen[0], f" (the only GPU this task sees; {name}={index})"
        raise UserError(f"{name}={index} but this job sees {count} GPU(s) (cuda:0-{count - 1}); pass --gpu N")
    return seen[0], " (the first GPU; no --gpu, LOCAL_RANK or SLURM_LOCALID)"


def _index(name: str, value: str) -> int:
    from ...inputs import parse_int, shown_excerpt

    text = value.strip()
    try:
        if text[:1] in "+-":
            raise ValueError("signed")
        return parse_int(text, name, 6)
    except ValueError:
        raise UserError(f"{name}={shown_excerpt(value)} is not a GPU index (a whole number from 0)") from None


# --- probing: only what the plan needs ------------------------------------------------------------


def probe_for_run(
    root: str | None,
    sysfs_root: str | None,
    procfs_root: str | None,
    nvml_timeout: float,
    environ: Mapping[str, str],
) -> dict[str, Any]:
    """The facts sections the plan reads, from the live machine (or a tree), cheaply."""
    from ...context import make_context
    from ...facts import Unavailable
    from ...model.cpus import parse_cpulist
    from ...probes import numa as numa_probe
    from ...probes import pci as pci_probe
    from ...probes.files import list_dir, read_lines
    from ...probes.host import gpu_env

    ctx = make_context(root=root, sysfs_root=sysfs_root, procfs_root=procfs_root, timeout=nvml_timeout + 5.0,
                       nvml_timeout=nvml_timeout)
    pci_section = pci_probe.collect(ctx)
    numa_section = numa_probe.collect(ctx)

    devices = pci_section.get("devices")
    exposed = list_dir(ctx, "/proc/driver/nvidia/gpus")
    if isinstance(devices, list) and isinstance(exposed, list) and exposed:
        wanted = {name.lower() for name in exposed}
        pci_section["devices"] = [
            d for d in devices
            if not (d.get("kind") == "gpu" and d.get("vendor") == "nvidia" and d.get("bus_id") not in wanted)
        ]

    status: dict[str, Any] = {}
    lines = read_lines(ctx, "/proc/self/status")
    if isinstance(lines, list):
        for line in lines:
            key, sep, value = line.partition(":")
            if sep:
                status[key.strip()] = value.strip()

    def status_list(key: str) -> Any:
        if key not in status:
            return Unavailable("not_found", f"no {key} in {ctx.path('/proc/self/status')}")
        try:
            return parse_cpulist(status[key])
        except ValueError as exc:
            return Unavailable("error", f"{key}: {exc}")

    env = gpu_env(environ)
    facts: dict[str, Any] = {
        "host": {
            "allowed_cpus": status_list("Cpus_allowed_list"),
            "allowed_mems": status_list("Mems_allowed_list"),
            # The kernel keeps Cpus_allowed_list inside the cgroup cpuset: nothing to add.
            "cgroup_cpus": Unavailable("not_supported", "not read by run: Cpus_allowed_list lies within the cpuset"),
            "env": env,
        },
        "pci": pci_section,
        "numa": numa_section,
        "toolkit": {"numactl_path": shutil.which("numactl") or Unavailable("not_found", "numactl not on PATH")},
        "nvml": {"status": "not_probed", "error": "not needed: sysfs placed every GPU"},
    }
    if _needs_nvml(facts, env):
        from ...probes import nvml as nvml_probe

        facts["nvml"] = nvml_probe.collect(ctx)
    return facts


def _is_index(entry: str) -> bool:
    """A CUDA_VISIBLE_DEVICES index (ASCII digits, maybe negative), not a UUID."""
    digits = entry.lstrip("-")
    return digits.isascii() and digits.isdigit()


def _needs_nvml(facts: Mapping[str, Any], env: Mapping[str, str]) -> bool:
    visible = env.get("CUDA_VISIBLE_DEVICES", "")
    if any(entry.strip() and not _is_index(entry.strip()) for entry in visible.split(",")):
        return True  # UUIDs: only NVML knows them
    nodes = facts["numa"].get("nodes")
    with_cpus = [n for n in nodes if n.get("cpus")] if isinstance(nodes, list) else []
    if len(with_cpus) < 2:
        return False  # one node: every GPU is on it
    devices = facts["pci"].get("devices")
    for dev in devices if isinstance(devices, list) else []:
        if dev.get("kind") == "gpu" and dev.get("vendor") == "nvidia":
            node = dev.get("numa_node")
            if not isinstance(node, int) or node < 0:
                return True
    return False


# --- memory policy without numactl ------------------------------------------------------------------


def _syscall() -> tuple[Any, int] | str:
    """libc's syscall() set up for set_mempolicy, and its number here; or why not."""
    machine = os.uname().machine
    number = SYS_SET_MEMPOLICY.get(machine)
    if number is None:
        return f"set_mempolicy system call number not known for {machine}"
    import ctypes

    try:
        syscall = ctypes.CDLL(None, use_errno=True).syscall
    except (OSError, AttributeError) as exc:
        return f"no libc syscall(): {exc}"
    syscall.restype = ctypes.c_long
    syscall.argtypes = [ctypes.c_long, ctypes.c_int, ctypes.POINTER(ctypes.c_ulong), ctypes.c_ulong]
    return syscall, number


def _errno_text(err: int) -> str:
    hint = {1: " (a container without CAP_SYS_NICE under the default seccomp profile)",
            22: " (node not allowed by the cpuset, or without memory)"}.get(err, "")
    return f"set_mempolicy: {os.strerror(err)}{hint}"


def mempolicy_blocked() -> str | None:
    """Why this process may not set a memory policy, or None when it may.

    Asks for the default policy (MPOL_DEFAULT, no mask), which changes nothing the binding will
    not set anyway; a seccomp filter refuses it like any other set_mempolicy call."""
    found = _syscall()
    if isinstance(found, str):
        return found
    import ctypes

    syscall, number = found
    if syscall(number, 0, None, ctypes.c_ulong(0)) != 0:
        return _errno_text(ctypes.get_errno())
    return None


def set_mempolicy(mode: int, node: int) -> str | None:
    """Set this process's memory policy to mode over one node; None on success, else why not.

    Through the raw system call (libc has no wrapper without libnuma). The mask holds whole
    64-bit words and maxnode is its size in bits plus one, as libnuma passes it: the kernel
    subtracts one before reading, so it reads exactly the words given."""
    if node < 0:
        return f"bad node {node}"
    found = _syscall()
    if isinstance(found, str):
        return found
    import ctypes

    syscall, number = found
    words = node // 64 + 1
    mask = (ctypes.c_ulong * words)()
    mask[node // 64] = 1 << (node % 64)
    if syscall(number, mode, mask, ctypes.c_ulong(words * 64 + 1)) != 0:
        return _errno_text(ctypes.get_errno())
    return None
