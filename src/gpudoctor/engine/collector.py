"""The garbage collector paused while the engine builds or judges many objects at once.

Loading 10 000 rules or judging them on 512 GPUs allocates millions of objects that all live on
(compiled rules, findings): CPython's collector, triggered by allocation counts, then walks every
one of them again and again without freeing anything (12 full collections were 2.8 s of a
10 000 rules x 8 GPUs run). :func:`paused` turns it off for such a step and back on after it,
however the step ends. Nested uses leave it to the outermost, and a collector the caller turned
off stays off.

Turned back on, the collector would still walk, once, everything the step allocated: all of it
is in its youngest generation, so the first allocation after the step starts a collection of it
(0.8 s after loading 10 000 rules, and 1.5 s more when those survivors reached the next
generation during the run). So when a step leaves more than FREEZE_FROM new objects, they are
moved to the collector's permanent generation first (gc.freeze), which it never walks. The price:
a reference cycle that was already garbage at that moment is not freed until the process ends.
The engine leaves none by design (tests/engine/test_engine_cost.py counts them), and a step that
large is the whole of a command's work (a CLI process, which then exits); smaller steps (the
built-in rules leave about 20 000 objects) are left to the collector as before.
"""

from __future__ import annotations

import contextlib
import gc
from typing import Iterator

# New objects a step may leave before they are frozen rather than collected (see the docstring):
# above the built-in rules' load (about 20 000), below 1 000 rules' (about 160 000).
FREEZE_FROM = 100_000


@contextlib.contextmanager
def paused() -> Iterator[None]:
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            if gc.get_count()[0] > FREEZE_FROM:
                gc.freeze()
            gc.enable()
