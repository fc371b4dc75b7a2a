"""Recorded NVML answers, served by a fake NVML (fixture roots and tests).

The NVML probe talks to a *backend*: any object exposing the pynvml function
names it calls (``nvmlInit``, ``nvmlDeviceGetName``, ...) and ``NVMLError``.
The real backend is the ``pynvml`` module (nvidia-ml-py). :class:`ReplayNVML`
is a backend that answers from a recorded file instead, so a fixture root
(``<root>/nvml.json``) or a test exercises the very query and error-mapping
code that runs against a real driver. Errors are raised as real
``pynvml.NVMLError`` subclasses, so one wrapper handles both.

Recorded format (format 1), written by ``gpudoctor.probes.nvml.record``
(from a live machine) and by ``tests/fixtures/make_nvml.py`` (hand-made)::

    {
      "format": 1,
      "meta": {"source": "..."},              optional, free-form, ignored
      "init": null,                           nvmlInit succeeds (also when absent)
            | {"error": "NVML_ERROR_DRIVER_NOT_LOADED"}     nvmlInit raises that
            | {"hang": true},                 nvmlInit never returns
      "system": {                             calls that take no device handle
        "nvmlSystemGetDriverVersion": "550.90.07",
        "nvmlSystemGetCudaDriverVersion": 12040,
        "nvmlSystemGetNVMLVersion": "12.550.90.07",
        "nvmlDeviceGetCount": 2               optional: defaults to len(devices)
      },
      "devices": [                            one object per NVML index, in order
        {
          "nvmlDeviceGetName": "NVIDIA H100 80GB HBM3",
          "nvmlDeviceGetPciInfo": {"busId": "00000000:18:00.0", "pciDeviceId": 590418142},
          "nvmlDeviceGetCudaComputeCapability": [9, 0],
          "nvmlDeviceGetTemperatureThreshold(1)": 89,
          "nvmlDeviceGetTotalEccErrors(1,0)": 0,
          "nvmlDeviceGetCpuAffinityWithinScope(0)": [281470681808895],
          "nvmlDeviceGetNumaNodeId": {"error": "NVML_ERROR_NOT_SUPPORTED"},
          "nvmlDeviceGetPowerUsage": {"hang": true},
          ...
        }
      ]
    }

Keys are pynvml function names. When a call takes arguments besides the
device handle, they follow in parentheses, comma-separated, as decimal
integers (``nvmlDeviceGetTemperatureThreshold(1)``,
``nvmlDeviceGetNvLinkState(17)``); a second device handle is written as
that device's index (``nvmlDeviceGetP2PStatus(1,2)``: peer GPU 1,
capability 2), and a list of field ids its ids joined by ``+``
(``nvmlDeviceGetFieldValues(230)``; its answer is the list of field value
entries, ``[{"fieldId": 230, "nvmlReturn": 0, "value": {"uiVal": 0}}]``), and a
structure the call fills in (passed by reference) its version, left out when
it has none (``nvmlDeviceGetGpuFabricInfoV(3)``, ``nvmlDeviceGetGpuFabricInfo``;
the answer is the filled structure, one key per field, and the call returns
NVML_SUCCESS). Buffer-size arguments (the ``cpuSetSize``
/ ``nodeSetSize`` of the affinity calls, see :data:`SIZE_ARGUMENTS`) describe
the caller's buffer, not the question, so they are left out of the key; the
fake pads a recorded mask with zero words up to the size asked for and never
drops recorded words.

Values are the JSON form of what pynvml returns: strings, integers, lists
(for tuples, lists and ctypes arrays such as affinity masks: one integer per
64-bit word, word 0 = CPUs 0-63) and objects (for ctypes structures: one key
per field, e.g. ``nvmlDeviceGetMemoryInfo`` -> ``{"total", "free", "used"}``;
only the fields read need to be present). An answer that is an object with
the single key ``"error"`` raises ``pynvml.NVMLError`` of that constant name;
one with the single key ``"hang"`` blocks forever (tests use it to prove the
probe's deadline).

Answers that are not recorded: ``nvmlDeviceGetHandleByIndex`` succeeds for
every recorded device (record it as an error or hang to make it fail) and
raises NVML_ERROR_INVALID_ARGUMENT beyond them; ``nvmlShutdown`` does nothing;
any other missing key raises
NVML_ERROR_NOT_SUPPORTED, so an old recording replayed by a newer probe that
asks more just reads as "not supported".

pynvml is imported only when a :class:`ReplayNVML` is built (in the probe's
child process), never at import time of this module.
"""

from __future__ import annotations

import ctypes
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable, Mapping, Sequence

from ...inputs import InputError, parse_json, type_name
from .fabric_info import version_of

FORMAT = 1
# A recording of 8 GPUs is about 100 KB.
MAX_ANSWERS_BYTES = 16 << 20

# Function -> position (among the arguments after the handle) of its
# buffer-size argument, which is not part of the recorded key.
SIZE_ARGUMENTS: dict[str, int] = {
    "nvmlDeviceGetCpuAffinity": 0,
    "nvmlDeviceGetCpuAffinityWithinScope": 0,
    "nvmlDeviceGetMemoryAffinity": 0,
}


def call_key(name: str, args: Sequence[Any] = ()) -> str:
    """The recorded key of a call: name plus its non-handle, non-size arguments.

    A second device handle among the arguments (``nvmlDeviceGetP2PStatus``'s peer) is written as
    that device's NVML index: every handle type the probe passes around carries ``index``."""
    skip = SIZE_ARGUMENTS.get(name)
    shown = [text for i, a in enumerate(args) if i != skip for text in [_arg_text(a)] if text is not None]
    return f"{name}({','.join(shown)})" if shown else name


def _arg_text(arg: Any) -> str | None:
    """A list argument (nvmlDeviceGetFieldValues' field ids) is written as its ids joined by '+';
    a structure NVML fills in as its version (an unversioned one is left out)."""
    struct = out_struct(arg)
    if struct is not None:
        version = version_of(struct)
        return None if version is None else str(version)
    if isinstance(arg, (list, tuple)):
        return "+".join(str(int(a)) for a in arg)
    return str(int(getattr(arg, "index", arg)))


def out_struct(arg: Any) -> ctypes.Structure | None:
    """The structure behind an argument NVML fills in (the probe's OutStruct, or the
    ctypes.byref() the backend gets), else None."""
    for struct in (getattr(arg, "struct", None), getattr(arg, "_obj", None)):
        if isinstance(struct, ctypes.Structure):
            return struct
    return None


def fill_struct(struct: ctypes.Structure, recorded: Any) -> None:
    """Set a structure's fields from their recorded JSON form (an object, one key per field;
    arrays as lists); the version field stays as the caller set it. Bad data raises ValueError."""
    if not isinstance(recorded, dict):
        raise ValueError(f"recorded structure is {type_name(recorded)}, not an object")
    for field in struct._fields_:
        name = field[0]
        if name == "version" or name not in recorded:
            continue
        value = recorded[name]
        current = getattr(struct, name)
        if isinstance(current, ctypes.Array):
            if not isinstance(value, list) or len(value) != len(current):
                raise ValueError(f"recorded {name} is not a list of {len(current)} integers")
            for i, item in enumerate(value):
                current[i] = _small_int(item, name)
        else:
            setattr(struct, name, _small_int(value, name))


def _small_int(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 1 << 32:
        raise ValueError(f"recorded {name} {value!r} is not an unsigned 32-bit integer")
    return value


class ReplayUnavailable(Exception):
    """The recorded answers cannot be served: missing (not_found) or unusable (error)."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


def load_answers(path: str | Path) -> dict[str, Any]:
    """Read and check a recorded-answers file; raise ReplayUnavailable with a clear detail.

    The file is outside input (a fixture or image root): read as gpudoctor.inputs reads every such
    file (a regular file, bounded, strict JSON), and a symbolic link is not followed: the path
    comes from ProbeContext.recorded, which has resolved the name inside the root already."""
    from ...inputs import read_text_input

    path = Path(path)
    try:
        text = read_text_input(path, MAX_ANSWERS_BYTES, "recorded NVML answers file", follow=False)
    except InputError as exc:
        reason = "not_found" if exc.message == "no such file" else "error"
        detail = f"no recorded NVML answers at {path}" if reason == "not_found" else str(exc)
        raise ReplayUnavailable(reason, detail) from None
    try:
        data = parse_json(text, str(path), "recorded NVML answers file")
    except InputError as exc:
        raise ReplayUnavailable("error", f"recorded NVML answers at {path} are unusable: {exc.message}") from None
    problem = check_answers(data)
    if problem:
        raise ReplayUnavailable("error", f"recorded NVML answers at {path} are unusable: {problem}")
    return data  # type: ignore[no-any-return]


def check_answers(data: Any, error_names: Callable[[str], bool] | None = None) -> str | None:
    """Return the first problem with a recorded-answers document, or None."""
    if not isinstance(data, dict):
        return f"top level is {type_name(data)}, not an object"
    if data.get("format") != FORMAT:
        return f"format is {data.get('format')!r}, this gpudoctor reads format {FORMAT}"
    init = data.get("init")
    if init is not None:
        problem = _check_answer("init", init, error_names, marker_only=True)
        if problem:
            return problem
    system = data.get("system", {})
    if not isinstance(system, dict):
        return "'system' is not an object"
    for key, value in system.items():
        problem = _check_answer(f"system.{key}", value, error_names)
        if problem:
            return problem
    devices = data.get("devices", [])
    if not isinstance(devices, list):
        return "'devices' is not a list"
    for i, device in enumerate(devices):
        if not isinstance(device, dict):
            return f"devices[{i}] is not an object"
        for key, value in device.items():
            problem = _check_answer(f"devices[{i}].{key}", value, error_names)
            if problem:
                return problem
    count = system.get("nvmlDeviceGetCount")
    if isinstance(count, int) and not isinstance(count, bool) and count > len(devices):
        return f"nvmlDeviceGetCount is {count} but only {len(devices)} devices are recorded"
    return None


def _check_answer(
    where: str, value: Any, error_names: Callable[[str], bool] | None, marker_only: bool = False
) -> str | None:
    marker = _marker(value)
    if marker is None:
        if marker_only:
            return f"{where} must be null, {{\"error\": NAME}} or {{\"hang\": true}}, not {value!r}"
        return None
    kind, arg = marker
    if kind == "error":
        if not isinstance(arg, str) or not arg.startswith("NVML_ERROR_"):
            return f"{where}: error must name an NVML_ERROR_* constant, not {arg!r}"
        if error_names is not None and not error_names(arg):
            return f"{where}: unknown NVML error {arg}"
    elif arg is not True:
        return f"{where}: hang must be true"
    return None


def _marker(value: Any) -> tuple[str, Any] | None:
    if isinstance(value, dict) and len(value) == 1:
        if "error" in value:
            return ("error", value["error"])
        if "hang" in value:
            return ("hang", value["hang"])
    return None


def _as_result(value: Any) -> Any:
    """JSON form -> what pynvml code reads: objects become attribute objects."""
    if isinstance(value, dict):
        return SimpleNamespace(**{k: _as_result(v) for k, v in value.items()})
    if isinstance(value, list):
        return [_as_result(v) for v in value]
    return value


def _hang() -> None:
    while True:  # the probe's parent kills us; a stuck driver call behaves the same way
        time.sleep(3600)


class ReplayHandle:
    """The fake's device handle: just the NVML index."""

    __slots__ = ("index",)

    def __init__(self, index: int) -> None:
        self.index = index

    def __repr__(self) -> str:
        return f"ReplayHandle({self.index})"


class ReplayNVML:
    """A backend answering pynvml calls from recorded answers (see the module docstring)."""

    def __init__(self, answers: Mapping[str, Any]) -> None:
        import pynvml  # type: ignore[import-untyped]

        self._pynvml = pynvml
        self.NVMLError = pynvml.NVMLError
        problem = check_answers(answers, lambda name: isinstance(getattr(pynvml, name, None), int))
        if problem:
            raise ReplayUnavailable("error", f"recorded NVML answers are unusable: {problem}")
        self._init = answers.get("init")
        self._system: dict[str, Any] = dict(answers.get("system", {}))
        self._devices: list[dict[str, Any]] = [dict(d) for d in answers.get("devices", [])]
        # Keys asked for, in order: tests check them against pynvml's names.
        self.calls: list[str] = []

    @classmethod
    def from_file(cls, path: str | Path) -> ReplayNVML:
        return cls(load_answers(path))

    def _answer(self, key: str, value: Any, missing: bool) -> Any:
        if missing:
            raise self.NVMLError(self._pynvml.NVML_ERROR_NOT_SUPPORTED)
        marker = _marker(value)
        if marker is not None:
            if marker[0] == "hang":
                _hang()
            raise self.NVMLError(getattr(self._pynvml, marker[1]))
        return _as_result(value)

    def nvmlInit(self) -> None:
        self.calls.append("nvmlInit")
        if self._init is not None:
            self._answer("init", self._init, missing=False)

    def nvmlShutdown(self) -> None:
        self.calls.append("nvmlShutdown")

    def nvmlDeviceGetCount(self) -> int:
        self.calls.append("nvmlDeviceGetCount")
        if "nvmlDeviceGetCount" in self._system:
            return int(self._answer("nvmlDeviceGetCount", self._system["nvmlDeviceGetCount"], missing=False))
        return len(self._devices)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> ReplayHandle:
        self.calls.append("nvmlDeviceGetHandleByIndex")
        index = int(index)
        if index < 0 or index >= len(self._devices):
            raise self.NVMLError(self._pynvml.NVML_ERROR_INVALID_ARGUMENT)
        recorded = self._devices[index].get("nvmlDeviceGetHandleByIndex")
        if recorded is not None:
            self._answer("nvmlDeviceGetHandleByIndex", recorded, missing=False)
        return ReplayHandle(index)

    def __getattr__(self, name: str) -> Callable[..., Any]:
        if not name.startswith("nvml"):
            raise AttributeError(name)

        def call(*args: Any) -> Any:
            if args and isinstance(args[0], ReplayHandle):
                table = self._devices[args[0].index]
                rest = args[1:]
            else:
                table = self._system
                rest = args
            key = call_key(name, rest)
            self.calls.append(key)
            value = self._answer(key, table.get(key), missing=key not in table)
            filled = next((s for s in map(out_struct, rest) if s is not None), None)
            if filled is not None:  # the answer fills the caller's structure; the call returns SUCCESS
                fill_struct(filled, table.get(key))
                return 0
            size_at = SIZE_ARGUMENTS.get(name)
            if size_at is not None and isinstance(value, list) and size_at < len(rest):
                value = value + [0] * (int(rest[size_at]) - len(value))
            return value

        call.__name__ = name
        return call
