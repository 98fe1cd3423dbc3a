"""Candidates (implementation x compile variant x execution mode): names,
what each target offers, and a real build on the cpu target that tries them
all, ships the fastest validated one and runs it through the loader."""

from __future__ import annotations

import csv
import json
import re
import statistics
from pathlib import Path

import pytest
from helpers import boo, boo_main, compiles

from boo_build.candidates import (
    LANES_NOSD,
    NOSD,
    NOSPLIT,
    NOVD,
    SINGLE_DISPATCH,
    SPLIT_REDUCTION,
    STACK,
    WORDS,
    Candidate,
    applies,
    apply_variant,
    candidates,
    explores,
    export_variant,
    fallback_variants,
    fallbacks,
    modes,
    tuned_part,
    variant_flags,
    variants,
    words_base,
)
from boo_build.ops.base import LANES
from boo_build.signature import KernelSignature, ModuleId
from boo_build.stages.comparison import RoundsRecord, Verdict, choose, eager_call
from boo_build.stages.selection import preference_order
from boo_build.targets import catalogue

FWD = KernelSignature("layer_norm", (3, 33, 100), (100,), "float32", 1)
BWD = FWD.replace(mask=2)


def test_text_form_round_trips_and_leaves_baseline_parts_out():
    for text, c in [("manual", Candidate("manual")), ("aten@local-sync", Candidate("aten", "", "local-sync")),
                    ("manual+nosd", Candidate("manual", NOSD)),
                    ("manual+nosd@local-sync", Candidate("manual", NOSD, "local-sync"))]:
        assert Candidate.parse(text) == c and c.key == str(c) == text
    assert Candidate("aten", NOSD, "local-task").module == "aten+nosd"
    assert Candidate("manual").is_baseline and not Candidate("manual", mode="local-sync").is_baseline
    for bad in ("fast", "manual+o9", "manual@hip"):
        with pytest.raises(ValueError):
            Candidate.parse(bad)


def test_what_each_target_offers():
    cat = catalogue("x86_64")
    assert variants(cat["cpu"]) == (NOSD, LANES) and modes(cat["cpu"]) == ("", "local-sync")
    assert variants(cat["gfx942"]) == ("fused", "fused.nosplit") and modes(cat["gfx942"]) == ("",)
    # nosd only where the export puts the attribute: static forward modules
    assert applies(NOSD, ModuleId(FWD, "manual")) and not applies(NOSD, ModuleId(BWD, "manual"))
    # lanes: the manual forward of rows of whole 8-lane vectors, 64 wide or more (static or dynamic)
    wide = KernelSignature("rms_norm", (4, 16, 64), (64,), "float32", 1, eps=1e-6, bias=False)
    assert applies(LANES, ModuleId(wide, "manual")) and not applies(LANES, ModuleId(wide, "aten"))
    assert not applies(LANES, ModuleId(wide.replace(mask=2), "manual"))
    assert not applies(LANES, ModuleId(FWD, "manual"))  # 100 wide: not whole vectors
    assert not applies(LANES, ModuleId(wide.replace(input_shape=(4, 16, 32), normalized_shape=(32,)), "manual"))
    assert not applies(LANES, ModuleId(wide.replace(input_shape=(4, 16, 64), normalized_shape=(16, 64)), "manual"))
    assert apply_variant(LANES, "its own export") == "its own export"
    mid_of = lambda i: ModuleId(FWD, i)  # noqa: E731
    assert [c.key for c in candidates(["manual"], cat["cpu"], mid_of, True)] == [
        "manual", "manual@local-sync", "manual+nosd", "manual+nosd@local-sync"]
    assert [c.key for c in candidates(["aten", "manual"], cat["cpu"], mid_of, False)] == ["aten", "manual"]
    assert [c.key for c in candidates(["manual"], cat["gfx942"], mid_of, True)] == ["manual"]
    dev = object()
    assert explores(cat["cpu"], bench=True, distributed=False, device=dev)
    assert not explores(cat["cpu"], bench=False, distributed=False, device=dev)  # --no-bench
    assert not explores(cat["cpu"], bench=True, distributed=True, device=dev)  # --scheduler: baselines
    assert not explores(cat["cpu"], bench=True, distributed=False, device=None)  # no device here


def test_fallbacks_change_what_iree_compile_is_given():
    """Tried only where none of a kernel's candidates compiled, in this order: lanes.nosd
    (manual forwards of whole 8-lane rows), nosd, nosplit where the target splits
    reductions, novd on HIP and CUDA, stack on CPU targets; never a candidate already."""
    cat = catalogue("x86_64")
    assert fallback_variants(cat["cpu"]) == (LANES_NOSD, NOSD, STACK)
    assert fallback_variants(cat["gfx942"]) == (LANES_NOSD, NOSD, NOSPLIT, NOVD)
    assert fallback_variants(cat["gfx1100"]) == fallback_variants(cat["sm_80"]) == (LANES_NOSD, NOSD, NOVD)
    assert fallback_variants(cat["vulkan"]) == fallback_variants(cat["vulkan-llvmpipe"]) == (LANES_NOSD, NOSD)
    wide = KernelSignature("layer_norm", (16, 768), (768,), "float32", 1)
    of = lambda sig: lambda i: ModuleId(sig, i)  # noqa: E731
    keys = lambda cs: [c.key for c in cs]  # noqa: E731
    assert keys(fallbacks(["aten", "manual"], cat["vulkan"], of(wide), False, True)) == [
        "manual+lanes.nosd", "aten+nosd", "manual+nosd"]
    # where explored, in every mode, less what the target tries anyway (the CPU's nosd)
    assert keys(fallbacks(["manual"], cat["cpu"], of(wide), True)) == [
        "manual+lanes.nosd", "manual+lanes.nosd@local-sync", "manual+stack", "manual+stack@local-sync"]
    assert keys(fallbacks(["aten"], cat["cpu"], of(FWD), False)) == ["aten+nosd", "aten+stack"]
    # backwards: no single dispatch to drop; the gfx942 manual's fused variants are candidates, not fallbacks
    assert keys(fallbacks(["manual"], cat["gfx942"], of(BWD), False, True)) == ["manual+nosplit", "manual+novd"]
    dyn = KernelSignature("layer_norm", ("batch", 768), (768,), "float32", 2)
    assert keys(fallbacks(["manual"], cat["cpu"], of(dyn), False)) == []  # dynamic kernels have the stack bound
    # what each gives iree-compile: the lanes export without the attribute, or other flags
    assert export_variant(LANES_NOSD) == LANES and applies(LANES_NOSD, ModuleId(wide, "manual"))
    attr = f"util.func @f() attributes {{preprocessing_pipeline = {SINGLE_DISPATCH}}} {{"
    assert apply_variant(LANES_NOSD, attr) == apply_variant(NOSD, attr) == "util.func @f() {"
    assert all(apply_variant(v, "m") == "m" for v in (NOSPLIT, NOVD, STACK))
    gfx = cat["gfx942"].flags
    assert SPLIT_REDUCTION in gfx and SPLIT_REDUCTION not in variant_flags(NOSPLIT, gfx)
    assert variant_flags(NOVD, gfx) == gfx + ("--iree-codegen-llvmgpu-use-reduction-vector-distribution=false",)
    assert variant_flags(STACK, cat["cpu"].flags) == cat["cpu"].flags + (
        "--iree-llvmcpu-stack-allocation-limit=131072",)
    assert Candidate.parse("manual+lanes.nosd@local-sync").module == "manual+lanes.nosd"


def test_bfloat16_on_a_target_without_16_bit_types_is_built_as_words():
    """The portable ``vulkan`` target has no 16-bit types: a bfloat16 kernel of even widths is
    built as 32-bit words there (``words``), every module of it, fallbacks included; float16,
    odd widths and the targets with 16-bit types keep their modules as they were."""
    cat = catalogue("x86_64")
    of = lambda sig: lambda i: ModuleId(sig, i)  # noqa: E731
    keys = lambda cs: [c.key for c in cs]  # noqa: E731
    wide = KernelSignature("layer_norm", (16, 768), (768,), "bfloat16", 1)
    assert words_base(cat["vulkan"], ModuleId(wide, "manual")) == WORDS
    assert keys(candidates(["aten", "manual"], cat["vulkan"], of(wide), False)) == ["aten+words", "manual+words"]
    assert all(Candidate.parse(k).is_baseline for k in ("aten+words", "manual")) \
        and not Candidate.parse("manual+lanes.nosd.words").is_baseline
    assert keys(fallbacks(["aten", "manual"], cat["vulkan"], of(wide), False, True)) == [
        "manual+lanes.nosd.words", "aten+nosd.words", "manual+nosd.words"]
    assert export_variant("lanes.nosd.words") == "lanes.words" and export_variant("nosd.words") == WORDS
    # a tuned GPU configuration joined to it: the compile task finds its tuned part wherever it stands
    assert tuned_part("tune-wg32-t4.words") == "tune-wg32-t4" and tuned_part("lanes.nosd.words") == ""
    dyn = KernelSignature("rms_norm", ("rows", 64), (64,), "bfloat16", 6, eps=1e-6, bias=False)
    assert keys(candidates(["manual"], cat["vulkan"], of(dyn), False, True)) == ["manual+words", "manual+fused.words"]
    for target, sig in (("vulkan-llvmpipe", wide), ("vulkan", wide.replace(dtype="float16")),
                        ("vulkan", wide.replace(dtype="float32")), ("cpu", wide),
                        ("vulkan", KernelSignature("layer_norm", (4, 33), (33,), "bfloat16", 1))):
        assert words_base(cat[target], ModuleId(sig, "manual")) == "", (target, sig.key)
        assert keys(candidates(["manual"], cat[target], of(sig), False)) == ["manual"]


def test_nosd_removes_only_the_attribute():
    attr = f"preprocessing_pipeline = {SINGLE_DISPATCH}"
    head = "util.func public @f(%arg0: !hal.buffer_view) -> !hal.buffer_view attributes {"
    for attrs, left in [(f"iree.abi.stub, {attr}", "iree.abi.stub"), (f"{attr}, iree.abi.stub", "iree.abi.stub")]:
        assert apply_variant(NOSD, f"{head}{attrs}}} {{") == f"{head}{left}}} {{"
    assert apply_variant(NOSD, f"util.func @f() attributes {{{attr}}} {{") == "util.func @f() {"
    assert apply_variant(NOSD, "util.func @f() {") is None  # changes nothing: no module


# ------------------------------------------------------------- a real build
TINY = """
[bundle]
name = "cands"
version = "0.1.0"
targets = ["cpu"]

[[kernels]]
op = "layer_norm"
input_shape = [3, 33, 100]
dtype = "float32"
masks = [1, 2]

[[kernels]]
op = "rms_norm"
input_shape = [4, 16, 64]
dtype = "float32"
affine = true
bias = false
eps = 1e-6
masks = [1]
"""
WIDE = KernelSignature("rms_norm", (4, 16, 64), (64,), "float32", 1, eps=1e-6, bias=False)


@pytest.fixture(scope="module")
@compiles
def builds(tmp_path_factory):
    """The manifest built with benchmarks (candidates tried) and with --no-bench."""
    d = tmp_path_factory.mktemp("cands")
    (d / "tiny.toml").write_text(TINY)
    boo("build", "tiny.toml", "--out", "bench", "-q", cwd=d)
    boo("build", "tiny.toml", "--out", "nobench", "--no-bench", "-q", cwd=d)
    return d


def _index(path: Path) -> dict:
    from boo_build.stages.pack import read_index

    return read_index(path)


def test_the_bundle_ships_the_fastest_validated_candidate_and_runs_it(builds):
    from boo_build.loader import open_bundle

    root = builds / "bench" / "cands"
    index = _index(builds / "bench" / "cands-0.1.0.tar.zst")
    bundle = open_bundle(builds / "bench" / "cands-0.1.0.tar.zst", prefer_eager=False)  # the kernels, always
    for sig in (FWD, BWD):
        te = index["kernels"][sig.key]["targets"]["cpu"]
        cands = te["candidates"]
        expected = {Candidate(i, v, m).key for i in ("aten", "manual") for m in ("", "local-sync")
                    for v in (("", NOSD) if sig.is_forward else ("",))}
        assert set(cands) == expected and list(cands) == sorted(cands)
        # the records on disk: each candidate's, summarizing its samples in the paired rounds
        rounds = RoundsRecord.from_json(json.loads((root / "bench" / "cpu" / f"{sig.key}.rounds.json").read_text()))
        (r0,) = rounds.sizes
        timed = []
        for name in cands:
            c = Candidate.parse(name)
            stem = ModuleId(sig, c.impl).key + (f"+{c.variant}" if c.variant else "")
            val = json.loads((root / "validate" / "cpu" / f"{stem}.json").read_text())
            ben = json.loads((root / "bench" / "cpu" / f"{stem}{'@' + c.mode if c.mode else ''}.json").read_text())
            assert ben.get("mode", "") == c.mode and (c.mode != "local-sync" or ben["threads"] == 1)
            assert cands[name]["median_s"] == ben["median_s"] and cands[name].get("mean_s") == ben["mean_s"]
            if val["status"] == "passed" and ben["status"] == "ok":
                timed.append(name)
                assert ben["median_s"] == pytest.approx(statistics.median(r0.times[name]))
        # every candidate, torch eager and the reference loop in the same rounds
        assert set(r0.times) == set(timed) | {"eager", "reference"} and r0.n >= 12
        assert list(rounds.preference) == preference_order(timed)
        # the selected one is the rounds' choice: the fastest, or the preferred one of a tie
        choice = choose(r0, list(rounds.preference))
        winner = [n for n, r in cands.items() if r["status"] == "selected"]
        assert winner == [choice.winner]
        assert all(r["reason"] and r["kind"] for n, r in cands.items() if n != winner[0])
        assert ("tie" in {r["status"] for r in cands.values()}) == (choice.tie or any(
            v in (Verdict.TIE, Verdict.NOISE) for c, v in choice.verdicts.items() if c != choice.winner))
        chosen = Candidate.parse(winner[0])
        assert te["selected"] == chosen.module and list(te["impls"]) == [chosen.module]
        assert te.get("mode") == (chosen.mode or None)  # absent where it is the target's driver
        stem = ModuleId(sig, chosen.impl).key + (f"+{chosen.variant}" if chosen.variant else "")
        assert te["impls"][chosen.module]["member"] == f"kernels/cpu/{stem}.vmfb"
        assert te["impls"][chosen.module]["benchmark"]["median_s"] == cands[winner[0]]["median_s"]
        assert bundle.device_of(sig.key) == (chosen.mode or "local-task")
        # torch eager preferred exactly where the winner did not beat it beyond 10 % and the noise of the
        # paired rounds, and eager's results, as the loader routes them, passed validation (float32: they do)
        eager = json.loads((root / "bench" / "cpu" / f"{sig.key}-eager.json").read_text())
        assert eager["validation"] == {"status": "passed", "reason": ""}
        call = eager_call(r0, winner[0])
        assert ("prefer_eager" in te) == (not call.kernel_wins) and "eager_rejected" not in te
        assert te["timing"]["eager"]["ratio"] == call.pair.ratio and te["timing"]["rounds"] == r0.n
        if "prefer_eager" in te:
            assert te["prefer_eager"]["eager_s"] == r0.median("eager")
            assert te["prefer_eager"]["kernel_s"] == r0.median(winner[0])
            assert bundle.info()["kernels"][sig.key]["cpu"]["prefer_eager"] is True
    # the chosen kernels run through the loader and agree with torch
    import torch

    x, w, b = torch.randn(3, 33, 100), torch.randn(100), torch.randn(100)
    got = bundle.native_layer_norm(x, [100], w, b, 1e-5)
    want = torch.ops.aten.native_layer_norm(x, [100], w, b, 1e-5)
    for g, r in zip(got, want):
        torch.testing.assert_close(g, r, rtol=1e-4, atol=1e-4)
    gy = torch.randn_like(x)
    dx = bundle.native_layer_norm_backward(gy, x, [100], want[1], want[2], w, b, [True, False, False])[0]
    ref = torch.ops.aten.native_layer_norm_backward(gy, x, [100], want[1], want[2], w, b, [True, False, False])[0]
    torch.testing.assert_close(dx, ref, rtol=1e-4, atol=1e-4)
    rows = {r["key"]: r for r in csv.DictReader((root / "bench.csv").open()) if r["target"] == "cpu"}
    assert list(next(iter(rows.values())))[-5:] == ["selected", "candidates", "torch_calls", "speedup_interval",
                                                    "speedup_verdict"]
    for sig in (FWD, BWD):  # where the loader sends torch tensors, as the index says
        te = index["kernels"][sig.key]["targets"]["cpu"]
        assert rows[sig.key]["torch_calls"] == ("torch eager" if "prefer_eager" in te else "the kernel")


def test_no_bench_explores_nothing(builds):
    root = builds / "nobench" / "cands"
    assert not [p for p in root.rglob("*") if "+" in p.name or "@" in p.name]
    index = _index(builds / "nobench" / "cands-0.1.0.tar.zst")
    for rec in index["kernels"].values():
        te = rec["targets"]["cpu"]
        assert "mode" not in te and "candidates" not in te and set(te["impls"]) <= {"aten", "manual"}
    assert (root / "bench.csv").read_text().splitlines()[0].endswith(",validation,selected")


def test_the_lanes_variant_is_exported_on_its_own_validated_and_timed(builds):
    from boo_build.loader import open_bundle

    root = builds / "bench" / "cands"
    te = _index(builds / "bench" / "cands-0.1.0.tar.zst")["kernels"][WIDE.key]["targets"]["cpu"]
    assert {"manual+lanes", "manual+lanes@local-sync"} <= set(te["candidates"])
    assert "aten+lanes" not in te["candidates"]  # a variant of the manual math only
    stem = ModuleId(WIDE, "manual").key
    rec = json.loads((root / "mlir" / f"{stem}+lanes.export.json").read_text())
    assert rec["status"] == "ok" and rec["variant"] == "lanes"
    lanes, base = ((root / "mlir" / f"{stem}{v}.mlir").read_text() for v in ("+lanes", ""))
    assert lanes != base and "64x8xf32" not in base and "8x8xf32" in lanes  # rows summed as 8 lanes of 8
    assert json.loads((root / "validate" / "cpu" / f"{stem}+lanes.json").read_text())["status"] == "passed"
    for mode in ("", "@local-sync"):
        assert json.loads((root / "bench" / "cpu" / f"{stem}+lanes{mode}.json").read_text())["status"] == "ok"
    # whichever candidate won, the bundle's kernel agrees with torch
    import torch

    b = open_bundle(builds / "bench" / "cands-0.1.0.tar.zst", prefer_eager=False)
    x, w = torch.randn(4, 16, 64), torch.randn(64)
    y, rstd = b.fused_rms_norm(x, [64], w, 1e-6)
    ry, rrstd = torch.ops.aten._fused_rms_norm(x, [64], w, 1e-6)
    torch.testing.assert_close(y, ry, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(rstd, rrstd, rtol=1e-4, atol=1e-4)


def test_one_compared_figure_in_every_view(builds):
    """``info``, ``bench.csv``, the report page and ``diff`` show, for every kernel, the one
    figure the selection compared: the paired rounds' speed-up over torch eager with its
    interval (``compared.VsEager``), not a figure of their own (medians, means)."""
    from boo_build.compared import VsEager

    bundle = builds / "bench" / "cands-0.1.0.tar.zst"
    figures = {key: VsEager.from_timing(k["targets"]["cpu"].get("timing")) for key, k in _index(bundle)["kernels"].items()}
    assert figures and all(v is not None for v in figures.values()), figures
    info = boo_main("info", str(bundle), cwd=builds).stdout
    blocks = dict(zip(*[iter(re.split(r"^    (\S+)\n", info, flags=re.M)[1:])] * 2))
    with open(builds / "bench" / "cands" / "bench.csv", newline="") as f:
        rows = {r["key"]: r for r in csv.DictReader(f) if r["target"] == "cpu"}
    page = (builds / "bench" / "cands" / "report.html").read_text()
    diff = boo_main("diff", str(builds / "nobench" / "cands-0.1.0.tar.zst"), str(bundle), cwd=builds,
                    check=False).stdout
    for key, vs in figures.items():
        assert vs is not None
        shown = vs.figure() if vs.recorded else None
        assert f"speed-up over torch eager: {vs.text()}" in " ".join(blocks[key].split()), (key, blocks[key])
        assert rows[key]["speedup_vs_eager"] == (f"{vs.speedup:.2f}" if shown else ""), rows[key]
        assert rows[key]["speedup_interval"] == (f"{vs.low:.2f}-{vs.high:.2f}, {vs.rounds} rounds" if shown else "")
        assert re.search(rf"<tr class=\"figure\"><td><code>{re.escape(key)}</code></td><td>[^<]*</td><td>"
                         rf"{re.escape(shown or 'not recorded (unconfirmed)')}</td>", page), key
        assert f"{key} on cpu: speed-up over torch eager not timed in paired rounds -> {vs.text()}" in diff, diff
    # no other speed-up figure beside it: info's lines name no "x torch eager" of medians
    assert "x torch eager (" not in info
    # the page counts every module compiled, variants included, as the build's records (and log) do
    compiled = len(list((builds / "bench" / "cands" / "vmfb" / "cpu").glob("*.compile.json")))
    assert f"{compiled} compiles (" in page and compiled > 2 * len(figures)


def test_a_rebuild_keeps_the_previous_decision_unless_beaten_in_every_pass(builds):
    """Last in this module: it benchmarks the ``bench`` build again. A previous decision
    (planted: a timed candidate that did not ship) is first in the new rounds' preference,
    and ships unless another candidate beat it beyond the margin in every pass;
    ``--reselect`` benchmarks every kernel afresh, keeping nothing."""
    import dataclasses

    from boo_build.stages.comparison import replicated
    from boo_build.stages.select import SelectRecord
    from boo_build.stages.selection import MARGIN, Selection

    root = builds / "bench" / "cands"
    sel_path, rounds_path = root / "select" / "cpu" / f"{FWD.key}.json", root / "bench" / "cpu" / f"{FWD.key}.rounds.json"
    before = SelectRecord.read(sel_path)
    old = RoundsRecord.from_json(json.loads(rounds_path.read_text()))
    assert before.decision.timing.machine and old.machine == before.decision.timing.machine
    planted = next(c for c in old.preference if c != before.decision.selection.impl)
    d = before.decision
    fake = dataclasses.replace(d, selection=Selection(planted, True, d.selection.reason, d.selection.rejected))
    sel_path.write_text(json.dumps(dataclasses.replace(before, decision=fake).to_json()))
    rounds_path.unlink()  # this kernel's benchmark runs again (the others are up to date)
    boo("bench", "tiny.toml", "--out", "bench", "-q", cwd=builds)
    new = RoundsRecord.from_json(json.loads(rounds_path.read_text()))
    assert new.previous is not None and new.previous.candidate == planted and new.preference[0] == planted
    after = SelectRecord.read(sel_path).decision
    assert after.timing.previous == planted
    shipped = after.selection.impl
    r0 = new.sizes[0]
    assert shipped == planted or (replicated(r0, shipped, planted, MARGIN) and len(r0.passes) >= 2), (
        shipped, planted, r0.passes)
    # afresh: every kernel timed again, none against a previous decision
    boo("bench", "tiny.toml", "--out", "bench", "-q", "--reselect", cwd=builds)
    for sig in (FWD, BWD, WIDE):
        rec = RoundsRecord.from_json(json.loads((root / "bench" / "cpu" / f"{sig.key}.rounds.json").read_text()))
        assert rec.previous is None and rec.run_id != new.run_id
        assert list(rec.preference) == preference_order(list(rec.preference))
