"""ROCm user space and the AMD KFD compute interface.

Reads (through the context root, no subprocess; ``rocminfo`` is not run):

- ``$ROCM_PATH`` (from ``ctx.env``) or ``/opt/rocm``: ``.info/version`` ("6.4.0-47" gives
  "6.4.0"), else the ``rocm-X.Y.Z`` name that ``/opt/rocm`` links to
- ``/dev/kfd`` (present; read-write access is checked with ``os.access`` on the live machine only)
- ``/dev/dri/renderD*`` (render nodes, with access on the live machine)
- ``/sys/class/kfd/kfd/topology/nodes/*/properties`` (``gfx_target_version``; 0 is a CPU node),
  else ``/sys/devices/virtual/kfd/kfd/topology/nodes``. The number is decimal
  major*10000 + minor*100 + stepping; the gfx name prints the stepping in hex
  (90010 is gfx90a, 90402 gfx942, 110000 gfx1100), as LLVM's amdgpu-arch does.
"""

from __future__ import annotations

import os
import time
from typing import Any

from ..context import ProbeContext, excerpt, shown
from ..facts import Unavailable
from ..lazy_re import LazyPattern
from .files import exists, is_dir, list_dir, read_text, resolve_path
from .kfd import MAX_NODES, MAX_PROPERTIES, topology_nodes

_ROCM_DIR_VERSION = LazyPattern(r"^rocm-(\d{1,4}\.\d{1,4}(?:\.\d{1,6})?)")
_RELEASE = LazyPattern(r"^(\d{1,4}\.\d{1,4}(?:\.\d{1,6})?)")
# .info/version is one short line; longer files are not that.
MAX_INFO_FILE = 1 << 12
# An environment value longer than PATH_MAX names no directory.
MAX_ENV_PATH = 4096


def gfx_name(target_version: int) -> str:
    """gfx target name for a KFD gfx_target_version (90402 -> "gfx942")."""
    major = (target_version // 10000) % 100
    minor = (target_version // 100) % 100
    stepping = target_version % 100
    return f"gfx{major}{minor}{stepping:x}"


def _rocm_version(ctx: ProbeContext, path: str) -> str | Unavailable:
    info = read_text(ctx, f"{path}/.info/version", limit=MAX_INFO_FILE)
    if isinstance(info, str):
        match = _RELEASE.match(info.splitlines()[0].strip())
        if match:
            return match.group(1)
        return Unavailable("error", f"{ctx.path(path + '/.info/version')}: not a version: {excerpt(info, 40)}")
    # /opt/rocm -> /etc/alternatives/rocm -> /opt/rocm-6.4.0: the release is in the final name.
    real = resolve_path(ctx, path)
    if isinstance(real, str):
        match = _ROCM_DIR_VERSION.match(os.path.basename(real))
        if match:
            return match.group(1)
    if info.reason == "not_found":
        return Unavailable("not_found", f"no {path}/.info/version and {path} is not a rocm-X.Y.Z directory")
    return info


def _render_nodes(ctx: ProbeContext) -> list[dict[str, Any]] | Unavailable:
    names = list_dir(ctx, "/dev/dri")
    if isinstance(names, Unavailable):
        if names.reason == "not_found":
            return Unavailable("not_found", "no /dev/dri")
        return names
    nodes: list[dict[str, Any]] = []
    for name in names:
        if not name.startswith("renderD"):
            continue
        system = f"/dev/dri/{name}"
        accessible: bool | Unavailable
        if ctx.live:
            accessible = os.access(ctx.path(system), os.R_OK | os.W_OK)
        else:
            accessible = Unavailable("not_supported", "access is checked on the live machine only")
        nodes.append({"path": system, "accessible": accessible})
    nodes.sort(key=lambda n: _number_suffix(n["path"], "/dev/dri/renderD"))
    return nodes


def _number_suffix(name: str, prefix: str) -> tuple[int, str]:
    digits = name[len(prefix):]
    return (int(digits), name) if digits.isdecimal() else (1 << 30, name)


def _gfx_targets(ctx: ProbeContext) -> list[str] | Unavailable:
    found = topology_nodes(ctx)
    if isinstance(found, Unavailable):
        return found
    topology, nodes = found
    targets: list[str] = []
    problem: Unavailable | None = None
    stop = ctx.work_deadline()
    ordered = sorted(nodes, key=lambda n: _number_suffix(n, ""))
    for i, node in enumerate(ordered):
        if i >= MAX_NODES or time.monotonic() > stop:
            problem = problem or Unavailable(
                "timeout" if i < MAX_NODES else "not_supported",
                f"{len(ordered) - i} of the {len(ordered)} KFD topology nodes were not read",
            )
            targets = []  # a node not read may hold another target: the list would be short
            break
        text = read_text(ctx, f"{topology}/{node}/properties", limit=MAX_PROPERTIES)
        if isinstance(text, Unavailable):
            problem = problem or text
            continue
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key != "gfx_target_version":
                continue
            try:
                if len(value.strip()) > 20:
                    raise ValueError("too long")
                number = int(value.strip())
            except ValueError:
                problem = problem or Unavailable(
                    "error",
                    f"{ctx.path(topology)}/{shown(node)}/properties: gfx_target_version {excerpt(value.strip())}",
                )
                break
            if number > 0:  # 0: a CPU node
                name = gfx_name(number)
                if name not in targets:
                    targets.append(name)
            break
    if not targets and problem is not None:
        return problem
    return targets


def collect(ctx: ProbeContext) -> dict[str, Any]:
    env_path = ctx.env.get("ROCM_PATH", "").rstrip("/")
    if len(env_path) > MAX_ENV_PATH:
        env_path = ""  # names nothing: as if unset
    path = env_path if env_path.startswith("/") else "/opt/rocm"
    out: dict[str, Any] = {}
    if is_dir(ctx, path):
        out["version"] = _rocm_version(ctx, path)
        out["path"] = path
    else:
        where = f"ROCM_PATH={shown(env_path)}" if env_path else "/opt/rocm"
        missing = Unavailable("not_found", f"no ROCm at {where}")
        out["version"] = missing
        out["path"] = missing

    kfd_present = exists(ctx, "/dev/kfd")
    out["kfd_present"] = kfd_present
    if not kfd_present:
        out["kfd_accessible"] = Unavailable("not_found", "no /dev/kfd")
    elif ctx.live:
        out["kfd_accessible"] = os.access(ctx.path("/dev/kfd"), os.R_OK | os.W_OK)
    else:
        out["kfd_accessible"] = Unavailable("not_supported", "access is checked on the live machine only")
    out["render_nodes"] = _render_nodes(ctx)
    out["gfx_targets"] = _gfx_targets(ctx)
    return out
