"""Kernel log lines of the NVIDIA driver, NVSwitch driver and module loader, counted into facts.

probes/kmsg.py reads the log (/dev/kmsg or a syslog file, the current boot only) and feeds this
module one line at a time, oldest first. Nothing here reads a file; every pattern is searched in
at most MAX_LINE characters of a line, and every list is bounded (MAX_ENTRIES).

The texts matched, with where each was checked (open-gpu-kernel-modules at tag 595.45.04):

- Xid: ``NVRM: Xid (PCI:0000:3b:00): 79, pid=..., <text>`` (nvErrorLog_va); an NVLink training
  failure is an Xid 74 (NVLINK_ERROR) or 136 (ALI_TRAINING_FAIL, nverror.h) whose text is
  ``NVLink: failed to train link N to remote PCI:DDDD:BB:DD`` (kernel_nvlinkcorelibtrain.c) or
  ``NVLink: Link training failed for link N(...)`` (kernel_nvlink_gh100.c, _gb100.c).
- SXid: ``nvidia-nvswitchN: SXid (PCI:DDDD:BB:DD.F): CODE, Fatal, ...`` or ``..., Non-fatal, ...``
  (NVSWITCH_PRINT_SXID in src/common/nvswitch/kernel/inc/common_nvswitch.h; the severity word
  comes from NVSWITCH_REPORT_FATAL / _NONFATAL in intr_nvswitch.h and error_nvswitch.h); the
  ``CODE, Severity N Engine instance ...`` and ``CODE, Data {...}`` lines that follow an error
  (error_nvswitch.c) are its details, not errors of their own.
- API mismatch (osapi.c, RmCheckVersion's message, printed as several lines):
  ``NVRM: API mismatch: the client 'NAME' (pid N)`` / ``NVRM: has the version X, but this kernel
  module has`` / ``NVRM: the version Y.  Please ...``; drivers before ~R535 printed
  ``the client has the version X, but`` / ``this kernel module has the version Y``.
- ``NVRM: GPU DDDD:BB:DD.F: RmInitAdapter failed! (0xA:0xB:LINE)`` (osinit.c, NV_DEV_PRINTF's
  prefix in os-interface.h); old drivers print it without the ``GPU <bus id>:`` prefix.
- ``NVRM: The NVIDIA GPU DDDD:BB:DD.F (PCI ID: 10de:XXXX)`` / ``installed in this system is not
  supported by the`` / ``NVIDIA <version> driver release.`` (osapi.c, print_unsupported), and in
  the same shape ``... is not supported by open nvidia.ko`` (the open modules on a GPU without GSP).
- ``... installed in this system requires use of the NVIDIA open kernel modules.`` and the legacy
  notice ``The NVIDIA <name> GPU installed in this system is supported through the NVIDIA NNN.xx
  Legacy drivers ... The <version> NVIDIA driver will ignore this GPU.`` are printed only by the
  proprietary RM (their functions are empty in the open source, osapi.c rm_is_legacy_*): matched
  as real logs show them (NVIDIA/open-gpu-kernel-modules and distribution bug reports).
- ``NVRM: This PCI I/O region assigned to your NVIDIA device is invalid:`` / ``NVRM: BARn is NM
  @ 0xADDR (PCI:DDDD:BB:DD.F)`` (kernel-open/nvidia/nv-pci.c).
- Module signatures (Linux kernel/module/signing.c and main.c): ``Loading of unsigned module is
  rejected`` (also ``module with unavailable key`` / ``unsupported crypto``; newer kernels print
  ``MOD: loading of ... is rejected``, and only the nvidia modules' lines count), ``Lockdown: X:
  unsigned module loading is restricted``, ``MOD: module verification failed: signature and/or
  required key missing - tainting kernel`` (loaded, unsigned); from the journal, modprobe's and
  systemd-modules-load's ``... 'nvidia': Key was rejected by service``.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Optional, Tuple

from ..lazy_re import LazyPattern
from ..model.bus_ids import normalise_bus_id

MAX_ENTRIES = 64
MAX_MESSAGE = 160
# A printk record is at most about 1 KiB (PRINTK_MESSAGE_MAX); only so much of a line is searched.
MAX_LINE = 4096
# A multi-line driver message is read over its first line and at most this many more.
CONTINUATION_LINES = 6

# Compiled when first used (gpudoctor.lazy_re): the 17 patterns took 5 ms of every start-up,
# while a healthy log reaches only the few that its lines' prefilters (feed: "NVRM", "SXid",
# "module") let through.
_BUS = r"(?:[0-9A-Fa-f]{4}:)?[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-7])?"
_VERSION = r"\d{1,4}(?:\.\d{1,4}){1,3}"

_XID = LazyPattern(rf"NVRM: Xid \((?:PCI:)?(?P<bus>{_BUS})\): (?P<code>\d{{1,6}}),\s*(?P<text>.*)")
_NVLINK_TRAINING = LazyPattern(
    r"NVLink: (?:[Ff]ailed to train link (?P<link>\d{1,3}) to remote PCI:(?P<remote>"
    + _BUS
    + r")|Link training failed for links? (?P<links>[0-9A-Fa-fx]{1,40}))"
)
_SXID = LazyPattern(
    rf"nvidia-(?P<switch>nvswitch\d{{1,4}}): SXid \(PCI:(?P<bus>{_BUS})\): (?P<code>\d{{1,6}}),\s*(?P<text>.*)"
)
_API_MISMATCH_START = LazyPattern(r"NVRM: API mismatch: the client")
_API_MISMATCH = LazyPattern(
    rf"API mismatch: the client (?:'(?P<client>[^']{{0,64}})' \(pid \d{{1,10}}\) )?has the version "
    rf"(?P<client_version>{_VERSION}), but this kernel module has the version (?P<kernel_version>{_VERSION})"
)
_RM_INIT = LazyPattern(
    rf"NVRM: (?:GPU (?P<bus>{_BUS}): )?RmInitAdapter failed! "
    r"\((?P<code>0x[0-9A-Fa-f]{1,8}:0x[0-9A-Fa-f]{1,8}:\d{1,6})\)"
)
_GPU_NOTICE_START = LazyPattern(
    rf"NVRM: The NVIDIA GPU (?P<bus>{_BUS}) \(PCI ID: (?P<pci_id>[0-9A-Fa-f]{{4}}:[0-9A-Fa-f]{{4}})\)"
)
_NOT_SUPPORTED = LazyPattern(
    rf"installed in this system is not supported by the NVIDIA (?P<driver_version>{_VERSION}) driver release"
)
_NOT_SUPPORTED_OPEN = LazyPattern(r"installed in this system is not supported by open nvidia\.ko")
_OPEN_REQUIRED = LazyPattern(r"installed in this system requires use of the NVIDIA open kernel modules")
_LEGACY_START = LazyPattern(r"NVRM: The NVIDIA (?P<name>[^\n]{1,96}?) GPU installed in this system is\b")
_LEGACY_BRANCH = LazyPattern(r"supported through the NVIDIA (?P<branch>\d{2,4}\.xx) Legacy drivers")
_LEGACY_IGNORE = LazyPattern(rf"The (?P<driver_version>{_VERSION}) NVIDIA driver will ignore this GPU")
_BAR_START = LazyPattern(r"NVRM: This PCI I/O region assigned to your NVIDIA device is invalid")
_BAR = LazyPattern(
    rf"is invalid: BAR(?P<bar>\d) is (?P<size>\d{{1,12}})M @ 0x(?P<address>[0-9A-Fa-f]{{1,16}}) \(PCI:(?P<bus>{_BUS})\)"
)
_SIGNATURE = LazyPattern(
    r"(?P<rejected>(?:(?P<module_n>[\w-]{1,56}): )?[Ll]oading of "
    r"(?:unsigned module|module with unavailable key|module with unsupported crypto) is rejected"
    r"|unsigned module loading is restricted"
    r"|'(?P<module_r>nvidia[\w-]{0,20})': Key was rejected by service)"
    r"|(?P<module_t>nvidia[\w-]{0,20}): module verification failed: signature and/or required key missing"
)
_NVRM_PREFIX = LazyPattern(r"^\s*NVRM:\s*")


def _cut(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MAX_MESSAGE else text[: MAX_MESSAGE - 3] + "..."


def _bus(text: str | None) -> str:
    if not text:
        return ""
    return normalise_bus_id(text if "." in text[-2:] else text + ".0")  # Xid lines: bus:device


class _Counted:
    """Entries counted by a key, keeping the last message and when it came; at most MAX_ENTRIES."""

    def __init__(self) -> None:
        self.entries: dict[tuple[Any, ...], dict[str, Any]] = {}

    def add(self, key: tuple[Any, ...], fields: dict[str, Any], message: str, seconds: float | None) -> None:
        entry = self.entries.get(key)
        if entry is None:
            if len(self.entries) >= MAX_ENTRIES:
                return
            entry = self.entries[key] = {**fields, "count": 0}
        entry["count"] += 1
        entry["message"] = _cut(message)
        if seconds is not None:
            entry["seconds_after_boot"] = round(seconds, 1)

    def result(self, summary: Callable[[dict[str, Any]], str]) -> list[dict[str, Any]]:
        out = []
        for key in sorted(self.entries, key=repr):
            entry = self.entries[key]
            out.append({**entry, "summary": _cut(summary(entry))} if summary is not _NO_SUMMARY else entry)
        return out


def _NO_SUMMARY(entry: dict[str, Any]) -> str:
    return ""


# One line per entry for the rules' messages (the Xid list keeps its own form: xids_of).
SUMMARIES: dict[str, Callable[[dict[str, Any]], str]] = {
    "xids": _NO_SUMMARY,
    "sxids": lambda e: f"SXid {e['code']} on {e['switch']} ({e['bus_id']}) {e['count']}x: {e['message']}",
    "nvlink_training_failures": lambda e: f"Xid {e['code']} link {e['link']} {e['count']}x: {e['message']}",
    "api_mismatches": lambda e: (f"client {e['client'] + ' ' if e['client'] else ''}version {e['client_version']}"
                                 f" but kernel module {e['kernel_version']} ({e['count']}x)"),
    "rm_init_failures": lambda e: f"RmInitAdapter failed! ({e['code']}) {e['count']}x",
    "unsupported_gpus": lambda e: e["message"],
    "open_module_required": lambda e: e["message"],
    "open_module_unsupported": lambda e: e["message"],
    "legacy_gpus": lambda e: (f"{e['name']} (supported by the {e['legacy_branch'] or 'legacy'} drivers), ignored by"
                              f" driver {e['driver_version']}"),
    "invalid_bars": lambda e: f"{e['message']} {e['count']}x",
    "module_signature": lambda e: f"{e['message']} ({e['count']}x)",
}


# The lists of the kernel_log facts section this module fills, besides "source".
LISTS = (
    "xids", "sxids", "nvlink_training_failures", "api_mismatches", "rm_init_failures", "unsupported_gpus",
    "open_module_required", "open_module_unsupported", "legacy_gpus", "invalid_bars", "module_signature",
)


# (list name, key, fields, message) of one complete message
Found = Tuple[str, Tuple[Any, ...], Dict[str, Any], str]
Finisher = Callable[[str], Optional[Found]]


class KernelLog:
    """The driver's messages of one boot. feed() takes the log's lines in order."""

    def __init__(self) -> None:
        self.lists = {name: _Counted() for name in LISTS}
        # Messages the driver prints over several lines: how to finish each, its lines so far, when.
        self._open: list[tuple[Finisher, list[str], float | None]] = []

    def feed(self, line: str, seconds: float | None) -> None:
        line = line[:MAX_LINE]
        self._continue(line)
        if "NVRM" in line:
            self._nvrm(line, seconds)
        elif "SXid" in line:
            self._sxid(line, seconds)
        if "module" in line or "Key was rejected" in line:
            self._signature(line, seconds)

    def result(self) -> dict[str, list[dict[str, Any]]]:
        self._open = []  # a message whose end never came is not recorded: it says too little
        return {name: counted.result(SUMMARIES[name]) for name, counted in self.lists.items()}

    def _record(self, found: Found, seconds: float | None) -> None:
        name, key, fields, message = found
        self.lists[name].add(key, fields, message, seconds)

    # -- multi-line messages: the first line opens a window, later lines are joined to it. In
    # /dev/kmsg the whole message is one record (its line breaks escaped, split by kmsg.py into
    # lines of the same record), in a syslog file it is several lines.
    def _start(self, finish: Finisher, line: str, seconds: float | None) -> None:
        part = _NVRM_PREFIX.sub("", line)
        found = finish(part)
        if found is not None:
            self._record(found, seconds)
        elif len(self._open) < 8:
            self._open.append((finish, [part], seconds))

    def _continue(self, line: str) -> None:
        if not self._open:
            return
        still = []
        for finish, parts, seconds in self._open:
            parts.append(_NVRM_PREFIX.sub("", line))
            found = finish(" ".join(parts))
            if found is not None:
                self._record(found, seconds)
            elif len(parts) <= CONTINUATION_LINES:
                still.append((finish, parts, seconds))
        self._open = still

    # -- single-line messages
    def _nvrm(self, line: str, seconds: float | None) -> None:
        xid = _XID.search(line)
        if xid:
            bus, code, text = _bus(xid.group("bus")), int(xid.group("code")), xid.group("text").strip()
            self.lists["xids"].add((bus, code), {"bus_id": bus, "code": code}, text, seconds)
            training = _NVLINK_TRAINING.search(text)
            if training:
                link = training.group("link") or training.group("links") or ""
                fields = {"bus_id": bus, "code": code, "link": link, "remote_bus_id": _bus(training.group("remote"))}
                self.lists["nvlink_training_failures"].add((bus, link), fields, text, seconds)
            return
        rm = _RM_INIT.search(line)
        if rm:
            bus = _bus(rm.group("bus"))
            self.lists["rm_init_failures"].add((bus, rm.group("code")), {"bus_id": bus, "code": rm.group("code")},
                                               line[rm.start():], seconds)
            return
        if _API_MISMATCH_START.search(line):
            self._start(_api_mismatch, line, seconds)
            return
        notice = _GPU_NOTICE_START.search(line)
        if notice:
            self._start(_gpu_notice(_bus(notice.group("bus")), notice.group("pci_id").lower()), line, seconds)
            return
        if _BAR_START.search(line):
            self._start(_invalid_bar, line, seconds)
            return
        legacy = _LEGACY_START.search(line)
        if legacy:
            self._start(_legacy(legacy.group("name").strip()), line, seconds)

    def _sxid(self, line: str, seconds: float | None) -> None:
        sxid = _SXID.search(line)
        if not sxid:
            return
        bus, code, text = _bus(sxid.group("bus")), int(sxid.group("code")), sxid.group("text").strip()
        if text.startswith(("Severity ", "Data {")):
            return  # the error log's detail lines of the SXid just printed (error_nvswitch.c)
        severity = "fatal" if text.startswith("Fatal") else "non_fatal" if text.startswith("Non-fatal") else "unknown"
        fields = {"switch": sxid.group("switch"), "bus_id": bus, "code": code, "severity": severity}
        known = self.lists["sxids"].entries.get((bus, code))
        if known is not None and severity == "fatal":
            known["severity"] = "fatal"  # one code seen both ways: the worse one counts
        self.lists["sxids"].add((bus, code), fields, text, seconds)

    def _signature(self, line: str, seconds: float | None) -> None:
        match = _SIGNATURE.search(line)
        if not match:
            return
        rejected = match.group("rejected") is not None
        module = match.group("module_r") or match.group("module_t") or match.group("module_n") or ""
        if module and not module.startswith("nvidia"):
            return  # another module's signature (newer kernels name it): not the driver's
        self.lists["module_signature"].add((rejected, module), {"rejected": rejected, "module": module},
                                           line[match.start():], seconds)


# -- finishers of multi-line messages: the joined text so far -> what to record, or None (not yet)
def _api_mismatch(text: str) -> Found | None:
    match = _API_MISMATCH.search(text)
    if match is None:
        return None
    fields = {"client": match.group("client") or "", "client_version": match.group("client_version"),
              "kernel_version": match.group("kernel_version")}
    return ("api_mismatches", (fields["client_version"], fields["kernel_version"]), fields, text[match.start():])


def _gpu_notice(bus: str, pci_id: str) -> Finisher:
    def finish(text: str) -> Found | None:
        version = _NOT_SUPPORTED.search(text)
        if version:
            fields = {"bus_id": bus, "pci_id": pci_id, "driver_version": version.group("driver_version")}
            return ("unsupported_gpus", (bus,), fields, text)
        if _OPEN_REQUIRED.search(text):
            return ("open_module_required", (bus,), {"bus_id": bus, "pci_id": pci_id}, text)
        if _NOT_SUPPORTED_OPEN.search(text):
            return ("open_module_unsupported", (bus,), {"bus_id": bus, "pci_id": pci_id}, text)
        return None

    return finish


def _legacy(name: str) -> Finisher:
    def finish(text: str) -> Found | None:
        ignore = _LEGACY_IGNORE.search(text)
        if ignore is None:
            return None
        branch = _LEGACY_BRANCH.search(text)
        fields = {"name": name, "legacy_branch": branch.group("branch") if branch else "",
                  "driver_version": ignore.group("driver_version")}
        return ("legacy_gpus", (name,), fields, text)

    return finish


def _invalid_bar(text: str) -> Found | None:
    match = _BAR.search(text)
    if match is None:
        return None
    bus = _bus(match.group("bus"))
    fields = {"bus_id": bus, "bar": int(match.group("bar")), "size_mib": int(match.group("size"))}
    return ("invalid_bars", (bus, fields["bar"]), fields, text[match.start("bar") - 3:])
