"""Layer norm: ``aten.native_layer_norm`` and ``native_layer_norm_backward``.

Masks (MIOpen's -F): 1 forward; 2 input, 4 weight, 8 bias gradient, every
non-empty combination of them one combined backward kernel (ATen's
``output_mask``, in the order input, weight, bias). Affine forms: weight and
bias, weight only, neither. Statistics: mean and rstd.

* forward (mask 1): (x, [weight], [bias]) -> (y, mean, rstd)
* backward: (grad_y, x, mean, rstd, [weight if affine and mask & 2])
  -> the requested gradients in the order input, weight, bias

MIOpen commands ``layernorm``, ``layernormfp16``, ``layernormbfp16``; ``-m 1``
means weight and bias. Loader entry points: ``Bundle.native_layer_norm`` and
``native_layer_norm_backward`` (``loader/entries/layer_norm.py``).

Pure Python at import; torch only inside functions.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Callable

from .base import BIAS_GRAD, FUSED, INPUT_GRAD, LANES, WEIGHT_GRAD, Op, dense, stats_as


@dataclass(frozen=True)
class LayerNorm(Op):
    name: str = "layer_norm"
    fused_backward: bool = True
    fused_forward: bool = True
    masks: tuple[int, ...] = (1, 2, 4, 6, 8, 10, 12, 14)
    grads: tuple[int, ...] = (INPUT_GRAD, WEIGHT_GRAD, BIAS_GRAD)
    stats: tuple[str, ...] = ("mean", "rstd")
    has_bias: bool = True
    commands: tuple[tuple[str, str], ...] = (
        ("layernorm", "float32"), ("layernormfp16", "float16"), ("layernormbfp16", "bfloat16"))
    autocast_aten: str = "aten::layer_norm"
    residuals: bool = True
    residual_commands: tuple[tuple[str, str], ...] = (  # MIOpen's name (its forward does not return h)
        ("addlayernorm", "float32"), ("addlayernormfp16", "float16"), ("addlayernormbfp16", "bfloat16"))

    def zero_size_stat(self, name: str) -> float:
        return 0.0 if name == "mean" else super().zero_size_stat(name)

    def implementation(self, impl: str) -> Callable:
        return _implementations()[impl]

    def forward64(self, sig, x, dims):
        import torch

        mean = x.mean(dim=dims, keepdim=True)
        var = ((x - mean) ** 2).mean(dim=dims, keepdim=True)
        rstd = 1.0 / torch.sqrt(var + sig.eps)
        return (x - mean) * rstd, (mean, rstd)

    def eager_forward(self, sig, x, w, b):
        import torch

        y, mean, rstd = torch.ops.aten.native_layer_norm(x, list(sig.normalized_shape), w, b, sig.eps)
        return y, stats_as(torch, mean, sig), stats_as(torch, rstd, sig)

    # the base takes ``*rest``: each op names its own statistics, weight and bias
    def eager_backward(self, ns, mask, gy, x, mean, rstd, w, b):  # type: ignore[override]
        import torch

        want = [bool(mask & bit) for bit in self.grads]
        dt = x.dtype
        if gy.dtype == dt and all(t is None or t.dtype == dt for t in (w, b)):
            # what torch runs without the bundle: ATen's kernel in the input's dtype, the
            # statistics in it too (ATen's own CPU forward saves half-precision statistics)
            if mean.dtype != dt:
                mean, rstd = mean.to(dt), rstd.to(dt)
            # dense statistics: ATen's CPU kernel misreads strided ones (base.dense)
            outs = torch.ops.aten.native_layer_norm_backward(gy, x, list(ns), dense(mean), dense(rstd), w, b, want)
            return tuple(o for o, wanted in zip(outs, want) if wanted)
        c = torch.float32  # mixed dtypes, which ATen refuses: all in float32
        outs = torch.ops.aten.native_layer_norm_backward(
            gy.to(c), x.to(c), list(ns), dense(mean.to(c)), dense(rstd.to(c)),
            None if w is None else w.to(c), None if b is None else b.to(c), want)
        return tuple(o.to(dt) for o, wanted in zip(outs, want) if wanted)

    def eager_route(self, sig, stats=None):
        """ATen's ops with everything but the tensors decided here, so that a routed
        call costs little over calling them directly (``eager_forward``/``eager_backward``,
        which decide per call, cost several times more)."""
        import torch

        aten, ns, eps = torch.ops.aten, list(sig.normalized_shape), sig.eps
        half = sig.dtype in ("float16", "bfloat16") and sig.affine
        if sig.is_forward:
            forward, sd = aten.native_layer_norm.default, getattr(torch, sig.stats_dtype)

            if half and sd is torch.float32:
                # ATen's mixed-type kernel: its half-precision one rounds the statistics
                # to half (rstd 19x its float32 tolerance, bf16 37x768 offset case)
                def run_mixed(x, w, b):
                    return forward(x, ns, w.float(), None if b is None else b.float(), eps)
                return run_mixed

            if sd is torch.float32:  # Tensor.float() is cheaper than .to(torch.float32)
                def run_f32(x, w, b):
                    y, mean, rstd = forward(x, ns, w, b, eps)
                    return (y, mean, rstd) if mean.dtype is sd else (y, mean.float(), rstd.float())
                return run_f32

            def run(x, w, b):
                y, mean, rstd = forward(x, ns, w, b, eps)
                return (y, mean, rstd) if mean.dtype == sd else (y, mean.to(sd), rstd.to(sd))
            return run
        backward, dt, ss = aten.native_layer_norm_backward.default, getattr(torch, sig.dtype), sig.stats_shape
        want = [bool(sig.mask & bit) for bit in self.grads]
        if half and stats is not None:
            # the bias only sizes its gradient (ATen reads no value of it): one float32 stand-in
            fb = torch.empty(sig.normalized_shape, dtype=torch.float32) if want[2] else None

            def run_mixed_backward(gy, x, stats, w, b):
                mean, rstd = stats
                dx, dw, db = backward(gy, x, ns, dense(mean.float().reshape(ss)), dense(rstd.float().reshape(ss)),
                                      w.float(), None if b is None else fb, want)
                return dx, None if dw is None else dw.to(dt), None if db is None else db.to(dt)
            return run_mixed_backward
        # as eager_backward: statistics in the input's dtype and ATen's layout, as its CPU
        # forward saves them; whether they need it is the key's (it pins their dtype and shape)
        if stats is None or any(t.dtype != dt or tuple(t.shape) != ss for t in stats):
            def run_fixed(gy, x, stats, w, b):
                mean, rstd = stats
                return backward(gy, x, ns, dense(mean.to(dt).reshape(ss)), dense(rstd.to(dt).reshape(ss)), w, b,
                                want)
            return run_fixed

        def run_as_given(gy, x, stats, w, b):
            mean, rstd = stats
            if not (mean.is_contiguous() and rstd.is_contiguous()):  # ATen misreads strided statistics
                mean, rstd = mean.contiguous(), rstd.contiguous()
            return backward(gy, x, ns, mean, rstd, w, b, want)
        return run_as_given

    def eager_call(self, sig, x, w, b, grad_out, compiled):
        """``aten.native_layer_norm`` / ``native_layer_norm_backward`` with the
        output mask (statistics as eager's own forward saves them)."""
        import torch

        aten, ns = torch.ops.aten, list(sig.normalized_shape)
        if sig.is_forward:
            return (lambda x, w, b: aten.native_layer_norm(x, ns, w, b, sig.eps)), (x, w, b)
        _, mean, rstd = aten.native_layer_norm(x, ns, w, b, sig.eps)
        gy = grad_out()
        mask = [bool(sig.mask & bit) for bit in self.grads]
        return (lambda gy, x, mean, rstd, w, b: aten.native_layer_norm_backward(gy, x, ns, mean, rstd, w, b, mask),
                (gy, x, mean, rstd, w, b))


LAYER_NORM = LayerNorm()

# A routed half-precision call with a weight runs ATen's mixed-type CPU kernels
# (float32 weight, bias and statistics): the same forward output bit for bit, and
# float32 statistics where ATen's half kernels round them to half, which fails the
# kernels' validation at a mean offset (forward rstd 19x its bound at 37x768 bf16,
# backward grad_weight 3.4x at 37x64). Faster at a million elements (1024x768 bf16
# / f16: forward 1.07x / 1.08x, backward 1.10x / 1.19x), slower at a few rows (the
# weight's casts: 37x768, forward 0.73x, backward 0.82x). Intel CI machine. Its
# weight and bias gradients still fail (summed over rows in half precision):
# validate.validate_eager tells the build, which then keeps the kernel.


# ------------------------------------------------------ torch implementations
@functools.cache
def _implementations() -> dict[str, Callable]:
    """``aten`` calls the core ATen ops; ``manual`` writes the math out (forms
    from ``norm_math``) and computes only the requested gradients. Half
    precision is computed in float32 (ATen's opmath type), rounded once."""
    import torch

    from .norm_math import col_sum_for, fused_backward, lanes_forward, nan_if_inf, row_dot, split_affine

    def aten(m, *args):
        s = m.sig
        if s.is_forward:
            x, w, b = split_affine(args, s)
            y, mean, rstd = torch.ops.aten.native_layer_norm(x, list(s.normalized_shape), w, b, s.eps)
            return y, nan_if_inf(mean).to(m.stats_dtype), rstd.to(m.stats_dtype)
        gy, x, mean, rstd, *rest = args
        w = rest[0] if rest else None
        if w is None and s.affine:
            # ATen needs a weight to size the weight gradient; its value is unused then.
            w = torch.ones(s.normalized_shape, dtype=m.dtype)
        b = torch.zeros(s.normalized_shape, dtype=m.dtype) if s.bias else None
        mask = [bool(s.mask & INPUT_GRAD), bool(s.mask & WEIGHT_GRAD), bool(s.mask & BIAS_GRAD)]
        # ATen on the CPU wants one dtype for all tensors; float32 statistics
        # must not be rounded to half, so the op runs in float32 (as on GPUs).
        c = m.compute
        dx, dw, db = torch.ops.aten.native_layer_norm_backward(
            gy.to(c), x.to(c), list(s.normalized_shape), mean.to(c), rstd.to(c),
            None if w is None else w.to(c), None if b is None else b.to(c), mask,
        )
        return m.grad_outputs(dx, dw, db)

    def manual(m, *args):
        s = m.sig
        c = m.compute
        if s.is_forward and m.variant == FUSED:
            # a dynamic forward in one dispatch: ``x - mean`` read by the variance and by the
            # output is one value with two consumers, which iree-compile 3.13 gives a dispatch
            # of its own (statistics, then the output) where no single-dispatch pass applies;
            # ``x + (-mean)`` is the same value in an op of its own. A row holding an infinity
            # gets a NaN mean, as from ATen, through its NaN variance: ``nan_if_inf``'s select
            # would split the dispatch again
            x, w, b = split_affine(args, s)
            xc = x.to(c)
            mean = xc.mean(dim=m.norm_dims, keepdim=True)
            var = (xc - mean).pow(2).mean(dim=m.norm_dims, keepdim=True)
            rstd = torch.rsqrt(var + s.eps)
            y = (xc + (-mean)) * rstd
            if w is not None:
                y = y * w.to(c)
            if b is not None:
                y = y + b.to(c)
            return y.to(m.dtype), (mean + (var - var)).to(m.stats_dtype), rstd.to(m.stats_dtype)
        if s.is_forward and m.variant == LANES:
            y, mean, rstd = lanes_forward(m, *split_affine(args, s))
            return y.to(m.dtype), nan_if_inf(mean).to(m.stats_dtype), rstd.to(m.stats_dtype)
        if s.is_forward:
            x, w, b = split_affine(args, s)
            xc = x.to(c)
            mean = xc.mean(dim=m.norm_dims, keepdim=True)
            xm = xc - mean  # two-pass variance: stable under a large mean offset
            var = xm.pow(2).mean(dim=m.norm_dims, keepdim=True)
            rstd = torch.rsqrt(var + s.eps)
            y = xm * rstd
            if w is not None:
                y = y * w.to(c)
            if b is not None:
                y = y + b.to(c)
            return y.to(m.dtype), nan_if_inf(mean).to(m.stats_dtype), rstd.to(m.stats_dtype)
        gy, x, mean, rstd, *rest = args
        w = rest[0] if rest else None
        if m.variant == FUSED:
            return m.grad_outputs(*fused_backward(m, gy, x, mean, rstd, w))
        n, width = float(s.width), s.width
        # 2-D views: rows x normalized elements
        gyc = gy.reshape(-1, width).to(c)
        xm = x.reshape(-1, width).to(c) - mean.reshape(-1, 1).to(c)
        rs = rstd.reshape(-1, 1).to(c)
        wc = w.reshape(-1).to(c) if w is not None else None
        dx = dw = db = None
        if s.mask & INPUT_GRAD:
            g = gyc * wc if wc is not None else gyc
            sum_g = row_dot(gyc, wc)
            sum_gxm = row_dot(gyc * xm, wc)  # sum(g * xhat) / rstd
            dx = ((g - sum_g / n - xm * (sum_gxm * (rs * rs) / n)) * rs).reshape(x.shape)
        col_sum = col_sum_for(s)
        if s.mask & WEIGHT_GRAD:
            dw = col_sum((gyc * rs) * xm).reshape(s.normalized_shape)
        if s.mask & BIAS_GRAD:
            db = col_sum(gyc).reshape(s.normalized_shape)
        return m.grad_outputs(dx, dw, db)

    return {"aten": aten, "manual": manual}
