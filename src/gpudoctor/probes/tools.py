"""Running a tool for a fact (``nvcc --version``, the ``--python`` interpreter, ``numactl``).

A probe asks a program the one way gpudoctor runs any child (gpudoctor.children.Child: its own
session, capped pipes, killed on every way out, never waited for when stuck); this module turns
what the child did into what a probe reports: its output, or an Unavailable with a reason.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ..children import CUT, DEADLINE, OUTPUT_CAP, Child, deadline_in
from ..facts import Unavailable
from ..frozen import Frozen


class CommandResult(Frozen):
    """What a bounded child process left behind: exit status and decoded output. ``cut``: it
    printed more than run_bounded's cap on a pipe and was killed; the output is what came first."""

    __slots__ = ("returncode", "stdout", "stderr", "timed_out", "cut")
    returncode: int
    stdout: str
    stderr: str
    timed_out: bool
    cut: bool

    def __init__(self, returncode: int, stdout: str, stderr: str, timed_out: bool = False, cut: bool = False) -> None:
        object.__setattr__(self, "returncode", returncode)
        object.__setattr__(self, "stdout", stdout)
        object.__setattr__(self, "stderr", stderr)
        object.__setattr__(self, "timed_out", timed_out)
        object.__setattr__(self, "cut", cut)


def run_bounded(
    argv: Sequence[str],
    timeout: float,
    env: Mapping[str, str] | None = None,
    *,
    partial: bool = False,
    cap: int | None = None,
) -> CommandResult | Unavailable:
    """Run ``argv`` (never through a shell) with a hard wall-clock limit; never raise, never hang.

    The child gets its own session, so on timeout the whole process group is killed
    (a ``python`` wrapper script and its grandchildren too). A child stuck in the
    kernel (uninterruptible sleep after a GPU fault) may not die at once: it is
    reaped by a daemon thread, never waited for here. A missing program is
    not_found, an unexecutable one no_permission, a timeout is timeout; with
    ``partial=True`` a timeout returns what the child printed so far instead,
    marked ``timed_out``.

    Each pipe is read up to ``cap`` bytes (default gpudoctor.children.OUTPUT_CAP, 1 MiB); a
    child that prints more is killed at once: an error, or with ``partial=True`` what came
    first, marked ``cut``. The child is killed on every way out (an exception, a signal:
    see gpudoctor.children).
    """
    limit = OUTPUT_CAP if cap is None else cap
    try:
        child = Child(argv, env=env, stdout_cap=limit, stderr_cap=limit)
    except FileNotFoundError:
        return Unavailable("not_found", f"{argv[0]}: no such program")
    except PermissionError:
        return Unavailable("no_permission", f"{argv[0]}: not executable")
    except (OSError, ValueError, IndexError) as exc:  # IndexError: an empty argv
        return Unavailable("error", f"{argv[0] if argv else '(nothing)'}: cannot start: {exc}")
    deadline = deadline_in(max(0.01, timeout))
    outcome = child.read(deadline)
    code = child.wait(deadline) if outcome not in (CUT, DEADLINE) else None
    child.close()  # kills it when it is still running (past its deadline, or past its cap)
    out, err = child.stdout.text(), child.stderr.text()
    if outcome == CUT:
        if partial:
            return CommandResult(-9, out, err, cut=True)
        size = f"{limit / (1 << 20):g} MiB" if limit >= 1 << 20 else f"{limit} bytes"
        return Unavailable(
            "error", f"{argv[0]} printed more than {size} on {child.cut_stream()} and was stopped"
        )
    if code is None:
        if partial:
            return CommandResult(-9, out, err, True)
        # the full path: "python did not finish" would not say which of a host's interpreters hung
        return Unavailable("timeout", f"{argv[0]} did not finish within {timeout:.1f} s and was killed")
    return CommandResult(code, out, err)
