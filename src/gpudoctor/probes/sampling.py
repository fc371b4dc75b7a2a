"""``--sample SECONDS``: the second read of the error counters in the same run, and the
counter_rates section built from both reads (model/counter_rates.py).

NVLink: the NVML child read each GPU's links again SECONDS after its first read (probes/nvml/
resample.py); here its answers are taken as they came. RDMA: the port counters under
``/sys/class/infiniband`` are read again (probes/rdma.py, through the context root) once SECONDS
have passed since the rdma probe ran, within the run's deadline: a wait that would pass it is
cut short, and the seconds actually between the reads are what the rate is computed over.
"""

from __future__ import annotations

import time
from typing import Any, Mapping

from ..context import ProbeContext
from ..facts import Unavailable
from ..model.counter_rates import from_samples
from . import rdma


def sample_rates(
    ctx: ProbeContext,
    sections: Mapping[str, Any],
    nvml_samples: Mapping[int, Any] | Unavailable | None,
    rdma_read_at: float | None,
) -> dict[str, Any]:
    nvlink_later: Mapping[int, Any] | Unavailable
    nvlink_seconds: dict[int, float] = {}
    if nvml_samples is None:
        nvlink_later = Unavailable("error", "the NVML child did not run")
    elif isinstance(nvml_samples, Unavailable):
        nvlink_later = nvml_samples
    else:
        nvlink_later = {index: value for index, (value, _s) in nvml_samples.items()}
        nvlink_seconds = {index: s for index, (_v, s) in nvml_samples.items()}
    rdma_later: Mapping[str, Any] | Unavailable
    rdma_seconds: float | Unavailable
    if rdma_read_at is None or not isinstance(sections.get("rdma"), Mapping):
        rdma_later = rdma_seconds = Unavailable("error", "the rdma probe did not run")
    else:
        wait = min(rdma_read_at + ctx.sample_s - time.monotonic(), ctx.remaining())
        if wait > 0:
            time.sleep(wait)
        rdma_later = rdma.collect(ctx)
        rdma_seconds = round(time.monotonic() - rdma_read_at, 3)
    return from_samples(sections, nvlink_later, nvlink_seconds, rdma_later, rdma_seconds, ctx.sample_s)
