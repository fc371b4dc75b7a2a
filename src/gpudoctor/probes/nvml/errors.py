"""NVML's errors and what they mean as facts: every NVML return code by name, the mapping of a
failed call to an Unavailable reason (and whether the GPU is lost), and what a person can do
when nvmlInit fails. No pynvml: the codes are nvml.h's stable C ABI, so the parent needs none.
"""

from __future__ import annotations

from ...facts import Unavailable

# NVML return codes (nvml.h; stable C ABI), so the parent needs no pynvml. All of them, so that
# a fact's detail names the code a person can look up rather than a number.
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_ALREADY_INITIALIZED = 5
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_INSUFFICIENT_SIZE = 7
NVML_ERROR_INSUFFICIENT_POWER = 8
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_IRQ_ISSUE = 11
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_CORRUPTED_INFOROM = 14
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_RESET_REQUIRED = 16
NVML_ERROR_OPERATING_SYSTEM = 17
NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18
NVML_ERROR_IN_USE = 19
NVML_ERROR_MEMORY = 20
NVML_ERROR_NO_DATA = 21
NVML_ERROR_VGPU_ECC_NOT_SUPPORTED = 22
NVML_ERROR_INSUFFICIENT_RESOURCES = 23
NVML_ERROR_FREQ_NOT_SUPPORTED = 24
NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25
NVML_ERROR_DEPRECATED = 26
NVML_ERROR_NOT_READY = 27
NVML_ERROR_GPU_NOT_FOUND = 28
NVML_ERROR_INVALID_STATE = 29
NVML_ERROR_RESET_TYPE_NOT_SUPPORTED = 30
NVML_ERROR_UNKNOWN = 999

HANG_HINT = "the driver may be hung: check `dmesg` for Xid errors (79: GPU has fallen off the bus)"
LOST_HINT = "check `dmesg` for Xid errors (79: GPU has fallen off the bus); the GPU needs a reset or the host a reboot"

# nvmlInit failure code -> (status, reason, what a person can do).
INIT_FAILURES: dict[int, tuple[str, str, str]] = {
    NVML_ERROR_LIBRARY_NOT_FOUND: (
        "library_not_found",
        "not_found",
        "libnvidia-ml.so.1 could not be loaded: the NVIDIA driver's user-space libraries are not installed "
        "or not visible here (install the driver; in a container, run with the NVIDIA container toolkit; "
        "check `ldconfig -p | grep libnvidia-ml`)",
    ),
    NVML_ERROR_DRIVER_NOT_LOADED: (
        "driver_not_loaded",
        "driver_not_loaded",
        "the NVIDIA kernel driver is not loaded: check `lsmod | grep nvidia` and `dmesg | grep -i nvrm`, "
        "then `sudo modprobe nvidia` or reinstall the driver for the running kernel",
    ),
    NVML_ERROR_NO_PERMISSION: (
        "no_permission",
        "no_permission",
        "no permission to open the NVIDIA devices: check the permissions of /dev/nvidiactl and /dev/nvidia*, "
        "or the devices passed into the container",
    ),
    NVML_ERROR_LIB_RM_VERSION_MISMATCH: (
        "driver_library_mismatch",
        "error",
        "the NVML library and the loaded kernel module are from different driver versions "
        "(usually a driver upgrade without a reboot): reboot, or unload and reload the nvidia modules",
    ),
    # The driver gave up waiting on the GPU: the same as NVML not answering within our deadline.
    NVML_ERROR_TIMEOUT: ("timeout", "timeout", HANG_HINT),
}


def failure_text(name: str, code: int | None, message: str) -> str:
    return f"{name}: {message}" + (f" ({error_name(code)})" if code is not None else "")


ERROR_NAMES = {
    value: name for name, value in globals().items() if name.startswith("NVML_ERROR_") and isinstance(value, int)
}


def error_name(code: int | None) -> str:
    if code is None:
        return "no NVML code"
    return ERROR_NAMES.get(code, f"NVML error {code}")


def unavailable_for(name: str, code: int | None, message: str) -> tuple[Unavailable, bool]:
    """Map an NVML error of call `name` to (Unavailable, GPU is lost)."""
    if code == NVML_ERROR_NOT_SUPPORTED:
        return Unavailable("not_supported", f"{name}: not supported on this GPU or driver"), False
    if code == NVML_ERROR_NO_PERMISSION:
        return Unavailable("no_permission", f"{name}: insufficient permissions (try as root)"), False
    if code == NVML_ERROR_FUNCTION_NOT_FOUND:
        return Unavailable("not_supported", f"driver too old for {name}"), False
    if code in (NVML_ERROR_GPU_IS_LOST, NVML_ERROR_UNKNOWN, NVML_ERROR_RESET_REQUIRED):
        # A GPU that needs a reset is as unusable as a lost one: stop asking it, say so.
        return Unavailable("error", f"{failure_text(name, code, message)}; {LOST_HINT}"), True
    if code == NVML_ERROR_DRIVER_NOT_LOADED:
        return Unavailable("driver_not_loaded", failure_text(name, code, message)), False
    if code == NVML_ERROR_TIMEOUT:
        return Unavailable("timeout", failure_text(name, code, message)), False
    return Unavailable("error", failure_text(name, code, message)), False


def exception_text(exc: BaseException) -> str:
    """An NVML exception's text, never raising (pynvml's __str__ calls into the library)."""
    try:
        return str(exc) or type(exc).__name__
    except Exception:
        return type(exc).__name__
