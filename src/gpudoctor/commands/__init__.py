"""CLI commands beyond check/probe/rules, one module each, loaded lazily by cli.LazyGroup.

Each module exposes `command` (a click.Command) and is registered in cli.LAZY_COMMANDS.
Commands parse, call and render; the logic lives in advice/, preflight/, bench/ and so on.
"""
