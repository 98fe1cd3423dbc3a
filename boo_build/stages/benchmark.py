"""Benchmark: compiled kernels, torch eager and torch.compile (the CSV table:
``bench_table.py``; the timing statistics: ``sampling.py``).

* ``measure`` (``sampling.py``) times a callable adaptively: a few warm-up calls,
  then samples until the running median is stable (two medians ``rel_tol`` apart)
  or a budget of repetitions / seconds runs out. Very short calls are batched so a
  sample is at least ``min_sample_s`` long.
* ``bench_candidates`` times a kernel's candidates, torch eager, torch.compile of
  the op's eager call (``compiled_fn``, within the build's compile budget) with its
  call's fixed cost (``compiled_call_fn``) and a reference loop in paired rounds (``comparison.py``).
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
import os
import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from .. import ops
from ..records import COMPILED, EAGER, BenchResult, BenchStatus, SizeTiming
from ..signature import KernelSignature, ModuleId
from ..targets import Target
from . import comparison, load
from .bench_process import timing_priority
from .sampling import Stats, measure, summarize  # timing statistics (re-exported: the benchmark's surface)

# A CPU sample is the mean per call over about this long: the occasional stall of
# millisecond size (a local-task hand-off, a descheduled thread) counts in it, as
# it does in an application's throughput; a single call's time would hide it.
CPU_ROUND_S = 2e-3
NOT_ASKED = comparison.NOT_ASKED  # bench_candidates' untimed where nothing says why
COMPILE_FAILED = "not timed: torch.compile failed"  # how a compile that failed begins its why


# --------------------------------------------------------------- records
def _result(subject: str, sig: KernelSignature, target: str, stats: Stats, threads: int,
            reason: str = "", **fields: Any) -> BenchResult:
    if not stats.stable and not reason:
        reason = f"median not stable within the budget ({stats.n} samples)"
    return BenchResult(subject=subject, signature=sig.key, target=target, status=BenchStatus.OK, reason=reason,
                       min_s=stats.min, median_s=stats.median, p90_s=stats.p90, mean_s=stats.mean, reps=stats.n,
                       threads=threads, **fields)


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
    from ..loader.hal import open_device
    from ..loader.invoke import KernelRunner
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
    return _sized(sig, shapes, [run_one(tuple(shape)) for shape in shapes])


def _sized(sig: KernelSignature, shapes, results: Sequence[BenchResult]) -> BenchResult:
    """The first of ``results`` (one per shape), with every shape's timing in ``sizes``."""
    sizes = tuple(SizeTiming(shape=tuple(shape), status=r.status, reason=r.reason, min_s=r.min_s,
                             median_s=r.median_s, p90_s=r.p90_s, mean_s=r.mean_s, reps=r.reps)
                  for shape, r in zip(shapes, results))
    return dataclasses.replace(results[0], signature=sig.key, sizes=sizes)


def bench_kernel_at(vmfb: bytes, mid: ModuleId, target: Target, device, shapes=(), **kw) -> BenchResult:
    """``bench_kernel``, at each of ``shapes`` for a dynamic kernel (``bench_at``)."""
    if not mid.signature.is_dynamic or not shapes or device is None:
        return bench_kernel(vmfb, mid, target, device, **kw)
    return bench_at(mid.signature, shapes, lambda s: bench_kernel(vmfb, mid, target, device, shape=s, **kw))


def bench_eager_at(sig: KernelSignature, shapes=(), **kw) -> BenchResult:
    """``bench_eager``, at each of ``shapes`` for a dynamic signature (``bench_at``;
    without shapes, at its export sizes): a baseline timed alone (``boo-build measure``'s
    torch.compile); torch eager against the kernels is timed in their paired rounds
    (``bench_candidates``)."""
    if not sig.is_dynamic:
        return bench_eager(sig, **kw)
    shapes = [tuple(s) for s in shapes or (sig.example().input_shape,)]
    return bench_at(sig, shapes, lambda s: bench_eager(sig.bind(s), **kw))


# ------------------------------------------------- candidates, in rounds
@dataclass(frozen=True)
class Timed:
    """One subject of the rounds (``time_rounds``): ``call`` is timed; ``companion``
    (untimed) runs before each call of it (torch eager's op, on the CPU: the kernel
    as an application calls it, right after other torch work)."""

    name: str
    call: Callable[[], Any]
    companion: Callable[[], Any] | None = None


def reference_work() -> int:
    """A fixed piece of work (pure Python, one thread, no memory traffic to speak of)
    timed in every round: its spread says how busy the machine was (``comparison.Rounds.busy``)."""
    total = 0
    for i in range(4000):
        total += i * i % 7
    return total


def _batch(t: Timed, min_sample_s: float, clock: Callable[[], float], warmup: int) -> int:
    """Warm ``t`` up; the calls per sample that make a sample at least ``min_sample_s``."""
    for _ in range(warmup):
        if t.companion is not None:
            t.companion()
        t.call()
    if t.companion is not None:
        t.companion()
    t0 = clock()
    t.call()
    first = clock() - t0
    return 1 if first >= min_sample_s or first <= 0 else min(1000, math.ceil(min_sample_s / first - 1e-9))


def time_rounds(subjects: Sequence[Timed], rounds: int, batches: Mapping[str, int], *,
                clock: Callable[[], float] = time.perf_counter, start: int = 0,
                between: Callable[[], None] | None = None) -> dict[str, list[float]]:
    """``rounds`` rounds: in each, every subject's sample (the mean per call over its
    batch of calls), the order rotated by one from round to round (``start``: the
    first round's rotation), so that no subject always follows the same one.
    ``between``: called before each round, untimed (``load.waiting_threads``' sampling)."""
    times: dict[str, list[float]] = {t.name: [] for t in subjects}
    n = len(subjects)
    for r in range(rounds):
        if between is not None:
            between()
        k = (start + r) % n
        for t in list(subjects[k:]) + list(subjects[:k]):
            inner, spent = batches[t.name], 0.0
            if t.companion is None:
                t0 = clock()
                for _ in range(inner):
                    t.call()
                spent = clock() - t0
            else:
                for _ in range(inner):
                    t.companion()
                    t0 = clock()
                    t.call()
                    spent += clock() - t0
            times[t.name].append(spent / inner)
    return times


def bench_rounds(subjects: Sequence[Timed], preference: Sequence[str], *, shape: tuple[int, ...] | None = None,
                 rounds: int = comparison.ROUNDS, min_sample_s: float = CPU_ROUND_S, warmup: int = 3,
                 clock: Callable[[], float] = time.perf_counter,
                 cpu_use: Callable[[], tuple[float, float] | None] | None = None,
                 waiting: Callable[[], int | None] | None = None, previous: comparison.Previous | None = None,
                 rows: int | None = None) -> tuple[comparison.Rounds, list[str]]:
    """Time ``subjects`` (candidates named in ``preference``, most preferred first;
    ``comparison.EAGER``; ``comparison.REFERENCE``) in passes of ``rounds`` rounds
    until no comparison the selection makes is left inside the noise, or
    ``comparison.MAX_PASSES`` passes (``comparison.needs_more``, with ``previous``, the
    previous build's decision, and ``rows``, this size's): (the rounds, what each further
    pass was for; none where ``previous`` holds: ``comparison.Previous.holds``). ``cpu_use`` (default ``load.cpu_use``, read with
    ``clock``) says how much CPU other processes took during each pass, ``waiting``
    (default ``load.waiting_threads``, before each round) how many of their threads waited to run."""
    use, wait = cpu_use or load.cpu_use, waiting or load.waiting_threads
    batches = {t.name: _batch(t, min_sample_s, clock, warmup) for t in subjects}

    def one_pass(start: int) -> tuple[dict[str, list[float]], float | None, bool, float | None]:
        """(the pass's samples, the CPUs other processes used, whether it ran in the real-time class,
        the median round's threads of other processes waiting to run)."""
        seen: list[int] = []

        def sample() -> None:
            if (n := wait()) is not None:
                seen.append(n)
        with timing_priority() as rt:  # after the warm-ups: torch's and IREE's threads are there to rank
            u0, t0 = use(), clock()
            times = time_rounds(subjects, rounds, batches, clock=clock, start=start, between=sample)
            waited = float(statistics.median(seen)) if seen else None
            return times, load.others_between(u0, use(), clock() - t0), rt, waited

    times, others, rt, waited = one_pass(0)
    got = comparison.Rounds(times, (rounds,), shape, others, os.cpu_count() or 0, load.nice(), rt, waited)
    remeasured: list[str] = []
    eager = any(t.name == comparison.EAGER for t in subjects)
    while why := comparison.needs_more(got, preference, eager, previous, rows):
        remeasured += why
        more, others, rt, waited = one_pass(got.n)
        got = got.with_pass(more, others, rt, waited)
    return got, remeasured


@dataclass(frozen=True)
class KernelBench:
    """What ``bench_candidates`` returns: the rounds (``comparison.RoundsRecord``), each
    candidate's record by name (its samples summarized; an error where it could not
    run), and torch eager's."""

    rounds: comparison.RoundsRecord
    results: Mapping[str, BenchResult]
    eager: BenchResult
    # torch.compile of the op's eager call, timed in the same rounds (None: not asked for; a record
    # not run or skipped, with why, where the compile budget or the compile left it out)
    compiled: BenchResult | None = None
    compile_s: float = 0.0  # the seconds its Inductor compiles took (``boo-build measure``'s budget counts them)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"rounds": self.rounds.to_json(),
                               "results": {n: r.to_json() for n, r in self.results.items()},
                               "eager": self.eager.to_json()}
        if self.compiled is not None:
            out["compiled"], out["compile_s"] = self.compiled.to_json(), self.compile_s
        return out

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "KernelBench":
        c = d.get("compiled")
        return cls(comparison.RoundsRecord.from_json(d["rounds"]),
                   {n: BenchResult.from_json(r) for n, r in d["results"].items()}, BenchResult.from_json(d["eager"]),
                   None if c is None else BenchResult.from_json(c), float(d.get("compile_s") or 0.0))

    @classmethod
    def not_run(cls, sig: KernelSignature, target: str, candidates: Sequence[tuple[str, Any]], why: str) -> "KernelBench":
        """Nothing timed: every candidate's record and torch eager's "not run", with ``why``."""
        from ..candidates import Candidate

        results = {}
        for name, _ in candidates:
            c = Candidate.parse(name)
            results[name] = dataclasses.replace(BenchResult.not_run(ModuleId(sig, c.impl).key, sig.key, target, why),
                                                variant=c.variant, mode=c.mode)
        return cls(comparison.RoundsRecord(sig.key, target, (), ()), results,
                   BenchResult.not_run(EAGER, sig.key, target, why))


def bench_candidates(sig: KernelSignature, target: Target, device, candidates: Sequence[tuple[str, bytes]],
                     shapes=(), *, seed: int = 0, torch_device: str | None = None,
                     rounds: int = comparison.ROUNDS, eager_threads: int | None = None,
                     min_sample_s: float | None = None, previous: comparison.Previous | None = None,
                     compiled: int = 0, untimed: str = NOT_ASKED, **kw: Any) -> KernelBench:
    """Time the ``candidates`` of ``sig`` on ``device`` ((name, vmfb): a name is a
    candidate's text form, ``<impl>[+<variant>][@<mode>]``, its mode the CPU driver it
    runs on), torch eager and the reference loop in paired rounds (``bench_rounds``),
    at each of ``shapes`` for a dynamic signature (its first is what the selection
    decides at), on the CPU each kernel call right after torch eager's (untimed),
    torch on ``eager_threads`` threads (None: as many as local-task runs workers).
    A candidate that fails to load or run is left out of the rounds with an error record.
    ``previous``: the previous build's decision, kept where the rounds cannot tell
    otherwise (``comparison.Previous``) when it was made on this machine and its
    candidate is timed here; the rounds record says so. ``compiled``: at how many of the
    sizes (the first ones) torch.compile of the op's eager call (``compiled_fn``, one
    Inductor compile per size) joins the rounds, ``comparison.COMPILED``; ``untimed``: why
    not at the others (the build's compile budget), in the rounds' ``untimed`` and the
    compiled record (``KernelBench.compiled``). Where torch has no device for the
    target's (a GPU target without ``torch_device``), or the compile fails, it says so."""
    from ..candidates import Candidate
    from ..loader.hal import open_device
    from ..loader.invoke import KernelRunner
    from .torch_modules import sample_args

    if device is None:
        from ..loader.devices import no_device_reason

        return KernelBench.not_run(sig, target.name, candidates, no_device_reason(target.arch))
    if getattr(device, "software", False):  # validated there, not timed: the selection follows the traffic model
        return KernelBench.not_run(sig, target.name, candidates, software_reason(device))
    from ..stages.selection import preference_order

    machine = load.machine_id(device)
    if previous is not None and not previous.applies(machine, [name for name, _ in candidates]):
        previous = None  # made on another machine, or of a candidate no longer timed: decided afresh
    first = previous.candidate if previous is not None else None
    results: dict[str, BenchResult] = {}

    cpu = device.is_cpu
    sizes: list[tuple[int, ...] | None] = [tuple(s) for s in shapes] if sig.is_dynamic and shapes else [None]
    per_size: list[comparison.Rounds] = []
    remeasured: list[str] = []
    threads: dict[str, int] = {}
    errors: dict[str, BenchResult] = {}
    torch_threads = 0
    compile_on = "cpu" if cpu else torch_device
    compile_s = 0.0
    left_out: list[BenchStatus] = []  # per size: how torch.compile was left out (OK: it was timed)
    for i, shape in enumerate(sizes):
        bound = sig if shape is None else sig.bind(shape)
        companion = eager_fn(bound, seed) if cpu else None
        subjects: list[Timed] = []
        for name, vmfb in candidates:
            if name in errors:
                continue
            c = Candidate.parse(name)
            mid = ModuleId(sig, c.impl)
            try:
                dev = open_device(c.mode or device.uri)
                runner = KernelRunner(dev, vmfb, mid.func_name)
                args = sample_args(bound, seed)
                if not dev.is_cpu and torch_device is not None:
                    args = tuple(a.to(torch_device) for a in args)
                elif not dev.is_cpu:
                    from ..loader.arrays import numpy_from_torch  # host arrays for GPUs (CPU build of torch)

                    args = tuple(numpy_from_torch(a) for a in args)
                runner(*args)  # it runs, or it is left out with why
            except Exception as e:  # noqa: BLE001 - a kernel that fails to run is a result, not a crash
                errors[name] = BenchResult(subject=mid.key, signature=sig.key, target=target.name,
                                           status=BenchStatus.ERROR, reason=f"{type(e).__name__}: {_first_line(e)}",
                                           variant=c.variant, mode=c.mode)
                continue
            threads[name] = dev.threads()
            subjects.append(Timed(name, _call(runner, args), companion))
        pref = preference_order([t.name for t in subjects], first=first)
        with _torch_for(bound, eager_threads, cpu=cpu) as used:
            torch_threads = used
            # eager, too, right after an eager call: each timed call follows the same kind of torch
            # work (torch's threads awake), whatever subject the round timed before it
            subjects.append(Timed(comparison.EAGER, eager_fn(bound, seed, torch_device or "cpu"), companion))
            subjects.append(Timed(comparison.REFERENCE, reference_work))
            status, why_not = ((BenchStatus.SKIPPED, untimed) if i >= compiled else
                               (BenchStatus.NOT_RUN, f"not timed: torch has no device for {target.name} here")
                               if compile_on is None else (BenchStatus.OK, ""))
            if not why_not and subjects[:-2]:
                t0 = time.perf_counter()
                got_compiled = _compiled_subjects(bound, seed, compile_on or "cpu", companion)
                compile_s += time.perf_counter() - t0
                if isinstance(got_compiled, str):
                    status, why_not = BenchStatus.ERROR, got_compiled
                else:
                    subjects += got_compiled
            left_out.append(status)
            sample = min_sample_s if min_sample_s is not None else CPU_ROUND_S if cpu else 20e-6
            got, passes_for = bench_rounds(subjects, pref, shape=shape, rounds=rounds, min_sample_s=sample,
                                           previous=previous, rows=None if shape is None else sig.rows_of(shape),
                                           **kw)
        if why_not:
            got = dataclasses.replace(got, untimed={comparison.COMPILED: why_not})
        per_size.append(got)
        remeasured += [w + (f" at {list(shape)}" if shape is not None else "") for w in passes_for]
    results.update(errors)
    timed = [name for name, _ in candidates if name not in errors]
    for name in timed:
        c = Candidate.parse(name)
        results[name] = _from_rounds(ModuleId(sig, c.impl).key, sig, target.name, per_size, name, threads[name],
                                     variant=c.variant, mode=c.mode)
    eager = _from_rounds(EAGER, sig, target.name, per_size, comparison.EAGER, torch_threads)
    record = comparison.RoundsRecord(sig.key, target.name, tuple(preference_order(timed, first=first)),
                                     tuple(per_size), tuple(remeasured), machine=machine, previous=previous)
    return KernelBench(record, results, eager, _compiled_record(sig, target.name, per_size, torch_threads, left_out),
                       compile_s)




def _compiled_subjects(sig: KernelSignature, seed: int, device: str,
                       companion: Callable[[], Any] | None) -> "list[Timed] | str":
    """torch.compile of ``sig``'s eager call on ``device`` and its call's fixed cost
    (``compiled_call_fn``) as subjects of the rounds, compiled here (their first calls), or why
    not: the compile's error."""
    try:
        fn = compiled_fn(sig, seed, device)
        fn()  # Inductor compiles on the first call
        call = compiled_call_fn(sig, seed, device)  # after fn's: compiling fn resets Dynamo
        call()
    except Exception as e:  # noqa: BLE001 - a compile that fails is a result, not a crash
        return f"{COMPILE_FAILED}: {type(e).__name__}: {_first_line(e)}"
    return [Timed(comparison.COMPILED, fn, companion), Timed(comparison.COMPILED_CALL, call, companion)]


def _compiled_record(sig: KernelSignature, target: str, per_size: Sequence[comparison.Rounds], threads: int,
                     left_out: Sequence[BenchStatus]) -> BenchResult:
    """torch.compile's record from its samples in the rounds, at each size for a dynamic signature;
    a size where it was not timed says why (its rounds' ``untimed``), with ``left_out``'s status:
    skipped (the compile budget), an error (the compile failed), not run (no device; no candidate)."""
    name = comparison.COMPILED

    def one(r: comparison.Rounds, status: BenchStatus) -> BenchResult:
        if name in r.times:
            return _result(COMPILED, sig, target, summarize(r.times[name]), threads)
        why = r.untimed.get(name) or "not timed: no candidate to compare with"
        return BenchResult(subject=COMPILED, signature=sig.key, target=target,
                           status=BenchStatus.NOT_RUN if status is BenchStatus.OK else status, reason=why)
    results = [one(r, s) for r, s in zip(per_size, left_out)]
    if per_size[0].shape is None:
        return results[0]
    return _sized(sig, [r.shape for r in per_size], results)


def software_reason(device) -> str:
    """Why a software device (lavapipe) times nothing: what its timings would be."""
    return (f"not timed: {device.arch} is a software device on the CPU: its timings are the CPU's, "
            "not a GPU's")


def _call(runner: Callable[..., Any], args: tuple) -> Callable[[], Any]:
    return lambda: runner(*args)


def _from_rounds(subject: str, sig: KernelSignature, target: str, per_size: Sequence[comparison.Rounds],
                 name: str, threads: int, **fields: Any) -> BenchResult:
    """A subject's record from its samples over the rounds (its median, the mean but the
    slowest, ...), at each size for a dynamic signature (``sizes``)."""
    results = [_result(subject, sig, target, summarize(r.times[name]), threads, **fields) for r in per_size]
    if per_size[0].shape is None:
        return results[0]
    return _sized(sig, [r.shape for r in per_size], results)


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


def compiled_call_fn(sig: KernelSignature, seed: int = 0, device: str = "cpu") -> Callable[[], Any]:
    """Like ``compiled_fn`` with the op left out (``_touch``): what a compiled function's call
    costs on the op's inputs whatever it computes (Dynamo's frame and tensor guards, AOT autograd's
    and Inductor's wrappers, one tiny kernel and its output), which a model's graph pays once, not
    per norm. Compile it after ``compiled_fn``'s, which resets Dynamo."""
    return _op_call(sig, seed, device, compiled=True, call=True)


def _touch(*args: Any) -> Any:
    """One element of each tensor argument, summed: a trivial output that reads every input (so
    Dynamo guards them all, as the op's compile does) and runs one tiny kernel."""
    out = None
    for a in args:
        if a is not None:
            v = a.reshape(-1)[:1].float()
            out = v if out is None else out + v
    return out


def _op_call(sig: KernelSignature, seed: int, device: str, *, compiled: bool,
             call: bool = False) -> Callable[[], Any]:
    import torch

    from .torch_modules import sample_args, torch_dtype

    g = torch.Generator().manual_seed(seed)
    dt = torch_dtype(sig.dtype)
    fwd_args = [a.to(device) for a in sample_args(sig.replace(mask=1), seed)]
    x, r = fwd_args[0], fwd_args[1] if sig.residual else None
    params = fwd_args[2 if sig.residual else 1:]
    w = params[0] if sig.affine else None
    b = params[1] if sig.bias else None

    def grad_out():
        return torch.randn(sig.input_shape, generator=g).to(dt).to(device)
    if sig.residual:  # torch eager's add, then the norm (what a model without the fused kernel runs)
        op, args = ops.get(sig.op).residual_eager_call(sig, x, r, w, b, grad_out, compiled)
    else:
        op, args = ops.get(sig.op).eager_call(sig, x, w, b, grad_out, compiled)
    if call:
        op = torch.compile(_touch, dynamic=False, fullgraph=True)
    elif compiled:
        # Signatures share these lambdas' code: start afresh so that no
        # earlier compile's guards or recompile limit get in the way.
        torch._dynamo.reset()
        op = torch.compile(op, dynamic=False, fullgraph=True)
    return lambda: op(*args)


def local_task_threads() -> int:
    """Worker threads of IREE's local-task driver in this process (opens the
    driver if needed: its worker count is fixed from then on)."""
    from ..loader.hal import cpu_threads, open_device

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
