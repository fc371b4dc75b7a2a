"""The options several commands share, each declared once.

Where commands legitimately differ (which formats they write, what their output file holds),
the factory takes that as a parameter; the type, metavar, default and the rest of the help are
the same everywhere.
"""

from __future__ import annotations

import functools
import math
from typing import Any, Callable, Sequence

import click

from ..frozen import Frozen

Decorator = Callable[[Any], Any]

# A day: far beyond any probe or NVML deadline, far short of what looks like "no deadline".
MAX_TIMEOUT_S = 86400.0


def completer(name: str) -> Callable[[Any, Any, str], Any]:
    """A shell_complete callback that imports gpudoctor.cli.completion (and click's completion
    module) only when the shell asks, on TAB: a command that runs never pays for them."""

    def complete(ctx: Any, param: Any, incomplete: str) -> Any:
        from . import completion

        return getattr(completion, name)(ctx, param, incomplete)

    complete.__name__ = name
    return complete


class FiniteFloat(click.FloatRange):
    """A float option that must be a finite number, within [min, max] where given.

    click's FLOAT and FloatRange take "nan", "inf" and "1e999" (which is inf): nan passes every
    range check (each comparison is false) and inf every minimum. Every float option of every
    command uses this type instead; nan and inf are a usage error (exit status 2)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, float) and not math.isfinite(value):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        if isinstance(value, str):
            try:
                number = float(value)
            except ValueError:
                number = 0.0  # click says it is not a valid float
            if not math.isfinite(number):
                self.fail(f"{value!r} is not a finite number.", param, ctx)
        return super().convert(value, param, ctx)


def given(ctx: click.Context, name: str) -> bool:
    """Whether the parameter `name` was given (command line or environment), not defaulted."""
    from click.core import ParameterSource

    return ctx.get_parameter_source(name) in (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT)


# --- what to read and how to write ----------------------------------------------------------------


def facts_option(help: str = "Use this snapshot (from `gpudoctor probe`) instead of probing the machine.") -> Decorator:
    """--facts FILE (as `facts_file`): a saved snapshot instead of a probe."""
    return click.option("--facts", "facts_file", type=click.Path(dir_okay=False), help=help)


def format_option(
    choices: Sequence[str] = ("text", "json"), default: str | None = "text", help: str | None = None
) -> Decorator:
    """--format (as `fmt`), among the formats this command writes."""
    return click.option(
        "--format",
        "fmt",
        type=click.Choice(list(choices)),
        default=default,
        show_default=default is not None,
        help=help or "How to write the output.",
    )


def output_option(what: str) -> Decorator:
    """-o/--output FILE: where `what` (e.g. "the report") goes instead of stdout."""
    return click.option(
        "-o",
        "--output",
        type=click.Path(dir_okay=False),
        help=f"Write {what} here (a file is replaced atomically; a device or FIFO written).",
    )


def color_option(f: Any) -> Any:
    """--color/--no-color (as `color`, None when not given)."""
    return click.option(
        "--color/--no-color", default=None, help=(
            "Colour the text output, even into a pipe or file "
            "(default: on a terminal, unless NO_COLOR; FORCE_COLOR forces it)."
        ),
    )(f)


def rules_option(f: Any) -> Any:
    """--rules DIR (repeatable, as `rule_dirs`)."""
    return click.option(
        "--rules",
        "rule_dirs",
        multiple=True,
        type=click.Path(),
        metavar="DIR",
        help="Add the rule files in DIR (repeatable).",
    )(f)


def rule_dir_options(f: Any) -> Any:
    """--rules DIR (repeatable) and --no-builtin-rules, for every command that runs the rules."""
    f = click.option("--no-builtin-rules", is_flag=True, help="Use only the rules given with --rules.")(f)
    return rules_option(f)


# --- judging ----------------------------------------------------------------------------------------


def fail_on_option(
    help: str, severities: Sequence[str] = ("error", "warning"), default: str | None = "error"
) -> Decorator:
    """--fail-on SEVERITY: the lowest severity of a failed check that counts; what it counts for
    (the exit status, blocking the gate, leaving a GPU out) is the command's `help`."""
    return click.option(
        "--fail-on", type=click.Choice(list(severities)), default=default, show_default=default is not None, help=help
    )


def min_free_memory_option(help: str, default: float | None = None) -> Decorator:
    """--min-free-memory GiB: free memory every (chosen) GPU must have."""
    return click.option("--min-free-memory", type=FiniteFloat(min=0), default=default, metavar="GiB", help=help)


# --- NUMA binding (fix --numa, run --numa) -------------------------------------------------------


def strategy_option(mode: str = "") -> Decorator:
    """--strategy: how a GPU's CPUs are chosen (advice.numa_plan.STRATEGIES). `mode`: the flag
    it belongs to, for a command with several modes (fix --numa)."""
    from ..advice.numa_plan import STRATEGIES

    return click.option(
        "--strategy",
        type=click.Choice(STRATEGIES),
        default="node",
        show_default=True,
        help=_for_mode(
            mode,
            "Which CPUs: the GPU's node, its socket, an exclusive share of the node's cores, or one "
            "last-level-cache group.",
        ),
    )


def membind_option(mode: str = "") -> Decorator:
    """--membind: memory strictly on the GPU's node. `mode` as for strategy_option."""
    return click.option(
        "--membind",
        is_flag=True,
        help=_for_mode(mode, "Allocate memory only on the GPU's node (strict) instead of preferring it."),
    )


def _for_mode(mode: str, help: str) -> str:
    """`help`, said to apply only with the flag `mode` where one is given ("--numa: which CPUs...")."""
    return f"{mode}: {help[:1].lower()}{help[1:]}" if mode else help


# --- counter rates (check, gate) ---------------------------------------------------------------

# --sample at most this long: a pre-job check, not a monitor.
MAX_SAMPLE_S = 60.0


def previous_option(f: Any) -> Any:
    """--previous FILE (as `previous_file`): a snapshot to compare the error counters with."""
    return click.option(
        "--previous",
        "previous_file",
        type=click.Path(dir_okay=False),
        metavar="FILE",
        help="Compare the NVLink and RDMA error counters with this earlier snapshot of the same boot "
        "(gpudoctor probe -o FILE) and judge their rise per hour.",
    )(f)


def sample_option(f: Any) -> Any:
    """--sample SECONDS (as `sample_s`): read the error counters twice, SECONDS apart (live runs)."""
    return click.option(
        "--sample",
        "sample_s",
        type=FiniteFloat(min=0, min_open=True, max=MAX_SAMPLE_S),
        metavar="SECONDS",
        help=f"Read the NVLink and RDMA error counters twice, SECONDS apart (at most {MAX_SAMPLE_S:g}, "
        "less than --timeout), and judge their rise per hour; not with --facts.",
    )(f)


def check_rate_options(
    facts_file: str | None, previous_file: str | None, sample_s: float | None, timeout: float
) -> None:
    """The usage errors of --previous and --sample (exit status 2)."""
    from .errors import UserError

    if sample_s is not None and facts_file:
        raise UserError("--sample reads this machine's counters twice; it cannot be combined with --facts")
    if sample_s is not None and previous_file:
        raise UserError("--sample and --previous each give the counter rates; give one of them")
    if sample_s is not None and sample_s >= timeout:
        raise UserError(f"--sample {sample_s:g} must be shorter than the run's deadline (--timeout {timeout:g})")


# --- where and how to probe -----------------------------------------------------------------------


class ProbeOptions(Frozen):
    """What @root_options collects: where and how to probe. Commands receive it as `probe`."""

    __slots__ = ("root", "sysfs_root", "procfs_root", "python", "torch_import", "timeout", "nvml_timeout")
    root: str | None
    sysfs_root: str | None
    procfs_root: str | None
    python: str | None
    torch_import: bool
    timeout: float
    nvml_timeout: float

    def __init__(
        self,
        root: str | None = None,
        sysfs_root: str | None = None,
        procfs_root: str | None = None,
        python: str | None = None,
        torch_import: bool = False,
        timeout: float = 30.0,
        nvml_timeout: float = 5.0,
    ) -> None:
        object.__setattr__(self, "root", root)
        object.__setattr__(self, "sysfs_root", sysfs_root)
        object.__setattr__(self, "procfs_root", procfs_root)
        object.__setattr__(self, "python", python)
        object.__setattr__(self, "torch_import", torch_import)
        object.__setattr__(self, "timeout", timeout)
        object.__setattr__(self, "nvml_timeout", nvml_timeout)

    @property
    def elsewhere(self) -> bool:
        """A directory tree, not this machine, is probed."""
        return bool(self.root or self.sysfs_root or self.procfs_root)

    @property
    def origin(self) -> str:
        return f"root {self.root or '/'}" if self.elsewhere else "live"


def tree_options(root_help: str) -> list[Decorator]:
    """--root, --sysfs-root and --procfs-root: the tree read instead of /."""
    return [
        click.option("--root", type=click.Path(file_okay=False), help=root_help),
        click.option("--sysfs-root", type=click.Path(file_okay=False), help="Where /sys is (default ROOT/sys)."),
        click.option("--procfs-root", type=click.Path(file_okay=False), help="Where /proc is (default ROOT/proc)."),
    ]


def nvml_timeout_option(help: str = "Seconds NVML may take before it is reported as not answering.") -> Decorator:
    return click.option(
        "--nvml-timeout", type=FiniteFloat(min=0.1, max=MAX_TIMEOUT_S), default=5.0, show_default=True, help=help
    )


def root_options(f: Any) -> Any:
    """The probe options (--root, --sysfs-root, --procfs-root, --python, --torch-import, --timeout,
    --nvml-timeout), handed to the command as one ProbeOptions argument named `probe`."""
    options = [
        *tree_options("Probe this directory tree instead of / (a fixture root or a mounted image)."),
        click.option(
            "--python",
            "python",
            type=click.Path(dir_okay=False),
            help="Interpreter whose torch is inspected (default: this one).",
        ),
        click.option(
            "--torch-import",
            is_flag=True,
            help="Also import torch in a child process (slow, ~5 s) for runtime facts and the exact arch list.",
        ),
        click.option(
            "--timeout",
            type=FiniteFloat(min=0.1, max=MAX_TIMEOUT_S),
            default=30.0,
            show_default=True,
            help="Seconds the whole run may take; NVML and torch get their share of it.",
        ),
        nvml_timeout_option(),
    ]
    names = ("root", "sysfs_root", "procfs_root", "python", "torch_import", "timeout", "nvml_timeout")

    def collect_probe_options(*args: Any, **kwargs: Any) -> Any:
        values = {name: kwargs.pop(name) for name in names}
        return f(*args, probe=ProbeOptions(**values), **kwargs)

    functools.update_wrapper(collect_probe_options, f)
    wrapped: Any = collect_probe_options
    for option in reversed(options):
        wrapped = option(wrapped)
    return wrapped
