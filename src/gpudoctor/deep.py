"""`gate --deep`: run the device test (deep_worker.py) in a child process under the gate's deadline.

The child is the *target* interpreter (``--python``, default this one) running the worker's
source with ``-c`` (so the gpudoctor package directory is not put first on its sys.path). It gets
its own session; it is started before the probes so that its torch import overlaps them. The
parent reads its event lines until the child exits or the deadline passes; then it SIGKILLs the
child's process group and never waits for it (a process stuck in the kernel on a hung GPU cannot
be killed; a daemon thread reaps it if it ever exits). A step that had begun and not ended names
the GPU that hung.

:func:`deep_findings` turns the events into findings (gate-deep-cuda, gate-deep-gpu,
gate-deep-p2p, gate-deep-allreduce). A step that failed is a failed check; a step that did not
finish in time is a check that could not be judged (the gate's fail-open/fail-closed policy
decides), with the running step named.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from .children import CUT, EOF, Child
from .findings import HOST, Finding, Status, Subject

WORKER = Path(__file__).with_name("deep_worker.py")
MARKER = "@@GPUDOCTOR-DEEP@@"
GPU_STEPS = ("context", "memory", "matmul")
# What the test may print on stdout before it is stopped as runaway: its events are short lines
# (well under a megabyte on any host); the rest is room for a library's prints.
WORKER_STDOUT_CAP = 8 << 20


@dataclass
class DeepResult:
    python: str
    budget_s: float
    started: bool = False
    start_error: str = ""
    events: list[dict[str, Any]] = field(default_factory=list)
    timed_out: bool = False
    cancelled: str = ""
    cancel_cause: str = ""
    returncode: int | None = None
    # the pipe ("stdout", "stderr") on which the test printed more than gpudoctor reads; it was stopped
    cut: str = ""
    stderr_tail: str = ""
    duration_s: float = 0.0
    # CUDA indices are NVML's (PCI order, no CUDA_VISIBLE_DEVICES), so index matching is safe
    index_is_nvml: bool = True

    def first(self, kind: str) -> dict[str, Any] | None:
        return next((e for e in self.events if e.get("e") == kind), None)

    @property
    def devices(self) -> dict[int, dict[str, Any]]:
        return {int(e["gpu"]): e for e in self.events if e.get("e") == "device" and isinstance(e.get("gpu"), int)}

    def ends(self) -> dict[tuple[Any, Any, Any], dict[str, Any]]:
        return {(e.get("gpu"), e.get("step"), e.get("peer")): e for e in self.events if e.get("e") == "end"}

    def running(self) -> list[dict[str, Any]]:
        """Steps that began and never ended."""
        ended = set(self.ends())
        return [
            e
            for e in self.events
            if e.get("e") == "begin" and (e.get("gpu"), e.get("step"), e.get("peer")) not in ended
        ]

    def to_json(self) -> dict[str, Any]:
        torch = self.first("torch") or {}
        cuda = self.first("cuda") or {}
        return {
            "ran": self.started,
            "python": self.python,
            "torch_version": torch.get("version"),
            "devices": cuda.get("count"),
            "duration_s": round(self.duration_s, 3),
            "import_s": torch.get("import_s"),
            "timed_out": self.timed_out,
            "steps": [{k: v for k, v in e.items() if k != "e"} for e in self.events if e.get("e") in ("end",)],
        }


def parse_events(stdout: str) -> list[dict[str, Any]]:
    events = []
    for line in stdout.splitlines():
        if not line.startswith(MARKER):
            continue
        try:
            event = json.loads(line[len(MARKER) :])
        except ValueError:
            continue  # a line cut by the kill
        if isinstance(event, dict):
            events.append(event)
    return events


class DeepRun:
    """The device test in progress: :meth:`result` waits until the deadline at most.

    The child is a gpudoctor.children.Child: registered while it lives (a signal, or any way out
    of gpudoctor, kills it), its output read with a cap (a test that floods its pipes is stopped)."""

    def __init__(
        self, python: str, argv: Sequence[str], deadline: float, env: Mapping[str, str], index_is_nvml: bool
    ) -> None:
        self.started = time.monotonic()
        self.deadline = deadline
        self.result_ = DeepResult(
            python=python, budget_s=max(0.0, deadline - self.started), index_is_nvml=index_is_nvml
        )
        self.child: Child | None = None
        try:
            self.child = Child(argv, env=env, name="deep", stdout_cap=WORKER_STDOUT_CAP)
            self.result_.started = True
        except OSError as exc:
            self.result_.start_error = f"{python}: cannot start: {exc.strerror or exc}"

    def _finish(self) -> DeepResult:
        r = self.result_
        child = self.child
        if child is not None:
            r.events = parse_events(child.stdout.text())
            tail = child.stderr.text().strip().splitlines()
            r.stderr_tail = "\n".join(line[:500] for line in tail[-5:])
            child.close()
        r.duration_s = time.monotonic() - self.started
        return r

    def _read(self, deadline: float) -> None:
        """Read until the child exits or `deadline`; a child still running then is killed."""
        child = self.child
        assert child is not None
        outcome = child.read(deadline)
        if outcome == CUT:
            self.result_.cut = child.cut_stream()
        code = child.wait(deadline) if outcome == EOF else None
        if code is None:
            child.kill()
        self.result_.returncode = code

    def result(self) -> DeepResult:
        if self.child is None:
            return self._finish()
        self._read(self.deadline)
        if self.result_.returncode is None and not self.result_.cut:
            self.result_.timed_out = True
        return self._finish()

    def cancel(self, reason: str, cause: str = "") -> DeepResult:
        """Stop the test now (the gate stopped, or the driver is known not to answer)."""
        self.result_.cancelled = reason
        self.result_.cancel_cause = cause
        if self.child is None:
            return self._finish()
        self._read(min(self.deadline, time.monotonic() + 0.05))
        return self._finish()


def start_deep(
    python: str,
    *,
    deadline: float,
    memory_mib: int = 256,
    devices: Sequence[int] | None = None,
    env: Mapping[str, str] | None = None,
    extra_args: Sequence[str] = (),
) -> DeepRun:
    """Start the device test now; it must end by ``deadline`` (time.monotonic())."""
    child_env = dict(os.environ if env is None else env)
    # CUDA numbers devices fastest-first unless told otherwise; PCI order makes its indices NVML's.
    child_env.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    index_is_nvml = child_env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID" and "CUDA_VISIBLE_DEVICES" not in child_env
    # With -c the interpreter puts the current directory first on sys.path; a timeit.py or json.py
    # lying there must not replace the standard library in the test (sys itself is built in).
    source = (
        "import sys\n"
        "if sys.path and sys.path[0] == '': del sys.path[0]\n"
        f"path = {str(WORKER)!r}\n"
        "with open(path, encoding='utf-8') as fh: code = compile(fh.read(), path, 'exec')\n"
        "exec(code, {'__name__': '__main__', '__file__': path})\n"
    )
    argv = [python, "-c", source, "--memory-mib", str(memory_mib)]
    if devices is not None:
        argv += ["--devices", ",".join(str(d) for d in devices)]
    argv += list(extra_args)
    return DeepRun(python, argv, deadline, child_env, index_is_nvml)


# ---------------------------------------------------------------------------
# Events → findings.


def _subjects(result: DeepResult, facts: Mapping[str, Any]) -> dict[int, Subject]:
    from .engine.subjects import gpu_subject_ref, gpu_subjects, normalise_bus_id

    gpus = gpu_subjects(facts)
    out: dict[int, Subject] = {}
    for i, dev in result.devices.items():
        match = None
        uuid = dev.get("uuid")
        bus = dev.get("bus_id")
        for g in gpus:
            g_uuid = g.get("uuid")
            if isinstance(uuid, str) and isinstance(g_uuid, str) and g_uuid.lower() == uuid.lower():
                match = g
                break
        if match is None and isinstance(bus, str):
            match = next((g for g in gpus if g.get("bus_id") == normalise_bus_id(bus)), None)
        if match is None and result.index_is_nvml:
            match = next((g for g in gpus if g.get("index") == i), None)
        if match is not None:
            out[i] = gpu_subject_ref(match)
        else:
            name = dev.get("name") or "GPU"
            out[i] = Subject("gpu", f"CUDA device {i} ({name})", index=i, bus_id=bus if isinstance(bus, str) else None)
    return out


def _how_it_ended(result: DeepResult) -> tuple[str, str]:
    """(cause, words) for steps that never ran or never finished."""
    if result.cancelled:
        return (result.cancel_cause or "deep: not run"), f"the device test was stopped: {result.cancelled}"
    if result.timed_out:
        return "deep: timeout", f"the device test did not finish within its {result.budget_s:.1f} s"
    if result.cut:
        return "deep: error", f"the device test printed more than gpudoctor reads on its {result.cut} and was stopped"
    code = result.returncode
    how = f"killed by signal {-code}" if code is not None and code < 0 else f"exit status {code}"
    tail = f"; stderr: {result.stderr_tail.splitlines()[-1]}" if result.stderr_tail else ""
    return "deep: error", f"the device test process died ({how}){tail}"


def deep_findings(result: DeepResult, facts: Mapping[str, Any]) -> list[Finding]:
    from .gate import _finding

    out: list[Finding] = []
    cause, ended = _how_it_ended(result)
    died = not result.timed_out and not result.cancelled and not result.cut and result.started
    if not result.started:
        out.append(
            _finding(
                "gate-deep-cuda",
                HOST,
                Status.UNKNOWN,
                f"the device test could not start: {result.start_error}",
                detail=result.start_error,
                cause="deep: not_found",
            )
        )
        return out
    torch_event, cuda = result.first("torch"), result.first("cuda")
    error_event = result.first("torch_error")
    if error_event is not None:
        message = (
            f"{result.python} cannot import torch: {error_event.get('error')} "
            "(install torch in that interpreter, or point --python at the job's interpreter)"
        )
        out.append(_finding("gate-deep-cuda", HOST, Status.UNKNOWN, message, cause="deep: not_found"))
        return out
    if cuda is None:
        phase = "importing torch" if torch_event is None else "initialising CUDA (torch.cuda.is_available)"
        if died and torch_event is not None:
            out.append(_finding("gate-deep-cuda", HOST, Status.FAIL, f"{ended} while {phase}"))
        else:
            out.append(
                _finding("gate-deep-cuda", HOST, Status.UNKNOWN, f"{ended} while {phase}", detail=ended, cause=cause)
            )
        return out
    version = (torch_event or {}).get("version", "?")
    if not cuda.get("available"):
        out.append(
            _finding(
                "gate-deep-cuda",
                HOST,
                Status.FAIL,
                f"torch {version} cannot use CUDA on this machine: {cuda.get('error') or 'no CUDA device'}",
            )
        )
        return out
    count = int(cuda.get("count") or 0)
    nvml = facts.get("nvml")
    nvml_gpus = nvml.get("gpus") if isinstance(nvml, Mapping) and nvml.get("status") == "ok" else None
    if result.index_is_nvml and isinstance(nvml_gpus, list) and len(nvml_gpus) != count:
        out.append(
            _finding(
                "gate-deep-cuda",
                HOST,
                Status.FAIL,
                f"torch {version} sees {count} CUDA device(s) but NVML lists {len(nvml_gpus)}",
                [("nvml.gpus (count)", len(nvml_gpus))],
            )
        )
    else:
        took = (torch_event or {}).get("import_s")
        out.append(
            _finding(
                "gate-deep-cuda",
                HOST,
                Status.PASS,
                f"torch {version} sees {count} CUDA device(s)" + (f"; import took {took:.1f} s" if took else ""),
            )
        )

    subjects = _subjects(result, facts)
    ends = result.ends()
    running = {(e.get("gpu"), e.get("step"), e.get("peer")) for e in result.running()}
    stalled = "did not finish" if result.timed_out else "was still running when it stopped"

    def stopped_in(rule: str, subject: Subject, what: str, detail: str = ended) -> Finding:
        """A step the child was in when it stopped: failed if the child died, else unknown (hung)."""
        if died:
            return _finding(rule, subject, Status.FAIL, f"{what}: {ended}")
        return _finding(rule, subject, Status.UNKNOWN, what, detail=detail, cause=f"{cause} (hung)")

    def not_reached(rule: str, subject: Subject) -> Finding:
        return _finding(rule, subject, Status.UNKNOWN, f"not reached: {ended}", detail=ended, cause=cause)

    for i, subject in subjects.items():
        failed = next(
            (ends[(i, s, None)] for s in GPU_STEPS if (i, s, None) in ends and ends[(i, s, None)].get("ok") is False),
            None,
        )
        hung = next((s for s in GPU_STEPS if (i, s, None) in running), None)
        if failed is not None:
            out.append(
                _finding(
                    "gate-deep-gpu",
                    subject,
                    Status.FAIL,
                    f"{subject.label}: {failed.get('step')} failed: {failed.get('error')}",
                )
            )
        elif hung is not None:
            what = f"{subject.label} {stalled} step '{hung}' ({_STEP_WORDS[hung]})"
            detail = f"{ended}; the GPU or its driver may be hung: check dmesg for Xid errors"
            out.append(stopped_in("gate-deep-gpu", subject, what, detail))
        elif all((i, s, None) in ends for s in GPU_STEPS):
            took = sum(float(ends[(i, s, None)].get("s") or 0) for s in GPU_STEPS)
            matmul = ends[(i, "matmul", None)]
            mib = ends[(i, "memory", None)].get("mib")
            out.append(
                _finding(
                    "gate-deep-gpu",
                    subject,
                    Status.PASS,
                    f"context, {mib} MiB memory check and fp32/{matmul.get('low_dtype', '?')} matmul correct "
                    f"in {took:.2f} s",
                )
            )
        else:
            out.append(not_reached("gate-deep-gpu", subject))

    if len(subjects) < 2:
        return out
    gpu_ok = all(all((i, s, None) in ends and ends[(i, s, None)].get("ok") for s in GPU_STEPS) for i in subjects)
    order = sorted(subjects)
    for pos, i in enumerate(order):
        j = order[(pos + 1) % len(order)]
        subject = subjects[i]
        key: tuple[Any, Any, Any] = (i, "p2p", j)
        target = subjects[j].label
        if key in ends:
            e = ends[key]
            via = "peer access" if e.get("peer_access") else "no peer access: staged through host memory"
            if e.get("ok"):
                out.append(
                    _finding(
                        "gate-deep-p2p", subject, Status.PASS, f"copy to {target} correct ({via}, {e.get('gbps')} GB/s)"
                    )
                )
            else:
                out.append(
                    _finding(
                        "gate-deep-p2p", subject, Status.FAIL, f"copy {subject.label} → {target}: {e.get('error')}"
                    )
                )
        elif key in running:
            out.append(stopped_in("gate-deep-p2p", subject, f"copy {subject.label} → {target} {stalled}"))
        elif not gpu_ok:
            out.append(_finding("gate-deep-p2p", subject, Status.SKIP, "not run: a GPU failed its own test first"))
        else:
            out.append(not_reached("gate-deep-p2p", subject))

    key = (None, "allreduce", None)
    names = ", ".join(str(i) for i in order)
    if key in ends:
        e = ends[key]
        if e.get("ok") is True:
            out.append(
                _finding("gate-deep-allreduce", HOST, Status.PASS, f"NCCL all-reduce among GPUs {names} correct")
            )
        elif e.get("ok") is None:
            out.append(
                _finding(
                    "gate-deep-allreduce",
                    HOST,
                    Status.UNKNOWN,
                    f"cannot check: {e.get('error')}",
                    detail=str(e.get("error")),
                    cause="deep: not_supported",
                )
            )
        else:
            out.append(
                _finding(
                    "gate-deep-allreduce", HOST, Status.FAIL, f"NCCL all-reduce among GPUs {names}: {e.get('error')}"
                )
            )
    elif key in running:
        out.append(stopped_in("gate-deep-allreduce", HOST, f"NCCL all-reduce among GPUs {names} {stalled}"))
    elif not gpu_ok or any(f.rule_id == "gate-deep-p2p" and f.status is Status.FAIL for f in out):
        out.append(_finding("gate-deep-allreduce", HOST, Status.SKIP, "not run: a GPU test failed first"))
    else:
        out.append(not_reached("gate-deep-allreduce", HOST))
    return out


_STEP_WORDS = {
    "context": "creating the CUDA context",
    "memory": "allocating and checking memory",
    "matmul": "matrix multiply against the CPU reference",
}
