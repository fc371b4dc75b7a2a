"""``python -m gpudoctor.probes.nvml PLAN_JSON``: the NVML child where gpudoctor cannot fork
(see gpudoctor.probes.nvml.child); it writes its events on stdout."""

from __future__ import annotations

import sys

from .child import spawned_main

if __name__ == "__main__":
    raise SystemExit(spawned_main(sys.argv[1:]))
