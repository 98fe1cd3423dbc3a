"""Timing statistics: ``measure`` times a callable until its running median is
stable, ``summarize`` reduces samples to ``Stats`` (the benchmark's records,
``benchmark.py``, are made of them). Stdlib only."""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence


@dataclass(frozen=True)
class Stats:
    min: float
    median: float
    p90: float
    n: int
    stable: bool = True  # False when measure() ran out of budget before the median settled
    # the mean of the samples but the slowest (one pause of the machine must not
    # decide); what the selection compares (``BenchResult.mean_s``)
    mean: float | None = None


def _percentile(sorted_times: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (numpy's default method) of sorted data."""
    if not sorted_times:
        return math.nan
    pos = (len(sorted_times) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_times) - 1)
    return sorted_times[lo] + (sorted_times[hi] - sorted_times[lo]) * (pos - lo)


def summarize(times: Iterable[float], stable: bool = True) -> Stats:
    t = sorted(float(x) for x in times)
    if not t:
        raise ValueError("no timings to summarize")
    mean = statistics.fmean(t[:-1]) if len(t) > 1 else t[0]
    return Stats(min=t[0], median=statistics.median(t), p90=_percentile(t, 0.9), n=len(t), stable=stable, mean=mean)


def measure(fn: Callable[[], Any], *, warmup: int = 3, min_reps: int = 10, max_reps: int = 2000,
            max_seconds: float = 2.0, rel_tol: float = 0.05, min_sample_s: float = 20e-6,
            clock: Callable[[], float] = time.perf_counter, companion: Callable[[], Any] | None = None) -> Stats:
    """Time ``fn()`` until the running median is stable.

    After ``min_reps`` samples the median is checked every ``max(2, min_reps // 2)``
    samples; two consecutive checks within ``rel_tol`` of each other stop the
    loop. ``max_reps`` samples or ``max_seconds`` of sampling stop it too
    (``Stats.stable`` is then False). A call shorter than ``min_sample_s`` is
    repeated within a sample and the sample divided by the repeat count.
    ``companion``: called (untimed) before every call of ``fn``, each call then
    timed on its own: ``fn`` as an application runs it, right after other work.
    """
    if min_reps < 1 or max_reps < min_reps:
        raise ValueError(f"need 1 <= min_reps <= max_reps, got {min_reps}, {max_reps}")
    for _ in range(warmup):
        if companion is not None:
            companion()
        fn()
    # One timed call decides the batch size.
    t0 = clock()
    fn()
    first = clock() - t0
    inner = 1 if first >= min_sample_s or first <= 0 else min(1000, math.ceil(min_sample_s / first - 1e-9))
    times: list[float] = []
    step = max(2, min_reps // 2)
    previous = None
    start = clock()
    stable = False
    while len(times) < max_reps:
        if companion is None:
            t0 = clock()
            for _ in range(inner):
                fn()
            times.append((clock() - t0) / inner)
        else:
            spent = 0.0
            for _ in range(inner):
                companion()
                t0 = clock()
                fn()
                spent += clock() - t0
            times.append(spent / inner)
        n = len(times)
        if n >= min_reps and (n - min_reps) % step == 0:
            med = statistics.median(times)
            if previous is not None and abs(med - previous) <= rel_tol * max(abs(med), 1e-30):
                stable = True
                break
            previous = med
        if clock() - start >= max_seconds and n >= min_reps:
            break
    return summarize(times, stable=stable)


__all__ = ["Stats", "measure", "summarize"]
