"""GPU candidates: the ``fused`` export variant of the manual backwards and the
``nosplit`` compile variant, their names, and the traffic model's gate on what
compiles. The fused variant targets GPUs, but its math is checked here: exported,
compiled for the CPU and validated against float64 like every kernel."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import pytest
from helpers import CPU_TARGET, boo_main, ln, rms

from boo_build.candidates import (
    NOSPLIT,
    SPLIT_REDUCTION,
    Candidate,
    applies,
    candidates,
    export_variant,
    variant_flags,
    variants,
)
from boo_build.loader.archive import read_archive
from boo_build.loader.devices import discover
from boo_build.ops.base import FUSED
from boo_build.signature import KernelSignature, ModuleId
from boo_build.stages.compile import compile_mlir
from boo_build.stages.export import export_mlir
from boo_build.stages.selection import modelled_gate
from boo_build.stages.traffic import Traffic
from boo_build.stages.validate import validate_kernel
from boo_build.targets import catalogue

pytestmark = pytest.mark.build  # every test compiles

CAT = catalogue()

FUSED_KERNELS = [
    *(ln("float32", m) for m in (2, 4, 6, 8, 10, 12, 14)),
    ln("bfloat16", 14), ln("float16", 14),
    KernelSignature("layer_norm", (4, 6, 10), (10,), "float32", 2, affine=False, bias=False),
    KernelSignature("layer_norm", (4, 6, 10), (10,), "float32", 6, bias=False),
    KernelSignature("layer_norm", (4, 3, 5), (3, 5), "float32", 14),  # two normalized dims
    KernelSignature("layer_norm", ("batch", 6, 10), (10,), "float32", 14),  # dynamic rows
    *(KernelSignature("layer_norm", ("batch", 6, 10), (10,), dt, 1) for dt in ("float32", "bfloat16")),
    KernelSignature("layer_norm", ("batch", 6, 10), (10,), "float32", 1, affine=False, bias=False),
    *(rms("float32", m) for m in (2, 4, 6)),
    rms("bfloat16", 6),
    KernelSignature("rms_norm", (3, 37), (37,), "float32", 2, eps=1e-6, affine=False, bias=False),
]


def test_fused_backward_validates_on_the_cpu():
    """Every mask and affine form of both ops, half precision, two normalized dims and
    dynamic rows, and the dynamic layer-norm forward: the fused variant's outputs match
    float64 within the tolerances, at plain inputs and at a mean offset, like the baseline's."""
    cpu = discover(gpus=False)[0]
    mids = [ModuleId(s, "manual") for s in FUSED_KERNELS]
    assert all(applies(FUSED, m) for m in mids)
    texts = {mid: export_mlir(mid, FUSED) for mid in mids}
    assert all(texts[mid] != export_mlir(mid) for mid in mids[:2])  # other torch code than the baseline's
    with ThreadPoolExecutor(max_workers=2) as pool:
        compiled = {mid: pool.submit(compile_mlir, texts[mid], CPU_TARGET.flags) for mid in mids}
        for mid, fut in compiled.items():
            res = fut.result()
            assert res.ok, f"{mid.key}: {res.error}"
            shapes = [(2, 6, 10), (5, 6, 10)] if mid.signature.is_dynamic else None
            val = validate_kernel(res.vmfb, mid, CPU_TARGET, cpu, shapes=shapes)
            assert val.passed, f"{mid.key}: {val.reason}"


def test_variant_names_and_where_they_apply():
    gfx942, gfx1100, sm80, cpu = CAT["gfx942"], CAT["gfx1100"], CAT["sm_80"], CAT["cpu"]
    assert variants(gfx942) == (FUSED, f"{FUSED}.{NOSPLIT}")  # it splits reductions
    assert variants(gfx1100) == variants(sm80) == (FUSED,)
    assert FUSED not in variants(cpu)
    c = Candidate.parse("manual+fused.nosplit")
    assert (c.impl, c.variant, c.module, c.key) == ("manual", "fused.nosplit", "manual+fused.nosplit",
                                                    "manual+fused.nosplit")
    with pytest.raises(ValueError, match="unknown variant 'fused.bogus'"):
        Candidate.parse("manual+fused.bogus")
    assert export_variant("fused.nosplit") == export_variant(FUSED) == FUSED and export_variant(NOSPLIT) == ""
    assert SPLIT_REDUCTION in gfx942.flags
    assert SPLIT_REDUCTION not in variant_flags("fused.nosplit", gfx942.flags)
    assert variant_flags(FUSED, gfx942.flags) == gfx942.flags
    bwd, fwd = ModuleId(ln("float32", 14), "manual"), ModuleId(ln("float32", 1), "manual")
    assert applies("fused.nosplit", bwd) and not applies(NOSPLIT, fwd)
    # forwards: a static one is already one dispatch (single-dispatch preprocessing); a dynamic
    # layer norm's is two without the fused form, a dynamic RMS norm's one
    dyn = KernelSignature("layer_norm", ("batch", 6, 10), (10,), "float32", 1)
    assert not applies(FUSED, fwd) and applies(FUSED, ModuleId(dyn, "manual"))
    assert not applies(FUSED, ModuleId(rms("float32", 1).replace(input_shape=("batch", 37)), "manual"))
    assert not applies(FUSED, ModuleId(ln("float32", 14), "aten")) and applies(NOSPLIT, ModuleId(ln("float32", 14), "aten"))
    gn = KernelSignature("group_norm", (2, 8, 4, 4), (), "float32", 14, groups=2)
    assert not applies(FUSED, ModuleId(gn, "manual"))  # group norm has no fused backward
    names = [c.key for c in candidates(("aten", "manual"), gfx942, lambda i: ModuleId(bwd.signature, i), False,
                                       model=True)]
    assert names == ["aten", "manual", "manual+fused", "manual+fused.nosplit"]
    assert [c.key for c in candidates(("aten", "manual"), gfx942, lambda i: ModuleId(bwd.signature, i),
                                      False)] == ["aten", "manual"]


def _t(modelled: int, dispatches: int) -> Traffic:
    return Traffic(dispatches, modelled, 0, 100, (1,))


def test_the_model_gates_which_variant_compiles():
    models = {"aten": _t(400, 4), "manual": _t(300, 9), "manual+fused": _t(250, 5), "manual+fused.nosplit": _t(250, 3),
              "manual+nosplit": None}
    assert modelled_gate("manual+fused.nosplit", models) is None  # least bytes, fewer dispatches
    why = modelled_gate("manual+fused", models)
    assert why is not None and why.startswith("least modelled traffic is manual+fused.nosplit's") and \
        why.endswith("not compiled")
    assert modelled_gate("manual+nosplit", models) == "traffic not modelled: not compiled"
    # a variant that only ties with an implementation does not compile: the implementation ships
    tie = {"aten": _t(250, 3), "manual+fused": _t(250, 3)}
    assert modelled_gate("manual+fused", tie) is not None


def test_where_every_implementation_failed_the_gate_ranks_the_variants_alone(tmp_path):
    """A variant the model ranks below an implementation is not compiled (the
    implementation ships); but where every implementation failed in iree-compile, a
    better model of theirs is no reason to leave it untried: it compiles, and the
    kernel is not left to its fallbacks."""
    from boo_build.build.actions import compile_action
    from boo_build.build.jobs import CompileJob
    from boo_build.files import write_json
    from boo_build.records import CompileRecord, ExportRecord
    from boo_build.stages.traffic import TrafficRecord

    mid = ModuleId(ln("float32", 14), "manual")
    mlir = tmp_path / "m.mlir"  # the variant's module: any that compiles (the gate is what is tested)
    mlir.write_text("func.func @f(%a: tensor<4xf32>) -> tensor<4xf32> { return %a : tensor<4xf32> }\n")
    write_json(tmp_path / "m.export.json", ExportRecord(mid.key, "ok", "", mid.func_name, FUSED).to_json())
    gate = []
    for name, model in (("aten", _t(200, 3)), ("manual", _t(300, 4)), ("manual+fused", _t(250, 3))):
        path = tmp_path / f"{name}.traffic.json"
        write_json(path, TrafficRecord(name, "cpu", model).to_json())
        gate.append((name, str(path)))
    bases = []
    for impl in ("aten", "manual"):
        bases.append(tmp_path / f"{impl}.compile.json")
        write_json(bases[-1], CompileRecord(ModuleId(mid.signature, impl).key, "cpu", (), "failed",
                                            error="error: failed to distribute").to_json())
    job = CompileJob(mid.key, "cpu", CPU_TARGET.flags, str(mlir), str(tmp_path / "m.export.json"),
                     str(tmp_path / "v.vmfb"), str(tmp_path / "v.compile.json"), 60.0, "run", None, FUSED,
                     tuple(gate), tuple(str(b) for b in bases))
    assert compile_action(job) == {"status": "ok"} and (tmp_path / "v.vmfb").stat().st_size > 0
    # one implementation compiled: the model decides, as before
    write_json(bases[0], CompileRecord(ModuleId(mid.signature, "aten").key, "cpu", (), "ok").to_json())
    assert compile_action(job) == {"status": "unavailable"} and not (tmp_path / "v.vmfb").exists()
    rec = json.loads((tmp_path / "v.compile.json").read_text())
    assert rec["reason"].startswith("least modelled traffic is aten's")


def test_fused_variants_cut_what_the_model_counts():
    """What the variants are for, on iree-compile's own output: the dynamic layer-norm
    forward in one dispatch instead of two (the same passes over x); the mask-14
    backward with no intermediate written and read back: fewer bytes than either
    implementation, on a target that splits reductions (gfx942, without the split)
    and on sm_80."""
    from boo_build.stages.traffic import kernel_traffic

    dyn = KernelSignature("layer_norm", ("batch", "seq", 768), (768,), "float32", 1)
    at = dyn.bind((8, 128, 768))
    sm80, gfx942 = CAT["sm_80"].flags, CAT["gfx942"].flags
    base = kernel_traffic(export_mlir(ModuleId(dyn, "manual")), sm80, at, dyn)
    fused = kernel_traffic(export_mlir(ModuleId(dyn, "manual"), FUSED), sm80, at, dyn)
    assert (base.dispatches, fused.dispatches) == (2, 1)
    assert fused.modelled_bytes <= base.modelled_bytes

    bwd = ln("float32", 14, shape=(8, 128, 768), norm=(768,))
    mid = ModuleId(bwd, "manual")
    for flags, variant in ((gfx942, "fused.nosplit"), (sm80, FUSED)):
        impls = [kernel_traffic(export_mlir(ModuleId(bwd, i)), flags, bwd) for i in ("aten", "manual")]
        best = kernel_traffic(export_mlir(mid, FUSED), variant_flags(variant, flags), bwd)
        assert best.modelled_bytes < min(t.modelled_bytes for t in impls), (variant, best, impls)
        # 8 full tensors for a minimum of 3: grad_y's row sum (1), the row pass reading x and grad_y
        # twice (4) and writing the input gradient (1), the column sums reading both once (2)
        assert best.ratio == pytest.approx(8 / 3, abs=0.05)


ALL_VARIANTS = """\
[bundle]
name = "allv"
version = "0.1.0"
targets = ["gfx942"]

[[kernels]]
op = "layer_norm"
input_shape = [64, 256]
masks = [14]
impls = ["manual"]
"""


def test_all_variants_ships_every_ranked_variant_and_switches_back(tmp_path):
    """``--all-variants`` on a GPU target without its device (gfx942: the model ranks fused and
    fused.nosplit): both variants compile and ship beside the implementation, for ``measure``
    to time on the device; the least modelled traffic is still the default. Built again in the
    same folder without the option: only the variants' compile tasks run again, the one the
    model ranks below the other is not compiled and leaves the folder and the bundle (nothing
    stale); the selection is the same."""
    (tmp_path / "m.toml").write_text(ALL_VARIANTS)
    sig = KernelSignature("layer_norm", (64, 256), (256,), "float32", 14)
    root = tmp_path / "out" / "allv"
    names = ("manual", "manual+fused", "manual+fused.nosplit")

    def records():
        return {n: json.loads((root / f"vmfb/gfx942/{sig.key}-{n}.compile.json").read_text()) for n in names}

    def entry():
        return read_archive(tmp_path / "out/allv-0.1.0.tar.zst").bundle_index.kernels[sig.key].targets["gfx942"]

    build = ("build", "m.toml", "--out", "out", "--no-validate", "-q")
    boo_main(*build, "--all-variants", cwd=tmp_path)
    every = records()
    assert all(r["status"] == "ok" for r in every.values()), every
    te = entry()
    assert te.impls is not None and set(te.impls) == set(names) and not te.rejected, te
    models = {n: Traffic.from_json(te.impls[n].traffic) for n in names}
    best = min(names, key=lambda n: (models[n].modelled_bytes, models[n].dispatches, n != "manual", n))
    assert te.selected == best and te.reason.startswith("least modelled traffic, until measured"), te.reason
    assert best != "manual"  # the variants cut the traffic (else neither would compile without the option)

    boo_main(*build, cwd=tmp_path)
    again = records()
    loser = next(n for n in names[1:] if n != best)
    assert again["manual"]["run_id"] == every["manual"]["run_id"]  # the implementation: up to date
    assert again[best]["status"] == "ok" and again[best]["run_id"] != every[best]["run_id"]
    assert again[loser]["status"] == "unavailable" and again[loser]["reason"].startswith(
        f"least modelled traffic is {best}'s") and again[loser]["reason"].endswith("not compiled")
    assert not (root / f"vmfb/gfx942/{sig.key}-{loser}.vmfb").exists()
    te = entry()
    assert te.selected == best and te.impls is not None and set(te.impls) == {"manual", best}
    assert te.rejected is not None and "not compiled" in te.rejected[loser].text


def test_all_variants_needs_the_traffic_model(tmp_path):
    (tmp_path / "m.toml").write_text(ALL_VARIANTS)
    proc = boo_main("build", "m.toml", "--out", "out", "--all-variants", "--no-traffic", cwd=tmp_path, check=False)
    assert proc.returncode != 0 and "--all-variants ships the variants the traffic model ranks" in proc.stderr, proc
    assert not (tmp_path / "out").exists()
