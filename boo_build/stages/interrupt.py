"""Stopping an interrupted build (Ctrl-C, SIGTERM) with no task cut off half-way.

doit runs the graph's actions in daemon threads of the build process, and the
signal is handled on the main thread, which leaves doit at once. Had the
interpreter exited then, a thread still inside torch's export or IREE's
runtime (C++ that releases the GIL) would be ended by the interpreter's
finalization in the middle of that call: CPython 3.11 ends a daemon thread
that wants the GIL back with ``pthread_exit``, whose unwinding through C++
frames aborts the process (``terminate called without an active exception``,
exit status 134), and a file the thread was writing stays behind as its
temporary. A torch call cannot be cancelled from outside, so the build waits
for the actions in flight instead (exporting in child processes would make
exports killable, but each would import torch again: seconds per export, more
than the wait), and cuts short what it can:

* ``stop()`` (the signal handler, ``build.tasks.interrupt_on_sigterm``) sets
  the flag; the handler then kills the compilers (``compile.kill_running``).
* Every action of the graph runs under ``tracked`` (``build.creators``): one
  that starts after the flag raises ``Interrupted`` before doing anything;
  the others are counted.
* The stages check the flag where waiting ends (``check``): an export that
  waited for the export lock, a compile about to start its compiler.
* ``wait_idle()`` (the main thread, before it returns): until no action runs.
  What cannot be cut short (the export in torch, a validation, writing a
  record) finishes: seconds.

A task that ends while the build stops writes its outputs whole, or nothing;
doit's database, written on the way out, does not list it, so a rerun redoes it.
"""

from __future__ import annotations

import functools
import os
import threading
import time
from pathlib import Path
from typing import Callable, TypeVar

__all__ = ["PAUSE_ENV", "Interrupted", "check", "pause_point", "resume", "running", "stop", "stopping", "tracked",
           "wait_idle"]

F = TypeVar("F", bound=Callable)

# A plain flag, not a threading.Event: the signal handler sets it on the main
# thread at any bytecode, so setting must take no lock the main thread may hold
# at that moment (an Event's, in its clear() by ``resume``: a deadlock).
_stopping = False
_IDLE = threading.Condition()  # guards _running; notified when an action ends (never taken by the handler)
_running = 0


class Interrupted(RuntimeError):
    """The build was interrupted: this work did not start, or was stopped; nothing to record.
    An ``Exception``: doit's worker thread takes it as the task's failure (which
    nothing records any more) and goes on, instead of ending with a traceback."""


def stop() -> bool:
    """Mark the build as interrupted; False if it already was (a second signal)."""
    global _stopping
    if _stopping:
        return False
    _stopping = True
    return True


def stopping() -> bool:
    return _stopping


def resume() -> None:
    """Let work start again (a new build in this process after an interrupted one)."""
    global _stopping
    _stopping = False


def check(what: str) -> None:
    """Raise ``Interrupted`` if the build was interrupted: ``what`` does not start."""
    if _stopping:
        raise Interrupted(f"{what} not started: the build was interrupted")


def running() -> int:
    """How many tracked actions are running now."""
    with _IDLE:
        return _running


def tracked(fn: F) -> F:
    """``fn`` counted while it runs (``wait_idle`` waits for it); refused once the build is stopping."""

    @functools.wraps(fn)  # doit reads the signature (through __wrapped__) for its keyword arguments
    def action(*args, **kw):
        global _running
        with _IDLE:  # the check and the count together: wait_idle sees the action, or it sees the flag
            check(f"task {getattr(fn, '__name__', fn)}")
            _running += 1
        try:
            return fn(*args, **kw)
        finally:
            with _IDLE:
                _running -= 1
                _IDLE.notify_all()

    return action  # type: ignore[return-value]


def wait_idle(timeout: float | None = None) -> bool:
    """Wait until no tracked action runs (True), or ``timeout`` seconds passed (False)."""
    with _IDLE:
        return _IDLE.wait_for(lambda: _running == 0, timeout)


# Test-only hook. BOO_BUILD_TEST_PAUSE="<stage>:<marker path>" (stage: export
# or compile) makes the first such step of the process write the marker file
# and wait (up to PAUSE_LIMIT_S) for the build to be interrupted, then go on:
# a test sends the signal at exactly that point (tests/test_interrupt.py). No
# build sets it; unset, it costs one environment lookup per export or compile.
PAUSE_ENV = "BOO_BUILD_TEST_PAUSE"
PAUSE_LIMIT_S = 120.0
_PAUSE_LOCK = threading.Lock()
_paused: list[str] = []


def pause_point(stage: str) -> None:
    spec = os.environ.get(PAUSE_ENV)
    if not spec or spec.partition(":")[0] != stage:
        return
    with _PAUSE_LOCK:
        if _paused:
            return
        _paused.append(stage)
    Path(spec.partition(":")[2]).write_text(f"{stage} {os.getpid()}\n")
    deadline = time.monotonic() + PAUSE_LIMIT_S
    while not _stopping and time.monotonic() < deadline:  # the flag has nothing to wait on (above)
        time.sleep(0.01)
