"""Benchmark: timing statistics, compiled kernels and torch eager (the CSV
table: ``bench_table.py``).

* ``measure`` times a callable adaptively: a few warm-up calls, then samples
  until the running median is stable (two medians ``rel_tol`` apart) or a
  budget of repetitions / seconds runs out. Very short calls are batched so a
  sample is at least ``min_sample_s`` long.
* ``bench_kernel`` times a vmfb in-process through ``loader.invoke.KernelRunner``
  (the loader's own call path: zero-copy DLPack in and out), inputs prepared once.
* ``bench_eager`` times torch's eager op for the same signature on the CPU,
  with torch's intra-op threads set to the local-task worker count (or what
  the caller passes), so IREE and torch get the same cores.

Thread count of IREE's local-task driver: fixed when the driver is created
(once per process), from ``--task_topology_max_group_count`` (see
``loader.invoke.set_cpu_threads``); default: one worker per physical core.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence

from .. import ops
from ..records import COMPILED, EAGER, BenchResult, BenchStatus, SizeTiming
from ..signature import KernelSignature, ModuleId
from ..targets import Target

# A CPU sample is the mean per call over about this long: the occasional stall of
# millisecond size (a local-task hand-off, a descheduled thread) counts in it, as
# it does in an application's throughput; a single call's time would hide it.
CPU_ROUND_S = 2e-3


# ----------------------------------------------------------------- stats
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


# --------------------------------------------------------------- records
def _result(subject: str, sig: KernelSignature, target: str, stats: Stats, threads: int,
            reason: str = "") -> BenchResult:
    if not stats.stable and not reason:
        reason = f"median not stable within the budget ({stats.n} samples)"
    return BenchResult(subject=subject, signature=sig.key, target=target, status=BenchStatus.OK, reason=reason,
                       min_s=stats.min, median_s=stats.median, p90_s=stats.p90, mean_s=stats.mean, reps=stats.n,
                       threads=threads)


# --------------------------------------------------------------- kernels
def bench_kernel(vmfb: bytes, mid: ModuleId, target: Target, device, *, seed: int = 0,
                 torch_device: str | None = None, shape: tuple[int, ...] | None = None,
                 **measure_kw) -> BenchResult:
    """Time ``vmfb`` on ``device`` (``loader.devices.DeviceInfo``; None: not run)
    through the loader's call path, with inputs prepared once (on a GPU: torch
    tensors on ``torch_device`` when given, else host arrays, staged)."""
    sig = mid.signature
    base: dict[str, Any] = dict(subject=mid.key, signature=sig.key, target=target.name)
    if device is None:
        from ..loader.devices import no_device_reason

        return BenchResult.not_run(mid.key, sig.key, target.name, no_device_reason(target.arch))
    from ..loader.invoke import KernelRunner, open_device
    from .torch_modules import sample_args

    try:
        dev = open_device(device.uri)
        runner = KernelRunner(dev, vmfb, mid.func_name)
        bound = sig if shape is None else sig.bind(shape)  # shape: a dynamic kernel's
        args = sample_args(bound, seed)
        if not dev.is_cpu and torch_device is not None:
            args = tuple(a.to(torch_device) for a in args)
        elif not dev.is_cpu:
            from ..loader.arrays import numpy_from_torch  # host arrays for GPUs (CPU build of torch)

            args = tuple(numpy_from_torch(a) for a in args)
        if dev.is_cpu:
            with _torch_for(bound):
                stats = measure(lambda: runner(*args), companion=eager_fn(bound, seed),
                                **{"min_sample_s": CPU_ROUND_S, **measure_kw})
        else:
            stats = measure(lambda: runner(*args), **measure_kw)
    except Exception as e:  # noqa: BLE001 - a kernel that fails to run is a result, not a crash
        return BenchResult(status=BenchStatus.ERROR, reason=f"{type(e).__name__}: {str(e).strip()[:500]}", **base)
    return _result(mid.key, sig, target.name, stats, dev.threads())


# A CPU kernel is timed with torch eager's call of its signature before each call
# (``measure``'s companion), as an application calls a norm between torch ops,
# whose OpenMP threads are awake then. Timed alone, a ``local-task`` kernel looked
# several times faster than in such a loop: its worker hand-offs stall now and then
# for milliseconds (docs/cpu-performance.md, "Measurements behind the code").
@contextlib.contextmanager
def _torch_for(sig: KernelSignature, threads: int | None = None, compiled: bool = False, cpu: bool = True):
    """torch as the benchmarks run it for ``sig``: on the CPU with ``threads``
    intra-op threads (None: as many as IREE's local-task driver runs workers),
    in inference mode unless its eager call needs autograd; yields the thread
    count (0 off the CPU). torch's thread count is restored afterwards."""
    import torch

    previous = torch.get_num_threads()
    try:
        if threads is None and cpu:
            threads = local_task_threads() or previous
        if threads and cpu:
            torch.set_num_threads(int(threads))
        with torch.inference_mode(mode=not ops.get(sig.op).eager_needs_autograd(sig, compiled)):
            yield torch.get_num_threads() if cpu else 0
    finally:
        torch.set_num_threads(previous)


def bench_at(sig: KernelSignature, shapes, run_one: Callable[[tuple[int, ...]], BenchResult]) -> BenchResult:
    """One result for a dynamic signature timed at each of ``shapes``
    (``run_one(shape)``): the first shape's timing, every shape in ``sizes``."""
    results = [run_one(tuple(shape)) for shape in shapes]
    sizes = tuple(SizeTiming(shape=tuple(shape), status=r.status, reason=r.reason, min_s=r.min_s,
                             median_s=r.median_s, p90_s=r.p90_s, mean_s=r.mean_s, reps=r.reps)
                  for shape, r in zip(shapes, results))
    return dataclasses.replace(results[0], signature=sig.key, sizes=sizes)


def bench_kernel_at(vmfb: bytes, mid: ModuleId, target: Target, device, shapes=(), **kw) -> BenchResult:
    """``bench_kernel``, at each of ``shapes`` for a dynamic kernel (``bench_at``)."""
    if not mid.signature.is_dynamic or not shapes or device is None:
        return bench_kernel(vmfb, mid, target, device, **kw)
    return bench_at(mid.signature, shapes, lambda s: bench_kernel(vmfb, mid, target, device, shape=s, **kw))


def bench_eager_at(sig: KernelSignature, shapes=(), passes: int = 2, **kw) -> BenchResult:
    """``bench_eager``, at each of ``shapes`` for a dynamic signature (``bench_at``;
    without shapes, at its export sizes), in ``passes`` passes (every other one
    in reverse order), each size keeping its pass with the lower median.

    Why: a disturbed timing of the baseline hands torch calls to a kernel slower
    than eager; one disturbed pass has timed eager tens of times slow
    (docs/cpu-performance.md, "Measurements behind the code")."""
    if not sig.is_dynamic:
        runs = [bench_eager(sig, **kw) for _ in range(max(1, passes))]
        return min(runs, key=_median_or_inf)
    shapes = [tuple(s) for s in shapes or (sig.example().input_shape,)]
    best: dict[tuple, BenchResult] = {}
    for p in range(max(1, passes)):
        for shape in (shapes if p % 2 == 0 else shapes[::-1]):
            r = bench_eager(sig.bind(shape), **kw)
            if shape not in best or _median_or_inf(r) < _median_or_inf(best[shape]):
                best[shape] = r
    return bench_at(sig, shapes, lambda s: best[tuple(s)])


def _median_or_inf(r: BenchResult) -> float:
    return r.median_s if r.ok and r.median_s is not None else math.inf


# ----------------------------------------------------------------- eager
def eager_fn(sig: KernelSignature, seed: int = 0, device: str = "cpu") -> Callable[[], Any]:
    """A no-argument callable running torch's eager op for ``sig`` on
    prepared inputs on ``device`` (what a model without these kernels would
    run): the op's ``eager_call`` (e.g. ``aten.native_layer_norm_backward``
    with the output mask, statistics as eager's own forward saves them)."""
    return _op_call(sig, seed, device, compiled=False)


def compiled_fn(sig: KernelSignature, seed: int = 0, device: str = "cpu") -> Callable[[], Any]:
    """Like ``eager_fn``, with the op compiled by ``torch.compile`` (Inductor,
    default mode, static shapes, one graph). The first call compiles."""
    return _op_call(sig, seed, device, compiled=True)


def _op_call(sig: KernelSignature, seed: int, device: str, *, compiled: bool) -> Callable[[], Any]:
    import torch

    from .torch_modules import sample_args, torch_dtype

    g = torch.Generator().manual_seed(seed)
    dt = torch_dtype(sig.dtype)
    fwd_args = [a.to(device) for a in sample_args(sig.replace(mask=1), seed)]
    x = fwd_args[0]
    w = fwd_args[1] if sig.affine else None
    b = fwd_args[2] if sig.bias else None
    op, args = ops.get(sig.op).eager_call(
        sig, x, w, b, lambda: torch.randn(sig.input_shape, generator=g).to(dt).to(device), compiled)
    if compiled:
        # Signatures share these lambdas' code: start afresh so that no
        # earlier compile's guards or recompile limit get in the way.
        torch._dynamo.reset()
        op = torch.compile(op, dynamic=False, fullgraph=True)
    return lambda: op(*args)


def local_task_threads() -> int:
    """Worker threads of IREE's local-task driver in this process (opens the
    driver if needed: its worker count is fixed from then on)."""
    from ..loader.invoke import cpu_threads, open_device

    open_device("local-task")
    return cpu_threads()


def bench_eager(sig: KernelSignature, threads: int | None = None, *, target: str = "cpu", seed: int = 0,
                torch_device: str = "cpu", compiled: bool = False, **measure_kw) -> BenchResult:
    """Time torch eager (``compiled``: ``torch.compile``, compiled in the
    warm-up) for ``sig`` on ``torch_device``. On the CPU with ``threads``
    intra-op threads; None: as many as IREE's local-task driver runs workers,
    so both get the same cores. (``os.cpu_count()`` counts SMT siblings, which
    local-task does not use by default.)"""
    import torch

    subject = COMPILED if compiled else EAGER
    base: dict[str, Any] = dict(subject=subject, signature=sig.key, target=target)
    cpu = torch.device(torch_device).type == "cpu"
    try:
        with _torch_for(sig, threads, compiled, cpu) as used:
            fn = (compiled_fn if compiled else eager_fn)(sig, seed, torch_device)
            stats = measure(fn, **({"min_sample_s": CPU_ROUND_S, **measure_kw} if cpu else measure_kw))
    except Exception as e:  # noqa: BLE001
        return BenchResult(status=BenchStatus.ERROR, reason=f"{type(e).__name__}: {_first_line(e)}", **base)
    return _result(subject, sig, target, stats, used)


def _first_line(e: BaseException) -> str:
    lines = [ln for ln in str(e).strip().splitlines() if ln.strip()]
    return (lines[0] if lines else type(e).__name__)[:500]
