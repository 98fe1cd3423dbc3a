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

import threading
from typing import Callable

_BENCH_POOL: list = []
_BENCH_LOCK = threading.Lock()
PRIORITY = -20  # the benchmark process's nice value where the OS allows it (root): other work on the machine waits


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
