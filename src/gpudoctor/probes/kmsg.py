"""Kernel log: the NVIDIA driver's Xid events of the current boot, where the log is readable.

Reads (through the context root), the first source that answers:

- ``/dev/kmsg``, opened non-blocking and read record by record until the kernel says there
  is no more (EAGAIN), so it cannot hang; it holds what the ring buffer still has of this
  boot. Reading it needs CAP_SYSLOG when ``kernel.dmesg_restrict`` is 1 (the default on
  Ubuntu and RHEL). Under a fixture root it is a regular file of the same records.
- ``/var/log/kern.log``, ``/var/log/messages``, ``/var/log/syslog``: the last 16 MiB, and only
  the lines after the last boot banner ("Linux version ..."), so Xids of earlier boots are not
  reported as current. A file without kernel lines (a container image's own syslog) is no source.

Binary journal files are not read. Containers normally see none of these: the section is then
``not_supported`` (no kernel log here), while a log that exists but may not be read is
``no_permission``.

An Xid line reads ``NVRM: Xid (PCI:0000:3b:00): 79, pid=..., GPU has fallen off the bus.``
(older drivers omit "PCI:"); the probe counts them per GPU and code and keeps the last message.
"""

from __future__ import annotations

import errno
import os
import re
import stat
import time
from typing import Any

from ..context import ProbeContext
from ..facts import Unavailable
from ..model.bus_ids import normalise_bus_id
from .files import open_fd, unavailable_from_oserror

KMSG = "/dev/kmsg"
LOG_FILES = ("/var/log/kern.log", "/var/log/messages", "/var/log/syslog")

# The kernel's printk ring buffer is at most a few MiB; syslog files can be huge, and only
# their tail (the current boot) matters.
MAX_KMSG_BYTES = 32 << 20
MAX_LOG_TAIL = 16 << 20
MAX_ENTRIES = 64
MAX_MESSAGE = 160
# A printk record is at most about 1 KiB (PRINTK_MESSAGE_MAX); only so much of a line is searched.
MAX_LINE = 4096

_XID = re.compile(
    r"NVRM: Xid \((?:PCI:)?(?P<bus>(?:[0-9A-Fa-f]{4}:)?[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2})(?:\.\d)?\): "
    r"(?P<code>\d+),\s*(?P<text>.*)"
)
_SYSLOG_UPTIME = re.compile(r"kernel:\s*\[\s*(\d+\.\d+)\]")
_BOOT_BANNER = re.compile(r"kernel:(?:\s*\[\s*0\.0+\])?\s*Linux version \d")


class _Xids:
    """Xid lines counted per (GPU, code), keeping the last message and when it came."""

    def __init__(self) -> None:
        self.entries: dict[tuple[str, int], dict[str, Any]] = {}

    def add(self, line: str, seconds: float | None) -> None:
        match = _XID.search(line, 0, MAX_LINE)
        if not match:
            return
        key = (normalise_bus_id(match.group("bus") + ".0"), int(match.group("code")))  # very old drivers: bus:device
        entry = self.entries.get(key)
        if entry is None:
            if len(self.entries) >= MAX_ENTRIES:
                return
            entry = self.entries[key] = {"bus_id": key[0], "code": key[1], "count": 0}
        entry["count"] += 1
        text = match.group("text").strip()
        entry["message"] = text if len(text) <= MAX_MESSAGE else text[: MAX_MESSAGE - 3] + "..."
        if seconds is not None:
            entry["seconds_after_boot"] = round(seconds, 1)

    def result(self) -> list[dict[str, Any]]:
        return [self.entries[k] for k in sorted(self.entries)]


def _parse_kmsg_record(record: str, xids: _Xids) -> None:
    # "6,1234,5678901,-;NVRM: Xid (PCI:0000:3b:00): 79, ..." ; continuation lines start with a space
    header, sep, message = record.partition(";")
    if not sep:
        return
    fields = header.split(",")
    seconds = None
    if len(fields) >= 3 and fields[2].isdecimal():
        seconds = int(fields[2]) / 1e6
    xids.add(message, seconds)


def _read_kmsg(ctx: ProbeContext) -> list[dict[str, Any]] | Unavailable:
    path = ctx.path(KMSG)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        # Under a root that is not the live machine only a regular file is opened: a dev/kmsg
        # device node in an image is this machine's kernel log, not the image's.
        fd = open_fd(ctx, KMSG, flags)
    except (OSError, ValueError) as exc:
        return unavailable_from_oserror(path, exc)
    xids = _Xids()
    total = 0
    deadline = time.monotonic() + max(0.05, min(2.0, ctx.remaining()))
    try:
        if stat.S_ISREG(os.fstat(fd).st_mode):
            # A captured record file: read it whole (bounded) and split into records.
            chunks = []
            while total < MAX_KMSG_BYTES:
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    break
                chunks.append(chunk)
                total += len(chunk)
            for line in b"".join(chunks).decode("utf-8", "replace").splitlines():
                if line and not line.startswith(" "):
                    _parse_kmsg_record(line, xids)
            return xids.result()
        # The character device returns one record per read and EAGAIN at the end.
        while total < MAX_KMSG_BYTES and time.monotonic() < deadline:
            try:
                record = os.read(fd, 8192)
            except BlockingIOError:
                break
            except OSError as exc:
                if exc.errno == errno.EPIPE:  # a record was overwritten while reading: go on
                    continue
                if exc.errno == errno.EAGAIN:
                    break
                return unavailable_from_oserror(path, exc)
            if not record:
                break
            total += len(record)
            _parse_kmsg_record(record.decode("utf-8", "replace").split("\n", 1)[0], xids)
    except OSError as exc:
        return unavailable_from_oserror(path, exc)
    finally:
        os.close(fd)
    return xids.result()


def _read_tail(ctx: ProbeContext, absolute: str) -> str | Unavailable:
    path = ctx.path(absolute)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = open_fd(ctx, absolute, flags)
    except (OSError, ValueError) as exc:
        return unavailable_from_oserror(path, exc)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return Unavailable("not_supported", f"{path} is not a regular file")
        start = max(0, info.st_size - MAX_LOG_TAIL)
        os.lseek(fd, start, os.SEEK_SET)
        chunks = []
        remaining = info.st_size - start
        while remaining > 0:
            chunk = os.read(fd, min(1 << 20, remaining))
            if not chunk:
                break
            chunks.append(chunk)
            remaining -= len(chunk)
    except OSError as exc:
        return unavailable_from_oserror(path, exc)
    finally:
        os.close(fd)
    text = b"".join(chunks).decode("utf-8", "replace")
    if start > 0:
        text = text.split("\n", 1)[-1]  # the first line was cut by the seek
    return text


def parse_syslog(text: str) -> list[dict[str, Any]] | None:
    """Xid entries of the current boot in a syslog-format text; None when it has no kernel lines."""
    lines = text.splitlines()
    kernel_lines = [i for i, line in enumerate(lines) if " kernel:" in line]
    if not kernel_lines:
        return None
    start = 0
    for i in kernel_lines:
        if _BOOT_BANNER.search(lines[i], 0, MAX_LINE):
            start = i
    xids = _Xids()
    for line in lines[start:]:
        if "NVRM: Xid" not in line:
            continue
        uptime = _SYSLOG_UPTIME.search(line, 0, MAX_LINE)
        xids.add(line, float(uptime.group(1)) if uptime else None)
    return xids.result()


def collect(ctx: ProbeContext) -> dict[str, Any]:
    problems: list[Unavailable] = []
    found = _read_kmsg(ctx)
    if not isinstance(found, Unavailable):
        return {"source": KMSG, "xids": found}
    problems.append(found)
    for name in LOG_FILES:
        text = _read_tail(ctx, name)
        if isinstance(text, Unavailable):
            problems.append(text)
            continue
        parsed = parse_syslog(text)
        if parsed is None:
            problems.append(Unavailable("not_found", f"{ctx.path(name)} has no kernel messages"))
            continue
        return {"source": name, "xids": parsed}
    denied = [p for p in problems if p.reason == "no_permission"]
    if denied:
        missing: Unavailable = Unavailable(
            "no_permission",
            "; ".join(p.detail for p in denied)
            + " (kernel.dmesg_restrict: run as root, with CAP_SYSLOG, or in the adm/systemd-journal group)",
        )
    elif all(p.reason == "not_found" for p in problems):
        missing = Unavailable(
            "not_supported",
            f"no kernel log here: no {KMSG} and no {', '.join(LOG_FILES)} with kernel messages "
            "(usual inside containers)",
        )
    else:
        odd = [p for p in problems if p.reason != "not_found"]
        missing = Unavailable(odd[0].reason, "; ".join(p.detail for p in odd))
    return {"source": missing, "xids": missing}
