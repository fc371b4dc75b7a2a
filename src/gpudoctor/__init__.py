"""gpudoctor: environment doctor and setup validator for GPU machines.

The package root holds ``__version__`` and the Python API for job scripts
(``from gpudoctor import gate, GateFailed``), handed out from gpudoctor.preflight on first use.
It imports nothing at import time, so ``import gpudoctor`` and every command's start-up stay
cheap; the layers below it are described in docs/architecture.md.
"""

from __future__ import annotations

# Not typing.TYPE_CHECKING: importing typing costs about 4 ms of start-up, inside the window in
# which a Ctrl-C comes before gpudoctor's handler (type checkers treat this name as True).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__version__ = "0.1.0"

# The Python API for job scripts, imported on first use so that `import gpudoctor` (and every
# CLI command) stays cheap: `from gpudoctor import gate, GateFailed`.
_LAZY = {
    "gate": ("preflight.api", "gate"),
    "GateFailed": ("preflight.verdict", "GateFailed"),
    "GateError": ("preflight.errors", "GateError"),
    "GateReport": ("preflight.verdict", "GateReport"),
    "Policy": ("preflight.policy", "Policy"),
}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    module_name, attribute = _LAZY[name]
    value = getattr(importlib.import_module(f"{__name__}.{module_name}"), attribute)
    globals()[name] = value
    return value
