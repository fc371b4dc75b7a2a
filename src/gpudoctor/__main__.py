"""`gpudoctor` and `python -m gpudoctor`: the console entry point.

NVML's probe (a child process, about 90 ms of import, init and first calls on a 2 x H200 host)
is started before click is even imported, when the command registry says the command line will
probe this machine (gpudoctor.cli.registry.probes_early), so its start-up overlaps the parsing;
see gpudoctor.probes.nvml.prestart.

The first step installs the stop-signal handlers (gpudoctor.children.stopping): from then on SIGINT,
SIGTERM and SIGHUP kill every child gpudoctor started and end it with status 128 + the signal,
without a traceback; a Ctrl-C that comes even earlier, while the handlers are being installed,
ends it the same way.
"""

from __future__ import annotations

import sys


def main() -> None:
    try:
        from .children import stopping

        stopping.install_handlers()
        from .cli.registry import probes_early

        if probes_early(sys.argv[1:]):
            from .probes import nvml

            nvml.prestart()
        from .cli.root import entry
    except BaseException as exc:
        loaded = sys.modules.get(f"{__package__}.children.stopping")
        stop = loaded.stop_in(exc) if loaded is not None else exc if isinstance(exc, KeyboardInterrupt) else None
        if stop is None:
            raise
        _stopped_early(stop)
    entry()


def _stopped_early(exc: BaseException) -> None:
    """A stop signal before the command line was even parsed: kill what was started, exit quietly."""
    import os

    # a KeyboardInterrupt: Ctrl-C before the handlers were installed (SIGINT is 2 everywhere)
    signo = 2 if isinstance(exc, KeyboardInterrupt) else getattr(exc, "signo", None)
    if signo is None:
        raise exc  # a SystemExit of someone else's: not ours to turn into a status
    stopping = sys.modules.get(f"{__package__}.children.stopping")
    line = "gpudoctor: interrupted"
    if stopping is not None:
        signo = stopping.settle() or signo  # blocks further signals; kills what was registered
        line = stopping.describe(signo)
    nvml = sys.modules.get(f"{__package__}.probes.nvml")
    if nvml is not None:
        nvml.discard_prestarted()
    try:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
    os._exit(128 + signo)


if __name__ == "__main__":
    main()
