"""``--sample SECONDS`` in the NVML child: after the first read, wait until SECONDS have passed
since each GPU's NVLink counters were read, then read them again (nvmlDeviceGetHandleByIndex,
nvmlDeviceGetNvLinkErrorCounter for every link that was active, through the same Query wrapper,
so a hang names the call). Each second read goes to the parent as a ``sample`` event {index,
value, seconds}. Runs in the child, inside its one deadline (the parent grew it by SECONDS).
"""

from __future__ import annotations

import time
from typing import Any

from ...facts import Unavailable
from .fields import GpuReader, nvlink_link_errors
from .query import Query


class FirstRead:
    """A sink that passes every event on and notes, per GPU, when and which links the first read of
    nvlink_link_errors found (GPU threads call it concurrently: one dict write each)."""

    def __init__(self, sink: Any) -> None:
        self.sink = sink
        self.links: dict[int, tuple[list[int], float]] = {}

    def gpu(self, index: int, key: str, value: Any) -> None:
        if key == "nvlink_link_errors" and isinstance(value, list):
            self.links[index] = ([int(entry["link"]) for entry in value], time.monotonic())
        self.sink.gpu(index, key, value)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.sink, name)


def read_again(nv: Any, sink: Any, first: FirstRead, seconds: float) -> None:
    """The second read of every GPU whose first read had NVLink counters."""
    if not first.links:
        return
    earliest = min(at for _links, at in first.links.values())
    wait = earliest + seconds - time.monotonic()
    if wait > 0:
        sink.calling(f"waiting {seconds:g} s between the two reads of the NVLink counters (--sample)", None)
        time.sleep(wait)
    q = Query(nv, sink)
    for index, (links, at) in sorted(first.links.items()):
        handle = q.call("nvmlDeviceGetHandleByIndex", index, gpu=index)
        value: Any
        if isinstance(handle, Unavailable):
            value = handle
        else:
            value = nvlink_link_errors(GpuReader(q, sink, index, handle), links)
        sink.sample(index, value, round(max(time.monotonic() - at, 1e-6), 6))
        sink.gpu_done(index)
