"""The loader's entry points on inputs with no elements and on infinities:
torch's results (ATen on the CPU), on the kernel path, the eager fallback and
the nn modules."""

from __future__ import annotations

import math

import pytest
import torch
from helpers import F32_EPS, _ln, _rms16, _rms32, assert_close

from boo_build.loader import nn as boo_nn
from boo_build.loader import open_bundle
from boo_build.loader.hal import open_device
from boo_build.loader.invoke import KernelRunner
from boo_build.signature import ModuleId

INF, NAN = math.inf, math.nan


def _rms_backward_ref(*args):
    """torch's _fused_rms_norm_backward (the CPU has no kernel: its decomposition)."""
    from torch._decomp import decomposition_table

    return decomposition_table[torch.ops.aten._fused_rms_norm_backward.default](*args)


def _assert_same(out, ref, what):
    """Same shape, dtype and values (NaN where torch has NaN)."""
    assert out.shape == ref.shape and out.dtype == ref.dtype, (what, out.shape, out.dtype, ref.shape, ref.dtype)
    assert torch.equal(out.isnan(), ref.isnan()), (what, out, ref)
    keep = ~ref.isnan()
    assert torch.equal(out[keep], ref[keep]), (what, out, ref)


# --------------------------------------------------------------- zero-size
# (shape, normalized_shape): no rows; rows of no elements (ATen: mean 0, rstd NaN)
ZERO_SIZE = [((0, 10), (10,)), ((4, 0, 10), (10,)), ((3, 0), (0,))]


@pytest.mark.parametrize("fallback", [None, "eager"])
def test_zero_size_inputs_give_torchs_results_without_a_kernel(built, fallback):
    b = open_bundle(built.path, device="local-task", fallback=fallback)
    for shape, ns in ZERO_SIZE:
        x, gy = torch.randn(shape), torch.randn(shape)
        w, bias = torch.randn(ns), torch.randn(ns)
        ref = torch.ops.aten.native_layer_norm(x, list(ns), w, bias, 1e-5)
        out = b.native_layer_norm(x, ns, w, bias)
        for o, r, name in zip(out, ref, ("out", "mean", "rstd")):
            _assert_same(o, r, f"layer norm {shape} {name}")
        for mask in ([True, True, True], [False, True, False]):
            ref_g = torch.ops.aten.native_layer_norm_backward(gy, x, list(ns), ref[1], ref[2], w, bias, mask)
            got = b.native_layer_norm_backward(gy, x, ns, ref[1], ref[2], w, bias, mask)
            for o, r, want in zip(got, ref_g, mask):
                assert (o is None) == (not want)
                if want:  # weight and bias gradients: zeros of the weight's shape
                    _assert_same(o, r, f"layer norm backward {shape} {mask}")
        ref = torch.ops.aten._fused_rms_norm(x, list(ns), w, None)
        out = b.fused_rms_norm(x, ns, w)
        for o, r, name in zip(out, ref, ("out", "rstd")):
            _assert_same(o, r, f"rms norm {shape} {name}")
        got = b.fused_rms_norm_backward(gy, x, ns, ref[1], w, [True, True])
        for o, r in zip(got, _rms_backward_ref(gy, x, list(ns), ref[1], w, [True, True])):
            _assert_same(o, r, f"rms norm backward {shape}")
    # half precision: rstd in float32 as torch's; layer norm statistics in the
    # stats dtype non-empty calls return (float32; ATen on the CPU keeps bf16)
    xb = torch.randn(0, 37).bfloat16()
    wb = torch.randn(37).bfloat16()
    for o, r in zip(b.fused_rms_norm(xb, [37], wb, 1e-5), torch.ops.aten._fused_rms_norm(xb, [37], wb, 1e-5)):
        _assert_same(o, r, "bf16 rms norm")
    y, mean, rstd = b.native_layer_norm(xb, [37], wb, wb)
    assert y.dtype == torch.bfloat16 and y.shape == (0, 37)
    assert mean.dtype == rstd.dtype == torch.float32 and mean.shape == rstd.shape == (0, 1)
    gx, gw, gb = b.native_layer_norm_backward(xb, xb, [37], mean, rstd, wb, wb)
    assert gx.shape == (0, 37) and gw.dtype == torch.bfloat16 and torch.equal(gw, torch.zeros(37).bfloat16())
    assert b.stats() == {}  # no kernel ran, no fallback counted


def test_zero_size_batch_through_nn_modules(built):
    b = open_bundle(built.path, device="local-task")
    for ours, theirs in ((boo_nn.LayerNorm(10, bundle=b), torch.nn.LayerNorm(10)),
                         (boo_nn.RMSNorm(10, bundle=b), torch.nn.RMSNorm(10))):
        theirs.load_state_dict(ours.state_dict())
        for m in (ours, theirs):
            x = torch.randn(0, 10, requires_grad=True)
            y = m(x)
            assert y.shape == (0, 10) and y.requires_grad
            y.sum().backward()
            assert x.grad.shape == (0, 10)
        for p, q in zip(ours.parameters(), theirs.parameters()):
            assert torch.equal(p.grad, q.grad) and torch.equal(p.grad, torch.zeros(10))
    assert b.stats() == {}


# --------------------------------------------------------------- infinities
def _special(out, ref, dtype, what):
    """NaN and infinities where torch has them, finite values within tolerance."""
    assert out.shape == ref.shape and out.dtype == ref.dtype, what
    o, r = out.double(), ref.double()
    assert torch.equal(o.isnan(), r.isnan()), f"{what}: NaN at {o.isnan().nonzero().tolist()}, torch's at " \
                                              f"{r.isnan().nonzero().tolist()}"
    assert torch.equal(o.isinf(), r.isinf()) and torch.equal(o[o.isinf()], r[r.isinf()]), what
    fin = r.isfinite()
    if fin.any():
        assert_close(o[fin], r[fin], dtype, what)


def _inf_input(shape):
    x = torch.randn(shape, generator=torch.Generator().manual_seed(4))
    x[0, 0, 3] = INF
    x[1, 2, 0] = -INF
    x[2, 1, 2], x[2, 1, 5] = INF, -INF
    x[3, 3, 4] = NAN
    return x


def test_infinite_inputs_match_torch(built):
    """Rows holding an infinity: mean NaN (ATen's Welford mean; a plain sum
    gives +-inf), rstd and out NaN; backward as torch's; both implementations."""
    b = open_bundle(built.path, device="local-task")
    g = torch.Generator().manual_seed(5)
    x = _inf_input((4, 6, 10))
    w, bias, gy = torch.randn(10, generator=g), torch.randn(10, generator=g), torch.randn(4, 6, 10, generator=g)
    ref = torch.ops.aten.native_layer_norm(x, [10], w, bias, 1e-5)
    assert ref[1][0, 0].isnan() and ref[1][1, 2].isnan()  # torch's mean of a row with an infinity
    sig = _ln(1)
    aten = KernelRunner(open_device("local-task"), built.vmfb[(sig.key, "aten")].read_bytes(),
                        ModuleId(sig, "aten").func_name)
    for impl, out in (("manual (selected)", b.native_layer_norm(x, [10], w, bias)), ("aten", aten(x, w, bias))):
        for o, r, name in zip(out, ref, ("out", "mean", "rstd")):
            _special(o, r, "float32", f"layer norm {impl} {name}")
    ref_g = torch.ops.aten.native_layer_norm_backward(gy, x, [10], ref[1], ref[2], w, bias, [True, True, True])
    got = b.native_layer_norm_backward(gy, x, [10], ref[1], ref[2], w, bias, [True, True, True])
    for o, r, name in zip(got, ref_g, ("input", "weight", "bias")):
        _special(o, r, "float32", f"layer norm grad {name}")

    ref = torch.ops.aten._fused_rms_norm(x, [10], w, F32_EPS)
    out = b.fused_rms_norm(x, [10], w)
    for o, r, name in zip(out, ref, ("out", "rstd")):
        _special(o, r, "float32", f"rms norm {name}")
    ref_g = _rms_backward_ref(gy, x, [10], ref[1], w, [True, True])
    for o, r, name in zip(b.fused_rms_norm_backward(gy, x, [10], out[1], w, eps=F32_EPS), ref_g, ("input", "weight")):
        _special(o, r, "float32", f"rms norm grad {name}")
    assert {k: v["hits"] for k, v in b.stats().items()} == {
        _ln(1).key: 1, _ln(14).key: 1, _rms32(1).key: 1, _rms32(6).key: 1}


def test_infinite_bf16_rms_norm_matches_torch(built):
    b = open_bundle(built.path, device="local-task")
    x = torch.randn(3, 37, generator=torch.Generator().manual_seed(6)).bfloat16()
    x[0, 5], x[1, 36], x[2, 0] = INF, -INF, NAN
    w = torch.randn(37).bfloat16()
    ref = torch.ops.aten._fused_rms_norm(x, [37], w, 1e-5)
    for o, r, name in zip(b.fused_rms_norm(x, [37], w, 1e-5), ref, ("out", "rstd")):
        _special(o, r, "bfloat16", f"bf16 rms norm {name}")
    assert b.stats() == {_rms16(1).key: {"hits": 1, "misses": 0, "eager": 0}}
