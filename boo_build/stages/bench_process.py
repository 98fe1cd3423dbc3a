"""The build's benchmark process: every benchmark of a build runs there.

One spawned child process, one call at a time, on its main thread: as in an
application, one thread runs torch, with one OpenMP team. In the build's own
process doit's pool threads ran validation's torch work, and each such thread
keeps an idle OpenMP team; libgomp then stops spinning and wakes workers per
parallel region, and eager timed there ran 2-3x slow, so the build kept
kernels eager beats (docs/cpu-performance.md, "Measurements behind the code"). A dedicated
thread was not enough: the other threads' teams are still there.

Stdlib only; the functions it runs come by reference (``benchmark``'s). A
spawned child imports the parent's main script as ``__mp_main__``: a script
that starts a build itself needs the usual ``if __name__ == "__main__":``
guard (``boo-build`` and doit have it).
"""

from __future__ import annotations

import contextlib
import threading
from typing import Callable, Iterator

_BENCH_POOL: list = []
_BENCH_LOCK = threading.Lock()
PRIORITY = -20  # the benchmark process's nice value where the OS allows it (root): other work on the machine waits
# While rounds are timed (``timing_priority``): the timed work's threads (the main thread, IREE's
# local-task workers) above the rest of this process (torch's OpenMP team, IREE's I/O threads),
# all of them above every ordinary process. Round-robin real-time classes: Linux keeps 5 % of each
# second for ordinary processes (sched_rt_runtime_us), and the rounds run for seconds at most.
TIMED_RT, OTHER_RT = 2, 1
TIMED_THREADS = ("iree-worker",)  # thread names (besides the main thread) that run the timed kernels


def raise_priority(nice: int = PRIORITY) -> int | None:
    """Every thread of this process, and those it starts later, at ``nice``; the nice value
    now, or None where the OS refused (not root, no CAP_SYS_NICE: left as it was)."""
    import os

    try:
        tids = [int(t) for t in os.listdir("/proc/self/task")]
    except OSError:
        tids = [0]
    try:
        for tid in tids:  # on Linux a nice value is per thread; new threads inherit their creator's
            os.setpriority(os.PRIO_PROCESS, tid, nice)
    except (OSError, AttributeError):
        return None
    return os.getpriority(os.PRIO_PROCESS, 0)


def _threads() -> list[tuple[int, str]]:
    import os

    out = []
    for t in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{t}/comm") as f:
                out.append((int(t), f.read().strip()))
        except OSError:  # a thread that ended meanwhile
            continue
    return out


@contextlib.contextmanager
def timing_priority() -> Iterator[bool]:
    """While the block runs, in a process whose priority ``raise_priority`` raised (the
    benchmark process; any other is left alone): this process's threads in the
    round-robin real-time class, the main thread and IREE's workers (``TIMED_THREADS``)
    at ``TIMED_RT``, the others at ``OTHER_RT``; after it, all of them back in the
    ordinary class at their nice value. Yields whether it did.

    Why: at nice -20 ordinary processes still run whenever a timed thread sleeps,
    and a multi-threaded kernel's workers sleep and wake at every dispatch; beside
    one CPU hog per core a ``local-task`` kernel's medians moved by up to 3x from
    pass to pass (the paired ratio's noise 10-40 %), and the selection with them.
    In the real-time class a waking worker takes its core at once; the timed
    threads above torch's OpenMP team so that its threads, spinning after each torch
    call, do not hold the cores IREE's workers wake to (at one level they did:
    ``local-task`` ran no faster than ``local-sync``). docs/cpu-performance.md has the
    measurements."""
    import os

    changed: list[int] = []
    ok = False
    try:
        if os.getpriority(os.PRIO_PROCESS, 0) == PRIORITY and hasattr(os, "sched_setscheduler"):
            pid = os.getpid()
            for tid, name in _threads():
                level = TIMED_RT if tid == pid or name.startswith(TIMED_THREADS) else OTHER_RT
                try:
                    os.sched_setscheduler(tid, os.SCHED_RR, os.sched_param(level))
                except ProcessLookupError:  # ended meanwhile
                    continue
                changed.append(tid)
            ok = True
    except (OSError, AttributeError):  # not allowed (no CAP_SYS_NICE, a container's limit): as it was
        ok = False
    try:
        yield ok
    finally:
        if changed:
            # threads started inside the block inherited the class: every real-time thread goes back
            for tid, _ in _threads():
                try:
                    if os.sched_getscheduler(tid) == os.SCHED_RR:
                        os.sched_setscheduler(tid, os.SCHED_OTHER, os.sched_param(0))
                except OSError:
                    continue


def in_bench_process(fn: Callable, *args, **kw):
    """``fn(*args, **kw)`` (picklable, by reference) in the benchmark process,
    started on first use (spawned: no threads or OpenMP teams inherited);
    its result, or its exception. A process that died is replaced next call."""
    from concurrent.futures.process import BrokenProcessPool

    with _BENCH_LOCK:
        if not _BENCH_POOL:
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor

            _BENCH_POOL.append(ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"),
                                                   initializer=raise_priority))
        pool = _BENCH_POOL[0]
        try:
            return pool.submit(fn, *args, **kw).result()
        except BrokenProcessPool as e:
            _BENCH_POOL.clear()
            raise RuntimeError(f"the benchmark process died running {getattr(fn, '__name__', fn)} ({e}); "
                               "the next benchmark starts a new one") from None
