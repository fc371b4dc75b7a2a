"""The one NVML call wrapper (:class:`Query`) and where what it reads goes (:class:`Sink`).

Every NVML call of the probe and the recorder goes through :meth:`Query.call`: a progress event
first (so a hang names the call), then the call, and an NVML error becomes an Unavailable
(gpudoctor.probes.nvml.errors) instead of an exception.
"""

from __future__ import annotations

import ctypes
from typing import Any, Callable, Protocol

from ...facts import Unavailable
from .errors import NVML_ERROR_FUNCTION_NOT_FOUND, exception_text, unavailable_for
from .fabric_info import OutStruct
from .replay import call_key


class Sink(Protocol):
    """Where facts go: the child's pipe (gpudoctor.probes.nvml.child), or an Assembler."""

    def calling(self, call: str, gpu: int | None) -> None: ...
    def init_failed(self, status: str, error: str, reason: str, detail: str) -> None: ...
    def system(self, key: str, value: Any) -> None: ...
    def gpu(self, index: int, key: str, value: Any) -> None: ...
    def gpu_done(self, index: int) -> None: ...
    def recording(self, answers: dict[str, Any]) -> None: ...
    def crashed(self, detail: str) -> None: ...
    def finished(self) -> None: ...


class PeerHandle:
    """Another GPU's handle passed as an argument (nvmlDeviceGetP2PStatus): the backend gets
    `handle`; progress lines and recorded keys name the GPU by `index`."""

    __slots__ = ("index", "handle")

    def __init__(self, index: int, handle: Any) -> None:
        self.index = index
        self.handle = handle


class Query:
    """The one NVML call wrapper: progress line first, then the call, errors -> Unavailable."""

    def __init__(self, nv: Any, sink: Sink) -> None:
        self.nv = nv
        self.sink = sink
        self.error_class: type[BaseException] = getattr(nv, "NVMLError", Exception)
        self.code: int | None = None
        self.missing_function = False
        self.lost = False

    def call(self, name: str, *args: Any, handle: Any = None, gpu: int | None = None) -> Any:
        self.code = None
        self.missing_function = False
        self.lost = False
        self.sink.calling(call_key(name, args), gpu)
        try:
            fn = getattr(self.nv, name)
        except AttributeError:
            self.missing_function = True
            return Unavailable("not_supported", f"the installed nvidia-ml-py has no {name}; upgrade nvidia-ml-py")
        args = tuple(_passed(a) for a in args)
        try:
            return fn(handle, *args) if handle is not None else fn(*args)
        except self.error_class as exc:
            code = getattr(exc, "value", None)
            self.code = code if isinstance(code, int) else None
            self.missing_function = self.code == NVML_ERROR_FUNCTION_NOT_FOUND
            failure, self.lost = unavailable_for(name, self.code, exception_text(exc))
            return failure
        except Exception as exc:  # a ctypes or pynvml surprise must not end the probe
            return Unavailable("error", f"{name} raised {type(exc).__name__}: {exc}")


def _passed(arg: Any) -> Any:
    """What the backend gets for an argument: a peer's handle; a structure to fill, by reference
    (pynvml passes it on as it is, and the C function takes a pointer)."""
    if isinstance(arg, PeerHandle):
        return arg.handle
    if isinstance(arg, OutStruct):
        return ctypes.byref(arg.struct)
    return arg


def as_text(value: Any) -> str:
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    return str(value).strip("\x00").strip()


def converted(value: Any, convert: Callable[[Any], Any], name: str) -> Any:
    if isinstance(value, Unavailable):
        return value
    try:
        return convert(value)
    except Exception as exc:
        shown = repr(value)
        shown = shown if len(shown) <= 60 else shown[:57] + "..."
        return Unavailable("error", f"{name}: unexpected answer {shown} ({type(exc).__name__}: {exc})")
