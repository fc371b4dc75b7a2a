"""Host facts: identity, OS, interpreter, CPU/memory limits, container, shm, memlock, environment.

Reads (all through the context root):

- ``/proc/sys/kernel/hostname``, ``/proc/sys/kernel/osrelease``, ``/proc/sys/kernel/arch``
- ``/etc/os-release`` (fallback ``/usr/lib/os-release``), parsed here
- ``/sys/devices/system/cpu/online``, ``/proc/meminfo`` (MemTotal)
- ``/proc/self/status`` (Cpus_allowed_list, Mems_allowed_list), ``/proc/self/limits`` (Max locked memory)
- ``/proc/uptime`` (seconds since boot: the time base for counters that start at boot)
- ``/proc/sys/kernel/random/boot_id`` (this boot's random id: two snapshots with the same one are of
  one boot, so counters since boot can be compared; Documentation/admin-guide/sysctl/kernel.rst)
- ``/proc/self/cgroup`` and ``/sys/fs/cgroup/.../cpuset.cpus.effective`` (v2) or
  ``/sys/fs/cgroup/cpuset/.../cpuset.effective_cpus|cpuset.cpus`` (v1)
- ``/.dockerenv``, ``/run/.containerenv``, ``/proc/1/cgroup``, ``/proc/self/mountinfo`` (container signs)
- ``/proc/self/mounts`` (fallback ``/proc/mounts``): the size= option of the /dev/shm tmpfs

Live only (no file stands for them under a fixture root): ``platform.machine()``,
``os.confstr('CS_GNU_LIBC_VERSION')``, ``os.statvfs('/dev/shm')`` when the mount has no size option,
``resource.getrlimit(RLIMIT_MEMLOCK)`` when proc/self/limits cannot be read, and the target
interpreter (``platform.python_version()`` in process, else ``<ctx.python> -c ...`` under ``ctx.budget(3)``).
Under a fixture root the interpreter facts come from ``python_version`` / ``python_executable``
keys of ``torch.json`` when the recording has them.
"""

from __future__ import annotations

import os
import platform
import re
import sys
from typing import Any, Mapping

from ..context import ProbeContext, excerpt, shown
from ..facts import Unavailable
from ..lazy_re import LazyPattern
from ..model.cpus import parse_cpulist
from .files import (
    exists,
    parse_recorded_json,
    read_cpulist,
    read_lines,
    read_parsed,
    read_recorded,
    read_text,
    resolve_path,
)
from .tools import run_bounded

ENV_PREFIXES = (
    "CUDA_", "NCCL_", "HIP_", "ROCR_", "ROCM_", "HSA_", "PYTORCH_", "TORCH_", "NVIDIA_",
    "UCX_", "OMP_", "KMP_", "NSIGHT_", "ASCEND_",
)
ENV_NAMES = frozenset({
    "SLURM_LOCALID", "SLURM_JOB_ID", "SLURM_STEP_GPUS", "SLURM_JOB_GPUS",
    "LOCAL_RANK", "RANK", "WORLD_SIZE", "LD_LIBRARY_PATH", "LD_PRELOAD",
    "COMPUTE_PROFILE", "OPENCL_PROFILE", "CUDA_INJECTION64_PATH",
})

# Architectures that RHEL/Fedora/SUSE kernels append to their release string.
_RELEASE_ARCH_SUFFIXES = ("x86_64", "aarch64", "ppc64le", "s390x", "riscv64")

_SIZE_SUFFIX = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}

# Sizes a file can have at most; a longer one is not that file (EFBIG: unavailable, error). The
# kernel's host name and release are at most 64 bytes (__NEW_UTS_LEN); os-release is a few lines.
MAX_UTS_FILE = 256
MAX_OS_RELEASE = 1 << 16
# What of an os-release value is kept as a fact (PRETTY_NAME is some 30 characters).
MAX_OS_FIELD = 256
# cgroup files are read this far: the container signs are in the first lines.
MAX_CGROUP_TEXT = 1 << 16
# A cgroup path longer or deeper than this is not a machine's (systemd nests a few levels).
MAX_CGROUP_PATH = 4096
MAX_CGROUP_DEPTH = 64
# Digits a size or limit has at most (2**64 has 20).
MAX_DIGITS = 20
# What a fact keeps of an environment value read from a root's proc/self/environ.
MAX_ENV_VALUE = 1 << 14


def collect(ctx: ProbeContext) -> dict[str, Any]:
    osrelease = read_text(ctx, "/proc/sys/kernel/osrelease", limit=MAX_UTS_FILE)
    os_fields = _os_release(ctx)
    status = _proc_status(ctx)
    memlock_soft, memlock_hard = _memlock(ctx)
    python_version, python_executable = _python(ctx)
    in_container, runtime = _container(ctx)
    return {
        "hostname": read_text(ctx, "/proc/sys/kernel/hostname", limit=MAX_UTS_FILE),
        "kernel_release": osrelease,
        "os_id": os_fields["ID"],
        "os_version": os_fields["VERSION_ID"],
        "os_name": os_fields["PRETTY_NAME"],
        "arch": _arch(ctx, osrelease),
        "glibc": _glibc(ctx),
        "python_version": python_version,
        "python_executable": python_executable,
        "cpu_count": _cpu_count(ctx),
        "memory_total_bytes": _mem_total(ctx),
        "allowed_cpus": _status_list(status, "Cpus_allowed_list"),
        "allowed_mems": _status_list(status, "Mems_allowed_list"),
        "cgroup_cpus": _cgroup_cpus(ctx),
        "in_container": in_container,
        "container_runtime": runtime,
        "wsl": _wsl(osrelease),
        "shm_bytes": _shm_bytes(ctx),
        "memlock_soft_bytes": memlock_soft,
        "memlock_hard_bytes": memlock_hard,
        "uptime_s": read_parsed(ctx, "/proc/uptime", lambda text: float(text.split()[0])),
        "boot_id": read_parsed(ctx, "/proc/sys/kernel/random/boot_id", parse_boot_id),
        "env": gpu_env(ctx.env) if ctx.live else _bounded(gpu_env(ctx.env)),
    }


_BOOT_ID_RE = LazyPattern(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def parse_boot_id(text: str) -> str:
    """The kernel's boot id, a UUID in lower case ("6f2c...-..."); raises ValueError."""
    value = text.strip().lower()
    if not _BOOT_ID_RE.match(value):
        raise ValueError("not a UUID")
    return value


def gpu_env(env: Mapping[str, str]) -> dict[str, str]:
    """The variables of env that change how GPU jobs behave (PATH deliberately left out)."""
    return {
        key: env[key]
        for key in sorted(env)
        if key in ENV_NAMES or key.startswith(ENV_PREFIXES)
    }


def _bounded(env: dict[str, str]) -> dict[str, str]:
    """A root's environment (a file of the tree) as facts: each value at most MAX_ENV_VALUE long."""
    return {k: v if len(v) <= MAX_ENV_VALUE else v[: MAX_ENV_VALUE - 3] + "..." for k, v in env.items()}


# --- OS -------------------------------------------------------------------------------------------

def parse_os_release(text: str) -> dict[str, str]:
    """Parse os-release(5): KEY=value lines, values in shell quoting."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.partition("=")
        key = key.strip()
        if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
            out[key] = _unquote(value.strip())
    return out


def _unquote(value: str) -> str:
    """One shell word as os-release(5) quotes it: double quotes (backslash escapes the four
    characters backslash, double quote, dollar, backtick), single quotes (literal), bare text.

    An unbalanced quote runs to the end of the line: keep what is there rather than lose it.
    """
    out: list[str] = []
    i, n = 0, len(value)
    while i < n:
        ch = value[i]
        if ch == '"':
            i += 1
            while i < n and value[i] != '"':
                if value[i] == "\\" and i + 1 < n and value[i + 1] in '"\\$`':
                    i += 1
                out.append(value[i])
                i += 1
            i += 1
        elif ch == "'":
            end = value.find("'", i + 1)
            end = n if end < 0 else end
            out.append(value[i + 1:end])
            i = end + 1
        elif ch == "\\" and i + 1 < n:
            out.append(value[i + 1])
            i += 2
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def _os_release(ctx: ProbeContext) -> dict[str, Any]:
    keys = ("ID", "VERSION_ID", "PRETTY_NAME")
    first: Unavailable | None = None
    for candidate in ("/etc/os-release", "/usr/lib/os-release"):
        # etc/os-release is usually a link into usr/lib; resolve it inside the root so that a
        # captured tree with an absolute link does not read this machine's file.
        where = resolve_path(ctx, candidate)
        text = where if isinstance(where, Unavailable) else read_text(ctx, where, limit=MAX_OS_RELEASE)
        if isinstance(text, Unavailable):
            first = first or text
            continue
        fields = parse_os_release(text)
        return {k: _os_field(ctx, candidate, k, fields.get(k)) for k in keys}
    missing = first or Unavailable("not_found", "no os-release file")
    return {k: missing for k in keys}


def _os_field(ctx: ProbeContext, candidate: str, key: str, value: str | None) -> str | Unavailable:
    if not value:
        return Unavailable("not_found", f"no {key}= in {ctx.path(candidate)}")
    if len(value) > MAX_OS_FIELD:
        return Unavailable("error", f"{ctx.path(candidate)}: {key}= is {len(value)} characters long: {excerpt(value)}")
    return value


def _arch(ctx: ProbeContext, osrelease: str | Unavailable) -> str | Unavailable:
    if ctx.live:
        machine = platform.machine()
        return machine if machine else Unavailable("not_found", "platform.machine() is empty")
    recorded = read_text(ctx, "/proc/sys/kernel/arch", limit=MAX_UTS_FILE)  # only newer kernels have this sysctl
    if not isinstance(recorded, Unavailable) or recorded.reason != "not_found":
        return recorded  # the file, or why it is there and unreadable (a loop, a link out of the root)
    if isinstance(osrelease, str):
        for suffix in _RELEASE_ARCH_SUFFIXES:
            if osrelease.endswith("." + suffix):
                return suffix
    return Unavailable("not_found", "architecture not recorded in the fixture root (no proc/sys/kernel/arch)")


def _glibc(ctx: ProbeContext) -> str | Unavailable:
    if not ctx.live:
        return Unavailable("not_found", "the C library is only known on the live machine")
    try:
        value = os.confstr("CS_GNU_LIBC_VERSION")
    except (ValueError, OSError, AttributeError):
        value = None
    if value and value.startswith("glibc "):
        return value.split(" ", 1)[1]
    lib, version = platform.libc_ver()
    if lib == "glibc" and version:
        return version
    return Unavailable("not_found", "not a glibc system (musl or another C library)")


def _wsl(osrelease: str | Unavailable) -> bool | Unavailable:
    if isinstance(osrelease, Unavailable):
        return osrelease
    return "microsoft" in osrelease.lower() or "wsl" in osrelease.lower()


# --- interpreter ----------------------------------------------------------------------------------

_PY_SNIPPET = "import sys; sys.stdout.write(sys.version.split()[0] + '\\n' + sys.executable + '\\n')"


def _python(ctx: ProbeContext) -> tuple[str | Unavailable, str | Unavailable]:
    if not ctx.live:
        return _recorded_python(ctx)
    if ctx.python == sys.executable or os.path.abspath(ctx.python) == os.path.abspath(sys.executable):
        return platform.python_version(), sys.executable
    # -E -s keep the user's PYTHON* variables and user site out of a simple version query.
    argv = [ctx.python, "-E", "-s", "-c", _PY_SNIPPET]
    timeout = ctx.budget(3.0)
    # run_bounded never waits on a child stuck in the kernel, unlike subprocess.run(timeout=...)
    proc = run_bounded(argv, timeout, env=dict(ctx.env))
    if isinstance(proc, Unavailable):
        return proc, proc
    lines = proc.stdout.splitlines()
    if proc.returncode != 0 or len(lines) < 2 or not re.match(r"\d+\.\d+", lines[0]):
        tail = proc.stderr.strip().splitlines()[-1:] or ["no output"]
        failed = Unavailable("error", f"{ctx.python} exited {proc.returncode}: {tail[0][:200]}")
        return failed, failed
    return lines[0].strip(), lines[1].strip() or ctx.python


def _recorded_python(ctx: ProbeContext) -> tuple[str | Unavailable, str | Unavailable]:
    raw = read_recorded(ctx, "torch.json")  # read inside the root, like every file of it
    absent = Unavailable("not_found", "interpreter not recorded in the fixture root")
    if isinstance(raw, Unavailable):
        return absent, absent
    data = parse_recorded_json(raw, "torch.json")  # strict JSON, as the torch probe reads it
    if not isinstance(data, dict):
        return absent, absent
    out: list[str | Unavailable] = []
    for key in ("python_version", "python_executable"):
        value = data.get(key)
        out.append(value if isinstance(value, str) and value else absent)
    return out[0], out[1]


# --- CPU, memory, limits --------------------------------------------------------------------------

def _cpu_count(ctx: ProbeContext) -> int | Unavailable:
    cpus = read_cpulist(ctx, "/sys/devices/system/cpu/online")
    if isinstance(cpus, Unavailable):
        return cpus
    if not cpus:
        return Unavailable("error", f"{ctx.path('/sys/devices/system/cpu/online')} lists no CPUs")
    return len(cpus)


def _mem_total(ctx: ProbeContext) -> int | Unavailable:
    lines = read_lines(ctx, "/proc/meminfo")
    if isinstance(lines, Unavailable):
        return lines
    for line in lines:
        if line.startswith("MemTotal:"):
            parts = line.split()
            if len(parts) >= 2 and parts[1].isascii() and parts[1].isdecimal() and len(parts[1]) <= MAX_DIGITS:
                unit = parts[2].lower() if len(parts) > 2 else ""
                return int(parts[1]) * (1024 if unit == "kb" else 1)
            return Unavailable("error", f"{ctx.path('/proc/meminfo')}: unexpected MemTotal line {excerpt(line)}")
    return Unavailable("not_found", f"{ctx.path('/proc/meminfo')}: no MemTotal line")


def _proc_status(ctx: ProbeContext) -> dict[str, str] | Unavailable:
    lines = read_lines(ctx, "/proc/self/status")
    if isinstance(lines, Unavailable):
        return lines
    out: dict[str, str] = {}
    for line in lines:
        key, sep, value = line.partition(":")
        if sep:
            out[key.strip()] = value.strip()
    return out


def _status_list(status: dict[str, str] | Unavailable, key: str) -> list[int] | Unavailable:
    if isinstance(status, Unavailable):
        return status
    if key not in status:
        return Unavailable("not_found", f"no {key} in proc/self/status")
    try:
        return parse_cpulist(status[key])
    except ValueError as exc:
        return Unavailable("error", f"proc/self/status {key}: {excerpt(status[key])} is not a list ({exc})")


def _memlock(ctx: ProbeContext) -> tuple[int | Unavailable, int | Unavailable]:
    lines = read_lines(ctx, "/proc/self/limits")
    if isinstance(lines, Unavailable):
        if ctx.live:
            return _memlock_rlimit()
        return lines, lines
    for line in lines:
        if line.startswith("Max locked memory"):
            fields = line[len("Max locked memory"):].split()
            if len(fields) >= 2:
                soft, hard = _limit_value(fields[0]), _limit_value(fields[1])
                if soft is not None and hard is not None:
                    return soft, hard
            bad = Unavailable("error", f"{ctx.path('/proc/self/limits')}: unexpected line {excerpt(line.strip())}")
            return bad, bad
    gone = Unavailable("not_found", f"{ctx.path('/proc/self/limits')}: no 'Max locked memory' line")
    return gone, gone


def _limit_value(text: str) -> int | None:
    if text == "unlimited":
        return -1
    return int(text) if text.isascii() and text.isdecimal() and len(text) <= MAX_DIGITS else None


def _memlock_rlimit() -> tuple[int | Unavailable, int | Unavailable]:
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    except (ImportError, OSError, ValueError, AttributeError) as exc:
        failed = Unavailable("error", f"getrlimit(RLIMIT_MEMLOCK): {exc}")
        return failed, failed
    infinity = resource.RLIM_INFINITY
    return (-1 if soft == infinity else soft), (-1 if hard == infinity else hard)


# --- cgroup cpuset --------------------------------------------------------------------------------

def _cgroup_cpus(ctx: ProbeContext) -> list[int] | Unavailable:
    lines = read_lines(ctx, "/proc/self/cgroup")
    if isinstance(lines, Unavailable):
        return lines
    v1_path: str | None = None
    v2_path: str | None = None
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        hier, controllers, path = parts
        if hier == "0" and controllers == "":
            v2_path = path
        elif "cpuset" in controllers.split(","):
            v1_path = path
    # A controller lives in one hierarchy only: a v1 cpuset line means the v2 tree has no cpuset.
    if v1_path is not None:
        return _walk_cpuset(ctx, "/sys/fs/cgroup/cpuset", v1_path, ("cpuset.effective_cpus", "cpuset.cpus"))
    if v2_path is not None:
        return _walk_cpuset(ctx, "/sys/fs/cgroup", v2_path, ("cpuset.cpus.effective",))
    return Unavailable("not_found", "proc/self/cgroup names no cpuset hierarchy")


def _walk_cpuset(ctx: ProbeContext, mount: str, cgroup: str, names: tuple[str, ...]) -> list[int] | Unavailable:
    # Walk from the process's cgroup up to the mount: in v2 a cgroup without the cpuset
    # controller has no file and inherits its parent's set, and inside a container without a
    # cgroup namespace the host path does not exist there, but the mount root is the
    # container's own cgroup.
    parts = [p for p in cgroup.split("/") if p and p not in (".", "..")] if len(cgroup) <= MAX_CGROUP_PATH else []
    if len(cgroup) > MAX_CGROUP_PATH or len(parts) > MAX_CGROUP_DEPTH:
        return Unavailable("error", f"cgroup {excerpt(cgroup)} is longer or deeper than a cgroup path can be")
    for depth in range(len(parts), -1, -1):
        base = "/".join([mount] + parts[:depth])
        for name in names:
            cpus = read_cpulist(ctx, f"{base}/{name}")
            if isinstance(cpus, list) or cpus.reason != "not_found":
                return cpus
    return Unavailable("not_found", f"no cpuset file under {ctx.path(mount)} for cgroup {shown(cgroup, 120)}")


# --- container ------------------------------------------------------------------------------------

# Order matters: the orchestrator says more about what to do (shm, limits) than the engine below it.
_CGROUP_SIGNS = (
    ("kubernetes", LazyPattern(r"kubepods")),
    ("podman", LazyPattern(r"libpod")),
    ("docker", LazyPattern(r"/docker[/-][0-9a-f]{12}|docker-[0-9a-f]{12,}\.scope")),
    ("containerd", LazyPattern(r"cri-containerd-[0-9a-f]|nerdctl-[0-9a-f]|/containerd/")),
    ("lxc", LazyPattern(r"/lxc/|lxc\.payload")),
)
# Engines bind-mount these files from their per-container state directories; on a host,
# mounts elsewhere under those directories are normal and say nothing.
_CONTAINER_BIND_TARGETS = frozenset({"/etc/hostname", "/etc/hosts", "/etc/resolv.conf"})
_MOUNTINFO_SIGNS = (
    ("kubernetes", "/var/lib/kubelet/pods/"),
    ("podman", "/containers/storage/overlay-containers/"),
    ("docker", "/var/lib/docker/containers/"),
    ("containerd", "/io.containerd."),
)


def _container(ctx: ProbeContext) -> tuple[bool | Unavailable, str | Unavailable]:
    """Container signs, strongest first; none found is 'not in a container'."""
    signs: list[str] = []
    if "KUBERNETES_SERVICE_HOST" in ctx.env:
        signs.append("kubernetes")
    if exists(ctx, "/run/.containerenv"):
        signs.append("podman")
    if exists(ctx, "/.dockerenv"):
        signs.append("docker")
    for cgroup_file in ("/proc/1/cgroup", "/proc/self/cgroup"):
        text = read_text(ctx, cgroup_file, whole=False, limit=MAX_CGROUP_TEXT)
        if isinstance(text, str):
            signs.extend(name for name, pattern in _CGROUP_SIGNS if pattern.search(text))
    overlay_root = False
    mountinfo = read_lines(ctx, "/proc/self/mountinfo")
    if isinstance(mountinfo, list):
        for line in mountinfo:
            fields = line.split()
            if len(fields) >= 5:
                if fields[4] in _CONTAINER_BIND_TARGETS:
                    signs.extend(name for name, needle in _MOUNTINFO_SIGNS if needle in fields[3])
                if fields[4] == "/" and " - overlay " in line:
                    overlay_root = True
    env_kind = ctx.env.get("container", "").strip()
    if env_kind:
        signs.append(_normalise_runtime(env_kind))
    if signs:
        order = [name for name, _ in _CGROUP_SIGNS] + ["systemd-nspawn"]
        ranked = sorted(set(signs), key=lambda s: order.index(s) if s in order else len(order))
        return True, ranked[0]
    if overlay_root:
        return True, Unavailable("not_found", "root is an overlay mount but no runtime left a sign")
    return False, Unavailable("not_found", "not in a container")


def _normalise_runtime(value: str) -> str:
    value = value.lower()
    if value.startswith("podman"):
        return "podman"
    if value == "oci":  # set by several engines; not enough to name one
        return "oci"
    return value


# --- /dev/shm -------------------------------------------------------------------------------------

def _shm_bytes(ctx: ProbeContext) -> int | Unavailable:
    source = "/proc/self/mounts"
    lines = read_lines(ctx, source)
    if isinstance(lines, Unavailable):
        source = "/proc/mounts"
        lines = read_lines(ctx, source)
    if isinstance(lines, Unavailable):
        return lines
    options: str | None = None
    for line in lines:  # the last mount on /dev/shm is the one in effect
        fields = line.split()
        if len(fields) >= 4 and fields[1] == "/dev/shm":
            options = fields[3]
    if options is None:
        return Unavailable("not_found", f"no /dev/shm mount in {ctx.path(source)}")
    for option in options.split(","):
        if option.startswith("size="):
            size = _parse_size(option[len("size="):])
            if size is None:
                return Unavailable("error", f"{ctx.path(source)}: unexpected /dev/shm option {excerpt(option)}")
            if size > 0:
                return size
            break  # size=0 is "no limit" for tmpfs: fall through to what the filesystem says
    if not ctx.live:
        return Unavailable("not_found", "/dev/shm mount has no size option (kernel default) in the fixture root")
    try:
        st = os.statvfs(ctx.path("/dev/shm"))
    except OSError as exc:
        return Unavailable("error", f"statvfs(/dev/shm): {exc.strerror or exc}")
    return st.f_blocks * st.f_frsize


def _parse_size(text: str) -> int | None:
    match = re.fullmatch(r"([0-9]{1,20})([kmgtKMGT]?)", text) if len(text) <= MAX_DIGITS + 1 else None
    if not match:
        return None
    return int(match.group(1)) * _SIZE_SUFFIX[match.group(2).lower()]
