"""UserError: the one error a command raises for something the user can fix."""

from __future__ import annotations

from typing import IO, Any

import click


class UserError(click.ClickException):
    """Something the user can fix (a bad option value, a missing file, an unreadable snapshot):
    one line on stderr, no traceback, exit status 2.

    A click exception, so click's own standalone mode and gpudoctor.cli.root.run treat it like
    click's usage errors. The message may quote outside content (paths, values from snapshots and
    reports): show() escapes its control characters, so it stays one line."""

    exit_code = 2

    def show(self, file: IO[Any] | None = None) -> None:
        from ..escaping import printable

        try:
            click.echo(f"gpudoctor: error: {printable(self.message)}", file=file, err=file is None)
        except (OSError, ValueError):
            pass  # stderr cannot take it: the exit status still says
