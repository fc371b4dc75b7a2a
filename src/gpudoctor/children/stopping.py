"""How gpudoctor stops, and takes every child it started with it.

- The **registry** of children that may be alive (:func:`register`; gpudoctor.children.Child does
  it), so that however gpudoctor ends (the console entry's exit, an exception, SIGINT, SIGTERM or
  SIGHUP) :func:`kill_all` reaches them; a child started in its own session is killed with its
  whole process group (a wrapper script's grandchildren too). A killed child is never waited on
  with a blocking wait: one stuck in the kernel (a hung GPU) cannot die at once, so it is reaped
  by a daemon thread whenever it exits (:func:`forget`), registered until then.
- **Signals**: :func:`install_handlers` (the console entry's first step) makes SIGINT, SIGTERM and
  SIGHUP kill every registered child at once, then raise :class:`Stopped` (a ``SystemExit`` with
  status 128 + the signal number) in the main thread, so that clean-up code runs on the way out
  and the exit status says what stopped gpudoctor. A signal that arrives while a child is being
  started (``with starting:``) is acted on once that child is registered, so it cannot slip
  between the fork and the registry. Without the handlers (gpudoctor used as a library), the
  readers still kill their child on every exception, KeyboardInterrupt included.

Imports only the standard library (os, signal, sys, _thread; threading when a child is forgotten):
the console entry imports it before anything else.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

# Signals that stop gpudoctor (and its children) through the handlers.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


# pid -> whether the child leads its own process group (then the whole group is killed).
_LIVE: dict[int, bool] = {}
# The process the registry belongs to: a forked child inherits the dict but not the children.
_OWNER = os.getpid()


def register(pid: int, group: bool) -> None:
    """Record a child that may be alive; `group`: it leads its own process group."""
    _LIVE[pid] = group


def unregister(pid: int) -> None:
    """The child was reaped: its pid may be reused, never signal it again."""
    _LIVE.pop(pid, None)


def registered() -> dict[int, bool]:
    """The children registered now (pid -> leads its own group); a copy."""
    return dict(_LIVE)


def kill(pid: int, group: bool) -> None:
    """SIGKILL a child (its whole process group when it leads one); never raises, never waits."""
    if group:
        try:
            os.killpg(pid, signal.SIGKILL)
            return
        except OSError:
            pass  # the group is gone, or never was: the process itself, if it is still there
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass


def kill_all() -> None:
    """SIGKILL every registered child (safe in a signal handler; waits for nothing)."""
    if os.getpid() != _OWNER:
        return  # a forked child: these are its parent's children
    for pid, group in list(_LIVE.items()):
        kill(pid, group)


def forget(proc: Any, name: str, group: bool = True) -> None:
    """SIGKILL a subprocess.Popen child (its process group with `group`), close its pipes, and
    leave the reaping to a daemon thread: a child stuck in the kernel may not die at once, and
    nobody may block on it. It stays registered until that thread has reaped it."""
    import threading

    kill(proc.pid, group)
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        try:
            if stream is not None:
                stream.close()
        except OSError:
            pass

    def reap() -> None:
        try:
            proc.wait()
        except Exception:
            return
        unregister(proc.pid)

    threading.Thread(target=reap, name=f"reap-{name}", daemon=True).start()


def forget_in_child() -> None:
    """In a forked child, first thing: its parent's children and signal handlers are not its own."""
    _LIVE.clear()
    for signo in STOP_SIGNALS:
        try:
            if signal.getsignal(signo) is _on_signal:
                signal.signal(signo, signal.SIG_DFL)
        except (ValueError, OSError):
            pass


# ---------------------------------------------------------------------------
# Signals.


class Stopped(SystemExit):
    """A stop signal arrived (see install_handlers); the exit status is 128 + its number."""

    def __init__(self, signo: int) -> None:
        super().__init__(128 + signo)
        self.signo = signo


_received: list[int] = []  # stop signals handled, in order of arrival
_held: list[int] = []  # arrived inside `with starting:`, to be acted on at its end
_state: dict[str, Any] = {
    "holding": 0,
    "quiet": False,
    "main": -1,
    "installed": False,
    "hook": None,  # sys.unraisablehook before install_handlers
    "in_hook": False,  # inside _on_unraisable
}


def _on_signal(signo: int, frame: Any) -> None:
    if os.getpid() != _OWNER:
        os._exit(128 + signo)  # a forked child that has not reset its handlers yet
    kill_all()
    _received.append(signo)
    if _state["quiet"]:
        return
    if _state["in_hook"]:  # the redelivered stop came back inside _on_unraisable: once more
        _redeliver(signo)
        return
    if _state["holding"]:
        _held.append(signo)
        return
    raise Stopped(signo)


def install_handlers() -> None:
    """SIGINT, SIGTERM and SIGHUP: kill every registered child, raise Stopped in the main thread.
    A signal that is ignored now (``nohup``, a background job's SIGINT) stays ignored. Only from
    the main thread; a second call does nothing."""
    import _thread

    if _state["installed"]:
        return
    try:
        for signo in STOP_SIGNALS:
            if signal.getsignal(signo) is not signal.SIG_IGN:
                signal.signal(signo, _on_signal)
    except ValueError:  # not the main thread
        return
    _state["installed"] = True
    _state["main"] = _thread.get_ident()
    _state["hook"] = sys.unraisablehook
    sys.unraisablehook = _on_unraisable


def _on_unraisable(unraisable: Any) -> None:
    """A Stopped that Python had to swallow: the signal's handler ran inside a weakref callback,
    a ``__del__`` or a finalizer (seen in importlib's module-lock callback), where an exception is
    printed as "Exception ignored in ..." with a traceback and then dropped. Say nothing and
    deliver the stop again, so that the handler raises it where the main flow can stop."""
    exc = getattr(unraisable, "exc_value", None)
    if isinstance(exc, Stopped) and os.getpid() == _OWNER:
        _state["in_hook"] = True
        try:
            _redeliver(exc.signo)
        finally:
            _state["in_hook"] = False
        return
    previous = _state.get("hook") or sys.__unraisablehook__
    previous(unraisable)


def _redeliver(signo: int) -> None:
    """Send `signo` again to the main thread from a new thread, so that its handler runs after this
    hook has returned (tripping it here would run the handler inside the hook, whose exception
    Python swallows too). A real signal, not a flag: it also wakes a blocking call the main thread
    may be in (a sleep, a write to a stalled pipe); once settle() has blocked the stop signals it
    stays pending, and harmless."""
    import _thread

    main = int(_state["main"])

    def send() -> None:
        try:
            if hasattr(signal, "pthread_kill") and main != -1:
                signal.pthread_kill(main, signo)
            else:
                os.kill(os.getpid(), signo)
        except (OSError, ValueError):
            pass

    try:
        _thread.start_new_thread(send, ())
    except RuntimeError:  # no thread can be started: the stop is said on the way out (settle)
        pass


def stopped_by() -> int | None:
    """The first stop signal handled, or None."""
    return _received[0] if _received else None


def settle() -> int | None:
    """On the way out: stop acting on signals (block them), kill every registered child, and say
    which stop signal came (handled before, or pending now), if any."""
    _state["quiet"] = True
    if hasattr(signal, "pthread_sigmask"):
        try:
            signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
            pending = [s for s in STOP_SIGNALS if s in signal.sigpending()]
        except (OSError, ValueError):
            pending = []
        if pending and not _received:
            _received.append(int(pending[0]))
    kill_all()
    return stopped_by()


def describe(signo: int) -> str:
    """The one line said on stderr when a signal stopped gpudoctor."""
    if signo == signal.SIGINT:
        return "gpudoctor: interrupted"
    try:
        name = signal.Signals(signo).name
    except ValueError:
        name = f"signal {signo}"
    return f"gpudoctor: stopped by {name}"


class _Starting:
    """``with starting:`` around starting a child and registering it: a stop signal that arrives
    inside is acted on at the end, when kill_all() reaches the new child too."""

    def _mine(self) -> bool:
        import _thread

        return bool(_state["installed"]) and _thread.get_ident() == _state["main"]

    def __enter__(self) -> None:
        if self._mine():
            _state["holding"] += 1

    def __exit__(self, *exc: Any) -> None:
        if not self._mine():
            return
        _state["holding"] = max(0, int(_state["holding"]) - 1)
        if not _state["holding"] and _held:
            signo = _held[0]
            _held.clear()
            kill_all()
            if not _state["quiet"]:
                raise Stopped(signo)


starting = _Starting()




def _stderr_line(text: str) -> None:
    try:
        sys.stderr.write(text + "\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


def say_stopped(signo: int) -> None:
    """Write describe(signo) to stderr, never raising (the terminal may be gone: SIGHUP)."""
    _stderr_line(describe(signo))


def stop_in(exc: BaseException) -> BaseException | None:
    """The KeyboardInterrupt or SystemExit (a Stopped) that ``exc`` is or was caused by, if any.
    A signal can arrive in the middle of any import, and Python wraps what the handler raised in
    some places (a RuntimeError from __set_name__ while a class is made: seen in platform.py
    during click's import), so the chain of causes is searched, not the exception alone."""
    current: BaseException | None = exc
    for _ in range(16):
        if current is None:
            break
        if isinstance(current, (KeyboardInterrupt, SystemExit)):
            return current
        current = current.__cause__ or current.__context__
    return None
