"""Autograd of the loader's functional entry points: torch's flags and
gradients, on the kernel path and on the eager fallback alike, with the
bundle's backward kernel for exactly the gradients needed."""

from __future__ import annotations

import pytest
import torch
from helpers import F32_EPS, _ln, _rms32, assert_close

from boo_build.loader import open_bundle

# (fallback, input shape): the bundle's kernels, or a shape it lacks (torch eager)
PATHS = [(None, (4, 6, 10)), ("eager", (2, 5, 10))]


def _randn(*shapes, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(s, generator=g) for s in shapes]


def _flags(*ts):
    return tuple(t.requires_grad for t in ts)


@pytest.mark.parametrize("fallback, shape", PATHS)
def test_layer_norm_follows_torch_autograd(built, fallback, shape):
    b = open_bundle(built.path, device="local-task", fallback=fallback)
    x, w, bias, gy = _randn(shape, 10, 10, shape, seed=1)
    for need in ((True, True, True), (True, False, False), (True, True, False)):
        ours = [t.clone().requires_grad_(n) for t, n in zip((x, w, bias), need)]
        theirs = [t.clone().requires_grad_(n) for t, n in zip((x, w, bias), need)]
        out = b.native_layer_norm(ours[0], [10], ours[1], ours[2])
        ref = torch.ops.aten.native_layer_norm(theirs[0], [10], theirs[1], theirs[2], 1e-5)
        assert _flags(*out) == _flags(*ref) == (True, False, False)
        (out[0] * gy).sum().backward()
        (ref[0] * gy).sum().backward()
        for o, r, n in zip(ours, theirs, need):
            assert (o.grad is None) == (not n)
            if n:
                assert_close(o.grad, r.grad, "float32")
    with torch.no_grad():
        assert _flags(*b.native_layer_norm(x.requires_grad_(), [10], w, bias)) == (False, False, False)
    if fallback is None:  # one forward and ONE backward kernel per step, for exactly what was needed
        assert b.stats() == {k.key: {"hits": n, "misses": 0, "eager": 0}
                             for k, n in ((_ln(1), 4), (_ln(14), 1), (_ln(2), 1), (_ln(6), 1))}
    else:
        s = b.stats()
        assert sum(v["misses"] for v in s.values()) == 7 and not any(v["hits"] for v in s.values())


@pytest.mark.parametrize("fallback, shape", PATHS)
def test_rms_norm_follows_torch_autograd(built, fallback, shape):
    """rstd is differentiable in ATen too: a loss on it reaches the input."""
    b = open_bundle(built.path, device="local-task", fallback=fallback)
    rows = shape[:-1] + (1,)
    x, w, gy, gr = _randn(shape, 10, shape, rows, seed=2)
    for use_rstd in (False, True):
        ours = [t.clone().requires_grad_() for t in (x, w)]
        theirs = [t.clone().requires_grad_() for t in (x, w)]
        y, rstd = b.fused_rms_norm(ours[0], [10], ours[1])
        ry, rr = torch.ops.aten._fused_rms_norm(theirs[0], [10], theirs[1], F32_EPS)
        assert _flags(y, rstd) == _flags(ry, rr) == (True, True)
        ((y * gy).sum() + use_rstd * (rstd * gr).sum()).backward()
        ((ry * gy).sum() + use_rstd * (rr * gr).sum()).backward()
        for o, r in zip(ours, theirs):
            assert_close(o.grad, r.grad, "float32", f"rstd used: {use_rstd}")
    if fallback is None:
        assert b.stats() == {k.key: {"hits": 2, "misses": 0, "eager": 0} for k in (_rms32(1), _rms32(6))}


def test_backward_entry_points_are_differentiable(built):
    """Second derivatives (no kernels for them) match torch's; the first-order
    backward still runs its kernel."""
    b = open_bundle(built.path, device="local-task")
    x, w, bias, gy, v = _randn((4, 6, 10), 10, 10, (4, 6, 10), (4, 6, 10), seed=3)
    _, mean, rstd = torch.ops.aten.native_layer_norm(x, [10], w, bias, 1e-5)
    ours = [t.clone().requires_grad_() for t in (gy, x, w)]
    theirs = [t.clone().requires_grad_() for t in (gy, x, w)]
    out = b.native_layer_norm_backward(ours[0], ours[1], [10], mean, rstd, ours[2], bias, [True, True, True])
    ref = torch.ops.aten.native_layer_norm_backward(theirs[0], theirs[1], [10], mean, rstd, theirs[2], bias,
                                                    [True, True, True])
    assert _flags(*out) == _flags(*ref) == (True, True, True)
    got = torch.autograd.grad((out[0] * v).sum() + out[1].square().sum() + out[2].sum(), ours)
    want = torch.autograd.grad((ref[0] * v).sum() + ref[1].square().sum() + ref[2].sum(), theirs)
    for name, o, r in zip(("grad_out", "input", "weight"), got, want):
        assert_close(o, r, "float32", name)

    # the same through the forward: a gradient penalty (create_graph=True)
    xs = [x.clone().requires_grad_(), w.clone().requires_grad_()]
    xt = [x.clone().requires_grad_(), w.clone().requires_grad_()]
    y = b.native_layer_norm(xs[0], [10], xs[1], bias)[0]
    ry = torch.ops.aten.native_layer_norm(xt[0], [10], xt[1], bias, 1e-5)[0]
    (gx,) = torch.autograd.grad((y * gy).sum(), xs[0], create_graph=True)
    (rgx,) = torch.autograd.grad((ry * gy).sum(), xt[0], create_graph=True)
    (gx * v).sum().backward()
    (rgx * v).sum().backward()
    for o, r in zip(xs, xt):
        assert_close(o.grad, r.grad, "float32", "gradient penalty")

    # RMS norm: torch's decomposition of the backward is the reference
    from torch._decomp import decomposition_table

    _, rstd = torch.ops.aten._fused_rms_norm(x, [10], w, F32_EPS)
    ours = [t.clone().requires_grad_() for t in (gy, x, w)]
    theirs = [t.clone().requires_grad_() for t in (gy, x, w)]
    out = b.fused_rms_norm_backward(ours[0], ours[1], [10], rstd, ours[2], [True, True], eps=F32_EPS)
    ref = decomposition_table[torch.ops.aten._fused_rms_norm_backward.default](
        theirs[0], theirs[1], [10], rstd, theirs[2], [True, True])
    assert _flags(*out) == (True, True)
    got = torch.autograd.grad((out[0] * v).sum() + out[1].square().sum(), ours)
    want = torch.autograd.grad((ref[0] * v).sum() + ref[1].square().sum(), theirs, allow_unused=True)
    for name, o, r in zip(("grad_out", "input", "weight"), got, want):
        assert_close(o, torch.zeros_like(o) if r is None else r, "float32", f"rms {name}")
    # first-order kernels only: the mask-14 call, the penalty's forward and mask-6 backward, RMS mask 6
    assert b.stats() == {k.key: {"hits": 1, "misses": 0, "eager": 0} for k in (_ln(14), _ln(1), _ln(6), _rms32(6))}
