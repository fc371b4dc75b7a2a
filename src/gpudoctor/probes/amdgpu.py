"""AMD GPUs' health and topology, from the amdgpu driver's sysfs files (no amd-smi, no subprocess).

Each GPU is a DRM card bound to amdgpu: ``/sys/class/drm/card<N>/device`` resolves to its PCI
function (a compute partition's extra card, which is no PCI function, is skipped; one entry per
bus id). Read there, through the context root, each file on its own (an absent or garbled file
makes that fact Unavailable, never the GPU):

- ``hwmon/hwmon*/temp<i>_input``, ``_crit``, ``_emergency`` (millidegrees Celsius) and
  ``temp<i>_label`` ("edge", "junction", "mem"); ``power1_cap`` and ``power1_cap_default``
  (microwatts). Kernel docs, "amdgpu hwmon": https://docs.kernel.org/gpu/amdgpu/thermal.html
- ``gpu_metrics`` (binary): its header ``metrics_table_header {u16 structure_size; u8
  format_revision; u8 content_revision}``. The ASIC-independent throttle status is taken only
  from table 1.3, ``struct gpu_metrics_v1_3`` of drivers/gpu/drm/amd/include/kgd_pp_interface.h,
  where ``uint64_t indep_throttle_status`` is the last field, at byte 112 of the 120 (natural C
  alignment, little endian); its bits are the SMU_THROTTLER_*_BIT of
  drivers/gpu/drm/amd/pm/swsmu/inc/amdgpu_smu.h (power 0-7, current 16-23, temperature
  32-47, other 56-57). Tables 1.4 and 1.5 (the MI300 series) have no indep_throttle_status:
  their ``uint32_t throttle_status`` is ASIC-dependent, and the driver that writes them
  (drivers/gpu/drm/amd/pm/swsmu/smu13/smu_v13_0_6_ppt.c, smu_v13_0_6_get_gpu_metrics) sets it
  to 0 ("Throttle status is not reported through metrics now"): a 0 there says nothing, so it is
  not read (not_supported, with that reason). Later tables' throttler residencies are
  accumulated counts, which need two samples; other tables are not parsed either.
- ``mem_info_vram_total``, ``mem_info_vram_used`` (bytes). Kernel docs, "GPU Memory Usage
  Information": https://docs.kernel.org/gpu/amdgpu/driver-misc.html
- ``ras/<block>_err_count`` ("ue: N" and "ce: N" lines; newer kernels add "de: N", ignored) and
  ``ras/gpu_vram_bad_pages`` (one "pfn : size : flags" line per retired page, flags R reserved,
  P pending, F failed). Kernel docs, "AMDGPU RAS Support":
  https://docs.kernel.org/gpu/amdgpu/ras.html
- ``xgmi_device_id`` and ``xgmi_hive_info/xgmi_hive_id`` (amdgpu_xgmi.c)
- ``current_compute_partition`` ("SPX", "CPX", ...) and ``current_memory_partition`` ("NPS1",
  ...); ``product_name`` (FRU data, where the board has it)
- ``/sys/module/amdgpu/parameters/bad_page_threshold``: the retirement limit when set above 0.
  Otherwise the driver computes its own, by a formula that changed between kernel releases and
  is in no sysfs file; the mainline formula (amdgpu_ras.c amdgpu_ras_validate_threshold: one page
  per RAS_BAD_PAGE_COVER = 100 MiB of VRAM) is what ``bad_page_threshold`` gives then, and
  ``bad_page_threshold_from`` says which.
- the KFD topology (probes/kfd.py): this GPU's node and its XGMI io_links.
"""

from __future__ import annotations

import os
import re
import struct
import time
from typing import Any

from ..context import ProbeContext, excerpt
from ..facts import Unavailable
from ..lazy_re import LazyPattern
from . import kfd
from .files import link_name, list_dir, parse_int, read_bytes, read_int, read_text, resolve_path
from .pci import BDF_RE

DRM = "/sys/class/drm"
THRESHOLD_PARAM = "/sys/module/amdgpu/parameters/bad_page_threshold"
SENSORS = ("edge", "junction", "mem")
# Cards looked at, at most (8 GPUs with 8 partitions each is 64); RAS blocks and hwmon inputs per
# GPU likewise, and bad-page lines (each one retired 4 KiB page; the EEPROM holds a few thousand).
MAX_CARDS = 1024
MAX_RAS_BLOCKS = 64
MAX_TEMPS = 16
MAX_BAD_PAGE_BYTES = 1 << 20
# One bad page per 100 MiB of VRAM: amdgpu_ras.c RAS_BAD_PAGE_COVER.
BAD_PAGE_COVER = 100 * 1024 * 1024
# gpu_metrics v1.3: 120 bytes, indep_throttle_status the u64 at 112.
METRICS_V13_SIZE = 120
METRICS_V13_THROTTLE = 112
# gpu_metrics tables of the MI300 series whose throttle status the driver leaves 0 (see above).
MI300_TABLES = ((1, 4), (1, 5))
MAX_METRICS = 1 << 16

_CARD = LazyPattern(r"^card(\d{1,6})$")
_TEMP = LazyPattern(r"^temp(\d{1,2})_input$")
_RAS_LINE = LazyPattern(r"^\s*(ue|ce)\s*:\s*([0-9]{1,20})\s*$", re.ASCII)
_BAD_PAGE = LazyPattern(r"^\s*0x[0-9a-fA-F]{1,16}\s*:\s*0x[0-9a-fA-F]{1,16}\s*:\s*[RPF]\s*$")
_WORD = LazyPattern(r"^[A-Za-z0-9_+-]{1,32}$")


def _cards(ctx: ProbeContext) -> list[tuple[str, str]] | Unavailable:
    """(bus id, resolved PCI device path) of each amdgpu card, by card number, one per bus id."""
    names = list_dir(ctx, DRM)
    if isinstance(names, Unavailable):
        return names
    numbered = sorted((int(m.group(1)), n) for n in names if (m := _CARD.match(n)))
    out: dict[str, str] = {}
    for _, name in numbered[:MAX_CARDS]:
        device = resolve_path(ctx, f"{DRM}/{name}/device")
        if not isinstance(device, str) or not BDF_RE.match(os.path.basename(device)):
            continue  # a partition's platform device, or a link that leads nowhere
        if link_name(ctx, f"{device}/driver") != "amdgpu":
            continue
        out.setdefault(os.path.basename(device), device)
    return list(out.items())


def _number(ctx: ProbeContext, path: str, scale: float) -> float | int | Unavailable:
    value = read_int(ctx, path)
    if isinstance(value, Unavailable):
        return value
    scaled = value / scale
    return int(scaled) if scaled == int(scaled) else round(scaled, 3)


def _hwmon(ctx: ProbeContext, device: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for sensor in SENSORS:
        for key in ("c", "crit_c", "emergency_c"):
            out[f"temp_{sensor}_{key}"] = Unavailable("not_found", f"no {sensor} temperature sensor")
    out["power_cap_w"] = out["power_cap_default_w"] = Unavailable("not_found", "no amdgpu hwmon directory")
    dirs = list_dir(ctx, f"{device}/hwmon")
    if isinstance(dirs, Unavailable) or not dirs:
        reason = dirs if isinstance(dirs, Unavailable) else Unavailable("not_found", "no amdgpu hwmon directory")
        return dict.fromkeys(out, reason)
    base = f"{device}/hwmon/{dirs[0]}"
    files = list_dir(ctx, base)
    for name in (files if isinstance(files, list) else [])[: MAX_TEMPS * 8]:
        match = _TEMP.match(name)
        if not match:
            continue
        stem = f"{base}/temp{match.group(1)}"
        label = read_text(ctx, f"{stem}_label", limit=64)
        if not isinstance(label, str) or label not in SENSORS:
            continue
        out[f"temp_{label}_c"] = _number(ctx, f"{stem}_input", 1000)
        out[f"temp_{label}_crit_c"] = _number(ctx, f"{stem}_crit", 1000)
        out[f"temp_{label}_emergency_c"] = _number(ctx, f"{stem}_emergency", 1000)
    out["power_cap_w"] = _number(ctx, f"{base}/power1_cap", 1e6)
    out["power_cap_default_w"] = _number(ctx, f"{base}/power1_cap_default", 1e6)
    return out


def _metrics(ctx: ProbeContext, device: str) -> dict[str, Any]:
    path = f"{device}/gpu_metrics"
    raw = read_bytes(ctx, path, MAX_METRICS)
    if isinstance(raw, Unavailable):
        return {"gpu_metrics_version": raw, "indep_throttle_status": raw}
    if len(raw) < 4:
        bad = Unavailable("error", f"{ctx.path(path)}: {len(raw)} bytes, shorter than its header")
        return {"gpu_metrics_version": bad, "indep_throttle_status": bad}
    size, major, minor = struct.unpack_from("<HBB", raw, 0)
    version = f"{major}.{minor}"
    throttle: int | Unavailable
    if (major, minor) in MI300_TABLES:
        throttle = Unavailable(
            "not_supported",
            f"gpu_metrics table {version} (MI300 series): the driver writes 0 as its throttle status "
            "(smu_v13_0_6_ppt.c: not reported through metrics), so it cannot tell throttling",
        )
    elif (major, minor) != (1, 3):
        throttle = Unavailable("not_supported", f"gpu_metrics table {version}: only table 1.3's layout is read")
    elif size < METRICS_V13_SIZE or len(raw) < METRICS_V13_SIZE:
        throttle = Unavailable("error", f"{ctx.path(path)}: table 1.3 of {min(size, len(raw))} bytes, not 120")
    else:
        throttle = struct.unpack_from("<Q", raw, METRICS_V13_THROTTLE)[0]
    return {"gpu_metrics_version": version, "indep_throttle_status": throttle}


def _ras_counts(text: str) -> tuple[int, int]:
    found: dict[str, int] = {}
    for line in text.splitlines():
        match = _RAS_LINE.match(line)
        if match:
            # the kernel prints u64 counts: more than 64 bits of digits is garbage (a ValueError)
            found[match.group(1)] = parse_int(match.group(2))
    if "ue" not in found or "ce" not in found:
        raise ValueError("no ue: and ce: lines")
    return found["ue"], found["ce"]


def _ras(ctx: ProbeContext, device: str) -> dict[str, Any]:
    names = list_dir(ctx, f"{device}/ras")
    if isinstance(names, Unavailable):
        if names.reason == "not_found":
            names = Unavailable("not_supported", f"{ctx.path(device)}: no ras directory (no RAS, or not enabled)")
        return dict.fromkeys(("ras_blocks", "ras_ue_total", "ras_ce_total", "bad_pages"), names)
    blocks: list[dict[str, Any]] = []
    problem: Unavailable | None = None
    for name in [n for n in names if n.endswith("_err_count")][:MAX_RAS_BLOCKS]:
        path = f"{device}/ras/{name}"
        text = read_text(ctx, path, limit=4096)
        if isinstance(text, Unavailable):
            problem = problem or text
            continue
        try:
            ue, ce = _ras_counts(text)
        except ValueError:
            problem = problem or Unavailable("error", f"{ctx.path(path)}: not ue/ce counts: {excerpt(text, 60)}")
            continue
        blocks.append({"block": name[: -len("_err_count")], "ue": ue, "ce": ce})
    totals: dict[str, Any] = {}
    for key in ("ue", "ce"):
        # a block not read may hold errors: the total of the others would say too little
        totals[f"ras_{key}_total"] = problem or sum(b[key] for b in blocks)
    return {"ras_blocks": blocks, **totals, "bad_pages": _bad_pages(ctx, f"{device}/ras/gpu_vram_bad_pages")}


def _bad_pages(ctx: ProbeContext, path: str) -> int | Unavailable:
    text = read_text(ctx, path, limit=MAX_BAD_PAGE_BYTES)
    if isinstance(text, Unavailable):
        # the kernel prints nothing when no page is retired: an empty file is a count of 0
        return 0 if text.reason == "not_found" and text.detail.endswith(" is empty") else text
    lines = [line for line in text.splitlines() if line.strip()]
    bad = [line for line in lines if not _BAD_PAGE.match(line)]
    if bad:
        return Unavailable("error", f"{ctx.path(path)}: not a bad-page record: {excerpt(bad[0], 60)}")
    return len(lines)


def _word(ctx: ProbeContext, path: str, absent: str = "") -> str | Unavailable:
    """A one-word attribute; with ``absent``, a file that does not exist is not_supported (why):
    amdgpu creates the XGMI and partition files only on GPUs that have them."""
    text = read_text(ctx, path, limit=256)
    missing = isinstance(text, Unavailable) and text.reason == "not_found" and not text.detail.endswith(" is empty")
    if absent and missing:
        return Unavailable("not_supported", f"{ctx.path(path)} does not exist: {absent}")
    if isinstance(text, str) and not _WORD.match(text):
        return Unavailable("error", f"{ctx.path(path)}: unexpected content {excerpt(text, 40)}")
    return text


def _product(ctx: ProbeContext, device: str) -> str | Unavailable:
    text = read_text(ctx, f"{device}/product_name", limit=256)
    if isinstance(text, str) and not text.isprintable():
        return Unavailable("error", f"{ctx.path(device)}/product_name: not printable: {excerpt(text, 40)}")
    return text


def _threshold(ctx: ProbeContext) -> int | Unavailable:
    value = read_int(ctx, THRESHOLD_PARAM)
    if isinstance(value, Unavailable) and value.reason == "not_found":
        return Unavailable("not_found", f"no {THRESHOLD_PARAM} (amdgpu not loaded)")
    return value


def _with_threshold(gpu: dict[str, Any], param: int | Unavailable) -> None:
    """bad_page_threshold: the module parameter when above 0, else the mainline formula."""
    vram = gpu["vram_total_bytes"]
    if isinstance(param, int) and param > 0:
        gpu["bad_page_threshold"], gpu["bad_page_threshold_from"] = param, "module parameter"
    elif isinstance(param, int) and param == 0:
        off = Unavailable("not_supported", "bad page retirement is off (amdgpu bad_page_threshold=0)")
        gpu["bad_page_threshold"], gpu["bad_page_threshold_from"] = off, off
    elif isinstance(param, Unavailable):
        gpu["bad_page_threshold"], gpu["bad_page_threshold_from"] = param, param
    elif isinstance(vram, int):
        gpu["bad_page_threshold"] = max(1, vram // BAD_PAGE_COVER)
        gpu["bad_page_threshold_from"] = "formula"
    else:
        gpu["bad_page_threshold"], gpu["bad_page_threshold_from"] = vram, vram


def _gpu(ctx: ProbeContext, bus_id: str, device: str, nodes: dict[str, Any] | Unavailable) -> dict[str, Any]:
    gpu: dict[str, Any] = {"bus_id": bus_id, "product_name": _product(ctx, device)}
    gpu.update(_hwmon(ctx, device))
    gpu.update(_metrics(ctx, device))
    gpu["vram_total_bytes"] = read_int(ctx, f"{device}/mem_info_vram_total")
    gpu["vram_used_bytes"] = read_int(ctx, f"{device}/mem_info_vram_used")
    gpu.update(_ras(ctx, device))
    no_xgmi = "the GPU is in no XGMI hive"
    gpu["xgmi_device_id"] = _word(ctx, f"{device}/xgmi_device_id", no_xgmi)
    gpu["xgmi_hive_id"] = _word(ctx, f"{device}/xgmi_hive_info/xgmi_hive_id", no_xgmi)
    no_partitions = "the GPU has no partition modes"
    gpu["compute_partition"] = _word(ctx, f"{device}/current_compute_partition", no_partitions)
    gpu["memory_partition"] = _word(ctx, f"{device}/current_memory_partition", no_partitions)
    node = nodes if isinstance(nodes, Unavailable) else nodes.get(bus_id)
    if node is None:
        node = Unavailable("not_found", f"no KFD topology node for {bus_id}")
    gpu["kfd_node"] = node if isinstance(node, Unavailable) else node["node"]
    gpu["xgmi_links"] = node if isinstance(node, Unavailable) else node["xgmi_links"]
    return gpu


def collect(ctx: ProbeContext) -> dict[str, Any]:
    cards = _cards(ctx)
    if isinstance(cards, Unavailable):
        if cards.reason == "not_found":
            cards = Unavailable("not_found", f"no {DRM} (no DRM driver loaded)")
        return {"gpus": cards, "bad_page_threshold_param": cards}
    param = _threshold(ctx) if cards else Unavailable("not_supported", "no amdgpu GPU")
    nodes = kfd.gpu_nodes(ctx) if cards else {}
    stop = ctx.work_deadline()
    gpus: list[dict[str, Any]] = []
    for done, (bus_id, device) in enumerate(cards):
        if time.monotonic() > stop:
            left = f"{len(cards) - done} of {len(cards)} amdgpu GPUs"
            late = Unavailable("timeout", f"{left} were not read: the run's deadline passed")
            return {"gpus": late, "bad_page_threshold_param": param}
        gpu = _gpu(ctx, bus_id, device, nodes)
        _with_threshold(gpu, param)
        gpus.append(gpu)
    return {"gpus": gpus, "bad_page_threshold_param": param}
