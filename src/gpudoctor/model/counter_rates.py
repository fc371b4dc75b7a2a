"""Counter rates: how fast the NVLink and RDMA error counters grew between two reads.

Both reads are facts: a previous snapshot and this run's (``--previous FILE``), or this run's two
reads SECONDS apart (``--sample SECONDS``). The counters count since the driver loaded, so two
reads compare only within one boot, for one GPU (by UUID) or one RDMA port (device and port
number, and the device's node GUID where both reads have it); a counter that went down was reset
(driver reload, counters cleared) and gives no rate. Nothing is judged here: the rules
(rules/nvlink.yaml, rules/rdma.yaml) hold the thresholds.

The section (facts.schema.json ``counter_rates``)::

    {"source": "previous" | "sample", "seconds": 600.0 | unavailable,
     "nvlink": [{"index", "uuid", "bus_id", "seconds",
                 "rates": [{"link", "counter", "before", "after", "delta", "per_hour", "reset"}]
                          | unavailable}] | unavailable,
     "rdma":   [{"device", "port", "bus_id", "node_guid", "seconds",
                 "rates": [{"counter", "before", "after", "delta", "per_hour", "reset"}]
                          | unavailable}] | unavailable}

A pure function of its arguments, in the base layer: the CLI and the gate build the section
(:func:`from_previous`, :func:`from_samples`) and add it to the facts before the rules run.
"""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any, Callable, Mapping, Sequence

from ..facts import Unavailable

NVLINK_COUNTERS = ("replay", "recovery", "crc_flit", "crc_data")
RDMA_COUNTERS = ("link_downed", "symbol_error", "port_rcv_errors", "excessive_buffer_overrun_errors")
# Entries compared at most (a snapshot holds at most 64 GPUs' worth of links and 1024 x 64 ports).
MAX_GPUS = 1024
MAX_PORTS = 4096
# Two reads of one boot agree on the kernel's start time (collected_at - uptime) within this much:
# collected_at has whole seconds, and uptime and the clock are read a moment apart.
BOOT_TOLERANCE_S = 5.0
SECONDS_PER_HOUR = 3600.0


def _section(facts: Mapping[str, Any], name: str) -> Mapping[str, Any] | None:
    value = facts.get(name)
    return value if isinstance(value, Mapping) else None


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def _collected_at(facts: Mapping[str, Any]) -> datetime | None:
    meta = _section(facts, "meta")
    text = meta.get("collected_at") if meta else None
    if not isinstance(text, str) or len(text) > 64:
        return None
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        return None
    return when if when.tzinfo is not None else None


def same_boot(previous: Mapping[str, Any], current: Mapping[str, Any]) -> Unavailable | None:
    """None when both snapshots are of this boot; else why they cannot be compared (not_supported:
    there is nothing to compare, which the gate does not hold against the node)."""
    host_prev, host_now = _section(previous, "host") or {}, _section(current, "host") or {}
    boot_prev, boot_now = host_prev.get("boot_id"), host_now.get("boot_id")
    if isinstance(boot_prev, str) and isinstance(boot_now, str):
        if boot_prev != boot_now:
            return Unavailable(
                "not_supported",
                f"the previous snapshot is of another boot (boot id {boot_prev[:36]}, now {boot_now[:36]}): "
                "the counters started again at boot",
            )
        return None
    start_prev, start_now = _kernel_start(previous), _kernel_start(current)
    if start_prev is None or start_now is None:
        return Unavailable(
            "not_supported",
            "the previous snapshot has no boot id and no uptime with its time (written by an older gpudoctor?), "
            "so it cannot be told to be of this boot",
        )
    if abs(start_prev - start_now) > BOOT_TOLERANCE_S:
        return Unavailable(
            "not_supported",
            f"the previous snapshot is of another boot (the kernel started {abs(start_prev - start_now):.0f} s "
            "apart): the counters started again at boot",
        )
    return None


def _kernel_start(facts: Mapping[str, Any]) -> float | None:
    when = _collected_at(facts)
    uptime = _number((_section(facts, "host") or {}).get("uptime_s"))
    if when is None or uptime is None:
        return None
    return when.timestamp() - uptime


def elapsed(previous: Mapping[str, Any], current: Mapping[str, Any]) -> float | Unavailable:
    """Seconds between two snapshots of one boot: the uptimes' difference where both have one
    (a clock that jumps does not move it), else the difference of their collected_at."""
    up_prev = _number((_section(previous, "host") or {}).get("uptime_s"))
    up_now = _number((_section(current, "host") or {}).get("uptime_s"))
    seconds: float | None = None
    if up_prev is not None and up_now is not None:
        seconds = up_now - up_prev
    else:
        t_prev, t_now = _collected_at(previous), _collected_at(current)
        if t_prev is not None and t_now is not None:
            seconds = (t_now - t_prev).total_seconds()
    if seconds is None:
        return Unavailable("not_supported", "the previous snapshot says neither its uptime nor when it was read")
    if seconds <= 0:
        return Unavailable("error", f"the previous snapshot is not older than this run ({seconds:.0f} s)")
    return round(seconds, 3)


def counter_rate(counter: str, before: Any, after: Any, seconds: float) -> dict[str, Any] | None:
    """One counter's entry, or None where either read is not a count."""
    if not isinstance(before, int) or not isinstance(after, int) or isinstance(before, bool) or isinstance(after, bool):
        return None
    entry: dict[str, Any] = {"counter": counter, "before": before, "after": after}
    if after < before:
        entry["delta"] = after - before
        entry["per_hour"] = Unavailable("not_supported", f"went down from {before} to {after}: the counter was reset")
        entry["reset"] = True
    else:
        entry["delta"] = after - before
        entry["per_hour"] = round((after - before) * SECONDS_PER_HOUR / seconds, 3)
        entry["reset"] = False
    return entry


def _gpus(facts: Mapping[str, Any]) -> list[Mapping[str, Any]] | Unavailable:
    nvml = _section(facts, "nvml")
    if nvml is None:
        return Unavailable("not_found", "no nvml section")
    gpus = nvml.get("gpus")
    if isinstance(gpus, Unavailable):
        return gpus
    if not isinstance(gpus, list):
        return Unavailable("not_found", f"NVML listed no GPUs (status {str(nvml.get('status'))[:40]})")
    return [g for g in gpus[:MAX_GPUS] if isinstance(g, Mapping)]


def nvlink_rates(
    before: Sequence[Mapping[str, Any]], after: Sequence[Mapping[str, Any]], seconds: float | Unavailable
) -> list[dict[str, Any]]:
    """Per GPU of `after` (NVML GPU entries), the growth of each active link's counters since
    the GPU of `before` with the same UUID."""
    by_uuid = {g.get("uuid"): g for g in before if isinstance(g.get("uuid"), str)}
    return [_gpu_entry(by_uuid.get(gpu.get("uuid")), gpu, seconds) for gpu in after]


def _gpu_entry(old: Mapping[str, Any] | None, new: Mapping[str, Any], seconds: float | Unavailable) -> dict[str, Any]:
    return {
        "index": new.get("index"),
        "uuid": new.get("uuid"),
        "bus_id": new.get("bus_id"),
        "seconds": seconds,
        "rates": _link_rates(old, new, seconds),
    }


def _link_rates(old: Mapping[str, Any] | None, new: Mapping[str, Any], seconds: float | Unavailable) -> Any:
    if isinstance(seconds, Unavailable):
        return seconds
    now = new.get("nvlink_link_errors")
    if isinstance(now, Unavailable):
        return now
    if not isinstance(now, list):
        return Unavailable("not_supported", "these facts have no per-link NVLink counters (an older snapshot?)")
    if old is None:
        return Unavailable("not_supported", "the previous read has no GPU with this UUID (another GPU, or it was lost)")
    then = old.get("nvlink_link_errors")
    if isinstance(then, Unavailable):
        return Unavailable(then.reason, f"the previous read: {then.detail}")
    if not isinstance(then, list):
        return Unavailable(
            "not_supported", "the previous snapshot has no per-link NVLink counters (written by an older gpudoctor?)"
        )
    then_by_link = {e.get("link"): e for e in then if isinstance(e, Mapping)}
    rates: list[dict[str, Any]] = []
    for link in now:
        if not isinstance(link, Mapping) or link.get("link") not in then_by_link:
            continue  # a link that was not up at the previous read: nothing to compare
        previous = then_by_link[link.get("link")]
        for counter in NVLINK_COUNTERS:
            rate = counter_rate(counter, previous.get(counter), link.get(counter), seconds)
            if rate is not None:
                rates.append({"link": link.get("link"), **rate})
    return rates


def _ports(facts: Mapping[str, Any]) -> list[tuple[Mapping[str, Any], Mapping[str, Any]]] | Unavailable:
    rdma = _section(facts, "rdma")
    if rdma is None:
        return Unavailable("not_found", "no rdma section")
    devices = rdma.get("devices")
    if isinstance(devices, Unavailable):
        return devices
    out: list[tuple[Mapping[str, Any], Mapping[str, Any]]] = []
    for device in devices if isinstance(devices, list) else []:
        if not isinstance(device, Mapping):
            continue
        ports = device.get("ports")
        for port in ports if isinstance(ports, list) else []:
            if isinstance(port, Mapping) and len(out) < MAX_PORTS:
                out.append((device, port))
    return out


def rdma_rates(
    before: Sequence[tuple[Mapping[str, Any], Mapping[str, Any]]],
    after: Sequence[tuple[Mapping[str, Any], Mapping[str, Any]]],
    seconds: float | Unavailable,
) -> list[dict[str, Any]]:
    """Per RDMA port of `after` ((device, port) pairs), the growth of its error counters since
    the same port (device name and port number, same node GUID where both have one) of `before`."""
    by_key = {(d.get("name"), p.get("port")): (d, p) for d, p in before}
    out: list[dict[str, Any]] = []
    for device, port in after:
        entry: dict[str, Any] = {
            "device": device.get("name"),
            "port": port.get("port"),
            "bus_id": device.get("bus_id"),
            "node_guid": device.get("node_guid"),
            "seconds": seconds,
        }
        entry["rates"] = _port_rates(by_key.get((device.get("name"), port.get("port"))), device, port, seconds)
        out.append(entry)
    return out


def _port_rates(
    old: tuple[Mapping[str, Any], Mapping[str, Any]] | None,
    device: Mapping[str, Any],
    port: Mapping[str, Any],
    seconds: float | Unavailable,
) -> Any:
    if isinstance(seconds, Unavailable):
        return seconds
    if old is None:
        return Unavailable("not_supported", "the previous read has no such port")
    old_device, old_port = old
    guid_then, guid_now = old_device.get("node_guid"), device.get("node_guid")
    if isinstance(guid_then, str) and isinstance(guid_now, str) and guid_then != guid_now:
        return Unavailable(
            "not_supported", f"another NIC under this name (node GUID {guid_then[:19]}, now {guid_now[:19]})"
        )
    then, now = old_port.get("counters"), port.get("counters")
    if not isinstance(now, Mapping):
        return Unavailable("not_found", "this run has no counters for the port")
    if not isinstance(then, Mapping):
        return Unavailable("not_supported", "the previous read has no counters for the port")
    rates = []
    for counter in RDMA_COUNTERS:
        rate = counter_rate(counter, then.get(counter), now.get(counter), seconds)
        if rate is not None:
            rates.append(rate)
    return rates


def from_previous(previous: Mapping[str, Any], current: Mapping[str, Any]) -> dict[str, Any]:
    """The counter_rates section for ``--previous``: `current` compared with `previous`."""
    problem = same_boot(previous, current)
    seconds: float | Unavailable = problem if problem is not None else elapsed(previous, current)
    section: dict[str, Any] = {"source": "previous", "seconds": seconds}
    if isinstance(seconds, Unavailable):
        section["nvlink"] = section["rdma"] = seconds
        return section
    section["nvlink"] = _compared(_gpus(previous), _gpus(current), "NVML GPUs", nvlink_rates, seconds)
    section["rdma"] = _compared(_ports(previous), _ports(current), "RDMA ports", rdma_rates, seconds)
    return section


def _compared(then: Any, now: Any, what: str, rates: Callable[[Any, Any, float], Any], seconds: float) -> Any:
    """rates(then, now, seconds), or why the two reads' items cannot be compared."""
    if isinstance(now, Unavailable):
        return now
    if isinstance(then, Unavailable):
        return Unavailable("not_supported", f"the previous snapshot has no {what} ({then.detail})")
    return rates(then, now, seconds)


def from_samples(
    current: Mapping[str, Any],
    nvlink_later: Mapping[int, Any] | Unavailable,
    nvlink_seconds: Mapping[int, float],
    rdma_later: Mapping[str, Any] | Unavailable,
    rdma_seconds: float | Unavailable,
    asked_s: float,
) -> dict[str, Any]:
    """The counter_rates section for ``--sample``: this run's facts (the first read) against a
    second read of the counters: ``nvlink_later`` (NVML index -> that GPU's nvlink_link_errors,
    read ``nvlink_seconds[index]`` after its first read) and ``rdma_later`` (a second rdma section,
    ``rdma_seconds`` after the first)."""
    section: dict[str, Any] = {"source": "sample", "seconds": round(asked_s, 3)}
    gpus = _gpus(current)
    if isinstance(gpus, Unavailable):
        section["nvlink"] = gpus
    elif isinstance(nvlink_later, Unavailable):
        section["nvlink"] = nvlink_later
    else:
        entries: list[dict[str, Any]] = []
        for gpu in gpus:
            index = gpu.get("index")
            first = gpu.get("nvlink_link_errors")
            if not isinstance(index, int) or index not in nvlink_later:
                reason = first if isinstance(first, Unavailable) else Unavailable(
                    "not_found", "the second read has no NVLink counters for this GPU"
                )
                entries.append({"index": index, "uuid": gpu.get("uuid"), "bus_id": gpu.get("bus_id"),
                                "seconds": reason, "rates": reason})
                continue
            again = dict(gpu, nvlink_link_errors=nvlink_later[index])
            entries.append(_gpu_entry(gpu, again, nvlink_seconds.get(index, asked_s)))
        section["nvlink"] = entries
    ports = _ports(current)
    if isinstance(ports, Unavailable):
        section["rdma"] = ports
    elif isinstance(rdma_later, Unavailable):
        section["rdma"] = rdma_later
    else:
        ports_later = _ports({"rdma": rdma_later})
        section["rdma"] = (
            ports_later if isinstance(ports_later, Unavailable) else rdma_rates(ports, ports_later, rdma_seconds)
        )
    return section


def load_previous(path: str) -> dict[str, Any]:
    """The snapshot given with ``--previous``, read as ``--facts`` is (gpudoctor.facts.load_snapshot:
    bounded, strict JSON, the schema); SnapshotError for a file that is not one."""
    from ..facts import SnapshotError, load_snapshot

    try:
        return load_snapshot(path)
    except SnapshotError as exc:
        text = str(exc)
        if "no schema_version" in text:
            text += (
                " (a check or gate report holds no counters: give a snapshot, from gpudoctor probe -o FILE)"
            )
        raise SnapshotError(f"--previous: {text}") from None
