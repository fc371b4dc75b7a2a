"""The garbage collector paused while the engine builds or judges many objects at once.

Loading 10 000 rules or judging them on 512 GPUs allocates millions of objects that all live on
(compiled rules, findings): CPython's collector, triggered by allocation counts, then walks every
one of them again and again without freeing anything (12 full collections were 2.8 s of a
10 000 rules x 8 GPUs run). :func:`paused` turns it off for such a step and back on after it,
however the step ends; the cycles the step leaves are collected by the next collection after it.
Nested uses leave it to the outermost, and a collector the caller turned off stays off.
"""

from __future__ import annotations

import contextlib
import gc
from typing import Iterator


@contextlib.contextmanager
def paused() -> Iterator[None]:
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
