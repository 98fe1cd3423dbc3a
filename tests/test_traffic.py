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
    """aten's mask-14 backward: six dispatches, each counted by hand."""
    t = kernel_traffic(export_mlir(ModuleId(_ln(14), "aten")), SM80, _ln(14))
    assert t.dispatches == 6
    per = [(d.read_bytes, d.write_bytes) for d in t.per_dispatch]
    assert per == [
        (X + 2 * ROW, X),  # xhat = (x - mean) * rstd
        (X + COL, X),  # gy * w
        (2 * X, ROW),  # row sums of gy * w * xhat
        (X + ROW + X + ROW + X, X),  # the input gradient: gy * w is read by a row sum and by dx (two passes)
        (2 * X, COL),  # grad_weight: column sums of gy * xhat
        (X, COL),  # grad_bias: column sums of gy
    ]
    assert t.modelled_bytes == sum(r + w for r, w in per)
    assert t.ratio > 4  # about 4.3x the minimal traffic


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
    """A --no-bench build for gfx942 (no device): every module's traffic record, in the
    bundle's implementations, bench.csv, ``boo-build info`` and the page; the default
    is the implementation with the least modelled bytes, and says it is modelled."""
    (tmp_path / "m.toml").write_text(
        '[bundle]\nname = "tm"\nversion = "0.1.0"\ntargets = ["gfx942"]\n\n'
        '[[kernels]]\nop = "layer_norm"\ninput_shape = [64, 256]\nmasks = [14]\n')
    proc = subprocess.run([str(BIN / "boo-build"), "build", "m.toml", "--out", "out", "--no-bench", "-q"],
                          cwd=tmp_path, env=env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "traffic  built 2" in proc.stdout
    sig = KernelSignature("layer_norm", (64, 256), (256,), "float32", 14)
    models = {}
    for impl in ("aten", "manual"):
        rec = json.loads((tmp_path / f"out/tm/traffic/gfx942/{sig.key}-{impl}.json").read_text())
        assert rec["status"] == "ok" and rec["target"] == "gfx942"
        models[impl] = Traffic.from_json(rec["traffic"])
        assert models[impl].minimal_bytes == minimal_bytes(sig) and models[impl].dispatches >= 1
    best = min(models, key=lambda i: (models[i].modelled_bytes, models[i].dispatches))
    te = read_archive(tmp_path / "out/tm-0.1.0.tar.zst").bundle_index.kernels[sig.key].targets["gfx942"]
    assert te.selected == best and te.reason.startswith("least modelled traffic, until measured")
    assert "not run: no device" in te.reason  # not validated, and it says so
    assert te.impls is not None and set(te.impls) == {"aten", "manual"}  # both ship until measured
    assert all(Traffic.from_json(te.impls[i].traffic) == models[i] for i in models)
    (row,) = csv.DictReader((tmp_path / "out/tm/bench.csv").open())
    assert row["selected"] == f"{best} (modelled)"
    assert row["traffic_modelled"].startswith(f"aten {models['aten'].dispatches} dispatch")
    info = subprocess.run([str(BIN / "boo-build"), "info", "out/tm-0.1.0.tar.zst"], cwd=tmp_path, env=env(),
                          capture_output=True, text=True, timeout=120).stdout
    assert f"traffic per call (modelled, not measured): aten {models['aten'].dispatches} dispatch" in info
    page = (tmp_path / "out/tm/report.html").read_text()
    assert 'id="traffic"' in page and f"{models[best].ratio:.2f}x minimal" in page
