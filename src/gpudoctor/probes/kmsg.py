"""Kernel log: the NVIDIA driver's messages of the current boot, where the log is readable.

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

probes/kernel_messages.py matches the lines: Xids and NVLink training failures, NVSwitch SXids,
API mismatches, RmInitAdapter failures, GPUs the driver does not support or ignores, invalid PCI
BARs and refused module signatures, each counted per GPU (bus id) where the line names one. In
/dev/kmsg a message printed over several lines is one record whose line breaks are escaped as
``\\x0a`` (the kernel's Documentation/ABI/testing/dev-kmsg: non-printable characters are escaped
"\\xff"-style); it is split back into lines here.
"""

from __future__ import annotations

import errno
import os
import stat
import time
from typing import Any

from ..context import ProbeContext
from ..facts import Unavailable
from ..lazy_re import LazyPattern
from . import kernel_messages
from .files import open_fd, unavailable_from_oserror

KMSG = "/dev/kmsg"
LOG_FILES = ("/var/log/kern.log", "/var/log/messages", "/var/log/syslog")

# The kernel's printk ring buffer is at most a few MiB; syslog files can be huge, and only
# their tail (the current boot) matters.
MAX_KMSG_BYTES = 32 << 20
MAX_LOG_TAIL = 16 << 20
MAX_LINE = kernel_messages.MAX_LINE

_SYSLOG_KERNEL = LazyPattern(r" kernel:\s*(?:\[\s*(?P<uptime>\d{1,10}\.\d{1,9})\]\s?)?")
_BOOT_BANNER = LazyPattern(r"kernel:(?:\s*\[\s*0\.0+\])?\s*Linux version \d")


def _parse_kmsg_record(record: str, log: kernel_messages.KernelLog) -> None:
    # "6,1234,5678901,-;NVRM: Xid (PCI:0000:3b:00): 79, ..." ; continuation lines start with a space.
    # A message printed with line breaks is one record with each break escaped as \x0a.
    header, sep, message = record.partition(";")
    if not sep:
        return
    fields = header.split(",")
    seconds = None
    if len(fields) >= 3 and fields[2].isdecimal() and len(fields[2]) <= 20:
        seconds = int(fields[2]) / 1e6
    for line in message[: 4 * MAX_LINE].split("\\x0a"):
        log.feed(line, seconds)


def _read_kmsg(ctx: ProbeContext) -> dict[str, list[dict[str, Any]]] | Unavailable:
    path = ctx.path(KMSG)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        # Under a root that is not the live machine only a regular file is opened: a dev/kmsg
        # device node in an image is this machine's kernel log, not the image's.
        fd = open_fd(ctx, KMSG, flags)
    except (OSError, ValueError) as exc:
        return unavailable_from_oserror(path, exc)
    log = kernel_messages.KernelLog()
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
                    _parse_kmsg_record(line, log)
            return log.result()
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
            _parse_kmsg_record(record.decode("utf-8", "replace").split("\n", 1)[0], log)
    except OSError as exc:
        return unavailable_from_oserror(path, exc)
    finally:
        os.close(fd)
    return log.result()


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


def parse_syslog(text: str) -> dict[str, list[dict[str, Any]]] | None:
    """The driver's messages of the current boot in a syslog-format text, as the kernel_log
    lists; None when it has no kernel lines."""
    lines = text.splitlines()
    kernel_lines = [i for i, line in enumerate(lines) if " kernel:" in line[:MAX_LINE]]
    if not kernel_lines:
        return None
    start = 0
    for i in kernel_lines:
        if _BOOT_BANNER.search(lines[i], 0, MAX_LINE):
            start = i
    log = kernel_messages.KernelLog()
    for line in lines[start:]:
        line = line[:MAX_LINE]
        kernel = _SYSLOG_KERNEL.search(line)
        if kernel:
            uptime = kernel.group("uptime")
            log.feed(line[kernel.end():], float(uptime) if uptime else None)
        elif "Key was rejected" in line:  # modprobe or systemd-modules-load in the journal
            log.feed(line, None)
    return log.result()


def collect(ctx: ProbeContext) -> dict[str, Any]:
    problems: list[Unavailable] = []
    found = _read_kmsg(ctx)
    if not isinstance(found, Unavailable):
        return {"source": KMSG, **found}
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
        return {"source": name, **parsed}
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
    return {"source": missing, **{name: missing for name in kernel_messages.LISTS}}
