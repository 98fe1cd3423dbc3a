"""Comparisons in paired rounds (stages/comparison.py), decided on recorded or
scripted samples, never on the load of the machine running the test: a stall in
one round, a whole pass disturbed, two candidates within the noise, a speed-up
beyond the factor that a second pass does or does not confirm; and the rounds
loop itself (``benchmark.bench_rounds``) on an injected clock."""

from __future__ import annotations

import math
import re
import statistics

import pytest

from boo_build.reasons import Kind
from boo_build.signature import KernelSignature
from boo_build.stages import comparison as cmp
from boo_build.stages.benchmark import Timed, bench_rounds, time_rounds
from boo_build.stages.comparison import EAGER, REFERENCE, Rounds, RoundsRecord, Verdict
from boo_build.stages.load import cpu_use, others_between
from boo_build.stages.routing import eager_by_rounds
from boo_build.stages.selection import decide, select

SIG = KernelSignature("layer_norm", (8, 128, 768), (768,), "float32", 14)
DYN = KernelSignature("layer_norm", ("batch", "seq", 768), (768,), "float32", 14)


def jitter(base: float, n: int, spread: float = 0.02, seed: int = 0) -> list[float]:
    """``n`` samples around ``base``: a fixed, seeded pattern within +-spread."""
    return [base * (1 + spread * math.sin(1.7 * i + seed)) for i in range(n)]


def rounds(n: int = 24, passes=None, **medians) -> Rounds:
    """Rounds of subjects at these medians (us), each a seeded pattern of its own, in passes
    of 12 (by default two: a decision that departs from the preference takes a second)."""
    times = {name: jitter(us * 1e-6, n, seed=k) for k, (name, us) in enumerate(sorted(medians.items()))}
    return Rounds(times, passes or ((12,) * (n // 12) if n % 12 == 0 else (n,)))


def test_a_pair_is_the_median_ratio_and_its_notch():
    r = Rounds({"a": [1.0, 2.0, 3.0, 4.0], "b": [2.0, 4.0, 6.0, 8.0]}, (4,))
    p = r.pair("a", "b")
    assert p.ratio == pytest.approx(0.5) and p.noise == 0.0 and p.n == 4  # the same ratio in every round
    noisy = Rounds({"a": [1.0, 1.0, 1.0, 1.0], "b": [1.0, 2.0, 4.0, 8.0]}, (4,))
    q = noisy.pair("a", "b")
    logs = sorted(math.log(1 / b) for b in (1.0, 2.0, 4.0, 8.0))
    q1, med, q3 = statistics.quantiles(logs, n=4, method="inclusive")
    assert q.ratio == pytest.approx(math.exp(med)) and q.noise == pytest.approx(cmp.NOTCH * (q3 - q1) / 2)
    assert q.low < q.ratio < q.high
    assert Pair_round_trip(q)


def Pair_round_trip(p) -> bool:  # noqa: N802 - a helper that reads as a claim
    return cmp.Pair.from_json(p.to_json()) == p


def test_a_difference_inside_the_margin_is_a_tie_and_the_preferred_ships():
    r = rounds(manual=106.0, aten=100.0, eager=90.0)  # aten 6 % faster: within 10 %
    choice = cmp.choose(r, ["manual", "aten"])
    assert choice.fastest == "aten" and choice.winner == "manual" and choice.tie
    s = select(SIG, "cpu", ["aten", "manual"], _passed(), {}, rounds=RoundsRecord(SIG.key, "cpu", ("manual", "aten"), (r,)))
    assert s.impl == "manual" and s.reason.kind is Kind.TIED and s.rejected["aten"].kind is Kind.TIE
    assert "within 10%" in s.rejected["aten"] and "manual preferred" in s.rejected["aten"]
    # a third candidate, slower than the fastest (aten) by 15 % but within 10 % of the tie's winner: its
    # reason names the comparison that decided it, not one against what ships
    r3 = rounds(manual=106.0, aten=100.0, **{"manual+lanes": 115.0}, eager=90.0)
    s = select(SIG, "cpu", ["aten", "manual", "manual+lanes"], _passed(impls=("aten", "manual", "manual+lanes")), {},
               rounds=RoundsRecord(SIG.key, "cpu", ("manual", "aten", "manual+lanes"), (r3,)))
    assert s.impl == "manual" and s.rejected["manual+lanes"].kind is Kind.SLOWER
    assert re.search(r"\(aten, the fastest\); 1\.1[4-6]x", s.rejected["manual+lanes"])


def test_a_clear_difference_is_decided():
    r = rounds(manual=150.0, aten=100.0, eager=90.0)
    s = select(SIG, "cpu", ["aten", "manual"], _passed(), {}, rounds=RoundsRecord(SIG.key, "cpu", ("manual", "aten"), (r,)))
    assert s.impl == "aten" and s.reason.kind is Kind.FASTEST
    assert s.rejected["manual"].kind is Kind.SLOWER and re.search(r"; 1\.5\dx \(1\.\d\d-1\.\d\d, 24 rounds\)$",
                                                                   s.rejected["manual"])


def test_a_stall_in_one_round_decides_nothing():
    r = rounds(manual=150.0, aten=100.0, eager=90.0)
    stalled = dict(r.times)
    stalled["aten"] = tuple(t * (40 if i == 3 else 1) for i, t in enumerate(r.times["aten"]))  # one round 40x
    s = Rounds(stalled, r.passes)
    assert cmp.choose(s, ["manual", "aten"]).winner == "aten"
    assert s.pair("aten", "manual").ratio == pytest.approx(r.pair("aten", "manual").ratio, rel=0.05)


def test_a_whole_pass_disturbed_moves_no_ratio():
    """Sustained load slowed every subject 3x for a whole pass (as beside a CPU hog):
    the absolute times double, the paired ratios and the decisions stay."""
    quiet = rounds(24, manual=150.0, aten=100.0, eager=120.0)
    loaded = Rounds({s: tuple(t * (3.0 if i >= 12 else 1.0) for i, t in enumerate(ts))
                     for s, ts in quiet.times.items()}, (12, 12))
    assert loaded.median("aten") > 1.5 * quiet.median("aten")
    for a, b in (("aten", "manual"), ("aten", EAGER)):
        assert loaded.pair(a, b).ratio == pytest.approx(quiet.pair(a, b).ratio, rel=0.01)
    rec = RoundsRecord(SIG.key, "cpu", ("manual", "aten"), (loaded,))
    s = select(SIG, "cpu", ["aten", "manual"], _passed(), {}, rounds=rec)
    assert s.impl == "aten" and eager_by_rounds(SIG, s, rec) is None  # 0.83x eager: the kernel runs torch calls


def test_inside_the_noise_is_measured_again_then_a_tie():
    # aten 15 % faster in the median, but the rounds scatter +-40 %: the notch covers it
    n = 12
    times = {"manual": [100e-6 * (1 + 0.4 * math.sin(2.3 * i)) for i in range(n)],
             "aten": [85e-6 * (1 + 0.4 * math.sin(2.3 * i + 1.0)) for i in range(n)], EAGER: jitter(300e-6, n)}
    r = Rounds(times, (n,))
    assert cmp.verdict(r.pair("aten", "manual"), cmp.MARGIN) is Verdict.NOISE
    more = cmp.needs_more(r, ["manual", "aten"])  # and manual, 3x faster than eager, once more to replicate it
    assert more in (["aten against manual", "manual against torch eager"],
                    ["manual against aten", "manual against torch eager"])
    full = Rounds({s: t * cmp.MAX_PASSES for s, t in times.items()}, (n,) * cmp.MAX_PASSES)  # passes spent
    assert cmp.needs_more(full, ["manual", "aten"]) == []
    rec = RoundsRecord(SIG.key, "cpu", ("manual", "aten"), (full,))
    s = select(SIG, "cpu", ["aten", "manual"], _passed(), {}, rounds=rec)
    assert s.impl == "manual" and s.reason.kind is Kind.TIED and "inside the noise" in s.reason


def test_a_departure_from_the_preference_not_in_every_pass_is_a_tie():
    """aten 25 % faster than manual over both passes pooled, but 3 % in the second alone
    (as a multi-threaded kernel's time moves between passes): the preferred manual ships,
    a tie 'not in every pass'; the same for the kernel against torch eager."""
    first, second = rounds(12, manual=150.0, aten=100.0, eager=200.0), rounds(12, manual=103.0, aten=100.0, eager=200.0)
    both = first.with_pass(second.times)
    assert cmp.verdict(both.pair("aten", "manual"), cmp.MARGIN) is Verdict.FASTER  # pooled: decided
    assert cmp.replicated(both, "aten", "manual", cmp.MARGIN) is False
    choice = cmp.choose(both, ["manual", "aten"])
    assert choice.fastest == "aten" and choice.winner == "manual" and choice.verdicts["manual"] is Verdict.UNREPLICATED
    assert cmp.needs_more(both, ["manual", "aten"]) == []  # a second pass said otherwise: no third
    s = select(SIG, "cpu", ["aten", "manual"], _passed(), {}, rounds=RoundsRecord(SIG.key, "cpu", ("manual", "aten"),
                                                                                  (both,)))
    assert s.impl == "manual" and s.reason.kind is Kind.TIED and "not in every pass" in s.reason
    # one pass: not known yet, measured again
    assert cmp.choose(first, ["manual", "aten"]).verdicts["manual"] is Verdict.NOISE
    assert cmp.needs_more(first, ["manual", "aten"]) == ["manual against aten", "manual against torch eager"]
    # repeated in the second pass: decided
    again = first.with_pass(rounds(12, manual=140.0, aten=100.0, eager=200.0).times)
    assert cmp.choose(again, ["manual", "aten"]).winner == "aten"
    # the kernel against eager: 30 % faster, then 2 %: torch calls stay with eager
    k = rounds(12, aten=70.0, eager=100.0).with_pass(rounds(12, aten=98.0, eager=100.0).times)
    call = cmp.eager_call(k, "aten")
    assert call.verdict is Verdict.UNREPLICATED and not call.kernel_wins
    d = decide(SIG, "cpu", ["aten"], ["aten"], {"aten": _passed()["aten"]}, {"aten": None}, eager=_eager(),
               eager_validation=_eager().validation, rounds=RoundsRecord(SIG.key, "cpu", ("aten",), (k,)))
    assert d.prefer_eager is not None and "not in every pass" in d.prefer_eager.reason


def test_a_speed_up_beyond_the_factor_is_confirmed_or_not_recorded():
    first = rounds(12, aten=10.0, eager=100.0)  # 10x faster than eager
    assert cmp.eager_call(first, "aten").verdict is Verdict.NOISE  # one pass: measure again
    assert cmp.needs_more(first, ["aten"]) == [f"aten against torch eager (beyond {cmp.FACTOR:g}x: to confirm)"]
    agree = first.with_pass(rounds(12, aten=10.2, eager=100.0).times)
    call = cmp.eager_call(agree, "aten")
    assert call.verdict is Verdict.FASTER and call.confirmed and call.figure == pytest.approx(10, rel=0.05)
    first = rounds(12, aten=5.0, eager=100.0)  # 20x
    disagree = first.with_pass(rounds(12, aten=12.5, eager=100.0).times)  # the second pass says 8x
    call = cmp.eager_call(disagree, "aten")
    assert call.verdict is Verdict.UNCONFIRMED and call.confirmed is False and call.figure is None
    # unconfirmed: torch calls stay with eager, the decision says so, and no figure is recorded
    rec = RoundsRecord(SIG.key, "cpu", ("aten",), (disagree,))
    bench = {"aten": None}
    d = decide(SIG, "cpu", ["aten"], ["aten"], {"aten": _passed()["aten"]}, bench, eager=_eager(),
               eager_validation=_eager().validation, rounds=rec)
    assert d.prefer_eager is not None and "not confirmed" in d.prefer_eager.reason
    assert d.timing.eager_verdict is Verdict.UNCONFIRMED and d.timing.eager_figure is None
    from boo_build.report.bench_table import eager_key, table_rows
    rows = table_rows([SIG], ["cpu"], {}, {eager_key(SIG.key, "cpu"): _eager()}, {(SIG.key, "cpu"): d})
    assert rows[0]["speedup_vs_eager"] == "" and rows[0]["eager_median_us"] == ""


def test_the_kernel_runs_torch_calls_only_beyond_the_eager_margin_and_the_noise():
    for kernel_us, kernel_wins in ((80.0, True), (95.0, False), (100.0, False), (130.0, False)):
        r = rounds(aten=kernel_us, eager=100.0)
        rec = RoundsRecord(SIG.key, "cpu", ("aten",), (r,))
        d = decide(SIG, "cpu", ["aten"], ["aten"], {"aten": _passed()["aten"]}, {"aten": None}, eager=_eager(),
                   eager_validation=_eager().validation, rounds=rec)
        assert (d.prefer_eager is None) == kernel_wins, kernel_us
        assert d.timing.rounds == 24 and d.timing.eager is not None


def test_a_dynamic_kernel_routes_per_size():
    small = Rounds(rounds(aten=50.0, eager=20.0).times, (12, 12), (1, 1, 768))  # eager faster at one row
    big = Rounds(rounds(aten=500.0, eager=900.0).times, (12, 12), (4, 1024, 768))
    rec = RoundsRecord(DYN.key, "cpu", ("aten",), (small, big))
    s = select(DYN, "cpu", ["aten"], {"aten": _passed()["aten"]}, {}, rounds=rec)
    pref = eager_by_rounds(DYN, s, rec)
    assert pref is not None and pref.by_rows == ((1, True), (4096, False))


def test_busy_from_other_processes_cpu_or_the_reference_loop():
    r = rounds(12, aten=10.0, eager=20.0)
    assert not Rounds(r.times, r.passes, None, 0.1, 2).busy and not Rounds(r.times, r.passes).busy
    assert Rounds(r.times, r.passes, None, 1.2, 2).busy  # another process took more than a CPU
    assert Rounds(r.times, r.passes, None, 0.1, 2).with_pass(r.times, 0.9).others == 0.9  # the busiest pass
    scattered = {**r.times, REFERENCE: tuple(1e-4 * (1 + 3 * (i % 2)) for i in range(12))}
    assert Rounds(scattered, r.passes).busy and Rounds(scattered, r.passes).reference_spread > cmp.BUSY_SPREAD
    assert RoundsRecord.from_json(RoundsRecord(SIG.key, "cpu", ("aten",), (r,), ("x",)).to_json()) == \
        RoundsRecord(SIG.key, "cpu", ("aten",), (r,), ("x",))


# ------------------------------------------------------------- the rounds loop
class Scripted:
    """A clock and subjects whose calls take scripted times: each call advances the
    clock by the subject's duration at that moment (``at(name, call index)``)."""

    def __init__(self, durations):
        self.now = 0.0
        self.durations = durations
        self.calls: dict[str, int] = {}
        self.order: list[str] = []

    def clock(self) -> float:
        return self.now

    def subject(self, name: str, companion: bool = False) -> Timed:
        def call():
            i = self.calls.get(name, 0)
            self.calls[name] = i + 1
            self.order.append(name)
            self.now += self.durations(name, i)

        def comp():
            self.now += 1e-3  # untimed: the clock moves, the sample does not count it
        return Timed(name, call, comp if companion else None)


def test_rounds_rotate_and_a_companion_is_not_timed():
    s = Scripted(lambda name, i: {"a": 2e-3, "b": 4e-3}[name])
    subjects = [s.subject("a", companion=True), s.subject("b")]
    times = time_rounds(subjects, 4, {"a": 1, "b": 1}, clock=s.clock)
    assert times == {"a": pytest.approx([2e-3] * 4), "b": pytest.approx([4e-3] * 4)}  # the companion's 1 ms: in none
    assert s.order == ["a", "b", "b", "a", "a", "b", "b", "a"]  # each round starts one further


def test_bench_rounds_measures_again_only_while_undecided():
    # manual (the preferred) slower than eager, aten between them: one pass decides everything
    s = Scripted(lambda name, i: {"manual": 3e-3, "aten": 2.9e-3, EAGER: 2.5e-3, REFERENCE: 1e-3}[name])
    subjects = [s.subject("manual"), s.subject("aten"), s.subject(EAGER), s.subject(REFERENCE)]
    got, why = bench_rounds(subjects, ["manual", "aten"], rounds=12, min_sample_s=1e-3, warmup=0, clock=s.clock,
                            cpu_use=lambda: None, waiting=lambda: None)
    assert got.passes == (12,) and why == []
    assert cmp.choose(got, ["manual", "aten"]).winner == "manual"
    # aten clearly faster than manual and than eager: both depart from the preference, so a second
    # pass must repeat them, and it does
    s = Scripted(lambda name, i: {"manual": 3e-3, "aten": 2e-3, EAGER: 2.5e-3, REFERENCE: 1e-3}[name])
    subjects = [s.subject("manual"), s.subject("aten"), s.subject(EAGER), s.subject(REFERENCE)]
    got, why = bench_rounds(subjects, ["manual", "aten"], rounds=12, min_sample_s=1e-3, warmup=0, clock=s.clock,
                            cpu_use=lambda: None, waiting=lambda: None)
    assert got.passes == (12, 12) and why == ["manual against aten"]  # (aten against eager: the second pass too)
    assert cmp.choose(got, ["manual", "aten"]).winner == "aten" and cmp.eager_call(got, "aten").kernel_wins
    # a kernel 10x faster than eager: a second pass to confirm it, and no more
    s = Scripted(lambda name, i: {"aten": 1e-3, EAGER: 10e-3, REFERENCE: 1e-3}[name])
    got, why = bench_rounds([s.subject("aten"), s.subject(EAGER), s.subject(REFERENCE)], ["aten"], rounds=12,
                            min_sample_s=1e-3, warmup=0, clock=s.clock, cpu_use=lambda: None,
                            waiting=lambda: None)
    assert got.passes == (12, 12) and len(why) == 1 and cmp.eager_call(got, "aten").confirmed
    # two candidates that scatter around each other: every pass the bound allows, then a tie
    scatter = lambda name, i: {"manual": 2e-3 * (1 + 0.5 * math.sin(i)), "aten": 1.8e-3 * (1 + 0.5 * math.cos(i)),  # noqa: E731
                               EAGER: 9e-3, REFERENCE: 1e-3}[name]
    s = Scripted(scatter)
    got, why = bench_rounds([s.subject("manual"), s.subject("aten"), s.subject(EAGER), s.subject(REFERENCE)],
                            ["manual", "aten"], rounds=12, min_sample_s=1e-3, warmup=0, clock=s.clock,
                            cpu_use=lambda: None, waiting=lambda: None)
    assert got.passes == (12,) * cmp.MAX_PASSES
    assert len([w for w in why if w in ("aten against manual", "manual against aten")]) == cmp.MAX_PASSES - 1
    assert set(why) <= {"aten against manual", "manual against aten", "manual against torch eager"}
    assert cmp.choose(got, ["manual", "aten"]).winner == "manual"  # the preferred one: a tie


def _passed(impls=("aten", "manual")):
    from test_selection import cval

    return {i: cval(i, "passed") for i in impls}


def _eager():
    from boo_build.records import BenchResult, EagerValidation

    return BenchResult("eager", SIG.key, "cpu", "ok", "", 1e-4, 1e-4, 1e-4, 10, 2, mean_s=1e-4,
                       validation=EagerValidation.from_json({"status": "passed", "reason": ""}))


def test_other_processes_cpu_from_the_machines_counters():
    # the machine ran 3 CPU-seconds in 2 s of wall time, this process 1 of them: others used 1 CPU
    assert others_between((100.0, 10.0), (103.0, 11.0), 2.0) == pytest.approx(1.0)
    assert others_between((100.0, 10.0), (100.5, 10.6), 1.0) == 0.0  # counter granularity: never below 0
    assert others_between(None, (1.0, 1.0), 1.0) is None
    # the rounds loop reads the counters around each pass: a pass beside a hog is busy
    s = Scripted(lambda name, i: {"aten": 1e-3, EAGER: 2e-3, REFERENCE: 1e-3}[name])
    use = iter([(0.1 * i, 0.05 * i) for i in range(6)])  # others: 0.05 CPU-s over each pass's ~0.05 s
    got, _ = bench_rounds([s.subject("aten"), s.subject(EAGER), s.subject(REFERENCE)], ["aten"], rounds=12,
                          min_sample_s=1e-3, warmup=0, clock=s.clock, cpu_use=lambda: next(use),
                          waiting=lambda: None)
    assert got.others is not None and got.others > cmp.BUSY_CORES and got.busy
    assert Rounds.from_json(got.to_json()) == got
    real = cpu_use()
    assert real is None or (real[0] >= 0 and real[1] >= 0)


def test_the_benchmark_process_runs_at_a_raised_priority_where_allowed():
    import os

    from boo_build.stages.bench_process import PRIORITY, in_bench_process

    nice = in_bench_process(os.getpriority, os.PRIO_PROCESS, 0)
    allowed = os.geteuid() == 0  # root (CAP_SYS_NICE): these machines and CI
    assert nice == (PRIORITY if allowed else os.getpriority(os.PRIO_PROCESS, 0))
    assert os.getpriority(os.PRIO_PROCESS, 0) != PRIORITY  # the build's own process is left as it was


def test_the_build_summary_says_how_the_kernels_were_timed():
    from pathlib import Path

    from boo_build.report.build_report import summary_text

    report = {"bundle": {"name": "b", "version": "0.1.0"}, "benchmarks": "ran", "per_target": {}, "targets": {},
              "dropped": [], "failures": [], "missing": [],
              "timing": {"kernels": 4, "ties": 1, "remeasured": 2, "unconfirmed": 0, "busy": 0, "normal_priority": 0}}
    text = summary_text(report, {"stats": {}}, Path("b.tar.zst"), False)
    assert ("  timing   4 kernel(s) compared in paired rounds: 1 with ties, 2 measured again, 0 speed-up(s) not "
            "confirmed") in text.splitlines()  # the whole line: nothing about a busy machine
    report["timing"].update(busy=3, normal_priority=4)
    text = summary_text(report, {"stats": {}}, Path("b.tar.zst"), False)
    assert "the machine was busy while 3 of them were timed" in text and "4 timed at normal priority" in text
    report["timing"].update(previous=2)  # a rebuild: two kernels against the previous build's decisions
    text = summary_text(report, {"stats": {}}, Path("b.tar.zst"), False)
    assert "0 speed-up(s) not confirmed, 2 against the previous build's decision (kept unless beaten in every pass)" \
        in text


def _policies_in_timing_priority() -> dict:
    """In the benchmark process: the threads' scheduling inside ``timing_priority`` and after it."""
    import os
    import threading

    from boo_build.stages.bench_process import timing_priority

    stop = threading.Event()
    names = {"iree-worker-7": None, "omp-like": None}
    threads = [threading.Thread(target=stop.wait, name=n) for n in names]
    for t in threads:
        t.start()
    tids = {t.name: t.native_id for t in threads}
    tids["main"] = os.getpid()
    for t in threads:  # Python names the OS thread only on some versions: name it as IREE and libgomp do
        with open(f"/proc/self/task/{t.native_id}/comm", "w") as f:
            f.write(t.name[:15])

    def state() -> dict:
        return {n: (os.sched_getscheduler(tid), os.sched_getparam(tid).sched_priority, os.getpriority(os.PRIO_PROCESS, tid))
                for n, tid in tids.items()}
    try:
        with timing_priority() as rt:
            inside = state()
            # a thread started inside inherits the class; it is put back too
            late = threading.Thread(target=stop.wait, name="late")
            late.start()
        after = state()
        late_after = os.sched_getscheduler(late.native_id)
    finally:
        stop.set()
    return {"rt": rt, "inside": inside, "after": after, "late_after": late_after}


def test_rounds_are_timed_with_the_timed_threads_above_the_rest_where_allowed():
    import os

    from boo_build.stages.bench_process import OTHER_RT, PRIORITY, TIMED_RT, in_bench_process, timing_priority

    got = in_bench_process(_policies_in_timing_priority)
    if os.geteuid() == 0:  # root (CAP_SYS_NICE): these machines and CI
        assert got["rt"] is True
        rr = os.SCHED_RR
        assert got["inside"]["main"][:2] == (rr, TIMED_RT)
        assert got["inside"]["iree-worker-7"][:2] == (rr, TIMED_RT)  # IREE's workers with the timed thread
        assert got["inside"]["omp-like"][:2] == (rr, OTHER_RT)  # the rest below them
        # after the rounds: every thread back in the ordinary class, at the raised nice value
        assert all(v == (os.SCHED_OTHER, 0, PRIORITY) for v in got["after"].values()), got["after"]
        assert got["late_after"] == os.SCHED_OTHER
    else:  # not allowed: nothing changes, and the rounds say so
        assert got["rt"] is False and got["inside"] == got["after"]
    # any other process (this one: its priority was not raised) is left alone
    with timing_priority() as rt:
        assert rt is False and os.sched_getscheduler(0) == os.SCHED_OTHER


def test_the_summary_counts_bench_tasks_and_names_no_bundle_before_packing():
    """A no-op rebuild's benchmarks were up to date (it said "benchmarks: ran"); the summary, written
    before the pack task, names no bundle (boo-build build prints it last, once packed)."""
    from pathlib import Path

    from boo_build.report.build_report import summary_text

    report = {"bundle": {"name": "b", "version": "0.1.0"}, "benchmarks": "ran", "per_target": {"cpu": {"available": 2}},
              "targets": {"cpu": {"device_status": ""}}, "dropped": [], "failures": [], "missing": []}
    lines = summary_text(report, {"stats": {"bench:up to date": 2, "compile:built": 1}}, Path("b.tar.zst"),
                         False).splitlines()
    assert "  bench    built 0, up to date 2" in lines and "  compile  built 1, up to date 0" in lines
    assert not any("benchmarks:" in ln or "bundle:" in ln or "b.tar.zst" in ln for ln in lines), lines
    assert any("available 2 (an implementation ships)" in ln for ln in lines)
    report["benchmarks"] = "skipped (--no-bench)"
    assert "  benchmarks: skipped (--no-bench)" in summary_text(report, {"stats": {}}, Path("b.tar.zst"), False)


# ------------------------------------------------- a rebuild keeps the previous decision
HERE = "Intel(R) Xeon(R) Processor (x86-64-v4), 2 CPUs"


def _kept_record(r: Rounds, previous: cmp.Previous | None, sig=SIG) -> RoundsRecord:
    from boo_build.stages.selection import preference_order

    first = previous.candidate if previous is not None else None
    return RoundsRecord(sig.key, "cpu", tuple(preference_order(list(r.times.keys() - {EAGER, REFERENCE}), first)),
                        (r,), machine=HERE, previous=previous)


def test_a_rebuild_keeps_the_previous_candidate_unless_another_wins_in_every_pass():
    """The flip selection_stability.md found at the margin: aten 12 % faster than the preferred
    manual in a quiet build (decided: aten ships), 8 % in a build beside other work (a tie: manual
    would ship). A rebuild that keeps the previous decision ships aten again, and says why; only a
    candidate faster beyond the margin in every pass replaces it."""
    quiet = rounds(manual=112.0, aten=100.0, eager=150.0)
    assert select(SIG, "cpu", ["aten", "manual"], _passed(), {}, rounds=_kept_record(quiet, None)).impl == "aten"
    loaded = rounds(manual=108.0, aten=100.0, eager=150.0)
    assert select(SIG, "cpu", ["aten", "manual"], _passed(), {}, rounds=_kept_record(loaded, None)).impl == "manual"
    prev = cmp.Previous("aten", HERE)
    s = select(SIG, "cpu", ["aten", "manual"], _passed(), {}, rounds=_kept_record(loaded, prev))
    assert s.impl == "aten" and s.reason.kind is Kind.FASTEST  # aten is the fastest here anyway
    # manual now 8 % faster (within the margin): the previous aten is kept, as a tie, and the reason says so
    closer = rounds(manual=92.0, aten=100.0, eager=150.0)
    s = select(SIG, "cpu", ["aten", "manual"], _passed(), {}, rounds=_kept_record(closer, prev))
    assert s.impl == "aten" and s.reason.kind is Kind.TIED and "aten kept from the previous build" in s.reason
    assert "aten kept from the previous build" in s.rejected["manual"]
    # faster beyond the margin in one pass only: not in every pass, kept
    once = rounds(12, manual=80.0, aten=100.0, eager=150.0).with_pass(rounds(12, manual=97.0, aten=100.0,
                                                                             eager=150.0).times)
    assert select(SIG, "cpu", ["aten", "manual"], _passed(), {}, rounds=_kept_record(once, prev)).impl == "aten"
    # one pass of it: measured again (the benchmark asks for a second pass against the previous choice)
    first = rounds(12, manual=80.0, aten=100.0, eager=150.0)
    assert cmp.needs_more(first, ["aten", "manual"])[0] == "aten against manual"
    # in every pass: replaced
    twice = first.with_pass(rounds(12, manual=82.0, aten=100.0, eager=150.0).times)
    s = select(SIG, "cpu", ["aten", "manual"], _passed(), {}, rounds=_kept_record(twice, prev))
    assert s.impl == "manual" and s.reason.kind is Kind.FASTEST


def test_torch_calls_that_ran_the_kernel_keep_it_unless_eager_is_faster_in_every_pass():
    """Fresh, the kernel takes torch calls only when 10 % faster than eager in every pass; kept
    (the previous build ran them on it), it loses them only when slower than eager, beyond the
    noise, in every pass: a kernel 5 % faster neither takes them nor, once it has them, loses them."""
    close = rounds(aten=95.0, eager=100.0)
    assert not cmp.eager_call(close, "aten").kernel_wins
    kept = cmp.eager_call(close, "aten", kept=True)
    assert kept.verdict is Verdict.KEPT and kept.kernel_wins and kept.figure == pytest.approx(1 / 0.95, rel=0.02)
    prev = cmp.Previous("aten", HERE)
    d = decide(SIG, "cpu", ["aten"], ["aten"], {"aten": _passed()["aten"]}, {"aten": None}, eager=_eager(),
               eager_validation=_eager().validation, rounds=_kept_record(close, prev))
    assert d.prefer_eager is None and d.timing.eager_verdict is Verdict.KEPT
    assert d.timing.previous == "aten" and d.timing.machine == HERE
    # kept where the previous build ran torch eager instead: the fresh rule
    d = decide(SIG, "cpu", ["aten"], ["aten"], {"aten": _passed()["aten"]}, {"aten": None}, eager=_eager(),
               eager_validation=_eager().validation,
               rounds=_kept_record(close, cmp.Previous("aten", HERE, kernel=False)))
    assert d.prefer_eager is not None
    # 20 % slower in one pass: measured again; then in the second too: torch eager takes them
    slow = rounds(12, aten=120.0, eager=100.0)
    assert cmp.eager_call(slow, "aten", kept=True).verdict is Verdict.NOISE
    assert cmp.needs_more(slow, ["aten"], previous=cmp.Previous("aten", HERE)) == ["aten against torch eager"]
    assert cmp.eager_call(slow.with_pass(rounds(12, aten=118.0, eager=100.0).times), "aten",
                          kept=True).verdict is Verdict.SLOWER
    # but not in the second: kept
    assert cmp.eager_call(slow.with_pass(rounds(12, aten=99.0, eager=100.0).times), "aten",
                          kept=True).verdict is Verdict.KEPT


def test_the_previous_decision_per_size_and_where_it_applies():
    from boo_build.stages.routing import Timing
    from boo_build.stages.select import SelectRecord

    # a dynamic kernel: torch calls of 1 row went to eager, of 4096 rows to the kernel
    small = Rounds(rounds(aten=21.0, eager=20.0).times, (12, 12), (1, 1, 768))  # eager 5 % faster: kept eager
    big = Rounds(rounds(aten=95.0, eager=100.0).times, (12, 12), (4, 1024, 768))  # kernel 5 % faster: kept kernel
    prev = cmp.Previous("aten", HERE, kernel=False, by_rows=((1, False), (4096, True)))
    assert [prev.kernel_at(r) for r in (1, 3, 100, 4096, 10**6)] == [False, False, True, True, True]
    rec = RoundsRecord(DYN.key, "cpu", ("aten",), (small, big), machine=HERE, previous=prev)
    assert rec.previous.kept_at(1) is None and rec.previous.kept_at(4096) == "aten"
    s = select(DYN, "cpu", ["aten"], {"aten": _passed()["aten"]}, {}, rounds=rec)
    assert eager_by_rounds(DYN, s, rec).by_rows == ((1, True), (4096, False))
    assert eager_by_rounds(DYN, s, dataclass_replace(rec, previous=None)).by_rows == ((1, True), (4096, True))
    assert RoundsRecord.from_json(rec.to_json()) == rec
    # a decision kept only on the machine that made it, and for a candidate still timed
    assert prev.applies(HERE, ["aten", "manual"])
    assert not prev.applies("AMD EPYC 9654 (x86-64-v4), 2 CPUs", ["aten", "manual"])
    assert not prev.applies(HERE, ["manual"])
    # from the select record the previous build wrote: the candidate, the machine, where torch calls went
    d = decide(DYN, "cpu", ["aten"], ["aten"], {"aten": _passed()["aten"]}, {"aten": None}, eager=_eager(),
               eager_validation=_eager().validation, rounds=rec)
    got = SelectRecord(DYN.key, "cpu", d, run_id="r1").previous()
    assert got == cmp.Previous("aten", HERE, kernel=False, by_rows=((1, False), (4096, True)), run_id="r1")
    # not kept: a decision whose timings do not say where they were taken, or not made by timings
    untimed = dataclass_replace(d, timing=dataclass_replace(d.timing, machine=None))
    assert SelectRecord(DYN.key, "cpu", untimed).previous() is None
    assert Timing.from_json(d.timing.to_json()) == d.timing
    modelled = decide(SIG, "cpu", ["aten"], ["aten"], {"aten": _passed()["aten"]}, {"aten": None})
    assert SelectRecord(SIG.key, "cpu", modelled).previous() is None


def dataclass_replace(obj, **kw):
    import dataclasses

    return dataclasses.replace(obj, **kw)


def test_busy_rounds_do_not_overturn_a_decision_made_on_a_quiet_machine():
    """Beside two CPU hogs at the benchmark's raised priority, a local-task candidate measured 1.29x
    the fastest local-sync one in every pass where it had tied quietly (selection_stability.md): other
    processes' threads waiting to run make the rounds busy, and busy rounds leave a quiet decision,
    candidate and torch calls, as it was (held), and take no second pass."""
    from boo_build.stages.load import waiting_threads

    prev = cmp.Previous("aten", HERE, kernel=False)
    loaded = rounds(aten=129.0, manual=100.0, eager=70.0)
    busy = Rounds(loaded.times, loaded.passes, waiting=2.0)
    assert busy.busy and not Rounds(loaded.times, loaded.passes, waiting=0.0).busy
    assert Rounds.from_json(busy.to_json()) == busy and busy.each_pass()[0].waiting == 2.0
    rec = _kept_record(busy, prev)
    assert rec.holds == "aten" and _kept_record(loaded, prev).holds is None
    assert _kept_record(busy, dataclass_replace(prev, busy=True)).holds is None  # a busy decision: decided again
    s = select(SIG, "cpu", ["aten", "manual"], _passed(), {}, rounds=rec)
    assert s.impl == "aten" and s.reason.kind is Kind.TIED and "busy machine" in s.reason
    assert s.rejected["manual"].kind is Kind.TIE and "not decided against aten" in s.rejected["manual"]
    # quiet rounds saying the same decide: manual is faster in every pass
    assert select(SIG, "cpu", ["aten", "manual"], _passed(), {}, rounds=_kept_record(loaded, prev)).impl == "manual"
    # torch calls held too: torch eager where the previous build sent them there, the kernel where to it
    d = decide(SIG, "cpu", ["aten", "manual"], ["aten", "manual"], _passed(), {"aten": None, "manual": None},
               eager=_eager(), eager_validation=_eager().validation, rounds=rec)
    assert d.prefer_eager is not None and d.timing.eager_verdict is Verdict.HELD
    fast = Rounds(rounds(aten=150.0, manual=140.0, eager=100.0).times, (12, 12), waiting=3.0)  # eager 1.5x faster
    d = decide(SIG, "cpu", ["aten", "manual"], ["aten", "manual"], _passed(), {"aten": None, "manual": None},
               eager=_eager(), eager_validation=_eager().validation,
               rounds=_kept_record(fast, cmp.Previous("aten", HERE)))
    assert d.prefer_eager is None and d.timing.eager_verdict is Verdict.KEPT
    # the rounds loop: busy after the first pass, against a quiet decision: nothing measured again
    sc = Scripted(lambda name, i: {"manual": 3e-3, "aten": 2e-3, EAGER: 2.5e-3, REFERENCE: 1e-3}[name])
    subjects = [sc.subject("manual"), sc.subject("aten"), sc.subject(EAGER), sc.subject(REFERENCE)]
    got, why = bench_rounds(subjects, ["manual", "aten"], rounds=12, min_sample_s=1e-3, warmup=0, clock=sc.clock,
                            cpu_use=lambda: None, waiting=lambda: 2, previous=cmp.Previous("manual", HERE))
    assert got.passes == (12,) and why == [] and got.waiting == 2.0 and got.busy
    # but a speed-up beyond the factor is confirmed as ever, held or not
    sc = Scripted(lambda name, i: {"manual": 1e-3, "aten": 2e-3, EAGER: 10e-3, REFERENCE: 1e-3}[name])
    subjects = [sc.subject("manual"), sc.subject("aten"), sc.subject(EAGER), sc.subject(REFERENCE)]
    got, why = bench_rounds(subjects, ["manual", "aten"], rounds=12, min_sample_s=1e-3, warmup=0, clock=sc.clock,
                            cpu_use=lambda: None, waiting=lambda: 2, previous=cmp.Previous("manual", HERE))
    assert got.passes == (12, 12) and why == [f"manual against torch eager (beyond {cmp.FACTOR:g}x: to confirm)"]
    assert cmp.eager_call(got, "manual", kept=True, held=True).verdict is Verdict.FASTER
    n = waiting_threads()  # the real counters: a count, where /proc can be read
    assert n is None or n >= 0
