"""Calls torch's op takes but no kernel can serve (issue 31, items 5 and 7): an eps
the signatures refuse (<= 0, a bool), a dtype no kernel takes (float64). With
``fallback="eager"`` they give torch's results, each counted in ``stats()`` as a
miss under ``"{op}:{reason}={value}"``; without a fallback the loader's error names
the reason. Arguments torch refuses too raise the loader's errors in both modes.
And inputs with no elements: ATen's shapes and dtypes, but a half-precision layer
norm's statistics, float32 as for every other batch size (docs/loader.md)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import _ln, _rms32
from torch._decomp import decomposition_table

from boo_build.loader import open_bundle

A = torch.ops.aten
SHAPES = [((4, 6, 10), (10,)), ((4, 2, 3), (2, 3))]  # the bundle's float32 shape; the issue's [2, 3]
CASES = [  # (name, dtype, eps): no kernel can serve these, whatever the bundle holds
    ("eps=-0.5", torch.float32, -0.5),
    ("eps=0", torch.float32, 0),
    ("float64", torch.float64, 1e-5),
]


def _rms_backward_ref(*args):
    """What torch runs for _fused_rms_norm_backward on the CPU: it has no kernel there,
    so its decomposition (the op itself refuses, checked here)."""
    with pytest.raises(NotImplementedError):
        A._fused_rms_norm_backward(*args)
    return decomposition_table[A._fused_rms_norm_backward.default](*args)


def _same(out, ref, what):
    """The same type, dtype, shape and values (NaN where the reference has NaN)."""
    if ref is None:
        assert out is None, what
        return
    assert type(out) is type(ref), (what, type(out), type(ref))
    if isinstance(ref, np.ndarray):
        out, ref = torch.from_numpy(out), torch.from_numpy(ref)
    assert out.dtype == ref.dtype and out.shape == ref.shape, (what, out.dtype, out.shape, ref.dtype, ref.shape)
    assert torch.equal(out.isnan(), ref.isnan()), (what, out, ref)
    keep = ~ref.isnan()
    assert torch.equal(out[keep], ref[keep]), (what, out, ref)


def _args(shape, ns, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    # x * 4: every row's variance and mean square well above 0.5, so that eps=-0.5 gives numbers
    x = (torch.randn(shape, generator=g) * 4).to(dtype)
    w, b = torch.randn(ns, generator=g).to(dtype), torch.randn(ns, generator=g).to(dtype)
    gy = torch.randn(shape, generator=g).to(dtype)
    return x, w, b, gy


@pytest.fixture
def eager(built):
    return open_bundle(built.path, device="local-task", fallback="eager")


@pytest.fixture
def strict(built):
    return open_bundle(built.path, device="local-task")


# ------------------------------------------------------- fallback="eager"
@pytest.mark.parametrize("shape, ns", SHAPES)
@pytest.mark.parametrize("name, dtype, eps", CASES)
def test_layer_norm_no_kernel_can_serve_gives_torchs_results(eager, shape, ns, name, dtype, eps):
    x, w, b, gy = _args(shape, ns, dtype)
    ref = A.native_layer_norm(x, list(ns), w, b, eps)
    assert not any(r.isnan().any() for r in ref)  # torch.equal below compares numbers
    out = eager.native_layer_norm(x, ns, w, b, eps)
    for o, r, what in zip(out, ref, ("out", "mean", "rstd")):
        _same(o, r, f"{name} {what}")
    for mask in ([True, True, True], [True, False, True], [False, True, False]):
        ref_g = A.native_layer_norm_backward(gy, x, list(ns), ref[1], ref[2], w, b, mask)
        got = eager.native_layer_norm_backward(gy, x, ns, out[1], out[2], w, b, mask, eps=eps)
        for o, r, want in zip(got, ref_g, mask):
            _same(o, r if want else None, f"{name} backward {mask}")
    # without a weight, and a bias alone (ATen's own: no stand-in weight)
    for ww, bb in ((None, None), (None, b)):
        for o, r in zip(eager.native_layer_norm(x, ns, ww, bb, eps), A.native_layer_norm(x, list(ns), ww, bb, eps)):
            _same(o, r, f"{name} weight {ww is not None} bias {bb is not None}")
    key = f"layer_norm:{'dtype=float64' if dtype == torch.float64 else f'eps={eps}'}"
    assert eager.stats() == {key: {"hits": 0, "misses": 6, "eager": 0}}


@pytest.mark.parametrize("shape, ns", SHAPES)
@pytest.mark.parametrize("name, dtype, eps", CASES)
def test_rms_norm_no_kernel_can_serve_gives_torchs_results(eager, shape, ns, name, dtype, eps):
    x, w, _, gy = _args(shape, ns, dtype)
    ref = A._fused_rms_norm(x, list(ns), w, eps)
    assert not any(r.isnan().any() for r in ref)
    out = eager.fused_rms_norm(x, ns, w, eps)
    for o, r, what in zip(out, ref, ("out", "rstd")):
        _same(o, r, f"{name} {what}")
    for mask in ([True, True], [False, True], [True, False]):
        ref_g = _rms_backward_ref(gy, x, list(ns), ref[1], w, mask)
        got = eager.fused_rms_norm_backward(gy, x, ns, out[1], w, mask, eps=eps)
        for o, r, want in zip(got, ref_g, mask):
            _same(o, r if want else None, f"{name} backward {mask}")
    for o, r in zip(eager.fused_rms_norm(x, ns, None, eps), A._fused_rms_norm(x, list(ns), None, eps)):
        _same(o, r, f"{name} no weight")
    key = f"rms_norm:{'dtype=float64' if dtype == torch.float64 else f'eps={eps}'}"
    assert eager.stats() == {key: {"hits": 0, "misses": 5, "eager": 0}}


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_no_kernel_can_serve_keeps_float32_statistics(eager, dtype):
    """torch's values; the statistics in the loader's dtype for half inputs, float32."""
    x, w, b, gy = _args((3, 37), (37,), dtype)
    ref = A.native_layer_norm(x, [37], w, b, 0)
    y, mean, rstd = eager.native_layer_norm(x, [37], w, b, 0)
    _same(y, ref[0], "out")
    _same(mean, ref[1].float(), "mean")
    _same(rstd, ref[2].float(), "rstd")
    gx, gw, gb = eager.native_layer_norm_backward(gy, x, [37], mean, rstd, w, b, eps=0)
    for o, r in zip((gx, gw, gb), A.native_layer_norm_backward(gy, x, [37], mean.to(dtype), rstd.to(dtype), w, b,
                                                               [True] * 3)):
        _same(o, r, "layer norm backward")
    for o, r in zip(eager.fused_rms_norm(x, [37], w, -0.5), A._fused_rms_norm(x, [37], w, -0.5)):
        _same(o, r, "rms norm")  # rstd float32: ATen's too
    assert eager.stats() == {"layer_norm:eps=0": {"hits": 0, "misses": 2, "eager": 0},
                             "rms_norm:eps=-0.5": {"hits": 0, "misses": 1, "eager": 0}}


def test_a_miss_is_counted_per_op_and_reason(eager):
    x, w, b, gy = _args((4, 6, 10), (10,), torch.float32)
    x64, w64, b64, gy64 = (t.double() for t in (x, w, b, gy))
    _, mean, rstd = eager.native_layer_norm(x, [10], w, b, -0.5)
    eager.native_layer_norm_backward(gy, x, [10], mean, rstd, w, b, eps=-0.5)
    _, mean, rstd = eager.native_layer_norm(x64, [10], w64, b64)
    eager.native_layer_norm_backward(gy64, x64, [10], mean, rstd, w64, b64)  # eps None: the dtype's miss
    eager.fused_rms_norm(x, [10], w, 0)
    eager.fused_rms_norm(x64, [10], w64, -0.5)  # both: the dtype's (checked first)
    eager.fused_rms_norm(x, [10], w, True)  # torch takes a bool eps (1.0); no signature does
    eager.native_layer_norm(x, [10], w, b)  # a kernel's hit
    with pytest.raises(TypeError, match="weight has dtype torch.float32, expected torch.float64"):
        eager.native_layer_norm(x64, [10], w, b64)  # refused: not counted
    with pytest.raises(TypeError, match="torch's op refuses the call too"):
        eager.native_layer_norm(x.int(), [10], None, None)  # torch refuses it too: not counted
    assert eager.stats() == {
        _ln(1).key: {"hits": 1, "misses": 0, "eager": 0},
        "layer_norm:dtype=float64": {"hits": 0, "misses": 2, "eager": 0},
        "layer_norm:eps=-0.5": {"hits": 0, "misses": 2, "eager": 0},
        "rms_norm:dtype=float64": {"hits": 0, "misses": 1, "eager": 0},
        "rms_norm:eps=0": {"hits": 0, "misses": 1, "eager": 0},
        "rms_norm:eps=True": {"hits": 0, "misses": 1, "eager": 0},
    }
    assert eager.stats(totals=True) == {"static_hits": 1, "dynamic_hits": 0, "misses": 7, "eager": 0}


def test_the_checked_kernel_calls_of_a_shape_are_not_touched(eager):
    """An unserved call records nothing: the same shape with a kernel's eps still
    runs the kernel, and a view without the fallback (the same checks and memos)
    refuses the unserved call."""
    x, w, b, _ = _args((4, 6, 10), (10,), torch.float32)
    for _ in range(2):
        eager.native_layer_norm(x, [10], w, b, 1e-5)
        eager.native_layer_norm(x, [10], w, b, -0.5)
        eager.fused_rms_norm(x, [10], w)  # eps None: float32's epsilon, the kernel's
        eager.fused_rms_norm(x, [10], w, -0.5)
    assert eager.stats() == {_ln(1).key: {"hits": 2, "misses": 0, "eager": 0},
                             _rms32(1).key: {"hits": 2, "misses": 0, "eager": 0},
                             "layer_norm:eps=-0.5": {"hits": 0, "misses": 2, "eager": 0},
                             "rms_norm:eps=-0.5": {"hits": 0, "misses": 2, "eager": 0}}
    with pytest.raises(ValueError, match="eps must be a positive finite number, got -0.5"):
        eager.with_fallback(None).native_layer_norm(x, [10], w, b, -0.5)


def test_float64_autograd_through_the_eager_fallback(eager):
    """Autograd records the custom ops; their eager results keep float64 statistics."""
    x, w, b, gy = _args((4, 6, 10), (10,), torch.float64)
    ours = [t.clone().requires_grad_(True) for t in (x, w, b)]
    theirs = [t.clone().requires_grad_(True) for t in (x, w, b)]
    y, mean, rstd = eager.native_layer_norm(*ours[:1], [10], *ours[1:])
    ry, rmean, rrstd = A.native_layer_norm(theirs[0], [10], theirs[1], theirs[2], 1e-5)
    for o, r in ((y, ry), (mean, rmean), (rstd, rrstd)):
        _same(o.detach(), r.detach(), "forward")
    y.backward(gy)
    ry.backward(gy)
    for o, r in zip(ours, theirs):
        _same(o.grad, r.grad, "grad")
    xr, wr = x.clone().requires_grad_(True), w.clone().requires_grad_(True)
    y, rstd = eager.fused_rms_norm(xr, [10], wr, 1e-6)
    assert rstd.dtype == torch.float64 and y.requires_grad
    y.backward(gy)
    x2, w2 = x.clone().requires_grad_(True), w.clone().requires_grad_(True)
    torch.nn.functional.rms_norm(x2, [10], w2, 1e-6).backward(gy)
    torch.testing.assert_close(xr.grad, x2.grad, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(wr.grad, w2.grad, rtol=1e-12, atol=1e-12)
    assert set(eager.stats()) == {"layer_norm:dtype=float64", "rms_norm:dtype=float64"}


def test_numpy_arrays_take_the_eager_fallback_too(eager, strict):
    x, w, b, gy = (t.numpy() for t in _args((4, 6, 10), (10,), torch.float32))
    x64, w64, b64, gy64 = (a.astype(np.float64) for a in (x, w, b, gy))
    for args, eps in (((x, w, b), -0.5), ((x64, w64, b64), 1e-5)):
        ref = [o.numpy() for o in A.native_layer_norm(*(torch.from_numpy(args[0]),), [10],
                                                       *map(torch.from_numpy, args[1:]), eps)]
        out = eager.native_layer_norm(args[0], [10], *args[1:], eps)
        for o, r in zip(out, ref):
            _same(o, r, f"numpy eps {eps}")
        g = gy if args[0].dtype == np.float32 else gy64
        grads = eager.native_layer_norm_backward(g, args[0], [10], out[1], out[2], *args[1:], eps=eps)
        ref_g = A.native_layer_norm_backward(*(torch.from_numpy(a) for a in (g, args[0])), [10],
                                             *(torch.from_numpy(a) for a in (ref[1], ref[2], *args[1:])), [True] * 3)
        for o, r in zip(grads, ref_g):
            _same(o, r.numpy(), f"numpy backward eps {eps}")
        ref = [o.numpy() for o in A._fused_rms_norm(torch.from_numpy(args[0]), [10], torch.from_numpy(args[1]), eps)]
        for o, r in zip(eager.fused_rms_norm(args[0], [10], args[1], eps), ref):
            _same(o, r, f"numpy rms eps {eps}")
    assert eager.stats() == {"layer_norm:dtype=float64": {"hits": 0, "misses": 2, "eager": 0},
                             "layer_norm:eps=-0.5": {"hits": 0, "misses": 2, "eager": 0},
                             "rms_norm:dtype=float64": {"hits": 0, "misses": 1, "eager": 0},
                             "rms_norm:eps=-0.5": {"hits": 0, "misses": 1, "eager": 0}}
    with pytest.raises(TypeError, match="^input has dtype float64: kernels take float32, float16 or bfloat16$"):
        strict.native_layer_norm(x64, [10], w64, b64)
    with pytest.raises(TypeError, match="weight is a numpy.ndarray but input is a torch.Tensor"):
        eager.native_layer_norm(torch.from_numpy(x64), [10], w64, b64)


# ------------------------------------------------------- fallback=None
F64 = "input has dtype torch.float64: kernels take float32, float16 or bfloat16"


@pytest.mark.parametrize("name, dtype, eps", CASES)
def test_without_a_fallback_the_error_names_eps_or_the_dtype(strict, name, dtype, eps):
    x, w, b, gy = _args((4, 6, 10), (10,), dtype)
    mean = rstd = torch.ones(4, 6, 1, dtype=dtype)
    if dtype == torch.float64:
        err, msg = TypeError, f"^{F64}$"
    else:
        err, msg = ValueError, f"^eps must be a positive finite number, got {eps}$"
    calls = [lambda: strict.native_layer_norm(x, [10], w, b, eps),
             lambda: strict.native_layer_norm_backward(gy, x, [10], mean, rstd, w, b, eps=eps),
             lambda: strict.fused_rms_norm(x, [10], w, eps),
             lambda: strict.fused_rms_norm_backward(gy, x, [10], rstd, w, eps=eps),
             lambda: strict.native_layer_norm(x[:0], [10], w, b, eps)]  # no elements: the same
    for call in calls:
        with pytest.raises(err, match=msg):
            call()
    assert strict.stats() == {}


# ------------------------------------------------------- refused in both modes
def _refused(x, w, b, gy, x64, w64, b64, gy64):
    """(call, error, its message with the eager fallback): arguments torch refuses too."""
    m64 = torch.zeros(4, 6, 1, dtype=torch.float64)
    return [
        (lambda bd: bd.native_layer_norm(x64, [10], w, b64), TypeError,
         "weight has dtype torch.float32, expected torch.float64"),
        (lambda bd: bd.native_layer_norm(x64, [10], w64[:9], b64), ValueError, r"weight has shape \[9\], expected \[10\]"),
        (lambda bd: bd.fused_rms_norm(x64, [10], w64.numpy()), TypeError,
         "weight is a numpy.ndarray but input is a torch.Tensor"),
        (lambda bd: bd.native_layer_norm(x64, [12], None, None), ValueError, "not a suffix"),
        (lambda bd: bd.native_layer_norm(x64, [10], w64, b64, "1e-5"), ValueError,
         r"eps must be a number \(int or float\), got '1e-5'"),
        (lambda bd: bd.native_layer_norm_backward(gy, x64, [10], m64, m64, w64, b64), TypeError,
         "grad_out has dtype torch.float32, expected torch.float64"),
        (lambda bd: bd.native_layer_norm_backward(gy64, x64, [10], m64.half(), m64, w64, b64), TypeError,
         "mean has dtype torch.float16, expected torch.float32 or torch.float64"),
        (lambda bd: bd.fused_rms_norm_backward(gy64, x64, [10], m64[:3], w64), ValueError,
         r"rstd has shape \[3, 6, 1\], expected \[4, 6, 1\]"),
    ]


def test_arguments_torch_refuses_too_raise_the_loaders_errors_in_both_modes(eager, strict):
    x, w, b, gy = _args((4, 6, 10), (10,), torch.float32)
    x64, w64, b64, gy64 = (t.double() for t in (x, w, b, gy))
    for i, (call, err, msg) in enumerate(_refused(x, w, b, gy, x64, w64, b64, gy64)):
        with pytest.raises(err, match=msg):
            call(eager)
        with pytest.raises(TypeError, match=f"^{F64}$"):  # today's error without the fallback: the input's first
            call(strict)
    # a bad eps on a kernel dtype: the arrays are checked first, in both modes
    for bd in (eager, strict):
        with pytest.raises(ValueError, match=r"weight has shape \[9\], expected \[10\]"):
            bd.native_layer_norm(x, [10], w[:9], b, -0.5)
        with pytest.raises(ValueError, match="input is on device meta"):
            bd.fused_rms_norm(x.to("meta"), [10], None, -0.5)
        # a backward's grad_out and statistics come after: without the fallback, today's eps error
        err, msg = ((TypeError, "rstd has dtype torch.float64, expected torch.float32") if bd is eager
                    else (ValueError, "eps must be a positive finite number, got 0"))
        with pytest.raises(err, match=msg):
            bd.fused_rms_norm_backward(gy, x, [10], torch.ones(4, 6, 1, dtype=torch.float64), w, eps=0)
        with pytest.raises(ValueError, match="normalized_shape must be a non-empty list"):  # ATen refuses [] too
            bd.native_layer_norm(x, [], None, None, -0.5)
    # a dtype torch's op does not take either: the loader's error, naming torch's reason
    with pytest.raises(TypeError, match="^input has dtype torch.int32: kernels take float32, float16 or bfloat16; "
                                        "torch's op refuses the call too: .*not implemented for 'Int'"):
        eager.native_layer_norm(x.int(), [10], None, None)
    assert eager.stats() == {} and strict.stats() == {}


# ------------------------------------------------------- no elements
def _zero_size_cases():
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        for shape, ns in (((0, 10), (10,)), ((4, 0, 10), (10,)), ((3, 0), (0,)), ((2, 0, 3), (0, 3))):
            yield dtype, shape, ns


@pytest.mark.parametrize("fallback", [None, "eager"])
def test_zero_size_results_have_atens_shapes_and_dtypes(built, fallback):
    """ATen's (torch 2.13, CPU) shapes, dtypes and values for inputs with no elements,
    both ops, forward and backward, with one exception by choice: a half-precision
    layer norm's mean and rstd are float32 (ATen's CPU kernel: the input's dtype),
    as for every other batch size, as the custom ops (autograd) return them, and as
    ATen's meta function (torch.compile's) says."""
    b = open_bundle(built.path, device="local-task", fallback=fallback)
    for dtype, shape, ns in _zero_size_cases():
        x, gy = torch.randn(shape).to(dtype), torch.randn(shape).to(dtype)
        w, bias = torch.randn(ns).to(dtype), torch.randn(ns).to(dtype)
        what = f"{dtype} {shape} {ns}"
        ref = A.native_layer_norm(x, list(ns), w, bias, 1e-5)
        out = b.native_layer_norm(x, ns, w, bias)
        _same(out[0], ref[0], f"layer norm out {what}")
        meta = A.native_layer_norm(x.to("meta"), list(ns), w.to("meta"), bias.to("meta"), 1e-5)
        for o, r, m in zip(out[1:], ref[1:], meta[1:]):
            assert o.dtype == m.dtype == torch.float32, what  # the choice (docs/loader.md)
            if dtype == torch.float32:
                _same(o, r, f"layer norm stats {what}")
            else:
                assert r.dtype == dtype, what  # ATen's CPU kernel: the input's dtype
                _same(o, r.float(), f"layer norm stats {what}")  # ATen's values (0, NaN) and shape
        for mask in ([True, True, True], [True, False, False], [False, True, True]):
            ref_g = A.native_layer_norm_backward(gy, x, list(ns), ref[1], ref[2], w, bias, mask)
            for stats in ((ref[1], ref[2]), (out[1], out[2])):  # ATen's statistics or the loader's
                got = b.native_layer_norm_backward(gy, x, ns, *stats, w, bias, mask)
                for o, r, want in zip(got, ref_g, mask):
                    _same(o, r if want else None, f"layer norm backward {what} {mask}")
        ref = A._fused_rms_norm(x, list(ns), w, 1e-5)
        out = b.fused_rms_norm(x, ns, w, 1e-5)
        for o, r in zip(out, ref):
            _same(o, r, f"rms norm {what}")  # rstd float32 for half inputs: ATen's too
        for mask in ([True, True], [True, False], [False, True]):
            ref_g = decomposition_table[A._fused_rms_norm_backward.default](gy, x, list(ns), ref[1], w, mask)
            for o, r, want in zip(b.fused_rms_norm_backward(gy, x, ns, out[1], w, mask), ref_g, mask):
                _same(o, r if want else None, f"rms norm backward {what} {mask}")
        # autograd (the custom ops) returns the same dtypes
        xr = x.clone().requires_grad_(True)
        y, mean, rstd = b.native_layer_norm(xr, ns, w, bias)
        assert y.requires_grad and (mean.dtype, rstd.dtype) == (torch.float32, torch.float32), what
    assert b.stats() == {}  # no kernel ran, no fallback counted


def test_zero_size_calls_no_kernel_can_serve_follow_the_fallback(eager, strict):
    for x, eps, key in ((torch.randn(0, 10).double(), 1e-5, "layer_norm:dtype=float64"),
                        (torch.randn(3, 0), 0, "layer_norm:eps=0")):
        ns = list(x.shape[-1:])
        w = torch.randn(ns).to(x.dtype)
        for o, r in zip(eager.native_layer_norm(x, ns, w, w, eps), A.native_layer_norm(x, ns, w, w, eps)):
            _same(o, r, key)
        with pytest.raises((TypeError, ValueError), match="float64|eps"):
            strict.native_layer_norm(x, ns, w, w, eps)
        assert eager.stats()[key]["misses"] == 1
    assert strict.stats() == {}
