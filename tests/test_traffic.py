"""The traffic model (stages/traffic.py) on kernels whose dispatches are
counted by hand from iree-compile's ``executable-sources`` output (sm_80)."""

from __future__ import annotations

import csv
import json
import subprocess

import pytest
from helpers import BIN, env

from boo_build.loader.archive import read_archive
from boo_build.signature import KernelSignature, ModuleId
from boo_build.stages.export import export_mlir
from boo_build.stages.traffic import Traffic, TrafficError, executable_sources, kernel_traffic, minimal_bytes, model
from boo_build.targets import catalogue

pytestmark = pytest.mark.build  # every test runs iree-compile for the model

SM80 = catalogue()["sm_80"].flags
ROWS, W = 1024, 768
X = ROWS * W * 4  # one float32 8x128x768 tensor: 3 MiB
ROW = ROWS * 4  # one float32 statistic per row
COL = W * 4  # a float32 weight, bias or column sum


def _ln(mask, shape=(8, 128, W)):
    return KernelSignature("layer_norm", shape, (W,), "float32", mask)


def test_minimal_bytes_is_each_input_and_output_once():
    assert minimal_bytes(_ln(1)) == X + 2 * COL + X + 2 * ROW  # x, w, b in; y, mean, rstd out
    assert minimal_bytes(_ln(14)) == 2 * X + 2 * ROW + COL + X + 2 * COL  # gy, x, mean, rstd, w in; dx, dw, db out


def test_forward_is_one_dispatch_of_three_passes_over_x():
    """aten's forward at 8x128x768 (static: the single-dispatch preprocessing): one
    dispatch of two-pass variance; x is read by three passes: the mean's reduction,
    the variance's reduction of x - mean, the normalization of x - mean (the
    elementwise x - mean is fused into both); w and b once; y, mean and rstd written once."""
    t = kernel_traffic(export_mlir(ModuleId(_ln(1), "aten")), SM80, _ln(1))
    assert t.dispatches == 1
    assert t.read_bytes == 3 * X + 2 * COL
    assert t.write_bytes == X + 2 * ROW
    assert t.minimal_bytes == X + 2 * COL + X + 2 * ROW
    assert t.ratio == pytest.approx((4 * X + 2 * COL + 2 * ROW) / t.minimal_bytes)
    assert Traffic.from_json(t.to_json()) == t


def test_combined_backward_dispatch_by_dispatch():
    """aten's mask-14 backward (sm_80 at O3): four dispatches, each counted by hand. A
    value that is both stored and consumed in its dispatch costs its inputs one pass per use."""
    t = kernel_traffic(export_mlir(ModuleId(_ln(14), "aten")), SM80, _ln(14))
    assert t.dispatches == 4
    per = [(d.read_bytes, d.write_bytes) for d in t.per_dispatch]
    assert per == [
        # xhat = (x - mean) * rstd, stored and reduced with gy (grad_weight): x, mean, rstd twice, gy once
        (2 * X + 2 * 2 * ROW + X, COL + X),
        # g = gy * w, stored and reduced with xhat (a row sum): gy and w twice, xhat once
        (2 * X + 2 * COL + X, ROW + X),
        # the input gradient: g read by a row sum and by dx (two passes), xhat once
        (2 * X + ROW + X + ROW, X),
        (X, COL),  # grad_bias: column sums of gy
    ]
    assert t.modelled_bytes == sum(r + w for r, w in per)
    assert t.ratio > 4  # about 4.3x the minimal traffic


def test_split_reduction_loops_count_every_iteration():
    """gfx942 splits the bias gradient's column sum (``--iree-dispatch-creation-enable-split-reduction``):
    a loop of 32 iterations, each loading 32 rows of gy, writes 32 partial sums per column,
    which a second dispatch adds up. Every iteration's rows are read: gy once in all."""
    gfx942 = catalogue()["gfx942"].flags
    t = kernel_traffic(export_mlir(ModuleId(_ln(8), "aten")), gfx942, _ln(8))
    assert [(d.read_bytes, d.write_bytes) for d in t.per_dispatch] == [(X, 32 * COL), (32 * COL, COL)]
    text = executable_sources(export_mlir(ModuleId(_ln(8), "aten")), gfx942)
    assert "scf.forall" in text and "split_reduction_mapping" in text  # the loop the count is about


def test_dynamic_kernel_is_evaluated_at_a_shape_it_serves():
    """A dynamic kernel's ``?`` dims take the call's sizes: twice the rows, about twice the bytes."""
    dyn = KernelSignature.parse("layer_norm-f32-BATCHxSEQx768-n768-wb-m1")
    text = executable_sources(export_mlir(ModuleId(dyn, "aten")), SM80)
    small, large = (model(text, dyn.bind(s), dyn) for s in ((4, 128, W), (8, 128, W)))
    assert small.shape == (4, 128, W) and large.shape == (8, 128, W)
    assert large.minimal_bytes == 2 * small.minimal_bytes - 2 * COL  # w and b do not grow
    assert large.dispatches == small.dispatches >= 1
    assert large.modelled_bytes > 1.9 * small.modelled_bytes


def test_a_module_iree_compile_refuses_names_the_phase():
    with pytest.raises(TrafficError, match="executable-sources"):
        executable_sources("this is not MLIR", SM80)


def test_a_build_models_gpu_kernels_and_ships_the_least_traffic_as_default(tmp_path):
    """A --no-bench build for gfx942 and gfx950 (no device): every candidate's traffic record
    (the implementations, the fused export variant alone and without split reduction), made
    before anything compiles, once for both targets (their flags differ only in the
    architecture; gfx950's record says it was modelled on gfx942); only the best-modelled variant compiles, the others'
    records say why not; the bundle ships the implementations and that variant, the
    default is the least modelled traffic and says it is modelled, in the bundle,
    bench.csv, ``boo-build info`` and the page. ``--no-traffic`` builds what it did before
    the model: the implementations, in the default order."""
    (tmp_path / "m.toml").write_text(
        '[bundle]\nname = "tm"\nversion = "0.1.0"\ntargets = ["gfx942", "gfx950"]\n\n'
        '[[kernels]]\nop = "layer_norm"\ninput_shape = [64, 256]\nmasks = [14]\n')
    proc = subprocess.run([str(BIN / "boo-build"), "build", "m.toml", "--out", "out", "--no-bench", "-q"],
                          cwd=tmp_path, env=env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "traffic  built 8" in proc.stdout
    sig = KernelSignature("layer_norm", (64, 256), (256,), "float32", 14)
    models = {}
    for name in ("aten", "manual", "manual+fused", "manual+fused.nosplit"):
        rec = json.loads((tmp_path / f"out/tm/traffic/gfx942/{sig.key}-{name}.json").read_text())
        assert rec["status"] == "ok" and rec["target"] == "gfx942" and "modelled_on" not in rec
        models[name] = Traffic.from_json(rec["traffic"])
        shared = json.loads((tmp_path / f"out/tm/traffic/gfx950/{sig.key}-{name}.json").read_text())
        assert (shared["target"], shared["modelled_on"]) == ("gfx950", "gfx942")
        assert shared["traffic"] == rec["traffic"]
        assert models[name].minimal_bytes == minimal_bytes(sig) and models[name].dispatches >= 1
    order = ["aten", "manual"]  # ties: fewer dispatches, then the implementations first
    best = min(models, key=lambda i: (models[i].modelled_bytes, models[i].dispatches,
                                      order.index(i) if i in order else 2, i))
    assert best.startswith("manual+fused")  # the variant cuts the traffic: the reason it exists
    assert models[best].modelled_bytes < min(models[i].modelled_bytes for i in order)
    for name in models:
        comp = json.loads((tmp_path / f"out/tm/vmfb/gfx942/{sig.key}-{name}.compile.json").read_text())
        if name in order or name == best:
            assert comp["status"] in ("ok", "failed"), comp  # the implementations always compile
        else:
            assert comp["status"] == "unavailable"
            assert comp["reason"].startswith(f"least modelled traffic is {best}'s") and "not compiled" in comp["reason"]
    te = read_archive(tmp_path / "out/tm-0.1.0.tar.zst").bundle_index.kernels[sig.key].targets["gfx942"]
    assert te.selected == best and te.reason.startswith("least modelled traffic, until measured")
    assert "not run: no device" in te.reason  # not validated, and it says so
    assert te.impls is not None and set(te.impls) == {"aten", "manual", best}  # they ship until measured
    assert all(Traffic.from_json(te.impls[i].traffic) == models[i] for i in te.impls)
    loser = next(n for n in models if n != best and "+" in n)
    assert te.rejected[loser].startswith(f"least modelled traffic is {best}'s")
    gfx950 = read_archive(tmp_path / "out/tm-0.1.0.tar.zst").bundle_index.kernels[sig.key].targets["gfx950"]
    assert gfx950.selected == best and gfx950.impls is not None and set(gfx950.impls) == set(te.impls)
    row = next(r for r in csv.DictReader((tmp_path / "out/tm/bench.csv").open()) if r["target"] == "gfx942")
    assert row["selected"] == f"{best} (modelled)"
    assert row["traffic_modelled"].startswith(f"aten {models['aten'].dispatches} dispatch")
    assert f"{best} {models[best].dispatches} dispatches {models[best].ratio:.2f}x" in row["traffic_modelled"]
    info = subprocess.run([str(BIN / "boo-build"), "info", "out/tm-0.1.0.tar.zst"], cwd=tmp_path, env=env(),
                          capture_output=True, text=True, timeout=120).stdout
    assert f"traffic per call (modelled, not measured): aten {models['aten'].dispatches} dispatch" in info
    assert f"{best} {models[best].dispatches} dispatches {models[best].ratio:.2f}x minimal" in info
    page = (tmp_path / "out/tm/report.html").read_text()
    assert 'id="traffic"' in page and f"{models[best].ratio:.2f}x minimal" in page

    proc = subprocess.run([str(BIN / "boo-build"), "build", "m.toml", "--out", "plain", "--no-bench", "-q",
                           "--no-traffic"], cwd=tmp_path, env=env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not (tmp_path / "plain/tm/traffic").exists()
    te = read_archive(tmp_path / "plain/tm-0.1.0.tar.zst").bundle_index.kernels[sig.key].targets["gfx942"]
    assert te.impls is not None and set(te.impls) <= {"aten", "manual"}
    assert te.reason.startswith("default until measured")


def test_gpus_whose_flags_differ_only_in_the_architecture_get_one_model():
    """Why the build models gfx942 and copies the record to gfx90a and gfx950 (and gfx1100 to
    gfx1201): their flags are the same but for the architecture, and dispatch formation
    comes before code generation, so the model is the same, dispatch by dispatch."""
    from boo_build.targets import arch_free

    cat = catalogue()
    mlir = export_mlir(ModuleId(_ln(14), "manual"))
    for family in (("gfx942", "gfx90a", "gfx950"), ("gfx1100", "gfx1201")):
        assert len({arch_free(cat[t], cat[t].flags) for t in family}) == 1
        models = {t: kernel_traffic(mlir, cat[t].flags, _ln(14)) for t in family}
        assert len(set(models.values())) == 1, models
    # different flags, a different key: gfx942 splits reductions, gfx1100 does not
    assert arch_free(cat["gfx942"], cat["gfx942"].flags) != arch_free(cat["gfx1100"], cat["gfx1100"].flags)
    assert arch_free(cat["sm_80"], cat["sm_80"].flags) != arch_free(cat["gfx1100"], cat["gfx1100"].flags)


def test_fused_residual_kernels_add_little_to_the_norms():
    """The fused residual form (``residual``): the static forward is one dispatch writing y, h
    and the statistics once; the fused variant's mask-14 backward has the plain one's
    dispatches, grad_h its only extra read (the add fused into the row pass)."""
    fwd = _ln(1).replace(residual=True)
    t = kernel_traffic(export_mlir(ModuleId(fwd, "aten")), SM80, fwd)
    assert t.dispatches == 1 and t.write_bytes == 2 * X + 2 * ROW
    assert t.minimal_bytes == 2 * X + 2 * COL + 2 * X + 2 * ROW  # x, residual, w, b in; y, h, mean, rstd out
    bwd = _ln(14).replace(residual=True)
    fused, plain = (kernel_traffic(export_mlir(ModuleId(s, "manual"), "fused"), SM80, s) for s in (bwd, _ln(14)))
    assert fused.dispatches == plain.dispatches
    assert fused.read_bytes == plain.read_bytes + X and fused.write_bytes == plain.write_bytes
