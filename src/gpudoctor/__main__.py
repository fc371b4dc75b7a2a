"""`gpudoctor` and `python -m gpudoctor`: the console entry point.

NVML's probe (a child process, about 90 ms of import, init and first calls on a 2 x H200 host)
is started before click is even imported, when the command line asks for a live probe, so its
start-up overlaps the parsing; see gpudoctor.probes.nvml.prestart.
"""

from __future__ import annotations

import sys


def main() -> None:
    from .probes import nvml

    nvml.prestart(sys.argv[1:])
    from .cli import entry

    entry()


if __name__ == "__main__":
    main()
