"""Benchmark statistics, adaptive stopping (synthetic clock), kernel and eager
benchmarks on the CPU, and the CSV table. No assertions about speed."""

from __future__ import annotations

import csv
import json

import pytest
import torch
from helpers import GOOD, kernel_set, ln, rms

from boo_build.loader.devices import discover
from boo_build.loader.hal import cpu_threads
from boo_build.records import EAGER, BenchResult, OutputCheck, ValidationResult
from boo_build.report.bench_table import COLUMNS, eager_key, table_rows, write_table
from boo_build.signature import ModuleId
from boo_build.stages.benchmark import Stats, bench_eager, bench_kernel, eager_fn, measure, summarize
from boo_build.stages.selection import Decision, Selection
from boo_build.targets import catalogue

QUICK = dict(warmup=1, min_reps=4, max_reps=40, max_seconds=0.3)


# ----------------------------------------------------------------- summarize
def test_summarize_known_lists():
    assert summarize([3.0, 1.0, 2.0]) == Stats(min=1.0, median=2.0, p90=2.8, n=3, mean=1.5)
    s = summarize(range(1, 11))  # 1..10
    assert (s.min, s.median, s.n) == (1, 5.5, 10)
    assert s.p90 == pytest.approx(9.1)  # linear interpolation, as numpy.percentile
    assert summarize([5.0]) == Stats(5.0, 5.0, 5.0, 1, mean=5.0)
    assert summarize([1, 1, 1, 100]).median == 1.0  # an outlier does not move the median
    assert summarize([1, 1, 1, 100]).mean == 1.0  # nor the mean: the slowest sample is left out
    # but stalls in more than one sample do, where the median does not see them
    s = summarize([1, 1, 1, 1, 4, 4, 100])
    assert s.median == 1.0 and s.mean == pytest.approx(2.0)
    with pytest.raises(ValueError):
        summarize([])


class FakeClock:
    """A clock the function under test advances by scripted durations."""

    def __init__(self, durations):
        self.now = 0.0
        self.durations = iter(durations)
        self.calls = 0

    def clock(self):
        return self.now

    def fn(self):
        self.calls += 1
        self.now += next(self.durations)


def test_measure_stops_when_the_median_is_stable():
    fc = FakeClock([1e-3] * 1000)
    s = measure(fc.fn, warmup=3, min_reps=10, rel_tol=0.05, clock=fc.clock)
    # median checked at 10 samples and again 5 later: equal, so it stops at 15
    assert s.stable and s.n == 15 and s.median == pytest.approx(1e-3)
    assert fc.calls == 3 + 1 + 15  # warm-up, the sizing call, the samples


def test_measure_waits_out_a_drifting_start():
    # samples that keep getting faster (caches warming, clocks ramping): the
    # running median moves more than 5 % per check for a while
    durations = [1e-3 * (1 + 2 * 0.9 ** i) for i in range(10_000)]
    fc = FakeClock(durations)
    s = measure(fc.fn, warmup=0, min_reps=10, rel_tol=0.05, clock=fc.clock)
    assert s.stable and s.n >= 40
    first10 = sorted(durations[1:11])[5]
    assert s.median < 0.7 * first10 and s.min == pytest.approx(durations[s.n])


def test_measure_gives_up_at_its_budget():
    alternating = [1e-3 * (1 + (i % 7)) * (1 + i / 10) for i in range(10_000)]  # never settles
    fc = FakeClock(alternating)
    s = measure(fc.fn, warmup=0, min_reps=10, max_reps=60, max_seconds=1e9, rel_tol=0.001, clock=fc.clock)
    assert not s.stable and s.n == 60
    rising = [1e-2 * (1 + i / 1000) for i in range(10_000)]  # ~10 ms, slowly getting slower
    fc = FakeClock(rising)
    s = measure(fc.fn, warmup=0, min_reps=5, max_reps=10_000, max_seconds=0.3, rel_tol=0.0, clock=fc.clock)
    total, expect = 0.0, 0
    while total < 0.3:  # the first call sizes the batch; sampling stops after 0.3 s
        expect += 1
        total += rising[expect]
    assert not s.stable and s.n == expect


def test_measure_batches_very_short_calls():
    fc = FakeClock([1e-6] * 100_000)
    s = measure(fc.fn, warmup=0, min_reps=10, min_sample_s=20e-6, clock=fc.clock)
    assert s.median == pytest.approx(1e-6) and s.stable
    assert fc.calls == 1 + 20 * s.n  # each sample ran 20 calls


def test_a_companion_runs_before_every_call_and_is_not_timed():
    # calls of 100 us in rounds of 1 ms, each after a companion that takes 5 ms;
    # one call in ten stalls for 2 ms: a round's mean per call counts it
    fc = FakeClock([300e-6 if i % 10 == 9 else 100e-6 for i in range(100_000)])
    order = []

    def companion():
        order.append("c")
        fc.now += 5e-3

    def fn():
        order.append("f")
        fc.fn()

    s = measure(fn, companion=companion, warmup=2, min_reps=10, min_sample_s=1e-3, clock=fc.clock)
    assert order[:4] == ["c", "f", "c", "f"] and order[4] == "f"  # warm-up pairs, then the sizing call
    assert order[5:] == ["c", "f"] * (len(order[5:]) // 2)
    assert fc.calls == 3 + 10 * s.n  # rounds of 10 calls
    assert s.median == pytest.approx(120e-6)  # the mean per call, the stall included; no companion time


# ----------------------------------------------------------------- kernels
@pytest.mark.build
def test_bench_kernel_on_the_cpu():
    mid = GOOD[0]
    cpu = discover(gpus=False)[0]
    res = bench_kernel(kernel_set()[(mid.key, False)], mid, catalogue()["cpu"], cpu, **QUICK)
    assert res.status == "ok", res.reason
    assert 0 < res.min_s <= res.median_s <= res.p90_s and res.reps >= 4
    assert res.subject == mid.key and res.signature == mid.signature.key and res.target == "cpu"
    assert res.threads == cpu_threads() >= 1
    assert BenchResult.from_json(json.loads(json.dumps(res.to_json()))) == res


def test_bench_kernel_without_device_or_with_a_broken_kernel():
    mid = GOOD[0]
    res = bench_kernel(b"", mid, catalogue()["gfx942"], None)
    assert res.status == "not run" and res.reason == "not run: no device (gfx942)" and res.median_s is None
    cpu = discover(gpus=False)[0]
    bad = bench_kernel(b"junk" * 8, mid, catalogue()["cpu"], cpu, **QUICK)
    assert bad.status == "error" and bad.median_s is None


# ------------------------------------------------------------------- eager
@pytest.mark.parametrize("sig", [ln("float32", 1), ln("bfloat16", 14), ln("float32", 4), rms("bfloat16", 1),
                                 rms("float32", 6), rms("float16", 2), rms("bfloat16", 4)], ids=str)
def test_bench_eager(sig):
    before = torch.get_num_threads()
    res = bench_eager(sig, threads=1, **QUICK)
    assert res.status == "ok", res.reason
    assert res.subject == EAGER and res.signature == sig.key and res.threads == 1
    assert res.median_s > 0
    assert torch.get_num_threads() == before  # restored


def test_bench_eager_defaults_to_the_local_task_worker_count():
    res = bench_eager(ln("float32", 1), **QUICK)
    assert res.status == "ok" and res.threads == cpu_threads() >= 1


def test_eager_backward_computes_the_requested_gradients():
    # rms backward is autograd through F.rms_norm (no CPU kernel for the fused backward)
    for sig, n in ((rms("float32", 6), 2), (rms("float32", 2), 1), (ln("float32", 14), 3), (ln("float32", 8), 3)):
        out = eager_fn(sig)()
        grads = [g for g in out if g is not None]
        assert len(grads) == (n if sig.op == "rms_norm" else bin(sig.mask).count("1"))
        assert all(torch.isfinite(g).all() for g in grads)


# ------------------------------------------------------------------- table
def _val(mkey, status, err=1e-3):
    checks = (OutputCheck("output", "seed0", err, err, (0,), 1.0, 1.0, status == "passed", 0.1),)
    return ValidationResult(mkey, "cpu", status, "" if status == "passed" else "output off", checks, {})


def _bench(subject, sig, median, target="cpu"):
    return BenchResult(subject, sig.key, target, "ok", "", median * 0.9, median, median * 1.1, 20, 2)


def test_table_rows_and_csv(tmp_path):
    a, b = ln("float32", 1), rms("bfloat16", 6)
    a_aten, a_man = ModuleId(a, "aten").key, ModuleId(a, "manual").key
    b_man = ModuleId(b, "manual").key
    validations = {(a_aten, "cpu"): _val(a_aten, "passed", 2e-4), (a_man, "cpu"): _val(a_man, "failed", 0.5),
                   (b_man, "cpu"): _val(b_man, "passed", 1e-2),
                   (b_man, "gfx942"): ValidationResult(b_man, "gfx942", "not run", "not run: no device (gfx942)")}
    benches = {(a_aten, "cpu"): _bench(a_aten, a, 100e-6), (a_man, "cpu"): _bench(a_man, a, 50e-6),
               eager_key(a.key, "cpu"): _bench(EAGER, a, 200e-6),
               (b_man, "cpu"): _bench(b_man, b, 400e-6), eager_key(b.key, "cpu"): _bench(EAGER, b, 100e-6)}
    selections = {(a.key, "cpu"): Selection("aten", True, "fastest validated", {"manual": "failed validation"}),
                  (b.key, "cpu"): Selection("manual", True, "fastest validated", {}),
                  (b.key, "gfx942"): Selection("manual", False, "default until measured: not run: no device", {})}
    decisions = {k: Decision(sel, sel.rejected) for k, sel in selections.items()}
    rows = table_rows([a, b], ["cpu", catalogue()["gfx942"]], validations, benches, decisions)
    assert [(r["key"], r["target"]) for r in rows] == [(a.key, "cpu"), (a.key, "gfx942"), (b.key, "cpu"),
                                                       (b.key, "gfx942")]
    r = rows[0]
    assert list(r) == list(COLUMNS)
    assert (r["op"], r["shape"], r["dtype"], r["mask"]) == ("layer_norm", "4x6x10", "float32", "1")
    assert (r["aten_median_us"], r["manual_median_us"], r["eager_median_us"]) == ("100.0", "50.0", "200.0")
    # speedup counts only validated implementations: aten (manual failed)
    assert r["speedup_vs_eager"] == "2.00" and r["selected"] == "aten"
    assert r["aten_max_err"] == "0.0002" and r["manual_max_err"] == "0.5"
    assert r["validation"] == "aten passed; manual failed"
    assert rows[2]["speedup_vs_eager"] == "0.25"  # slower than eager is reported as such
    g = rows[3]
    assert g["selected"] == "manual (default)" and g["speedup_vs_eager"] == "" and g["manual_median_us"] == ""
    assert g["validation"] == "manual not run: no device (gfx942)"

    path = tmp_path / "bench.csv"
    write_table(rows, path)
    with open(path, newline="") as f:
        back = list(csv.DictReader(f))
    assert back == rows
    mtime = path.stat().st_mtime_ns
    write_table(rows, path)  # unchanged: not rewritten
    assert path.stat().st_mtime_ns == mtime


def test_bench_result_json():
    r = BenchResult(subject="k", signature="s", target="cpu", status="skipped", reason="not validated: failed",
                    min_s=None, median_s=None, p90_s=None, reps=0, threads=0)
    assert BenchResult.from_json(r.to_json()) == r and not r.ok
    with pytest.raises(ValueError):
        BenchResult("k", "s", "cpu", "fine")


# ------------------------------------------------------- the benchmark process
def test_benchmarks_run_in_one_child_process_that_a_crash_does_not_take_down():
    """A build's benchmarks run in a spawned process (no idle OpenMP teams of the
    build's threads there): its pid is not ours, it stays the same from call to
    call, exceptions come back, and a process that died is replaced."""
    import os

    from boo_build.stages.bench_process import in_bench_process

    child = in_bench_process(os.getpid)
    assert child != os.getpid() and in_bench_process(os.getpid) == child
    with pytest.raises(ZeroDivisionError):
        in_bench_process(divmod, 1, 0)
    with pytest.raises(RuntimeError, match="the benchmark process died running _exit"):
        in_bench_process(os._exit, 3)
    assert in_bench_process(os.getpid) not in (child, os.getpid())
