"""Selection logic on synthetic validation and benchmark records."""

from __future__ import annotations

from boo_build.candidates import Candidate
from boo_build.loader.format import EagerPreference
from boo_build.records import BenchResult, EagerValidation, OutputCheck, ValidationResult
from boo_build.signature import KernelSignature, ModuleId
from boo_build.stages.selection import Selection, candidate_records, module_rejections, select

SIG = KernelSignature("layer_norm", (8, 128, 768), (768,), "bfloat16", 14)


def val(impl, status, reason=""):
    key = ModuleId(SIG, impl).key
    checks = ()
    if status in ("passed", "failed"):
        checks = (OutputCheck("grad_input", "seed0", 0.2, 0.1, (1, 2, 3), 1.2, 1.0, status == "passed", 3.0),)
    return ValidationResult(key, "cpu", status, reason, checks, {})


def bench(impl, us, status="ok", reason=""):
    t = None if us is None else us * 1e-6
    return BenchResult(ModuleId(SIG, impl).key, SIG.key, "cpu", status, reason, t, t, t, 10 if t else 0, 2)


BOTH = ["aten", "manual"]


def test_fastest_validated_wins():
    s = select(SIG, "cpu", BOTH, {"aten": val("aten", "passed"), "manual": val("manual", "passed")},
               {"aten": bench("aten", 80.0), "manual": bench("manual", 120.0)})
    assert s.impl == "aten" and s.measured
    assert s.rejected == {"manual": "slower: 120.0 us vs 80.0 us (aten)"}
    assert "80.0 us" in s.reason


def test_default_kept_within_noise_margin():
    s = select(SIG, "cpu", BOTH, {"aten": val("aten", "passed"), "manual": val("manual", "passed")},
               {"aten": bench("aten", 99.0), "manual": bench("manual", 100.0)})
    assert s.impl == "manual" and s.measured
    assert s.rejected["aten"].startswith("within 10% of manual")


def test_failed_validation_is_rejected_with_the_worst_element():
    why = "grad_input (seed0): max abs error 0.2, max rel 0.1; worst at [1,2,3]: got 1.2, expected 1"
    s = select(SIG, "cpu", BOTH, {"aten": val("aten", "passed"), "manual": val("manual", "failed", why)},
               {"aten": bench("aten", 300.0), "manual": bench("manual", 100.0)})
    assert s.impl == "aten" and s.measured  # the faster one failed
    assert s.rejected == {"manual": f"failed validation: {why}"}


def test_runtime_error_and_compile_failure():
    s = select(SIG, "cpu", ["manual"], {"aten": None, "manual": val("manual", "error", "RuntimeError: boom")},
               {"aten": None, "manual": None})
    assert s.impl is None and not s.measured
    assert s.rejected == {"aten": "compile failed", "manual": "validation error: RuntimeError: boom"}
    assert "no implementation available" in s.reason and "boom" in s.reason


def test_nothing_ran_keeps_every_compiled_impl():
    nr = "not run: no device (gfx942)"
    s = select(SIG, "gfx942", BOTH, {"aten": val("aten", "not run", nr), "manual": val("manual", "not run", nr)},
               {})
    assert s == Selection("manual", False, f"default until measured: {nr}", {})
    only_aten = select(SIG, "gfx942", ["aten"], {"aten": val("aten", "not run", nr), "manual": None}, {})
    assert only_aten.impl == "aten" and not only_aten.measured
    assert only_aten.rejected == {"manual": "compile failed"}
    # no records at all (validation disabled): still a stated default
    s = select(SIG, "gfx942", BOTH, {}, {})
    assert s.impl == "manual" and not s.measured and s.reason.startswith("default until measured: not run")


def test_validated_but_not_benchmarked():
    v = {"aten": val("aten", "passed"), "manual": val("manual", "passed")}
    s = select(SIG, "cpu", BOTH, v, {"aten": None, "manual": None})
    assert s.impl == "manual" and not s.measured and s.rejected == {}
    assert s.reason.startswith("default among validated")
    # one timed, one whose benchmark errored: the timed one wins, the other says why
    s = select(SIG, "cpu", BOTH, v, {"aten": bench("aten", 50.0), "manual": bench("manual", None, "error", "boom")})
    assert s.impl == "aten" and s.measured
    assert s.rejected == {"manual": "not benchmarked (error: boom)"}


def test_a_validated_impl_beats_an_unvalidated_faster_one():
    s = select(SIG, "cpu", BOTH, {"aten": val("aten", "passed"), "manual": val("manual", "not run", "not run: x")},
               {"aten": bench("aten", 500.0), "manual": bench("manual", 1.0)})
    assert s.impl == "aten" and s.measured
    assert s.rejected == {"manual": "not validated (not run: x)"}


def test_selection_json_round_trip():
    from boo_build.reasons import Kind, Reason

    s = Selection("aten", True, Reason(Kind.FASTEST, "fastest validated: 1.0 us"),
                  {"manual": Reason(Kind.SLOWER, "slower: 2.0 us vs 1.0 us (aten)")})
    back = Selection.from_json(s.to_json())
    assert back == s and back.reason.kind is Kind.FASTEST and back.rejected["manual"].kind is Kind.SLOWER
    assert s.to_json()["rejected"] == {"manual": {"kind": "slower", "text": "slower: 2.0 us vs 1.0 us (aten)"}}


# ---------------------------------------------------------------- candidates
def cval(name, status, reason=""):
    """A candidate's validation: its module's (every mode of a module shares it)."""
    return val(Candidate.parse(name).impl, status, reason)


def cbench(name, us, status="ok", reason=""):
    return bench(Candidate.parse(name).impl, us, status, reason)


def test_faster_of_two_validated_candidates_wins_with_reasons():
    names = ["manual", "manual@local-sync"]
    s = select(SIG, "cpu", names, {n: cval(n, "passed") for n in names},
               {"manual": cbench("manual", 100.0), "manual@local-sync": cbench("manual@local-sync", 30.0)})
    assert s.impl == "manual@local-sync" and s.measured
    assert s.rejected == {"manual": "slower: 100.0 us vs 30.0 us (manual@local-sync)"}
    recs = candidate_records(s, names, {"manual": cbench("manual", 100.0),
                                        "manual@local-sync": cbench("manual@local-sync", 30.0)})
    assert list(recs) == sorted(names)
    assert recs["manual@local-sync"].to_json() == {"median_s": 30.0 * 1e-6, "min_s": 30.0 * 1e-6, "status": "selected", "reason": ""}
    assert recs["manual"].status == "slower" and recs["manual"].reason.startswith("slower: 100.0 us")


def test_a_failed_candidate_is_never_selected_however_fast():
    names = ["aten", "aten+nosd", "aten+nosd@local-sync", "aten@local-sync", "manual", "manual@local-sync"]
    why = "y (seed0): max abs error 0.2"
    vals = {n: cval(n, "failed" if "+nosd" in n else "passed", why if "+nosd" in n else "") for n in names}
    vals["manual"] = vals["manual@local-sync"] = None  # manual did not compile
    benches = {"aten": cbench("aten", 80.0), "aten+nosd": cbench("aten+nosd", 5.0),
               "aten+nosd@local-sync": cbench("aten+nosd@local-sync", 1.0), "aten@local-sync": None}
    s = select(SIG, "cpu", [n for n in names if n.startswith("aten")], vals, benches)
    assert s.impl == "aten" and s.measured
    assert s.rejected == {"aten+nosd": f"failed validation: {why}", "aten+nosd@local-sync": f"failed validation: {why}",
                          "aten@local-sync": "not benchmarked (no benchmark record)",
                          "manual": "compile failed", "manual@local-sync": "compile failed"}
    recs = candidate_records(s, names, benches)
    assert {n: r.status for n, r in recs.items()} == {
        "aten": "selected", "aten+nosd": "failed", "aten+nosd@local-sync": "failed", "aten@local-sync": "not run",
        "manual": "failed", "manual@local-sync": "failed"}
    assert all(r.reason for n, r in recs.items() if n != "aten")
    assert recs["aten+nosd@local-sync"].median_s == 1.0 * 1e-6  # timed, and still never chosen
    # per module (the index's "rejected"): each losing module once, with its best candidate's reason
    assert module_rejections(s, names, benches) == {"aten+nosd": f"failed validation: {why}",
                                                    "manual": "compile failed"}


def test_margin_keeps_only_the_baseline_default():
    names = ["aten@local-sync", "manual", "manual@local-sync"]
    benches = {"manual": cbench("manual", 100.0), "aten@local-sync": cbench("aten@local-sync", 99.0),
               "manual@local-sync": cbench("manual@local-sync", 99.5)}
    s = select(SIG, "cpu", names, {n: cval(n, "passed") for n in names}, benches)
    assert s.impl == "manual" and s.rejected["aten@local-sync"].startswith("within 10% of manual")
    assert s.rejected["manual@local-sync"] == "slower: 99.5 us vs 100.0 us (manual)"
    # no timed baseline: the fastest wins, however close
    benches["manual"] = cbench("manual", None, "error", "boom")
    s = select(SIG, "cpu", names, {n: cval(n, "passed") for n in names}, benches)
    assert s.impl == "aten@local-sync"
    assert s.rejected == {"manual": "not benchmarked (error: boom)",
                          "manual@local-sync": "slower: 99.5 us vs 99.0 us (aten@local-sync)"}
    assert candidate_records(s, names, benches)["manual"].status == "not run"
    assert module_rejections(s, names, benches) == {"manual": "slower: 99.5 us vs 99.0 us (aten@local-sync)"}


def timed(impl, median_us, min_us):
    """A benchmark whose best sample and median differ (a loaded build machine)."""
    return BenchResult(ModuleId(SIG, impl).key, SIG.key, "cpu", "ok", "", min_us * 1e-6, median_us * 1e-6,
                       median_us * 1e-6, 20, 2)


def test_candidates_are_compared_by_their_median():
    # aten's best sample is the better one, its median (what an application pays: its
    # calls stall now and then) the worse: manual wins
    s = select(SIG, "cpu", BOTH, {"aten": val("aten", "passed"), "manual": val("manual", "passed")},
               {"aten": timed("aten", 200.0, 70.0), "manual": timed("manual", 120.0, 100.0)})
    assert s.impl == "manual" and s.rejected == {"aten": "slower: 200.0 us vs 120.0 us (manual)"}
    recs = candidate_records(s, BOTH, {"aten": timed("aten", 200.0, 70.0), "manual": timed("manual", 120.0, 100.0)})
    assert recs["aten"].min_s == 70.0 * 1e-6 and recs["aten"].median_s == 200.0 * 1e-6



def stalling(impl, median_us, mean_us):
    """A benchmark whose rounds stall now and then: a good median, a worse mean
    per call (what an application pays; ``Stats.mean``)."""
    return BenchResult(ModuleId(SIG, impl).key, SIG.key, "cpu", "ok", "", median_us * 0.9e-6, median_us * 1e-6,
                       mean_us * 2e-6, 20, 2, mean_s=mean_us * 1e-6)


def test_candidates_are_compared_by_their_mean_per_call_where_recorded():
    # aten's median is the better one, its mean (rounds that stalled) the worse: manual wins
    benches = {"aten": stalling("aten", 100.0, 180.0), "manual": stalling("manual", 120.0, 125.0)}
    vals = {"aten": val("aten", "passed"), "manual": val("manual", "passed")}
    s = select(SIG, "cpu", BOTH, vals, benches)
    assert s.impl == "manual" and s.rejected == {"aten": "slower: 180.0 us vs 125.0 us (manual)"}
    recs = candidate_records(s, BOTH, benches)
    assert recs["aten"].median_s == 100.0 * 1e-6 and recs["aten"].mean_s == 180.0 * 1e-6
    # against torch eager too: 125 us is not 10 % faster than eager's 130 us mean, though
    # manual's median (120 us) is 10 % faster than eager's median (135 us)
    from boo_build.stages.routing import eager_preference

    eager = BenchResult("eager", SIG.key, "cpu", "ok", "", 125e-6, 135e-6, 140e-6, 20, 2, mean_s=130e-6)
    pref = eager_preference(SIG, s, benches, eager)
    assert pref.kernel_s == 125e-6 and pref.reason.endswith("125.0 us (manual) vs 130.0 us (means per call)")
    # a record without a mean (written before means were) is compared by its median
    old = {"aten": timed("aten", 100.0, 90.0), "manual": stalling("manual", 120.0, 125.0)}
    assert select(SIG, "cpu", BOTH, vals, old).impl == "aten"

def eager_bench(us, status="ok", reason=""):
    t = None if us is None else us * 1e-6
    return BenchResult("eager", SIG.key, "cpu", status, reason, t, t, t, 10 if t else 0, 2)


def test_torch_calls_run_the_kernel_only_where_it_beat_eager_clearly():
    from boo_build.stages.routing import eager_preference

    vals = {"aten": val("aten", "passed"), "manual": val("manual", "passed")}
    benches = {"aten": bench("aten", 80.0), "manual": bench("manual", 120.0)}
    s = select(SIG, "cpu", BOTH, vals, benches)
    pref = eager_preference(SIG, s, benches, eager_bench(50.0))
    assert pref.eager_s == 50.0 * 1e-6 and pref.kernel_s == 80.0 * 1e-6
    assert pref.reason == ("the kernel not 10% faster than torch eager on the build machine: "
                              "80.0 us (aten) vs 50.0 us (medians)")
    assert eager_preference(SIG, s, benches, eager_bench(85.0)) is not None  # 6 % faster: not enough
    assert eager_preference(SIG, s, benches, eager_bench(95.0)) is None  # 19 % faster: the kernel runs
    # faster by its best sample, slower in median (a noisy kernel): eager
    noisy = {"aten": timed("aten", 130.0, 80.0), "manual": timed("manual", 125.0, 60.0)}
    assert eager_preference(SIG, select(SIG, "cpu", BOTH, vals, noisy), noisy, eager_bench(95.0)) is not None
    assert eager_preference(SIG, s, benches, eager_bench(None, "error", "boom")) is None  # eager did not run
    unmeasured = select(SIG, "cpu", BOTH, vals, {})
    assert not unmeasured.measured and eager_preference(SIG, unmeasured, {}, eager_bench(1.0)) is None


def sized(impl, per_rows):
    """A benchmark of a dynamic kernel at several sizes: {rows: us} (rows x 768)."""
    sizes = tuple({"shape": [r, 1, 768], "status": "ok", "reason": "", "min_s": us * 1e-6, "median_s": us * 1e-6,
                   "p90_s": us * 1e-6, "reps": 10} for r, us in per_rows.items())
    first = next(iter(per_rows.values())) * 1e-6
    return BenchResult(impl, DYN.key, "cpu", "ok", "", first, first, first, 10, 2, sizes=sizes)


DYN = KernelSignature.parse("layer_norm-f32-BATCHxSEQx768-n768-wb-m1")


def test_a_kernel_timed_at_several_sizes_gets_a_decision_per_size():
    from boo_build.stages.routing import eager_preference

    vals = {"manual": val("manual", "passed")}
    benches = {"manual": sized("manual", {1024: 300.0, 1: 25.0, 4096: 900.0})}
    s = select(DYN, "cpu", ["manual"], vals, benches)
    # the kernel wins at 1024 rows (the headline size) and 4096, eager at one row
    pref = eager_preference(DYN, s, benches, sized("eager", {1024: 400.0, 1: 9.0, 4096: 1000.0}))
    assert pref.to_json()["by_rows"] == [[1, True], [1024, False], [4096, False]]
    assert pref.kernel_s == 300.0 * 1e-6 and "at 1 of 3 sizes timed" in pref.reason
    assert eager_preference(DYN, s, benches, sized("eager", {1024: 400.0, 1: 30.0, 4096: 1000.0})) is None
    # eager faster everywhere: every size says so
    pref = eager_preference(DYN, s, benches, sized("eager", {1024: 100.0, 1: 9.0, 4096: 300.0}))
    assert [won for _, won in pref.to_json()["by_rows"]] == [True, True, True]


def test_where_torch_calls_go_in_words():
    from boo_build.stages.routing import torch_calls_text

    assert torch_calls_text(None) == "the kernel"
    assert torch_calls_text(EagerPreference(1.0, 2.0, "r")) == "torch eager"
    assert torch_calls_text(EagerPreference(1.0, 2.0, "r", by_rows=[[1, True], [64, True], [4096, True]])) == "torch eager (all 3 sizes)"
    assert torch_calls_text(EagerPreference(1.0, 2.0, "r", by_rows=[[1, True], [64, False], [4096, True]])) == \
        "eager at 1, 4096 rows, else the kernel"


def test_torch_calls_go_to_torch_only_where_eager_passed_validation():
    """Eager faster is not enough: its results, as the loader routes them, must
    pass the kernels' validation; otherwise the kernel runs and the reason says why."""
    from boo_build.stages.routing import eager_preference, gate_eager, torch_calls_text

    vals = {"aten": val("aten", "passed"), "manual": val("manual", "passed")}
    benches = {"aten": bench("aten", 80.0), "manual": bench("manual", 120.0)}
    s = select(SIG, "cpu", BOTH, vals, benches)
    pref = eager_preference(SIG, s, benches, eager_bench(50.0))
    assert gate_eager(pref, EagerValidation.from_json({"status": "passed", "reason": ""})) == (pref, None)
    kept, failed = gate_eager(pref, EagerValidation.from_json({"status": "failed", "reason": "grad_bias (seed0): ... (7.2x the tolerance)"}))
    assert kept is None and failed == ("torch eager failed validation: grad_bias (seed0): ... (7.2x the tolerance) "
                                       "(it was faster: 80.0 us (aten) vs 50.0 us (medians))")
    assert gate_eager(pref, None) == (None, "torch eager not validated (it was faster: 80.0 us (aten) vs 50.0 us "
                                            "(medians))")
    assert gate_eager(pref, EagerValidation.from_json({"status": "error", "reason": "seed0: RuntimeError: boom"}))[1].startswith(
        "torch eager error validation: seed0: RuntimeError: boom")
    # eager not faster: nothing to gate, whatever its validation
    assert gate_eager(eager_preference(SIG, s, benches, eager_bench(95.0)), EagerValidation.from_json({"status": "failed"})) == (None, None)
    assert torch_calls_text(None, failed) == "the kernel (torch eager fails validation)"
    assert torch_calls_text(None, gate_eager(pref, None)[1]) == "the kernel (torch eager not validated)"


def test_a_kernel_decided_per_size_keeps_eager_where_eager_passed_validation():
    """ATen's half-precision sums over rows pass at a few rows and fail at
    thousands: eager keeps the sizes where it passed, the kernel takes the rest."""
    from boo_build.stages.routing import eager_preference, gate_eager, torch_calls_text

    vals = {"manual": val("manual", "passed")}
    benches = {"manual": sized("manual", {1024: 300.0, 1: 25.0, 64: 40.0, 4096: 900.0})}
    s = select(DYN, "cpu", ["manual"], vals, benches)
    pref = eager_preference(DYN, s, benches, sized("eager", {1024: 100.0, 1: 9.0, 64: 12.0, 4096: 300.0}))
    assert [won for _, won in pref.to_json()["by_rows"]] == [True, True, True, True]
    validation = {"status": "failed", "reason": "grad_bias (seed0@3x1367x768): ...",
                  "by_rows": [[1, True], [37, True], [64, True], [1024, False], [4096, False]]}
    kept, why = gate_eager(pref, EagerValidation.from_json(validation))
    assert why is None and kept.to_json()["by_rows"] == [[1, True], [64, True], [1024, False], [4096, False]]
    assert kept.reason.endswith("; not at 1024, 4096 rows, where torch eager fails validation")
    assert torch_calls_text(kept) == "eager at 1, 64 rows, else the kernel"
    # failing at every size eager won: the kernel everywhere, and why
    everywhere = {**validation, "by_rows": [[1, False], [64, False], [1024, False], [4096, False]]}
    assert gate_eager(pref, EagerValidation.from_json(everywhere))[0] is None and gate_eager(pref, EagerValidation.from_json(everywhere))[1].startswith(
        "torch eager failed validation: grad_bias")
