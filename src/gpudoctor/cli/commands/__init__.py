"""The CLI's commands, one module each, loaded lazily by the root group (gpudoctor.cli.root)
from the registry (gpudoctor.cli.registry).

Each module exposes `command` (a click.Command whose help starts with its registry summary) and
is listed in gpudoctor.cli.registry.COMMANDS. Commands parse, call and render; the logic lives
in advice/, preflight/, bench/ and so on. They may import gpudoctor.cli's options, load, output,
errors and registry, and every layer below; never gpudoctor.cli.root, nor each other.
"""
