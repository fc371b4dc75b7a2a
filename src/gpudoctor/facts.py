"""The facts snapshot: what probes read, as plain JSON-able data.

A fact is either a known value (str, int, float, bool, None-free lists and
dicts of those) or an :class:`Unavailable` marker that says why it is not
known. Probes build nested dicts of facts; the snapshot is those dicts plus
``schema_version`` and the gpudoctor version. Nothing in here judges.

On disk an unavailable fact is ``{"unavailable": "<reason>", "detail": "..."}``.
"""

from __future__ import annotations

import json
import os
from typing import Any, Iterator, Mapping

from . import __version__
from .frozen import Frozen

SCHEMA_VERSION = 1

# Why a fact is not known. Kept small on purpose: a rule only needs to know
# that it cannot judge, a person needs the detail.
REASONS = (
    "not_found",
    "not_supported",
    "no_permission",
    "driver_not_loaded",
    "timeout",
    "error",
)


class Unavailable(Frozen):
    """A fact that could not be read, with the reason and a human detail."""

    __slots__ = ("reason", "detail")
    reason: str
    detail: str

    def __init__(self, reason: str, detail: str = "") -> None:
        object.__setattr__(self, "reason", reason)
        object.__setattr__(self, "detail", detail)
        if reason not in REASONS:
            raise ValueError(f"unknown unavailable reason {reason!r}")

    def to_json(self) -> dict[str, str]:
        return {"unavailable": self.reason, "detail": self.detail}

    def __str__(self) -> str:
        return f"unavailable ({self.reason}{': ' + self.detail if self.detail else ''})"


def is_unavailable(value: Any) -> bool:
    return isinstance(value, Unavailable)


def to_jsonable(value: Any) -> Any:
    """Convert a facts tree (with Unavailable markers) to plain JSON data."""
    if isinstance(value, Unavailable):
        return value.to_json()
    if isinstance(value, Mapping):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v) for v in value]
    return value


def from_jsonable(value: Any) -> Any:
    """Inverse of :func:`to_jsonable`: turn marker dicts back into Unavailable."""
    if isinstance(value, dict):
        if set(value) <= {"unavailable", "detail"} and "unavailable" in value:
            reason = value["unavailable"]
            if reason not in REASONS:
                raise SnapshotError(f"unknown unavailable reason {reason!r}")
            return Unavailable(reason, str(value.get("detail", "")))
        return {k: from_jsonable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [from_jsonable(v) for v in value]
    return value


class SnapshotError(Exception):
    """A snapshot that cannot be used: unreadable, not JSON, wrong schema."""


_SCALARS = frozenset({str, int, float, bool, type(None)})


def walk(value: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    """Yield (dotted path, leaf) for every leaf of a facts tree. (A plain value is yielded where it
    is found, not through one more generator: a snapshot has thousands of them.)"""
    kind = type(value)
    if kind is dict or (kind is not list and kind not in _SCALARS and isinstance(value, Mapping)):
        for k, v in value.items():
            sub = f"{path}.{k}" if path else str(k)
            if type(v) in _SCALARS:
                yield sub, v
            else:
                yield from walk(v, sub)
    elif kind is list or (kind not in _SCALARS and isinstance(value, list)):
        for i, v in enumerate(value):
            sub = f"{path}[{i}]"
            if type(v) in _SCALARS:
                yield sub, v
            else:
                yield from walk(v, sub)
    else:
        yield path, value


def make_snapshot(sections: Mapping[str, Any], meta: Mapping[str, Any]) -> dict[str, Any]:
    snap: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "gpudoctor_version": __version__,
        "meta": dict(meta),
    }
    snap.update(sections)
    return snap


def scrub(snapshot: dict[str, Any]) -> dict[str, Any]:
    """Replace what identifies a machine (hostname, GPU UUIDs and serials) for sharing a snapshot.

    UUIDs keep their shape (GPU-00000000-0000-0000-0000-00000000000N) so rules that parse them
    still work; CUDA_VISIBLE_DEVICES entries naming a real UUID are rewritten the same way.
    """
    out = json.loads(json.dumps(to_jsonable(snapshot)))
    mapping: dict[str, str] = {}
    host = out.get("host")
    if isinstance(host, dict) and isinstance(host.get("hostname"), str):
        host["hostname"] = "gpu-host"
    nvml = out.get("nvml")
    gpus = nvml.get("gpus") if isinstance(nvml, dict) else None
    for i, gpu in enumerate(gpus if isinstance(gpus, list) else []):
        uuid = gpu.get("uuid")
        if isinstance(uuid, str):
            mapping[uuid] = f"GPU-00000000-0000-0000-0000-{i:012d}"
            gpu["uuid"] = mapping[uuid]
        if isinstance(gpu.get("serial"), str):
            gpu["serial"] = f"SCRUBBED{i}"
    env = host.get("env") if isinstance(host, dict) else None
    if isinstance(env, dict):
        for key, value in env.items():
            for real, fake in mapping.items():
                value = value.replace(real, fake)
            env[key] = value
    result: dict[str, Any] = from_jsonable(out)
    return result


def dumps(snapshot: Mapping[str, Any]) -> str:
    return json.dumps(to_jsonable(snapshot), indent=2, sort_keys=False) + "\n"


def load_snapshot(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read and validate a snapshot file; raise SnapshotError with a clear message.

    The file is read as every untrusted input is (gpudoctor.inputs): a regular file only, at
    most MAX_SNAPSHOT_BYTES, so a FIFO or /dev/zero is refused instead of hanging or filling memory."""
    from .inputs import MAX_SNAPSHOT_BYTES, InputError, read_text_input

    try:
        text = read_text_input(path, MAX_SNAPSHOT_BYTES, "snapshot")
    except InputError as exc:
        raise SnapshotError(str(exc)) from None
    return parse_snapshot(text, str(path))


# A snapshot is a handful of levels deep; validating and converting one walk it recursively, so a
# file nested hundreds of levels deep (by accident or on purpose) is refused before that.
MAX_SNAPSHOT_DEPTH = 64


def parse_snapshot(text: str, origin: str = "<snapshot>") -> dict[str, Any]:
    """Strict JSON (gpudoctor.inputs.parse_json: no NaN or Infinity, bounded integers and
    nesting, lone surrogates replaced), then the schema; SnapshotError on any problem."""
    from .inputs import InputError, parse_json, type_name

    try:
        data = parse_json(text, origin, "gpudoctor snapshot", MAX_SNAPSHOT_DEPTH)
    except InputError as exc:
        raise SnapshotError(str(exc)) from None
    if not isinstance(data, dict):
        raise SnapshotError(f"{origin}: not a gpudoctor snapshot: top level is {type_name(data)}, not an object")
    version = data.get("schema_version")
    if version is None:
        raise SnapshotError(f"{origin}: not a gpudoctor snapshot: no schema_version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise SnapshotError(f"{origin}: schema_version must be an integer, got {version!r}")
    if version > SCHEMA_VERSION:
        raise SnapshotError(
            f"{origin}: snapshot schema_version {version} is newer than this gpudoctor understands "
            f"({SCHEMA_VERSION}); upgrade gpudoctor "
            f"(snapshot written by gpudoctor {data.get('gpudoctor_version', '?')})"
        )
    if version < 1:
        raise SnapshotError(f"{origin}: snapshot schema_version {version} is not supported")
    from .schemas import validate_facts

    problems = validate_facts(data)
    if problems:
        raise SnapshotError(f"{origin}: snapshot does not match the facts schema: {problems}")
    try:
        return from_jsonable(data)  # type: ignore[no-any-return]
    except SnapshotError as exc:
        raise SnapshotError(f"{origin}: {exc}") from None
