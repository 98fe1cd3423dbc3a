"""torch.compile's code as a second baseline (issue 57): the benchmark's paired rounds time
``torch.compile`` of the op's eager call beside the candidates and torch eager; the build
decides twice, each decision against its own baseline with the same margin and noise rules:
``replace_norms`` and the loader's entry points against torch eager (``prefer_eager``),
``torch.compile(backend="boo")`` against torch.compile (``vs_compiled``), falling back to the
eager verdict, saying why, where torch.compile was not timed. Decided on recorded samples
(no wall clock), and routed by real kernels of the session's backend bundle."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest
import torch
from helpers import BW, backend_sigs, rewrite

from boo_build.loader import open_bundle
from boo_build.loader.archive import read_archive
from boo_build.loader.backend import Backend, Runs, Why, explain
from boo_build.loader.format import CompiledVerdict, EagerPreference, TargetRecord
from boo_build.loader.nn import replace_norms
from boo_build.records import BenchResult, BenchStatus, EagerValidation, ValidationResult, ValidationStatus
from boo_build.signature import KernelSignature
from boo_build.stages import comparison as cmp
from boo_build.stages.comparison import COMPILED, COMPILED_CALL, EAGER, Rounds, RoundsRecord
from boo_build.stages.selection import Decision, decide, target_entry

SIG = KernelSignature("layer_norm", (8, 128, 768), (768,), "float32", 14)
DYN = KernelSignature("layer_norm", ("batch", "seq", 768), (768,), "float32", 1)


def jitter(base: float, n: int, seed: int) -> list[float]:
    return [base * (1 + 0.02 * math.sin(1.7 * i + seed)) for i in range(n)]


def rounds(shape=None, untimed=None, call=0.0, **medians_us) -> Rounds:
    """Two passes of 12 rounds at these medians (us): ``compiled`` names torch.compile's, ``call``
    its call's fixed cost (timed beside it; none: the decisions see torch.compile's own)."""
    names = {"compiled": COMPILED}
    times = {names.get(k, k): jitter(v * 1e-6, 24, i) for i, (k, v) in enumerate(sorted(medians_us.items()))}
    if COMPILED in times:
        times[COMPILED_CALL] = jitter(call * 1e-6, 24, 9)
    return Rounds(times, (12, 12), shape, untimed=untimed or {})


def _decide(sig, *sizes, previous=None) -> Decision:
    rec = RoundsRecord(sig.key, "cpu", ("aten",), tuple(sizes), previous=previous)
    val = ValidationResult(f"{sig.key}-aten", "cpu", ValidationStatus.PASSED)
    eager = BenchResult(EAGER, sig.key, "cpu", BenchStatus.OK, median_s=1e-4, mean_s=1e-4,
                        validation=EagerValidation(ValidationStatus.PASSED))
    return decide(sig, "cpu", ["aten"], ["aten"], {"aten": val}, {"aten": None}, explored=True, eager=eager,
                  eager_validation=eager.validation, rounds=rec)


def test_each_routing_is_decided_against_its_own_baseline():
    # faster than torch eager, slower than torch.compile: the loader's entry points run the kernel,
    # the compile backend keeps the graph's code
    d = _decide(SIG, rounds(aten=80.0, eager=100.0, compiled=60.0))
    assert d.prefer_eager is None
    assert d.vs_compiled is not None and d.vs_compiled.timed and d.vs_compiled.graph
    assert d.timing is not None and d.timing.vs_compiled is not None and d.timing.vs_compiled.verdict == "slower"
    assert "slower" in d.vs_compiled.reason and "torch.compile" in d.vs_compiled.reason
    # the reverse: slower than torch eager, faster than torch.compile
    d = _decide(SIG, rounds(aten=80.0, eager=60.0, compiled=100.0))
    assert d.prefer_eager is not None
    assert d.vs_compiled is not None and d.vs_compiled.timed and not d.vs_compiled.graph
    assert d.timing.vs_compiled.verdict == "faster" and d.timing.vs_compiled.speedup == pytest.approx(1.25, rel=0.05)
    # within the margin of torch.compile: a tie, which keeps the graph's code (the kernel must beat it)
    d = _decide(SIG, rounds(aten=95.0, eager=200.0, compiled=100.0))
    assert d.prefer_eager is None and d.vs_compiled.graph and d.timing.vs_compiled.verdict == "tie"


def test_the_kernel_taking_compiled_calls_needs_every_pass():
    # faster than torch.compile in the first pass only: not in every pass, a tie (the graph's code)
    r = rounds(aten=50.0, eager=100.0, compiled=100.0)
    times = dict(r.times)
    times["aten"] = tuple(times["aten"][:12]) + tuple(t * 1.9 for t in times["aten"][12:])  # 95 us: a tie
    d = _decide(SIG, Rounds(times, (12, 12)))
    assert d.timing.compiled_verdict is cmp.Verdict.UNREPLICATED and d.vs_compiled.graph
    # one pass on its own asks for another, as against torch eager
    one = Rounds({k: v[:12] for k, v in r.times.items()}, (12,))
    assert "aten against torch.compile" in cmp.needs_more(one, ["aten"])


def test_a_rebuild_keeps_its_verdict_against_torch_compile_as_against_eager():
    tied = rounds(aten=95.0, eager=200.0, compiled=100.0)  # within the margin: a fresh build keeps the graph's code
    assert _decide(SIG, tied).vs_compiled.graph
    took = cmp.Previous("aten", "m", compiled=True)  # the previous build gave the kernel torch.compile's calls
    d = _decide(SIG, tied, previous=took)
    assert not d.vs_compiled.graph and d.timing.compiled_verdict is cmp.Verdict.KEPT
    # torch.compile faster beyond the noise in every pass: the kept routing goes
    assert _decide(SIG, rounds(aten=130.0, eager=200.0, compiled=100.0), previous=took).vs_compiled.graph
    # busy rounds hold a quiet build's verdict, either way; one without a verdict is decided afresh
    busy = dataclasses.replace(rounds(aten=60.0, eager=200.0, compiled=100.0), others=1.5)
    assert _decide(SIG, busy, previous=cmp.Previous("aten", "m", compiled=False)).vs_compiled.graph
    assert not _decide(SIG, busy, previous=cmp.Previous("aten", "m")).vs_compiled.graph
    # the select record hands its verdict on (per size for a dynamic kernel)
    from boo_build.stages.select import SelectRecord

    d = _decide(DYN, rounds((1, 1, 768), aten=50.0, eager=90.0, compiled=20.0),
                rounds((4, 1024, 768), aten=500.0, eager=900.0, compiled=800.0))
    d = dataclasses.replace(d, timing=dataclasses.replace(d.timing, machine="m"))
    prev = SelectRecord(DYN.key, "cpu", d).previous()
    assert prev.compiled is False and prev.compiled_rows == ((1, False), (4096, True))
    assert cmp.Previous.from_json(prev.to_json()) == prev and prev.compiled_at(5000) and not prev.compiled_at(2)


def test_untimed_compiled_says_why_and_the_record_round_trips():
    why = "not timed: the build's torch.compile budget (0 sizes, --compile-budget) spent"
    d = _decide(SIG, rounds(aten=80.0, eager=60.0, untimed={COMPILED: why}))
    assert d.vs_compiled == CompiledVerdict.untimed(why) and d.timing.compiled_untimed == why
    assert Decision.from_json(d.to_json()) == d
    te = target_entry(d, {})  # no packed module: unavailable, but the JSON forms still round-trip
    assert TargetRecord.from_json(te.to_json()).to_json() == te.to_json()
    # rounds records written before the baseline: no verdict at all (the backend decides against eager)
    old = _decide(SIG, rounds(aten=80.0, eager=60.0))
    assert old.vs_compiled is not None and not old.vs_compiled.timed  # nothing says why: "not timed"
    assert "compiled" not in old.timing.to_json()


def test_a_dynamic_kernel_is_decided_against_torch_compile_per_size():
    small = rounds((1, 1, 768), aten=50.0, eager=90.0, compiled=20.0)  # torch.compile faster at one row
    big = rounds((4, 1024, 768), aten=500.0, eager=900.0, compiled=800.0)
    d = _decide(DYN, small, big)
    assert d.prefer_eager is None  # faster than torch eager at both
    assert d.vs_compiled.by_rows == ((1, True), (4096, False)) and d.vs_compiled.graph
    assert "faster at 4096 of 2 sizes timed" in d.vs_compiled.reason
    # a size the budget left untimed: the timed one decides, the reason names the other
    cut = dataclasses.replace(big, times={k: v for k, v in big.times.items() if k != COMPILED},
                              untimed={COMPILED: "not timed: budget"})
    d = _decide(DYN, small, cut)
    assert d.vs_compiled.by_rows is None and d.vs_compiled.graph and "1 size not timed against it" in \
        d.vs_compiled.reason


def test_torch_compile_is_compared_less_its_calls_fixed_cost():
    # the op compiled alone 100 us, 60 of them its call's fixed cost: the graph pays 40 us for the norm, so a
    # kernel of 60 us (1.67x faster than the op alone) is slower than it, and the graph's code stays
    d = _decide(SIG, rounds(aten=60.0, eager=200.0, compiled=100.0, call=60.0))
    assert d.vs_compiled.graph and d.timing.vs_compiled.verdict == "slower"
    assert d.timing.compiled.ratio == pytest.approx(1.5, rel=0.05)
    assert d.vs_compiled.compiled_s == pytest.approx(40e-6, rel=0.05)
    # the record keeps both figures it subtracted, and says so in words
    assert d.vs_compiled.op_s == pytest.approx(100e-6, rel=0.05)
    assert d.vs_compiled.call_s == pytest.approx(60e-6, rel=0.05)
    assert "vs 40.3 us: the op compiled alone 100.3 us less its call's fixed cost 60.0 us)" in d.vs_compiled.reason
    assert CompiledVerdict.from_json(d.vs_compiled.to_json()) == d.vs_compiled
    # the reverse: a kernel slower than the op compiled alone never beats it less its call
    d = _decide(SIG, rounds(aten=110.0, eager=200.0, compiled=100.0, call=10.0))
    assert d.vs_compiled.graph and d.timing.compiled.ratio == pytest.approx(110 / 90, rel=0.05)
    # a kernel that beats the op's own share still takes the calls
    d = _decide(SIG, rounds(aten=20.0, eager=200.0, compiled=100.0, call=60.0))
    assert not d.vs_compiled.graph and d.timing.vs_compiled.verdict == "faster"


def test_the_subtraction_is_floored_and_needs_the_call_timed():
    # the call timed at or above the op (noise at a tiny size): the figure is a tenth of the op's, never nil
    r = rounds(aten=20.0, eager=30.0, compiled=100.0, call=120.0)
    net = cmp.less_call(r)
    assert net.times[COMPILED] == pytest.approx([cmp.CALL_FLOOR * t for t in r.times[COMPILED]])
    assert r.times[COMPILED] != net.times[COMPILED] and net.times[COMPILED_CALL] == r.times[COMPILED_CALL]
    d = _decide(SIG, r)
    assert d.vs_compiled.graph and d.timing.compiled.ratio == pytest.approx(2.0, rel=0.05)  # 20 us vs 10 us
    # rounds that timed torch.compile without its call (an earlier build's) give no verdict, and say why
    old = dataclasses.replace(r, times={k: v for k, v in r.times.items() if k != COMPILED_CALL})
    d = _decide(SIG, old)
    assert not d.vs_compiled.timed and "no torch.compile call cost in these rounds" in d.vs_compiled.reason
    assert "no torch.compile call cost" in d.timing.compiled_untimed
    one = cmp.needs_more(Rounds({k: v[:12] for k, v in old.times.items()}, (12,)), ["aten"])
    assert one == ["aten against torch eager"]  # nothing more to measure against torch.compile


# ------------------------------------------------------------ the two routings, real kernels
LN1 = next(s.key for s, _ in backend_sigs() if s.op == "layer_norm" and s.mask == 1 and s.affine)


def _copy(src, dst, prefer_eager: bool, vs: CompiledVerdict | None):
    ix = read_archive(src).bundle_index
    te = ix.kernels[LN1].targets["cpu"]
    pref = EagerPreference(eager_s=1e-5, kernel_s=2e-5, reason="torch eager faster") if prefer_eager else None
    ix = ix.with_entry(LN1, "cpu", dataclasses.replace(te, prefer_eager=pref, vs_compiled=vs))
    new = ix.to_json()
    return rewrite(src, dst, index=lambda d: (d.clear(), d.update(new)))


def _route(path) -> dict:
    """The kernel's entry in a format-5 bundle's cpu routes (what the loader reads at open)."""
    return json.loads(read_archive(path).members["routes/cpu.json"])["kernels"][LN1]


def _routings(path):
    """(whether replace_norms' module ran the kernel, the backend's decision, whether the compiled
    graph ran the kernel) for one LayerNorm of the width-8 kernels, in inference."""
    torch.manual_seed(0)
    x = torch.randn(2, 3, BW)
    with torch.no_grad():
        b = open_bundle(path, device="local-task")
        m = torch.nn.Sequential(torch.nn.LayerNorm(BW))
        replace_norms(m, b, fallback="eager")
        m(x)
        swapped = b.stats().get(LN1, {}).get("hits", 0) > 0
        torch._dynamo.reset()
        why = explain(torch.nn.LayerNorm(BW), x, bundle=b)
        (d,) = why.norms
        b2 = open_bundle(path, device="local-task")
        torch._dynamo.reset()
        torch.compile(torch.nn.LayerNorm(BW), backend=Backend(b2, inner="eager"))(x)
        compiled = b2.stats().get(LN1, {}).get("hits", 0) > 0
    return swapped, d, compiled


def test_faster_than_eager_slower_than_compiled_runs_in_replace_norms_not_in_the_backend(backend_built, tmp_path):
    vs = CompiledVerdict(True, "kernel/torch.compile 1.60x: slower", graph=True, kernel_s=2e-5, compiled_s=1.25e-5)
    path = _copy(backend_built, tmp_path / "a.tar.zst", False, vs)
    assert _route(path)["compiled"] is True and "eager" not in _route(path)
    swapped, d, compiled = _routings(path)
    assert swapped
    assert d.runs is Runs.GRAPH and d.why is Why.COMPILED_FASTER and LN1 in d.detail, str(d)
    assert not compiled


def test_slower_than_eager_faster_than_compiled_runs_in_the_backend_not_in_replace_norms(backend_built, tmp_path):
    vs = CompiledVerdict(True, "kernel/torch.compile 0.70x: faster", graph=False, kernel_s=2e-5, compiled_s=2.9e-5)
    swapped, d, compiled = _routings(_copy(backend_built, tmp_path / "b.tar.zst", True, vs))
    assert not swapped  # torch eager runs replace_norms' calls
    assert d.runs is Runs.KERNEL and "faster than torch.compile" in d.detail, str(d)
    assert compiled  # and the compiled graph's op runs the kernel, not torch eager


def test_without_a_compiled_verdict_the_backend_decides_against_eager_and_says_why(backend_built, tmp_path):
    why = "not timed: the build's torch.compile budget (0 sizes, --compile-budget) spent"
    path = _copy(backend_built, tmp_path / "c.tar.zst", True, CompiledVerdict.untimed(why))
    assert _route(path)["compiled"] == {"untimed": why}
    _, d, compiled = _routings(path)
    assert d.runs is Runs.GRAPH and d.why is Why.EAGER_FASTER and why in d.detail and not compiled
    path = _copy(backend_built, tmp_path / "d.tar.zst", False, None)  # a bundle built before the baseline
    assert "compiled" not in _route(path)
    _, d, compiled = _routings(path)
    assert d.runs is Runs.KERNEL and "no torch.compile verdict in the bundle" in d.detail and compiled


# ------------------------------------------------------------------ the build's compile budget
BUDGET_MANIFEST = """
[bundle]
name = "budget"
version = "0.1.0"
targets = ["cpu", "gfx942"]

[[kernels]]
op = "layer_norm"
input_shape = [4, 6, 10]
masks = [1]

[[kernels]]
op = "rms_norm"
input_shape = ["batch", 10]
masks = [1]
bench_shapes = [[1, 10], [64, 10], [512, 10]]
"""


def test_the_compile_budget_goes_to_every_kernels_first_size_first():
    from types import SimpleNamespace

    from boo_build.build.creators import compile_shares
    from boo_build.manifest.reader import parse_toml
    from boo_build.targets import catalogue

    m = parse_toml(BUDGET_MANIFEST, "budget.toml")
    cat = catalogue()
    plan = SimpleNamespace(manifest=m, targets=[cat["cpu"], cat["gfx942"]])
    ln, rms = (f"budget/cpu/{k.signature.key}" for k in m.kernels)

    def shares(budget, devices=None):
        g = SimpleNamespace(plans=[plan], config=SimpleNamespace(compile_budget=budget),
                            devices=devices or {"cpu": ({"uri": "local-task"}, ""), "gfx942": (None, "no device")})
        return compile_shares(g)

    got, why = shares(2)
    assert got == {ln: 1, rms: 1} and "budget (2 sizes, --compile-budget) spent" in why
    assert shares(3)[0] == {ln: 1, rms: 2} and shares(48)[0] == {ln: 1, rms: 3} and shares(0)[0] == {ln: 0, rms: 0}
    # a GPU target with its device: no torch device in a build, so no share of the budget
    both = {"cpu": ({"uri": "local-task"}, ""), "gfx942": ({"uri": "hip://0"}, "")}
    assert set(shares(48, both)[0]) == {ln, rms}


def test_diff_shows_the_figure_over_torch_compile(backend_built):
    from boo_build.cli.diff import diff_indexes

    ix = read_archive(backend_built).bundle_index
    te = ix.kernels[LN1].targets["cpu"]

    def timed(ratio, verdict):
        pair = {"a": "aten", "b": "eager", "ratio": 0.8, "q1": 0.78, "q3": 0.82, "n": 24, "noise": 0.02,
                "verdict": "faster", "confirmed": None}
        return dataclasses.replace(te, timing={"rounds": 24, "ties": 0, "remeasured": [], "busy": False, "eager": pair,
                                               "compiled": {**pair, "b": COMPILED, "ratio": ratio, "verdict": verdict}})
    a = ix.with_entry(LN1, "cpu", timed(0.5, "faster"))
    b = ix.with_entry(LN1, "cpu", timed(1.5, "slower"))
    (line,) = diff_indexes(a, b)["bench"]
    assert line == (f"{LN1} on cpu: speed-up over torch.compile 2.00x (1.96-2.04, 24 rounds): faster than "
                    "torch.compile -> 0.67x (0.65-0.68, 24 rounds): slower than torch.compile"), line
    untimed = ix.with_entry(LN1, "cpu", dataclasses.replace(te, timing={
        "rounds": 24, "ties": 0, "remeasured": [], "busy": False, "compiled": {"untimed": "not timed: budget"}}))
    assert diff_indexes(untimed, b)["bench"][-1].startswith(f"{LN1} on cpu: speed-up over torch.compile not timed: "
                                                            "budget -> 0.67x")


def test_the_routes_refuse_a_compiled_verdict_they_cannot_read():
    from boo_build.loader.errors import BundleFormatError
    from boo_build.loader.split_format import check_routes

    entry = {"impl": "aten", "member": "m", "function": "f", "sha256": "0" * 64, "size": 1}
    for ok in (True, False, [[1, True], [64, False]], {"untimed": "not timed: budget"}):
        check_routes({"target": "cpu", "kernels": {"k": {**entry, "compiled": ok}}}, "cpu", "routes", framed=False)
    for bad in ("yes", [[1, "no"]], {"untimed": 3}, 1):
        with pytest.raises(BundleFormatError, match="compiled must be"):
            check_routes({"target": "cpu", "kernels": {"k": {**entry, "compiled": bad}}}, "cpu", "routes",
                         framed=False)
