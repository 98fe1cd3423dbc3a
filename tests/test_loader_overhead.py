"""The loader's leaner hot path (checks memoized per backward call, statistics
laid out per kernel, the runner's inline path) changes no result and no
refusal; timings are benchmarks/cpu_vs_eager.py's business, not asserted here."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import _ln, _rms16

from boo_build.loader import open_bundle
from boo_build.loader.invoke import KernelError


@pytest.fixture()
def fresh(built):
    return open_bundle(built.path, device="local-task")


def _ref_backward(gy, x, w, b, mask):
    _, mean, rstd = torch.ops.aten.native_layer_norm(x, [10], w, b, 1e-5)
    return torch.ops.aten.native_layer_norm_backward(gy, x, [10], mean, rstd, w, b, mask)


@pytest.mark.parametrize("mask", [(True, True, True), (True, True, False), (True, False, False)])
def test_backward_results_stay_right_across_memo_hits_and_layouts(fresh, mask):
    g = torch.Generator().manual_seed(3)
    x, gy = torch.randn(4, 6, 10, generator=g), torch.randn(4, 6, 10, generator=g)
    w, b = torch.randn(10, generator=g), torch.randn(10, generator=g)
    _, mean, rstd = fresh.native_layer_norm(x, (10,), w, b)
    ref = _ref_backward(gy, x, w, b, list(mask))
    layouts = [(mean, rstd), (mean.reshape(-1), rstd.reshape(-1)), (mean.reshape(4, 6), rstd.reshape(4, 6))]
    for _ in range(2):  # the second round hits every memo
        for m, r in layouts:
            got = fresh.native_layer_norm_backward(gy, x, (10,), m, r, w, b, mask)
            for o, e, want in zip(got, ref, mask):
                assert (o is None) == (not want)
                if want:
                    torch.testing.assert_close(o, e, atol=1e-4, rtol=1e-4)
        # same shapes, other memory layouts: made contiguous, same results
        gt = torch.empty(10, 6, 4).transpose(0, 2).copy_(gy)
        assert not gt.is_contiguous()
        got = fresh.native_layer_norm_backward(gt, x, (10,), mean, rstd, w, b, mask)
        torch.testing.assert_close(got[0], ref[0], atol=1e-4, rtol=1e-4)


def test_backward_refusals_survive_a_memoized_plan(fresh, built):
    x, w, b = torch.randn(4, 6, 10), torch.randn(10), torch.randn(10)
    _, mean, rstd = fresh.native_layer_norm(x, (10,), w, b)
    bad = [
        lambda bb: bb.native_layer_norm_backward(x.double(), x, (10,), mean, rstd, w, b),       # grad dtype
        lambda bb: bb.native_layer_norm_backward(x[:3], x, (10,), mean, rstd, w, b),            # grad shape
        lambda bb: bb.native_layer_norm_backward(x, x, (10,), mean.half(), rstd, w, b),         # stats dtype
        lambda bb: bb.native_layer_norm_backward(x, x, (10,), mean[:2], rstd, w, b),           # stats size
        lambda bb: bb.native_layer_norm_backward(x, x, (10,), mean.numpy(), rstd, w, b),       # mixed kinds
        lambda bb: bb.native_layer_norm_backward(x, x, (10,), mean, rstd, w, b, (True, True)),  # mask length
    ]

    def message(fn):
        with pytest.raises((TypeError, ValueError)) as e:
            fn()
        return f"{type(e.value).__name__}: {e.value}"

    first = [message(lambda: f(open_bundle(built.path, device="local-task"))) for f in bad]
    for _ in range(2):
        fresh.native_layer_norm_backward(x, x, (10,), mean, rstd, w, b)
        assert [message(lambda: f(fresh)) for f in bad] == first


def test_half_precision_statistics_are_cast_for_the_kernel(fresh):
    g = torch.Generator().manual_seed(4)
    x = torch.randn(3, 37, generator=g).bfloat16()
    w, gy = torch.randn(37, generator=g).bfloat16(), torch.randn(3, 37, generator=g).bfloat16()
    sig = _rms16(6)
    _, rstd = fresh.fused_rms_norm(x, (37,), w, sig.eps)
    want = fresh.fused_rms_norm_backward(gy, x, (37,), rstd, w, (True, True), eps=sig.eps)
    for _ in range(2):
        got = fresh.fused_rms_norm_backward(gy, x, (37,), rstd.bfloat16(), w, (True, True), eps=sig.eps)
        for o, e in zip(got, want):
            torch.testing.assert_close(o.float(), e.float(), atol=0.05, rtol=0.05)


def test_runner_paths_other_than_the_hot_one(fresh):
    r = fresh.load(_ln(1).key)
    x, w, b = torch.randn(4, 6, 10), torch.randn(10), torch.randn(10)
    want = r(x, w, b)[0]
    p = torch.nn.Parameter(x.clone())  # a Tensor subclass: not the hot path's exact type
    torch.testing.assert_close(r(p, w, b)[0], want)
    got = r(x.numpy(), w.numpy(), b.numpy())[0]
    assert isinstance(got, np.ndarray) and np.allclose(got, want.numpy())
    with pytest.raises(TypeError, match="takes 3 arguments"):
        r(x, w)
    with pytest.raises(TypeError, match="among tensors"):
        r(x, w.numpy(), b)


def test_a_closed_runner_refuses_calls(built):
    b = open_bundle(built.path, device="local-task")
    r = b.load(_ln(1).key)
    x, w, bias = torch.randn(4, 6, 10), torch.randn(10), torch.randn(10)
    r(x, w, bias)
    r.close()
    with pytest.raises(KernelError, match="released"):
        r(x, w, bias)
