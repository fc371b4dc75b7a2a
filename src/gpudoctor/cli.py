"""gpudoctor command line: parse, call, render. No logic of its own.

Exit status (every command):
  0  nothing failed at or above --fail-on
  1  a check failed at or above --fail-on
  2  gpudoctor could not run: bad arguments, a bad rule file, an unreadable
     or incompatible snapshot, a missing root
"""

from __future__ import annotations

import functools
import math
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn, Sequence

import click

from . import __version__

EXIT_HELP = """\b
Exit status:
  0  no check failed at or above --fail-on
  1  a check failed at or above --fail-on
  2  gpudoctor could not run (bad arguments, bad rule file,
     unreadable or incompatible snapshot, missing root)"""


class UserError(Exception):
    """Something the user can fix; printed without a traceback, exit status 2."""


def fail(message: str) -> NoReturn:
    raise UserError(message)


def style_for(stream: Any, colour: bool | None) -> Any:
    use = colour if colour is not None else (_isatty(stream) and not os.environ.get("NO_COLOR"))
    if use:
        return click.style
    from .render.text import plain

    return plain


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream is not None and stream.isatty())
    except (OSError, ValueError, AttributeError):
        return False


def coloured(style: Any) -> bool:
    """Whether a style from style_for() colours (its SGR sequences then pass the output writer)."""
    return style is click.style


# A day: far beyond any probe or NVML deadline, far short of what looks like "no deadline".
MAX_TIMEOUT_S = 86400.0


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


@dataclass(frozen=True)
class ProbeOptions:
    """What @root_options collects: where and how to probe. Commands receive it as `probe`."""

    root: str | None = None
    sysfs_root: str | None = None
    procfs_root: str | None = None
    python: str | None = None
    torch_import: bool = False
    timeout: float = 30.0
    nvml_timeout: float = 5.0

    @property
    def elsewhere(self) -> bool:
        """A directory tree, not this machine, is probed."""
        return bool(self.root or self.sysfs_root or self.procfs_root)

    @property
    def origin(self) -> str:
        return f"root {self.root or '/'}" if self.elsewhere else "live"


def root_options(f: Any) -> Any:
    """The probe options (--root, --sysfs-root, --procfs-root, --python, --torch-import, --timeout,
    --nvml-timeout), handed to the command as one ProbeOptions argument named `probe`."""
    options = [
        click.option(
            "--root",
            type=click.Path(file_okay=False),
            help="Probe this directory tree instead of / (a fixture root or a mounted image).",
        ),
        click.option("--sysfs-root", type=click.Path(file_okay=False), help="Where /sys is (default ROOT/sys)."),
        click.option("--procfs-root", type=click.Path(file_okay=False), help="Where /proc is (default ROOT/proc)."),
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
        click.option(
            "--nvml-timeout",
            type=FiniteFloat(min=0.1, max=MAX_TIMEOUT_S),
            default=5.0,
            show_default=True,
            help="Seconds NVML may take before it is reported as not answering.",
        ),
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


def rule_dir_options(f: Any) -> Any:
    """--rules DIR (repeatable) and --no-builtin-rules, for every command that runs the rules."""
    f = click.option("--no-builtin-rules", is_flag=True, help="Use only the rules given with --rules.")(f)
    return click.option(
        "--rules",
        "rule_dirs",
        multiple=True,
        type=click.Path(),
        metavar="DIR",
        help="Add the rule files in DIR (repeatable).",
    )(f)


def start_collect(probe: ProbeOptions) -> Any:
    """Validate the probe options and start probing (NVML is forked at once); `.finish()` gives the facts."""
    for label, path in (
        ("--root", probe.root),
        ("--sysfs-root", probe.sysfs_root),
        ("--procfs-root", probe.procfs_root),
    ):
        if path is not None and not Path(path).is_dir():
            fail(f"{label} {path}: no such directory")
    if probe.python is not None and not (os.path.isfile(probe.python) and os.access(probe.python, os.X_OK)):
        fail(f"--python {probe.python}: not an executable file")
    from .context import make_context
    from .probes import start_collection

    ctx = make_context(
        root=probe.root,
        sysfs_root=probe.sysfs_root,
        procfs_root=probe.procfs_root,
        python=probe.python,
        timeout=probe.timeout,
        nvml_timeout=probe.nvml_timeout,
        torch_import=probe.torch_import,
    )
    return start_collection(ctx)


def obtain_facts(facts_file: str | None, probe: ProbeOptions) -> tuple[dict[str, Any], str]:
    """The facts and where they came from: a snapshot file, a fixture root, or the live machine.

    For commands other than `check` that take `--facts FILE` plus @root_options."""
    if facts_file:
        refuse_probe_options_with_facts(probe)
        return load_facts_file(facts_file), facts_file
    return start_collect(probe).finish(), probe.origin


def refuse_probe_options_with_facts(probe: ProbeOptions) -> None:
    if probe.elsewhere or probe.python or probe.torch_import:
        fail("--facts reads a saved snapshot; it cannot be combined with the probe options (--root, --python, ...)")


def load_facts_file(path: str) -> dict[str, Any]:
    from .facts import SnapshotError, load_snapshot

    try:
        return load_snapshot(path)
    except SnapshotError as exc:
        fail(str(exc))


def load_ruleset(rule_dirs: Sequence[str], builtin: bool = True) -> Any:
    from .engine.loader import RuleLoadError, load_rules

    for d in rule_dirs:
        if not Path(d).is_dir():
            fail(f"--rules {d}: no such directory")
    try:
        return load_rules(rule_dirs, include_builtin=builtin)
    except RuleLoadError as exc:
        fail(f"bad rule file: {exc}")


def write_output(text: str | bytes, output: str | None, *, colour: bool = False, raw: bool = False) -> None:
    """Write a command's output to the file `output` (see gpudoctor.outputs.write_file for what a
    path may be), or to stdout when it is None or "-"; exit status 2 with one line if that fails.

    Text passes gpudoctor.render.safe.terminal_safe first (every control character but newline
    and tab escaped; with `colour`, the renderer's SGR sequences kept), JSON included: it stays
    valid. `raw` skips that, for formats that escape on their own (JUnit XML, Prometheus, NFD)."""
    from .outputs import OutputError, write_file, write_stdout

    if isinstance(text, str) and not raw:
        from .render.safe import terminal_safe

        text = terminal_safe(text, colour)
    try:
        if output and output != "-":
            write_file(output, text)
        elif isinstance(text, str):
            write_stdout(text)
        else:
            fail("internal error: binary output for standard output")
    except OutputError as exc:
        fail(str(exc))


# Commands that live in their own modules (src/gpudoctor/commands/<module>.py, each exposing
# `command`), imported only when used so that `check` does not pay for them.
LAZY_COMMANDS: dict[str, tuple[str, str]] = {
    # name: (module under gpudoctor.commands, one-line help shown in `gpudoctor --help`)
    "fix": ("fix", "Print the fixes: all failing findings, --numa bindings, --torch build."),
    "run": ("run", "Bind to the GPU's NUMA node and exec a command (run --numa -- CMD)."),
    "topo": ("topo", "Show GPUs, NUMA nodes, CPUs and NICs and how they connect."),
    "gate": ("gate", "Pre-training go/no-go gate for job scripts (exit 0 go, 1 no-go)."),
    "select": ("select", "Print CUDA_VISIBLE_DEVICES for the K best free, healthy GPUs."),
    "report": ("report", "Fleet reports: merge many JSON reports into one summary."),
    "tiers": ("tiers", "The GPU tier list: specs, this machine's GPUs marked."),
    "bench": ("bench", "Microbenchmarks per GPU against the spec (needs torch)."),
}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted([*super().list_commands(ctx), *LAZY_COMMANDS])

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in LAZY_COMMANDS:
            import importlib

            module = importlib.import_module(f"gpudoctor.commands.{LAZY_COMMANDS[name][0]}")
            command: click.Command = module.command
            return command
        return super().get_command(ctx, name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, cmd.get_short_help_str(80)) for name, cmd in self.commands.items() if not cmd.hidden]
        rows += [(name, help_text) for name, (_, help_text) in LAZY_COMMANDS.items()]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(sorted(rows))


@click.group(
    cls=LazyGroup,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
    epilog=EXIT_HELP,
)
@click.version_option(__version__, "-V", "--version", prog_name="gpudoctor")
def main() -> None:
    """Environment doctor for GPU machines used for AI training and inference.

    \b
    gpudoctor check                 check this machine, print findings and fixes
    gpudoctor probe -o host.json    save the facts snapshot of this machine
    gpudoctor check --facts host.json   judge a saved snapshot (any machine)
    gpudoctor rules list            the checks gpudoctor knows
    """


@main.command(epilog=EXIT_HELP)
@click.option(
    "--facts",
    "facts_file",
    type=click.Path(dir_okay=False),
    help="Judge this snapshot (from `gpudoctor probe`) instead of probing the machine.",
)
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False),
    help="Write the report here (a file is replaced atomically; a device or FIFO written).",
)
@rule_dir_options
@click.option("--only", multiple=True, metavar="AREA|TAG|ID", help="Run only these checks (repeatable).")
@click.option("--skip", multiple=True, metavar="AREA|TAG|ID", help="Skip these checks (repeatable).")
@click.option(
    "--fail-on",
    type=click.Choice(["error", "warning", "info"]),
    default="error",
    show_default=True,
    help="Lowest severity of a failed check that makes the exit status 1.",
)
@click.option("-v", "--verbose", is_flag=True, help="Show every subject, passes' evidence and skipped checks.")
@click.option("--color/--no-color", default=None, help="Colour the text report (default: only on a terminal).")
@root_options
def check(
    facts_file: str | None,
    fmt: str,
    output: str | None,
    rule_dirs: tuple[str, ...],
    no_builtin_rules: bool,
    only: tuple[str, ...],
    skip: tuple[str, ...],
    fail_on: str,
    verbose: bool,
    color: bool | None,
    probe: ProbeOptions,
) -> None:
    """Check this machine (or a snapshot) and print findings with fixes."""
    import time

    deadline = time.monotonic() + probe.timeout
    if facts_file:
        refuse_probe_options_with_facts(probe)
    # Probing starts first, before the rule engine is even imported, so that NVML's start-up in
    # its child overlaps importing the engine and loading the rules.
    collection = None
    if not facts_file:
        collection = start_collect(probe)
    try:
        from .engine.runner import judging_deadline, run_rules, select, unknown_selectors
        from .findings import Report, Severity

        ruleset = load_ruleset(rule_dirs, builtin=not no_builtin_rules)
        unknown = unknown_selectors(ruleset, list(only) + list(skip))
        if unknown:
            fail(f"--only/--skip: no rule, area or tag named {', '.join(unknown)} (see `gpudoctor rules list`)")
    except BaseException:
        if collection is not None:
            collection.abort()
        raise
    if collection is None:
        facts = load_facts_file(str(facts_file))
        origin = str(facts_file)
    else:
        facts = collection.finish()
        origin = probe.origin
    rules = select(ruleset.rules, only, skip)
    report = Report(
        findings=run_rules(ruleset, facts, rules, deadline=judging_deadline(deadline)),
        fail_on=Severity(fail_on),
        facts_origin=origin,
        rules_loaded=len(ruleset.rules),
    )
    style = None
    if fmt == "json":
        from .render.json_report import render as render_json

        text = render_json(report, facts, include_skipped=verbose)
    else:
        from .render.text import render as render_text

        stream = sys.stdout
        style = style_for(stream, color if not output else False)
        text = render_text(report, facts, style=style, verbose=verbose)
    write_output(text, output, colour=coloured(style))
    sys.exit(report.exit_code)


@main.command(epilog="Exit status: 0 snapshot written; 2 gpudoctor could not run.")
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Write the snapshot here (default: stdout).")
@click.option("--scrub", is_flag=True, help="Replace hostname, GPU UUIDs and serials (for bug reports and fixtures).")
@root_options
def probe(
    output: str | None,
    scrub: bool,
    probe: ProbeOptions,
) -> None:
    """Read the machine and print the facts snapshot as JSON."""
    from .facts import dumps

    facts = start_collect(probe).finish()
    if scrub:
        from .facts import scrub as scrub_facts

        facts = scrub_facts(facts)
    write_output(dumps(facts), output)


@main.group()
def rules() -> None:
    """List, explain and validate rules."""


@rules.command("list")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option("--rules", "rule_dirs", multiple=True, type=click.Path(), metavar="DIR", help="Add rules from DIR.")
def rules_list(fmt: str, rule_dirs: tuple[str, ...]) -> None:
    """Every rule with its area, severity and subject."""
    from .render.rules import list_json, list_text

    ruleset = load_ruleset(rule_dirs)
    write_output(list_json(ruleset) if fmt == "json" else list_text(ruleset), None)


@rules.command("show")
@click.argument("rule_id")
@click.option("--rules", "rule_dirs", multiple=True, type=click.Path(), metavar="DIR", help="Add rules from DIR.")
def rules_show(rule_id: str, rule_dirs: tuple[str, ...]) -> None:
    """Explain one rule: why it matters, what it reads, how to fix it."""
    from .render.rules import show_text

    ruleset = load_ruleset(rule_dirs)
    rule = ruleset.by_id(rule_id)
    if rule is None:
        import difflib

        close = difflib.get_close_matches(rule_id, [r.id for r in ruleset.rules], n=3)
        fail(f"no rule {rule_id!r}" + (f"; did you mean {', '.join(close)}?" if close else ""))
    write_output(show_text(rule), None)


@rules.command("validate")
@click.argument("paths", nargs=-1, required=True, type=click.Path())
def rules_validate(paths: tuple[str, ...]) -> None:
    """Check rule files or directories; exit 2 naming file and line on the first problem in each."""
    from .engine.loader import RuleLoadError, validate_paths

    try:
        count, errors = validate_paths(paths)
    except RuleLoadError as exc:
        fail(str(exc))
    from .render.safe import printable

    for e in errors:
        say(f"gpudoctor: {printable(str(e))}")
    if errors:
        sys.exit(2)
    write_output(f"{count} rule(s) OK\n", None)


def run(argv: Sequence[str] | None = None, command: click.Command | None = None, prog_name: str = "gpudoctor") -> int:
    """Entry point with user errors turned into exit status 2 and a one-line message.

    `command` defaults to the gpudoctor group; standalone entry points pass their own.

    Messages quote outside content (paths, values from snapshots and reports): each is one line
    with its control characters escaped. stdout and stderr write what their encoding cannot as
    ASCII (gpudoctor.outputs.use_ascii_fallback). A stdout that cannot be written (closed, a full
    disk, a reader that went away) is exit status 2 with one line on stderr, or none if stderr
    cannot be written either."""
    from .outputs import STDOUT, failed_standard_stream, use_ascii_fallback
    from .render.safe import printable

    use_ascii_fallback()
    target = command if command is not None else main
    try:
        target.main(args=list(argv) if argv is not None else None, prog_name=prog_name, standalone_mode=False)
    except UserError as exc:
        say(f"gpudoctor: error: {printable(str(exc))}")
        return 2
    except click.exceptions.Exit as exc:
        return int(exc.exit_code)
    except click.ClickException as exc:
        _show_click_error(exc)
        return 2
    except click.exceptions.Abort:
        say("gpudoctor: aborted")
        return 2
    except SystemExit as exc:
        code = exc.code
        return code if isinstance(code, int) else (0 if code is None else 2)
    except KeyboardInterrupt:
        return 130
    except OSError as exc:
        # A write to stdout or stderr outside write_output (click's --help, a stray echo).
        stream = failed_standard_stream(exc)
        if stream is None:
            raise
        if stream == 1:
            say(f"gpudoctor: error: cannot write {STDOUT}: {printable(exc.strerror or exc)}")
        return 2
    except Exception as exc:  # a stop signal that Python wrapped on its way (see stopping.stop_in)
        from .children.stopping import stop_in

        stop = stop_in(exc)
        if stop is None:
            raise
        code = getattr(stop, "code", None)
        return code if isinstance(code, int) else 130
    return 0


def say(line: str) -> None:
    """One line to stderr (the caller escapes what it quotes); nothing if stderr cannot take it."""
    try:
        click.echo(line, err=True)
    except (OSError, ValueError):
        pass


def _show_click_error(exc: click.ClickException) -> None:
    """click's usage message, with the control characters of what it quotes (the arguments) escaped."""
    import io

    from .render.safe import terminal_safe

    buffer = io.StringIO()
    exc.show(file=buffer)
    try:
        click.echo(terminal_safe(buffer.getvalue()), err=True, nl=False)
    except (OSError, ValueError):
        pass


def entry() -> None:
    # SIGINT, SIGTERM, SIGHUP: every child gpudoctor started is killed at once, and the command
    # unwinds (stopping.Stopped, a SystemExit that run() turns into status 128 + the signal).
    from .children import stopping

    stopping.install_handlers()  # done already by __main__.main; a second call does nothing
    try:
        try:
            code = run()
        finally:
            stopped = stopping.settle()  # signals blocked from here; every registered child killed
    except (SystemExit, KeyboardInterrupt) as exc:  # a stop signal just outside run()'s own handlers
        stopped = stopping.settle()
        code = exc.code if isinstance(exc, SystemExit) and isinstance(exc.code, int) else 130
    if stopped is not None:
        code = 128 + stopped
        stopping.say_stopped(stopped)
    from .probes.nvml import discard_prestarted

    discard_prestarted()
    # Leave without the interpreter's teardown (freeing every module and object: about 15 ms,
    # a tenth of a check), once what was written has reached its file descriptors. gpudoctor
    # registers no exit handlers and leaves no threads; its files are written atomically before this.
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BrokenPipeError:
        pass
    except OSError:
        code = code or 2
    os._exit(code)
