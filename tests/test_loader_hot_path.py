"""The loader's hot path: memoized argument checks (loader/call_checks.py) still
refuse what they refused, per call; the imports a runner keeps for recurring
inputs (weights, biases) never stand in for other memory; counts stay exact."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import _ln

from boo_build.loader import open_bundle


def _ln_ref(x, w, b):
    return torch.ops.aten.native_layer_norm(x, [10], w, b, 1e-5)


@pytest.fixture()
def fresh(built):
    return open_bundle(built.path, device="local-task")


def _message(fn) -> str:
    with pytest.raises((TypeError, ValueError)) as e:
        fn()
    return f"{type(e.value).__name__}: {e.value}"


def test_checks_still_refuse_after_a_good_call_of_the_same_shapes(fresh, built):
    x, w, b = torch.randn(4, 6, 10), torch.randn(10), torch.randn(10)
    bad = [
        lambda bb: bb.native_layer_norm(x, (10,), w.double(), b),                     # weight dtype
        lambda bb: bb.native_layer_norm(x, (10,), torch.randn(11), b),                # weight shape
        lambda bb: bb.native_layer_norm(x, (10,), w.numpy(), b),                      # mixed kinds
        lambda bb: bb.native_layer_norm(x, (6, 10), w, b),                            # normalized shape
        lambda bb: bb.native_layer_norm_backward(x, x, (10,), torch.randn(4, 6, 1), torch.randn(4, 7, 1), w, b),
        lambda bb: bb.native_layer_norm_backward(x.half(), x, (10,), torch.randn(4, 6, 1), torch.randn(4, 6, 1), w, b),
        lambda bb: bb.run(_ln(1).key, x, w),                                          # argument count
        lambda bb: bb.run(_ln(1).key, x[:, :5], w, b),                                # argument shape
    ]
    first = [_message(lambda: f(open_bundle(built.path, device="local-task"))) for f in bad]
    for _ in range(2):  # memos filled by good calls of the same shapes
        fresh.native_layer_norm(x, (10,), w, b)
        _, mean, rstd = fresh.native_layer_norm(x, (10,), w, b)
        fresh.native_layer_norm_backward(x, x, (10,), mean, rstd, w, b)
        fresh.run(_ln(1).key, x, w, b)
        assert [_message(lambda: f(fresh)) for f in bad] == first


def test_each_call_is_checked_for_its_own_memory(fresh):
    g = torch.Generator().manual_seed(1)
    x, w, b = torch.randn(4, 6, 10, generator=g), torch.randn(10, generator=g), torch.randn(10, generator=g)
    fresh.native_layer_norm(x, (10,), w, b)
    # same shapes and dtypes: non-contiguous, numpy, and a bias without a weight
    xt = torch.randn(10, 6, 4, generator=g).transpose(0, 2)
    torch.testing.assert_close(fresh.native_layer_norm(xt, (10,), w, b)[0], _ln_ref(xt.contiguous(), w, b)[0])
    y = fresh.native_layer_norm(x.numpy(), (10,), w.numpy(), b.numpy())[0]
    assert isinstance(y, np.ndarray) and np.allclose(y, _ln_ref(x, w, b)[0].numpy(), atol=1e-5)
    ones = torch.ones(10)
    for _ in range(2):
        torch.testing.assert_close(fresh.native_layer_norm(x, (10,), None, b)[0], _ln_ref(x, ones, b)[0])


def test_kept_imports_follow_the_memory(fresh):
    g = torch.Generator().manual_seed(2)
    x = torch.randn(4, 6, 10, generator=g)
    big, b = torch.randn(20, generator=g), torch.randn(10, generator=g)
    w = big[:10]
    r = fresh.load(_ln(1).key)
    assert r._slots and r._slots[0] is None  # the input is not kept, weight and bias are

    def check(w_):
        torch.testing.assert_close(r(x, w_, b)[0], _ln_ref(x, w_.contiguous(), b)[0])

    check(w)
    check(w)       # kept import
    w.mul_(3)      # written in place: the same memory, new values
    check(w)
    check(big[::2])  # same data pointer and shape, another layout: imported afresh (a copy)
    check(big[10:])  # other memory
    check(torch.randn(10, generator=g))
    # a weight that needs grad (detached for the kernel), then the same weight again
    wg = torch.randn(10, generator=g, requires_grad=True)
    check(wg.detach())
    torch.testing.assert_close(r(x, wg, b)[0], _ln_ref(x, wg.detach(), b)[0])


def test_counts_stay_exact_past_the_pending_limit(fresh):
    from boo_build.loader.memo import MEMO_LIMIT as _MEMO_LIMIT

    x, w, b = torch.randn(4, 6, 10), torch.randn(10), torch.randn(10)
    n = _MEMO_LIMIT + 50
    for _ in range(n):
        fresh.native_layer_norm(x, (10,), w, b)
    assert fresh.stats() == {_ln(1).key: {"hits": n, "misses": 0, "eager": 0}}
    fresh.reset_stats()
    fresh.native_layer_norm(x, (10,), w, b)
    assert fresh.stats() == {_ln(1).key: {"hits": 1, "misses": 0, "eager": 0}}


def _spy_checks(b) -> list:
    """Names of the checks each call ran (a first call of a key runs them)."""
    checked = []
    for name in ("prepare", "prepare_backward"):
        real = getattr(b.checks, name)
        setattr(b.checks, name, lambda *a, _real=real, _name=name, **kw: checked.append(_name) or _real(*a, **kw))
    return checked


def test_a_checked_key_runs_its_kernel_from_the_key_alone(built):
    """After a key's first (checked) call, its torch calls run the kernel without
    the checks: the same results as the checked call, any memory layout, the
    statistics reshaped and cast as the checks would, ungiven gradients None."""
    from helpers import _rms16

    b = open_bundle(built.path, device="local-task")
    checked = _spy_checks(b)
    g = torch.Generator().manual_seed(3)
    x, w, bias, gy = (torch.randn(s, generator=g) for s in ((4, 6, 10), (10,), (10,), (4, 6, 10)))
    first = b.native_layer_norm(x, (10,), w, bias, 1e-5)
    assert all(torch.equal(o, r) for o, r in zip(first, b.run(_ln(1).key, x, w, bias)))
    xt = x.transpose(0, 1).contiguous().transpose(0, 1)  # the same values, not contiguous
    for arg in (x, x, xt):
        assert all(torch.equal(o, r) for o, r in zip(b.native_layer_norm(arg, (10,), w, bias, 1e-5), first))
    mean, rstd = first[1].reshape(-1), first[2].reshape(-1)  # any layout of the rows: viewed as the kernel's
    for mask, key in (((True, True, True), _ln(14).key), ((True, False, False), _ln(2).key)):
        want = b.run(key, gy, x, first[1], first[2], w)
        grads = [b.native_layer_norm_backward(gy, x, (10,), mean, rstd, w, bias, mask) for _ in range(3)]
        for got in grads:
            assert [o is None for o in got] == [not m for m in mask]
            assert all(torch.equal(o, r) for o, r in zip([o for o in got if o is not None], want))
    # bfloat16 input, float32 kernel statistics: given as the input's dtype and flat, cast and viewed
    xr, wr, gr = (torch.randn(s, generator=g).bfloat16() for s in ((3, 37), (37,), (3, 37)))
    rstd16 = torch.rand(3, generator=g).add(0.5).bfloat16()
    want = b.run(_rms16(6).key, gr, xr, rstd16.float().reshape(3, 1), wr)
    for _ in range(3):
        got = b.fused_rms_norm_backward(gr, xr, (37,), rstd16, wr, (True, True))
        assert all(torch.equal(o, r) for o, r in zip(got, want))
    assert checked == ["prepare"] + ["prepare_backward", "prepare"] * 3  # first calls of each key only
    stats = b.stats()
    assert {k: v["hits"] for k, v in stats.items()} == {_ln(1).key: 5, _ln(14).key: 4, _ln(2).key: 4,
                                                        _rms16(6).key: 4}


def test_a_checked_key_goes_to_autograd_whenever_grad_mode_records_the_call(built):
    """Parameters that require grad: under no_grad the key's route runs them (no
    autograd, no checks after the first call); with grad mode on, the same call
    is recorded by autograd and its gradients are right."""
    b = open_bundle(built.path, device="local-task")
    checked = _spy_checks(b)
    g = torch.Generator().manual_seed(5)
    x = torch.randn(4, 6, 10, generator=g).requires_grad_()  # every gradient: a kernel of the bundle (mask 14)
    w, bias = (torch.randn(10, generator=g).requires_grad_() for _ in range(2))
    with torch.no_grad():
        outs = [b.native_layer_norm(x, (10,), w, bias, 1e-5)[0] for _ in range(3)]
    assert all(o.grad_fn is None and not o.requires_grad for o in outs) and checked == ["prepare"]
    y = b.native_layer_norm(x, (10,), w, bias, 1e-5)[0]
    assert y.grad_fn is not None
    y.pow(2).sum().backward()
    x64, w64, b64 = (t.detach().double().requires_grad_() for t in (x, w, bias))
    torch.nn.functional.layer_norm(x64, (10,), w64, b64, 1e-5).pow(2).sum().backward()
    torch.testing.assert_close(x.grad, x64.grad.float(), atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(w.grad, w64.grad.float(), atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(bias.grad, b64.grad.float(), atol=1e-4, rtol=1e-4)
    assert torch.equal(outs[0], y.detach())


def test_rms_backward_without_an_aten_kernel_asks_aten_once():
    """torch 2.13 has no CPU ``_fused_rms_norm_backward``: the eager route (the loader's
    routed RMS backward) learns so at its first call and runs torch's decomposition from
    then on, the same results, instead of raising and catching NotImplementedError per call."""
    from boo_build.ops import rms_norm

    rms_norm._NO_ATEN_KERNEL.discard("cpu")
    g = torch.Generator().manual_seed(0)
    x, gy, w = torch.randn(3, 16, generator=g), torch.randn(3, 16, generator=g), torch.randn(16, generator=g)
    _, rstd = torch.ops.aten._fused_rms_norm(x, [16], w, 1e-6)
    first = rms_norm.RMS_NORM.eager_backward((16,), 6, gy, x, rstd, w)
    assert "cpu" in rms_norm._NO_ATEN_KERNEL
    again = rms_norm.RMS_NORM.eager_backward((16,), 6, gy, x, rstd, w)
    assert all(torch.equal(a, b) for a, b in zip(first, again)) and len(first) == 2
    xr, wr = x.clone().requires_grad_(True), w.clone().requires_grad_(True)  # autograd of F.rms_norm
    torch.nn.functional.rms_norm(xr, (16,), wr, 1e-6).backward(gy)
    assert torch.allclose(first[0], xr.grad, atol=1e-5) and torch.allclose(first[1], wr.grad, atol=1e-5)
