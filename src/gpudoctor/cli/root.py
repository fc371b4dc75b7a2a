"""The root command group `gpudoctor`, its commands loaded lazily from the registry, and the
entry points (run: user errors to exit status 2; entry: the console script's last step)."""

from __future__ import annotations

import os
import sys
from typing import Sequence

import click

from .. import __version__
from .output import say
from .registry import COMMANDS, EXIT_HELP


class LazyGroup(click.Group):
    """The root group: a command's module (gpudoctor.cli.commands.<module>, exposing `command`) is
    imported only when that command runs; `gpudoctor --help` lists the registry's summaries."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        entry = COMMANDS.get(name)
        if entry is None:
            return None
        import importlib

        module = importlib.import_module(f"gpudoctor.cli.commands.{entry.module}")
        command: click.Command = module.command
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        with formatter.section("Commands"):
            formatter.write_dl([(name, COMMANDS[name].summary) for name in sorted(COMMANDS)])


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


def run(argv: Sequence[str] | None = None, command: click.Command | None = None, prog_name: str = "gpudoctor") -> int:
    """Entry point with user errors turned into exit status 2 and a one-line message.

    `command` defaults to the gpudoctor group; standalone entry points pass their own.

    Messages quote outside content (paths, values from snapshots and reports): each is one line
    with its control characters escaped. stdout and stderr write what their encoding cannot as
    ASCII (gpudoctor.outputs.use_ascii_fallback). A stdout that cannot be written (closed, a full
    disk, a reader that went away) is exit status 2 with one line on stderr, or none if stderr
    cannot be written either."""
    from ..escaping import printable
    from ..outputs import STDOUT, failed_standard_stream, use_ascii_fallback

    use_ascii_fallback()
    target = command if command is not None else main
    try:
        target.main(args=list(argv) if argv is not None else None, prog_name=prog_name, standalone_mode=False)
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
    except Exception as exc:  # a stop signal that Python wrapped on its way (see children.stopping.stop_in)
        from ..children.stopping import stop_in

        stop = stop_in(exc)
        if stop is None:
            rule_error = sys.modules.get("gpudoctor.engine.rule")
            if rule_error is not None and isinstance(exc, rule_error.RuleLoadError):
                # a cached rule read where first needed (engine.rule._Parts) whose file no longer
                # defines it as the cache did (edited, removed, or the entry tampered with)
                say(f"gpudoctor: bad rule file: {printable(str(exc))}")
                return 2
            raise
        code = getattr(stop, "code", None)
        return code if isinstance(code, int) else 130
    return 0


def _show_click_error(exc: click.ClickException) -> None:
    """click's usage message, with the control characters of what it quotes (the arguments) escaped."""
    import io

    from ..escaping import terminal_safe

    buffer = io.StringIO()
    exc.show(file=buffer)
    try:
        click.echo(terminal_safe(buffer.getvalue()), err=True, nl=False)
    except (OSError, ValueError):
        pass


def entry() -> None:
    # SIGINT, SIGTERM, SIGHUP: every child gpudoctor started is killed at once, and the command
    # unwinds (children.Stopped, a SystemExit that run() turns into status 128 + the signal).
    from ..children import stopping

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
    nvml = sys.modules.get("gpudoctor.probes.nvml")  # not imported: nothing was prestarted
    if nvml is not None:
        nvml.discard_prestarted()
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
