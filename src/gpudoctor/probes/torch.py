"""PyTorch in the target interpreter (``ctx.python``), never imported into gpudoctor.

Default (cheap) path, no torch import anywhere:

- where torch is: ``importlib.util.find_spec("torch")`` when ``ctx.python`` is this
  interpreter (finding a top-level package does not run its ``__init__``), otherwise
  ``<python> -c <find_spec script>`` in a child under ``ctx.budget(3)``
- ``torch/version.py`` read as text and parsed with :mod:`ast` (``__version__``, ``cuda``,
  ``hip``, ``xpu``, ``git_version``; literal assignments only, never executed)
- ``torchvision/version.py``, ``torchaudio/version.py``, ``torch_npu/version.py``, else their ``*.dist-info/METADATA``,
  and the ``nvidia_cudnn_cu*`` / ``nvidia_nccl_cu*`` ``.dist-info`` names, all in torch's
  site-packages directory
- the CUDA fat binary of ``torch/lib/libtorch_cuda.so`` (ELF section ``.nv_fatbin``), its
  headers only: see gpudoctor.probes.torch_fatbin

With ``ctx.torch_import``: a child ``<python>`` imports torch under ``ctx.budget(20)``
and prints JSON lines (version, ``torch.cuda.get_arch_list()``, cuDNN and NCCL versions,
``torch.cuda.is_available()``, ``device_count()``); it is killed on timeout, and what
it printed before that is kept.

Under a fixture root the section is the JSON object recorded in ``<root>/torch.json``.
"""

from __future__ import annotations

import ast
import os
import re
import sys
from pathlib import Path
from typing import Any

from ..children import MARKER, parse_event
from ..context import ProbeContext
from ..facts import SnapshotError, Unavailable, from_jsonable
from ..lazy_re import LazyPattern
from .files import (
    parse_recorded_json,
    read_file_bytes,
    read_recorded,
    unavailable_from_oserror,
)
from .tools import CommandResult, run_bounded
from .torch_fatbin import IMPORT_HINT, scan_fatbin_archs

FIELDS = (
    "installed",
    "version",
    "location",
    "cuda_version",
    "hip_version",
    "build",
    "arch_list",
    "arch_list_source",
    "cudnn_version",
    "nccl_version",
    "cuda_available",
    "device_count",
    "torchvision_version",
    "torchaudio_version",
    "torch_npu_version",
)

NEEDS_IMPORT = Unavailable("not_supported", "needs --torch-import")

# Prints where torch would be imported from, without importing it.
_FIND_SCRIPT = (
    "import importlib.util as u, json, sys\n"
    "try:\n"
    "    s = u.find_spec('torch')\n"
    "    r = {'found': s is not None, 'origin': s.origin if s else None,\n"
    "         'locations': list(s.submodule_search_locations or []) if s else []}\n"
    "except Exception as e:\n"
    "    r = {'error': type(e).__name__ + ': ' + str(e)}\n"
    "r['python'] = sys.version.split()[0]\n"
    f"sys.stdout.write('\\n{MARKER} ' + json.dumps(dict(event='result', **r), separators=(',', ':')) + '\\n')\n"
)

# Imports torch and prints one JSON line per fact as soon as it is known, so that a
# hang in CUDA initialisation (is_available) still leaves the earlier facts.
_IMPORT_SCRIPT = (
    "import json, os, sys\n"
    "def emit(**kw):\n"
    "    line = json.dumps(dict(event='fact', **kw), default=str, separators=(',', ':'))\n"
    f"    sys.stdout.write('\\n{MARKER} ' + line + '\\n'); sys.stdout.flush()\n"
    "def grab(key, fn):\n"
    "    try:\n"
    "        emit(**{key: fn()})\n"
    "    except BaseException as e:\n"
    "        emit(**{key + '_error': type(e).__name__ + ': ' + str(e)[:300]})\n"
    "try:\n"
    "    import torch\n"
    "except ModuleNotFoundError as e:\n"
    "    emit(import_error='ModuleNotFoundError: ' + str(e), missing=getattr(e, 'name', None) == 'torch')\n"
    "    sys.exit(0)\n"
    "except BaseException as e:\n"
    "    emit(import_error=type(e).__name__ + ': ' + str(e)[:300], missing=False)\n"
    "    sys.exit(0)\n"
    "v = getattr(torch, 'version', None)\n"
    "emit(version=str(torch.__version__), location=os.path.dirname(os.path.abspath(torch.__file__)),\n"
    "     cuda=getattr(v, 'cuda', None), hip=getattr(v, 'hip', None), xpu=getattr(v, 'xpu', None))\n"
    "grab('arch_list', lambda: [str(a) for a in torch.cuda.get_arch_list()])\n"
    "grab('cudnn', lambda: torch.backends.cudnn.version())\n"
    "grab('nccl', lambda: torch.cuda.nccl.version())\n"
    "grab('cuda_available', lambda: bool(torch.cuda.is_available()))\n"
    "grab('device_count', lambda: int(torch.cuda.device_count()))\n"
    "emit(done=True)\n"
)


# ---------------------------------------------------------------------------
# version.py and dist-info


def read_version_py(path: str) -> dict[str, Any] | Unavailable:
    """Literal top-level assignments of a version.py (str, None, bool), parsed, never run."""
    try:
        source = read_file_bytes(path, 1 << 16)
    except OSError as exc:
        return unavailable_from_oserror(Path(path), exc)
    try:
        tree = ast.parse(source, filename=path)
    except (SyntaxError, ValueError) as exc:
        return Unavailable("error", f"{path}: not Python: {exc}")
    values: dict[str, Any] = {}
    for node in tree.body:
        target: ast.expr | None = None
        value: ast.expr | None = None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign):
            target, value = node.target, node.value
        if (
            isinstance(target, ast.Name)
            and isinstance(value, ast.Constant)
            and (value.value is None or isinstance(value.value, (str, bool)))
        ):
            values[target.id] = value.value
    return values


def _dist_version(site: str, entries: list[str], project: str) -> str | None:
    """Version of a project from its ``<name>-<version>.dist-info/METADATA`` in site."""
    prefix = project.replace("-", "_").lower() + "-"
    for entry in entries:
        if entry.lower().startswith(prefix) and entry.endswith(".dist-info"):
            try:
                with open(os.path.join(site, entry, "METADATA"), "rb") as fh:
                    head = fh.read(4096).decode("utf-8", "replace")
            except OSError:
                head = ""
            for line in head.splitlines():
                if line.startswith("Version:"):
                    return line.split(":", 1)[1].strip()
            return entry[len(prefix):-len(".dist-info")]
    return None


def _companion_version(site: str, entries: list[str], name: str) -> str | Unavailable:
    if name in entries:
        values = read_version_py(os.path.join(site, name, "version.py"))
        if isinstance(values, dict) and isinstance(values.get("__version__"), str):
            return str(values["__version__"])
    found = _dist_version(site, entries, name)
    if found:
        return found
    return Unavailable("not_found", f"{name} is not installed beside torch")


_NVIDIA_WHEEL = LazyPattern(r"^nvidia_(cudnn|nccl)_cu(\d+)-(\d+(?:\.\d+){0,2})[.\d]*\.dist-info$", re.IGNORECASE)


def _nvidia_wheel_versions(entries: list[str], cuda: str | None) -> dict[str, str]:
    """cuDNN / NCCL versions from nvidia-*-cuXY wheels ("nvidia_cudnn_cu12-9.1.0.70" -> 9.1.0)."""
    best: dict[str, tuple[bool, tuple[int, ...], str]] = {}
    cuda_major = cuda.split(".")[0] if cuda else None
    for entry in entries:
        match = _NVIDIA_WHEEL.match(entry)
        if not match:
            continue
        lib, cu, version = match.group(1).lower(), match.group(2), match.group(3)
        key = (cu == cuda_major, tuple(int(p) for p in version.split(".")), version)
        if lib not in best or key > best[lib]:
            best[lib] = key
    return {lib: key[2] for lib, key in best.items()}


def _cuda_library(pkg_dir: str) -> str | None:
    for name in ("libtorch_cuda.so", "libtorch_cuda_cu.so"):  # the second: torch < 1.13 split builds
        candidate = os.path.join(pkg_dir, "lib", name)
        if os.path.exists(candidate):
            return candidate
    return None


# ---------------------------------------------------------------------------
# assembling the section


def _all(reason: Unavailable, **known: Any) -> dict[str, Any]:
    out: dict[str, Any] = {field: reason for field in FIELDS}
    out.update(known)
    return out


def _build(version: str, cuda: Any, hip: Any, xpu: Any) -> str:
    if isinstance(hip, str) and hip:
        return "rocm"
    if isinstance(cuda, str) and cuda:
        return "cuda"
    if "+xpu" in version or (isinstance(xpu, str) and xpu):
        return "xpu"
    return "cpu"


def package_facts(pkg_dir: str, *, scan_binary: bool = True) -> dict[str, Any]:
    """The torch section from the files of an installed torch package directory."""
    out = _all(NEEDS_IMPORT, installed=True, location=pkg_dir)
    values = read_version_py(os.path.join(pkg_dir, "version.py"))
    if isinstance(values, Unavailable) or not isinstance(values.get("__version__"), str):
        bad = values if isinstance(values, Unavailable) else Unavailable(
            "error", f"{pkg_dir}/version.py has no literal __version__"
        )
        for field in ("version", "cuda_version", "hip_version", "build", "arch_list", "arch_list_source",
                      "cudnn_version", "nccl_version"):
            out[field] = bad
        values = {}
        build: str | None = None
    else:
        version = str(values["__version__"])
        out["version"] = version
        out["cuda_version"] = values.get("cuda") if isinstance(values.get("cuda"), str) else None
        out["hip_version"] = values.get("hip") if isinstance(values.get("hip"), str) else None
        build = _build(version, values.get("cuda"), values.get("hip"), values.get("xpu"))
        out["build"] = build

    site = os.path.dirname(pkg_dir)
    try:
        entries = sorted(os.listdir(site))
    except OSError as exc:
        entries = []
        listing_problem: Unavailable | None = Unavailable("error", f"{site}: {exc.strerror or exc}")
    else:
        listing_problem = None
    for name in ("torchvision", "torchaudio", "torch_npu"):
        out[f"{name}_version"] = listing_problem or _companion_version(site, entries, name)

    if build == "cuda":
        wheels = _nvidia_wheel_versions(entries, out["cuda_version"])
        for lib in ("cudnn", "nccl"):
            out[f"{lib}_version"] = wheels.get(lib) or Unavailable(
                "not_found", f"no nvidia-{lib}-cu* package beside torch (built in or from the system); {IMPORT_HINT}"
            )
    elif build is not None:
        not_cuda = Unavailable("not_supported", f"not a CUDA build ({build})")
        out["cudnn_version"] = not_cuda
        out["nccl_version"] = not_cuda if build != "rocm" else Unavailable("not_supported", f"RCCL: {IMPORT_HINT}")

    if build == "cuda":
        if scan_binary:
            library = _cuda_library(pkg_dir)
            if library is None:
                out["arch_list"] = Unavailable("not_found", f"no lib/libtorch_cuda.so in {pkg_dir}")
                out["arch_list_source"] = out["arch_list"]
            else:
                archs = scan_fatbin_archs(library)
                out["arch_list"] = archs
                out["arch_list_source"] = "binary" if isinstance(archs, list) else archs
    elif build == "cpu":
        out["arch_list"] = []  # as torch.cuda.get_arch_list() says for a build without GPU code
        out["arch_list_source"] = "binary"
    elif build is not None:
        out["arch_list"] = Unavailable("not_supported", f"arch list of a {build} build: {IMPORT_HINT}")
        out["arch_list_source"] = out["arch_list"]
    return out


def _parse_marked(stdout: str) -> dict[str, Any]:
    """What the child's events said, merged (a later fact wins); other lines are not events."""
    merged: dict[str, Any] = {}
    for line in stdout.splitlines():
        event = parse_event(line)
        if event is not None:
            merged.update((k, v) for k, v in event.items() if k != "event")
    return merged


def _last_line(result: CommandResult, limit: int = 200) -> str:
    """The child's last line of output (stderr first), shortened: what a message can quote."""
    tail = (result.stderr or result.stdout).strip().splitlines()[-1:] or ["no output"]
    return tail[0] if len(tail[0]) <= limit else tail[0][: limit - 3] + "..."


def _same_interpreter(python: str) -> bool:
    # Not realpath: a venv's bin/python links to the base interpreter but has other site-packages.
    return os.path.abspath(python) == os.path.abspath(sys.executable)


def locate(ctx: ProbeContext) -> str | None | Unavailable:
    """torch's package directory in the target interpreter; None when torch is not there."""
    if _same_interpreter(ctx.python):
        import importlib.util

        try:
            spec = importlib.util.find_spec("torch")
        except (ImportError, ValueError, AttributeError) as exc:
            return Unavailable("error", f"looking for torch failed: {type(exc).__name__}: {exc}")
        if spec is None:
            return None
        locations = list(spec.submodule_search_locations or [])
        origin = spec.origin
    else:
        result = run_bounded([ctx.python, "-c", _FIND_SCRIPT], ctx.budget(3.0), ctx.env)
        if isinstance(result, Unavailable):
            if result.reason == "timeout":
                return Unavailable("timeout", f"{ctx.python} did not answer within {ctx.budget(3.0):.1f} s")
            return Unavailable(result.reason, f"cannot run {ctx.python}: {result.detail}")
        answer = _parse_marked(result.stdout)
        if "error" in answer:
            return Unavailable("error", f"{ctx.python}: looking for torch failed: {answer['error']}")
        if "found" not in answer:
            return Unavailable(
                "error", f"{ctx.python} is not a usable Python (exit {result.returncode}: {_last_line(result)})"
            )
        if not answer["found"]:
            return None
        locations = [str(p) for p in answer.get("locations") or []]
        origin = answer.get("origin")
    if isinstance(origin, str) and origin.endswith("__init__.py"):
        return os.path.dirname(origin)
    if locations:
        return locations[0]  # a namespace package: a torch directory without __init__.py
    return Unavailable("error", f"torch found at {origin!r} is not a package")


def _normalise_cudnn(value: Any) -> str | None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        return None
    if value >= 90000:  # cuDNN 9: major*10000 + minor*100 + patch
        return f"{value // 10000}.{value // 100 % 100}.{value % 100}"
    return f"{value // 1000}.{value // 100 % 10}.{value % 100}"  # cuDNN <= 8: major*1000 + minor*100 + patch


def _normalise_nccl(value: Any) -> str | None:
    if isinstance(value, list) and value and all(isinstance(p, int) for p in value):
        return ".".join(str(p) for p in value[:3])
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        if value >= 20900:  # NCCL >= 2.9: major*10000 + minor*100 + patch
            return f"{value // 10000}.{value // 100 % 100}.{value % 100}"
        return f"{value // 1000}.{value // 100 % 10}.{value % 100}"
    return None


def _import_facts(ctx: ProbeContext, files: dict[str, Any] | None) -> dict[str, Any]:
    """Overlay what an imported torch says on the file facts (``files``; None if none)."""
    budget = ctx.budget(20.0)
    result = run_bounded([ctx.python, "-c", _IMPORT_SCRIPT], budget, ctx.env, partial=True)
    if isinstance(result, Unavailable):
        failed = Unavailable(result.reason, f"cannot run {ctx.python}: {result.detail}")
        return files if files is not None else _all(failed)
    answer = _parse_marked(result.stdout)
    late = Unavailable(
        "timeout", f"importing torch in {ctx.python} did not finish within {budget:.1f} s (driver unresponsive?)"
    )
    if result.cut:  # what it had not said by then, it will not say
        late = Unavailable(
            "error", f"importing torch in {ctx.python} printed more than gpudoctor reads (1 MiB) and was stopped"
        )
    if "import_error" in answer:
        if answer.get("missing"):
            return _all(Unavailable("not_found", f"torch is not installed for {ctx.python}"), installed=False)
        broken = Unavailable("error", f"import torch failed: {answer['import_error']}")
        out = files if files is not None else _all(broken, installed=True)
        out["cuda_available"] = broken
        out["device_count"] = broken
        return out
    if "version" not in answer:
        if result.timed_out or result.cut:
            reason = late
        else:
            reason = Unavailable(
                "error", f"import torch in {ctx.python} died (exit {result.returncode}: {_last_line(result)})"
            )
        out = files if files is not None else _all(reason)
        out["cuda_available"] = reason
        out["device_count"] = reason
        return out

    location = str(answer.get("location") or "")
    out = package_facts(location, scan_binary=False) if files is None or files.get("location") != location else files
    version = str(answer["version"])
    cuda = answer.get("cuda") if isinstance(answer.get("cuda"), str) else None
    hip = answer.get("hip") if isinstance(answer.get("hip"), str) else None
    build = _build(version, cuda, hip, answer.get("xpu"))
    out.update(installed=True, version=version, location=location, cuda_version=cuda, hip_version=hip, build=build)

    def pick(key: str, convert: Any) -> Any:
        if key in answer:
            value = convert(answer[key])
            return value if value is not None else Unavailable("not_found", f"torch reports no {key} version")
        if f"{key}_error" in answer:
            return Unavailable("error", f"torch: {answer[key + '_error']}")
        return late

    arch = pick("arch_list", lambda v: [str(a) for a in v] if isinstance(v, list) else None)
    out["arch_list"] = arch
    out["arch_list_source"] = "import" if isinstance(arch, list) else arch
    if build == "cuda":
        out["cudnn_version"] = pick("cudnn", _normalise_cudnn)
    if build in ("cuda", "rocm"):
        out["nccl_version"] = pick("nccl", _normalise_nccl)
    out["cuda_available"] = pick("cuda_available", lambda v: v if isinstance(v, bool) else None)
    out["device_count"] = pick(
        "device_count", lambda v: v if isinstance(v, int) and not isinstance(v, bool) else None
    )
    return out


# ---------------------------------------------------------------------------
# recorded answers (fixture roots)

_ENUMS = {
    "build": ("cuda", "rocm", "cpu", "xpu", "other"),
    "arch_list_source": ("import", "binary"),
}


def _valid(field: str, value: Any) -> bool:
    if field in ("installed", "cuda_available"):
        return isinstance(value, bool)
    if field == "device_count":
        return isinstance(value, int) and not isinstance(value, bool)
    if field in ("cuda_version", "hip_version"):
        return value is None or isinstance(value, str)
    if field in _ENUMS:
        return value in _ENUMS[field]
    if field == "arch_list":
        return isinstance(value, list) and all(isinstance(a, str) for a in value)
    return isinstance(value, str)


def recorded_facts(path: str) -> dict[str, Any] | Unavailable:
    """The torch section recorded in a fixture root's torch.json, loosely checked."""
    try:
        raw = read_file_bytes(path)
    except FileNotFoundError:
        return Unavailable("not_found", "no recorded torch facts in fixture root")
    except OSError as exc:
        return Unavailable("error", f"{path}: not readable JSON: {exc}")
    return recorded_from(raw, path)


def recorded_from(raw: bytes, path: str) -> dict[str, Any] | Unavailable:
    """The torch section from the bytes of a torch.json (``path`` names it in messages).

    Read as strict JSON (gpudoctor.inputs.parse_json), as a snapshot is: what json.loads takes
    beyond it (NaN, a 4000-digit integer) would go into a snapshot that check --facts refuses."""
    data = parse_recorded_json(raw, path)
    if isinstance(data, Unavailable):
        return data
    try:
        data = from_jsonable(data)
    except SnapshotError as exc:
        return Unavailable("error", f"{path}: {exc}")
    except RecursionError:
        return Unavailable("error", f"{path}: nested too deeply")
    if isinstance(data, Unavailable):
        return data
    if not isinstance(data, dict):
        return Unavailable("error", f"{path}: expected a JSON object, got {type(data).__name__}")
    out: dict[str, Any] = {}
    for field in FIELDS:
        if field not in data:
            out[field] = Unavailable("not_found", f"{field} not recorded in torch.json")
        elif isinstance(data[field], Unavailable) or _valid(field, data[field]):
            out[field] = data[field]
        else:
            value = repr(data[field])  # escaped already; only cut short
            shown = value if len(value) <= 60 else value[:57] + "..."
            out[field] = Unavailable("error", f"torch.json: unexpected {field} {shown}")
    return out


def collect(ctx: ProbeContext) -> dict[str, Any] | Unavailable:
    if not ctx.live:
        # read inside the root, as every file of it is: torch.json -> /etc/shadow reads nothing
        raw = read_recorded(ctx, "torch.json")
        if isinstance(raw, Unavailable):
            if raw.reason == "not_found":
                return Unavailable("not_found", "no recorded torch facts in fixture root")
            return raw
        return recorded_from(raw, str(ctx.path("/torch.json")))
    where = locate(ctx)
    if isinstance(where, Unavailable):
        if ctx.torch_import and where.reason not in ("timeout", "not_found", "no_permission"):
            return _import_facts(ctx, None)
        return _all(where)
    if where is None:
        return _all(Unavailable("not_found", f"torch is not installed for {ctx.python}"), installed=False)
    files = package_facts(where, scan_binary=not ctx.torch_import)
    if ctx.torch_import:
        files = _import_facts(ctx, files)
        if not isinstance(files.get("arch_list"), list) and files.get("build") == "cuda":
            # The import failed or hung: the binary still tells which GPUs the build has kernels for.
            library = _cuda_library(where)
            if library is not None:
                archs = scan_fatbin_archs(library)
                if isinstance(archs, list):
                    files["arch_list"], files["arch_list_source"] = archs, "binary"
    return files
