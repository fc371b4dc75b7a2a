"""Huawei Ascend NPUs: the driver install, its device files, the CANN toolkit, the visible devices.

The NPUs themselves are PCI functions of vendor 0x19e5 with class 0x1200 (processing
accelerator): the pci probe lists them as kind "gpu", vendor "huawei". This probe reads (through
the context root, no subprocess; ``npu-smi`` is not run):

- ``/usr/local/Ascend/driver/version.info`` and ``/usr/local/Ascend/firmware/version.info``: the
  driver and firmware package versions, a ``Version=23.0.0`` line (Ascend's install guides check
  the installed versions with ``cat`` of these files)
- the CANN toolkit's install record, ``ascend_toolkit_install.info`` with a ``version=8.0.0`` line,
  where CANN's installation guide puts it: ``/usr/local/Ascend/ascend-toolkit/latest/<arch>-linux/``
  (CANN 8.0) or ``/usr/local/Ascend/cann/<arch>-linux/`` (CANN 8.5); ``$ASCEND_TOOLKIT_HOME``
  (set by CANN's set_env.sh) first when it is set
- ``/dev/davinci<N>`` (one per NPU), ``/dev/davinci_manager``, ``/dev/devmm_svm`` and
  ``/dev/hisi_hdc``: present, and whether this user may open them read-write (``os.access``, on
  the live machine only: a device file of a tree is this machine's device, not the tree's)

ASCEND_VISIBLE_DEVICES and ASCEND_RT_VISIBLE_DEVICES are in ``host.env`` (the host probe keeps
every ``ASCEND_`` variable).
"""

from __future__ import annotations

import os
import re
from typing import Any

from ..context import ProbeContext, excerpt, shown
from ..facts import Unavailable
from ..lazy_re import LazyPattern
from .files import exists, list_dir, read_text

DRIVER_INFO = "/usr/local/Ascend/driver/version.info"
FIRMWARE_INFO = "/usr/local/Ascend/firmware/version.info"
# The toolkit's install record, in the places CANN's installation guide names (newest layout last).
TOOLKIT_DIRS = ("/usr/local/Ascend/ascend-toolkit/latest", "/usr/local/Ascend/cann")
TOOLKIT_INFO = "ascend_toolkit_install.info"
ARCHES = ("aarch64", "x86_64")
# The control files the driver creates beside the per-NPU /dev/davinci<N>.
CONTROL_FILES = ("davinci_manager", "devmm_svm", "hisi_hdc")
# version.info and the install record are a dozen short key=value lines; longer files are not those.
MAX_INFO_FILE = 1 << 12
MAX_ENV_PATH = 4096
# /dev/davinci<N> files listed at most (a node has 8 or 16 NPUs).
MAX_DEVICES = 1024

_VERSION_LINE = LazyPattern(r"^\s*version\s*=\s*(\S{1,64})\s*$", re.IGNORECASE)
_DEVICE = LazyPattern(r"^davinci(\d{1,6})$")


def _version_of(ctx: ProbeContext, path: str, what: str) -> str | Unavailable:
    text = read_text(ctx, path, limit=MAX_INFO_FILE)
    if isinstance(text, Unavailable):
        if text.reason == "not_found":
            return Unavailable("not_found", f"no {path} ({what} not installed)")
        return text
    for line in text.splitlines():
        match = _VERSION_LINE.match(line)
        if match:
            return match.group(1)
    return Unavailable("error", f"{ctx.path(path)}: no Version= line in {excerpt(text, 60)}")


def _toolkit(ctx: ProbeContext) -> tuple[str | Unavailable, str | Unavailable]:
    """(CANN version, the install record read) from the first record found."""
    home = ctx.env.get("ASCEND_TOOLKIT_HOME", "").rstrip("/")
    dirs = ((home,) if home.startswith("/") and len(home) <= MAX_ENV_PATH else ()) + TOOLKIT_DIRS
    for base in dirs:
        for arch in ARCHES:
            record = f"{base}/{arch}-linux/{TOOLKIT_INFO}"
            if exists(ctx, record):
                return _version_of(ctx, record, "the CANN toolkit"), record
    missing = Unavailable("not_found", f"no CANN toolkit ({TOOLKIT_INFO} under {' or '.join(shown(d) for d in dirs)})")
    return missing, missing


def _accessible(ctx: ProbeContext, path: str) -> bool | Unavailable:
    if not ctx.live:
        return Unavailable("not_supported", "access is checked on the live machine only")
    return os.access(ctx.path(path), os.R_OK | os.W_OK)


def _devices(ctx: ProbeContext) -> list[dict[str, Any]] | Unavailable:
    names = list_dir(ctx, "/dev")
    if isinstance(names, Unavailable):
        return names
    numbers = sorted(int(m.group(1)) for m in map(_DEVICE.match, names) if m)[:MAX_DEVICES]
    return [
        {"index": n, "path": f"/dev/davinci{n}", "accessible": _accessible(ctx, f"/dev/davinci{n}")}
        for n in numbers
    ]


def collect(ctx: ProbeContext) -> dict[str, Any]:
    out: dict[str, Any] = {
        "driver_version": _version_of(ctx, DRIVER_INFO, "the Ascend driver"),
        "firmware_version": _version_of(ctx, FIRMWARE_INFO, "the Ascend firmware"),
    }
    out["cann_version"], out["cann_info_path"] = _toolkit(ctx)
    out["devices"] = _devices(ctx)
    for name in CONTROL_FILES:
        path = f"/dev/{name}"
        present = exists(ctx, path)
        out[f"{name}_present"] = present
        out[f"{name}_accessible"] = _accessible(ctx, path) if present else Unavailable("not_found", f"no {path}")
    return out
