"""The recorder's backend: a machine's NVML answers in the replay format (``nvml.json`` of a
fixture root).

:func:`gpudoctor.probes.nvml.record` runs the probe's own query code (``read_nvml``, in the
probe's child process under a deadline) against :class:`RecordingBackend`, a wrapper around
pynvml that passes every call through and writes down each answer or NVML error under the key
the fake NVML looks up (:func:`gpudoctor.probes.nvml.replay.call_key`). So the recorder asks
exactly what the probe asks; there is no second query list to keep in step. This module is the
child's side only (it never starts a child), so nothing imports back into it.

NVML APIs read: those of :mod:`gpudoctor.probes.nvml` (see its docstring).
With ``scrub`` (the default) UUIDs become ``GPU-00000000-0000-0000-0000-<index
as 12 digits>`` and serial numbers ``SCRUBBED<index>``; nothing else read by
the probe identifies a machine.
"""

from __future__ import annotations

import ctypes
import json
import threading
from typing import Any, Callable

from ... import __version__
from .replay import FORMAT, call_key, out_struct


def scrubbed_uuid(index: int) -> str:
    return f"GPU-00000000-0000-0000-0000-{index:012d}"


def scrubbed_serial(index: int) -> str:
    return f"SCRUBBED{index}"


def to_json_value(value: Any) -> Any:
    """A pynvml result as JSON data: structures -> objects, arrays/tuples -> lists, bytes -> str."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, (ctypes.Structure, ctypes.Union)):
        return {field[0]: to_json_value(getattr(value, field[0])) for field in value._fields_}
    if isinstance(value, (ctypes.Array, list, tuple)):
        return [to_json_value(v) for v in value]
    if isinstance(value, ctypes._SimpleCData):
        return to_json_value(value.value)
    if hasattr(value, "__dict__"):
        return {k: to_json_value(v) for k, v in vars(value).items() if not k.startswith("_")}
    return str(value)


class _RecordedHandle:
    __slots__ = ("index", "handle")

    def __init__(self, index: int, handle: Any) -> None:
        self.index = index
        self.handle = handle


class RecordingBackend:
    """A backend that forwards to `real` (pynvml or another backend) and records every answer."""

    def __init__(self, real: Any, scrub: bool = True) -> None:
        self._real = real
        self._scrub = scrub
        self.NVMLError = real.NVMLError
        self._init: Any = None
        self._system: dict[str, Any] = {}
        self._devices: dict[int, dict[str, Any]] = {}
        self._error_names: dict[int, str] | None = None
        self._lock = threading.Lock()  # the probe reads GPUs on several threads

    def _error_marker(self, exc: BaseException) -> dict[str, str]:
        if self._error_names is None:
            import pynvml  # type: ignore[import-untyped]

            self._error_names = {
                getattr(pynvml, n): n for n in dir(pynvml) if n.startswith("NVML_ERROR_") and isinstance(
                    getattr(pynvml, n), int)
            }
        code = getattr(exc, "value", None)
        return {"error": self._error_names.get(code, "NVML_ERROR_UNKNOWN") if isinstance(code, int) else
                "NVML_ERROR_UNKNOWN"}

    def _device(self, index: int) -> dict[str, Any]:
        with self._lock:
            return self._devices.setdefault(index, {})

    def _store(self, table: dict[str, Any], key: str, value: Any) -> None:
        with self._lock:
            table[key] = value

    def nvmlInit(self) -> None:
        try:
            self._real.nvmlInit()
        except self.NVMLError as exc:
            self._init = self._error_marker(exc)
            raise

    def nvmlDeviceGetHandleByIndex(self, index: int) -> _RecordedHandle:
        try:
            handle = self._real.nvmlDeviceGetHandleByIndex(index)
        except self.NVMLError as exc:
            self._store(self._device(index), "nvmlDeviceGetHandleByIndex", self._error_marker(exc))
            raise
        self._device(index)
        return _RecordedHandle(index, handle)

    def __getattr__(self, name: str) -> Callable[..., Any]:
        if not name.startswith("nvml"):
            raise AttributeError(name)
        real = getattr(self._real, name)  # AttributeError: an nvidia-ml-py without it, as for the probe

        def call(*args: Any) -> Any:
            if args and isinstance(args[0], _RecordedHandle):
                index: int | None = args[0].index
                table = self._device(args[0].index)
                real_args = (args[0].handle,) + tuple(
                    a.handle if isinstance(a, _RecordedHandle) else a for a in args[1:]
                )
                key = call_key(name, args[1:])
            else:
                index, table, real_args, key = None, self._system, args, call_key(name, args)
            try:
                result = real(*real_args)
            except self.NVMLError as exc:
                self._store(table, key, self._error_marker(exc))
                raise
            filled = next((s for s in map(out_struct, args) if s is not None), None)
            if filled is not None:  # the answer is the structure the call filled in (its version is in the key)
                result_json = {k: v for k, v in to_json_value(filled).items() if k != "version"}
            else:
                result_json = to_json_value(result)
            self._store(table, key, self._scrubbed(name, index, result_json))
            return result

        call.__name__ = name
        return call

    def _scrubbed(self, name: str, index: int | None, value: Any) -> Any:
        if not self._scrub or index is None:
            return value
        if name == "nvmlDeviceGetUUID":
            return scrubbed_uuid(index)
        if name == "nvmlDeviceGetSerial":
            return scrubbed_serial(index)
        return value

    def answers(self) -> dict[str, Any]:
        """The recording, in the replay format of :mod:`gpudoctor.probes.nvml.replay`."""
        with self._lock:
            count = max(self._devices) + 1 if self._devices else 0
            answers = {
                "format": FORMAT,
                "meta": {"source": f"recorded by gpudoctor {__version__}", "scrubbed": self._scrub},
                "init": self._init,
                "system": self._system,
                "devices": [self._devices.get(i, {}) for i in range(count)],
            }
            copied: dict[str, Any] = json.loads(json.dumps(answers))  # a snapshot, and proof it is JSON
        return copied
