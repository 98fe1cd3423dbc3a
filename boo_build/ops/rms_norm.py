"""RMS norm: ``aten._fused_rms_norm`` and ``_fused_rms_norm_backward``.

Masks: 1 forward; 2 input, 4 weight gradient, and 6 both (ATen's
``output_mask`` order: input, weight). No bias: affine means a weight.
Statistics: rstd only.

* forward (mask 1): (x, [weight]) -> (y, rstd)
* backward: (grad_y, x, rstd, [weight if affine and mask & 2])
  -> the requested gradients in the order input, weight

MIOpen-style commands (this project's) ``rmsnorm``, ``rmsnormfp16``,
``rmsnormbfp16``; ``-m 1`` means a weight. ``eps=None`` is torch's default,
float32's epsilon. Loader entry points: ``Bundle.fused_rms_norm`` and
``fused_rms_norm_backward``, differentiable (in ``out`` and ``rstd``, as
ATen's) through the custom ops ``boo::rms_norm`` / ``boo::rms_norm_backward``.

Pure Python at import; torch only inside functions.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Callable

from . import loader_calls
from .base import FUSED, INPUT_GRAD, LANES, WEIGHT_GRAD, Op, stats_as

FLOAT32_EPS = 1.1920928955078125e-07  # torch's eps for rms_norm(eps=None): the opmath type's epsilon


def rms_default_eps() -> float:
    """torch's eps for rms_norm(eps=None): the epsilon of the opmath type, float32."""
    return FLOAT32_EPS


@dataclass(frozen=True)
class RMSNorm(Op):
    name: str = "rms_norm"
    fused_backward: bool = True
    masks: tuple[int, ...] = (1, 2, 4, 6)
    grads: tuple[int, ...] = (INPUT_GRAD, WEIGHT_GRAD)
    stats: tuple[str, ...] = ("rstd",)
    has_bias: bool = False
    commands: tuple[tuple[str, str], ...] = (
        ("rmsnorm", "float32"), ("rmsnormfp16", "float16"), ("rmsnormbfp16", "bfloat16"))
    none_eps: float = FLOAT32_EPS
    autocast_aten: str = "aten::rms_norm"

    def implementation(self, impl: str) -> Callable:
        return _implementations()[impl]

    def forward64(self, sig, x, dims):
        import torch

        rstd = 1.0 / torch.sqrt((x * x).mean(dim=dims, keepdim=True) + sig.eps)
        return x * rstd, (rstd,)

    def eager_forward(self, sig, x, w, b=None):
        import torch

        y, rstd = torch.ops.aten._fused_rms_norm(x, list(sig.normalized_shape), w, sig.eps)
        return y, stats_as(torch, rstd, sig)

    # the base takes ``*rest``: each op names its own statistics, weight and bias
    def eager_backward(self, ns, mask, gy, x, rstd, w, b=None):  # type: ignore[override]
        want = [bool(mask & bit) for bit in self.grads]
        outs = _fused_rms_norm_backward(gy, x, list(ns), rstd, w, want, also=RuntimeError, learn=True)
        return tuple(o.to(x.dtype) for o, wanted in zip(outs, want) if wanted)

    def eager_call(self, sig, x, w, b, grad_out, compiled):
        """forward: ``aten._fused_rms_norm``. backward: torch 2.13 has no CPU
        kernel for ``_fused_rms_norm_backward``; eager's real path is autograd
        through the composite ``F.rms_norm``: its graph is built once and only
        ``torch.autograd.grad(..., retain_graph=True)`` is timed. Compiled, the
        backward op itself (Inductor decomposes it)."""
        import torch

        aten, ns = torch.ops.aten, list(sig.normalized_shape)
        if sig.is_forward:
            return (lambda x, w: aten._fused_rms_norm(x, ns, w, sig.eps)), (x, w)
        if compiled:
            _, rstd = aten._fused_rms_norm(x, ns, w, sig.eps)
            gy = grad_out()
            mask = [bool(sig.mask & bit) for bit in self.grads]
            return (lambda gy, x, rstd, w: aten._fused_rms_norm_backward(gy, x, ns, rstd, w, mask)), (gy, x, rstd, w)
        xr = x.clone().requires_grad_(bool(sig.mask & INPUT_GRAD))
        wr = w.clone().requires_grad_(bool(sig.mask & WEIGHT_GRAD)) if w is not None else None
        y = torch.nn.functional.rms_norm(xr, ns, wr, sig.eps)
        gy = grad_out()
        wanted = [t for bit, t in ((INPUT_GRAD, xr), (WEIGHT_GRAD, wr)) if sig.mask & bit]
        return (lambda: torch.autograd.grad(y, wanted, gy, retain_graph=True)), ()

    def eager_needs_autograd(self, sig, compiled: bool) -> bool:
        return not compiled and not sig.is_forward

    def decompositions(self) -> tuple:
        import torch

        return (torch.ops.aten._fused_rms_norm.default, torch.ops.aten._fused_rms_norm_backward.default)

    def entry_points(self):
        return {"fused_rms_norm": fused_rms_norm, "fused_rms_norm_backward": fused_rms_norm_backward}

    def torch_library(self, by_token):
        _library(by_token)


RMS_NORM = RMSNorm()


# Device types where ATen has no ``_fused_rms_norm_backward`` kernel (torch 2.13: the
# CPU), learnt from the first call's NotImplementedError: a cache, so that later calls
# go straight to the decomposition instead of raising and catching on every call.
_NO_ATEN_KERNEL: set[str] = set()


@functools.cache
def _backward_ops() -> tuple:
    """(ATen's ``_fused_rms_norm_backward``, torch's decomposition of it), looked up once."""
    import torch
    from torch._decomp import decomposition_table

    op = torch.ops.aten._fused_rms_norm_backward.default
    return op, decomposition_table[op]


def _fused_rms_norm_backward(*args, also=(), learn: bool = False):
    """ATen's op, else torch's decomposition of it. ``learn``: an eager call (never one
    export traces: its graph must not depend on what ran before in the process) that
    may use and fill ``_NO_ATEN_KERNEL``."""
    op, decomposed = _backward_ops()
    device = args[1].device.type
    if learn and device in _NO_ATEN_KERNEL:
        return decomposed(*args)
    try:
        return op(*args)
    except NotImplementedError:
        # torch 2.13 has no CPU kernel for it: run torch's own decomposition
        # (the same one applied at export) so the module also runs eagerly.
        if learn:
            _NO_ATEN_KERNEL.add(device)
        return decomposed(*args)
    except also or ():
        return decomposed(*args)


# ------------------------------------------------------- loader entry points
def fused_rms_norm(bundle, input, normalized_shape, weight=None, eps: float | None = None):
    """ATen's _fused_rms_norm -> (out, rstd); eps None is float32's epsilon, as in torch.
    Differentiable in ``out`` and ``rstd``, as ATen's."""
    eps = RMS_NORM.none_eps if eps is None else eps
    out = loader_calls.forward(bundle, RMS_NORM, input, normalized_shape, weight, None, eps, autograd=True)
    if out is not loader_calls.AUTOGRAD:
        return out
    torch = _library(bundle.by_token)
    return torch.ops.boo.rms_norm(input, loader_calls.norm_shape(normalized_shape), weight, float(eps),
                                  bundle.token())


def fused_rms_norm_backward(bundle, grad_out, input, normalized_shape, rstd, weight=None,
                            output_mask=(True, True), *, eps: float | None = None):
    """ATen's _fused_rms_norm_backward -> (grad_input, grad_weight), None where not asked.
    ``eps`` as in ``native_layer_norm_backward``."""
    out = loader_calls.backward(bundle, RMS_NORM, output_mask, grad_out, input, normalized_shape, (rstd,), weight, None, eps,
                         autograd=True)
    if out is not loader_calls.AUTOGRAD:
        return out
    torch = _library(bundle.by_token)
    from . import autograd as ag

    m = [bool(v) for v in output_mask]
    return ag.spread(ag.asked(m, weight), torch.ops.boo.rms_norm_backward(
        grad_out, input, loader_calls.norm_shape(normalized_shape), rstd, weight, m,
        None if eps is None else float(eps), bundle.token()))


# ------------------------------------------------------ torch implementations
@functools.cache
def _implementations() -> dict[str, Callable]:
    """As layer norm's (``layer_norm._implementations``)."""
    import torch

    from .norm_math import col_sum_for, fused_backward, lanes_forward, row_dot, split_affine

    def aten(m, *args):
        s = m.sig
        if s.is_forward:
            x, w, _ = split_affine(args, s)
            y, rstd = torch.ops.aten._fused_rms_norm(x, list(s.normalized_shape), w, s.eps)
            return y, rstd.to(m.stats_dtype)
        gy, x, rstd, *rest = args
        w = rest[0] if rest else None
        if w is None and s.affine:
            w = torch.ones(s.normalized_shape, dtype=m.dtype)
        mask = [bool(s.mask & INPUT_GRAD), bool(s.mask & WEIGHT_GRAD)]
        dx, dw = _fused_rms_norm_backward(gy, x, list(s.normalized_shape), rstd, w, mask)
        return m.grad_outputs(dx, dw, None)

    def manual(m, *args):
        s = m.sig
        c = m.compute
        if s.is_forward and m.variant == LANES:
            x, w, _ = split_affine(args, s)
            y, _, rstd = lanes_forward(m, x, w, None, bias_free=True)
            return y.to(m.dtype), rstd.to(m.stats_dtype)
        if s.is_forward:
            x, w, _ = split_affine(args, s)
            xc = x.to(c)
            rstd = torch.rsqrt(xc.pow(2).mean(dim=m.norm_dims, keepdim=True) + s.eps)
            y = xc * rstd
            if w is not None:
                y = y * w.to(c)
            return y.to(m.dtype), rstd.to(m.stats_dtype)
        gy, x, rstd, *rest = args
        w = rest[0] if rest else None
        if m.variant == FUSED:
            return m.grad_outputs(*fused_backward(m, gy, x, None, rstd, w))
        n, width = float(s.width), s.width
        gyc = gy.reshape(-1, width).to(c)
        xc = x.reshape(-1, width).to(c)
        rs = rstd.reshape(-1, 1).to(c)
        wc = w.reshape(-1).to(c) if w is not None else None
        dx = dw = None
        if s.mask & INPUT_GRAD:
            g = gyc * wc if wc is not None else gyc
            sum_gx = row_dot(gyc * xc, wc)  # sum(g * xhat) / rstd
            dx = ((g - xc * (sum_gx * (rs * rs) / n)) * rs).reshape(x.shape)
        if s.mask & WEIGHT_GRAD:
            dw = col_sum_for(s)((gyc * rs) * xc).reshape(s.normalized_shape)
        return m.grad_outputs(dx, dw, None)

    return {"aten": aten, "manual": manual}


# ------------------------------------------------- torch custom ops (autograd)
@functools.cache
def _library(by_token):
    """Register ``boo::rms_norm`` and ``boo::rms_norm_backward`` (once) -> torch
    (as ``layer_norm._library``). rstd is differentiable: its gradient reaches
    the input as ``-grad_rstd * rstd**3 * x / N`` (torch ops; the kernels take
    grad_out only)."""
    import torch

    from . import autograd as ag

    op = RMS_NORM

    @torch.library.custom_op("boo::rms_norm", mutates_args=(), schema=(
        "(Tensor input, SymInt[] normalized_shape, Tensor? weight, float? eps, str bundle) -> (Tensor, Tensor)"))
    def rms_norm(input, normalized_shape, weight, eps, bundle):
        out, rstd = fused_rms_norm(by_token(bundle), input, normalized_shape, weight, eps)
        return out, ag.stats_like(op, input, rstd)

    @rms_norm.register_fake
    def _(input, normalized_shape, weight, eps, bundle):
        return ag.empty(input), input.new_empty(ag.stats_shape(input, normalized_shape),
                                                dtype=ag.stats_dtype(op, input.dtype))

    def setup(ctx, inputs, output):
        x, normalized_shape, weight, eps, bundle = inputs
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(x, weight, output[1])
        ctx.normalized_shape, ctx.bundle = normalized_shape, bundle
        ctx.eps = op.none_eps if eps is None else eps

    def backward(ctx, grad_out, grad_rstd):
        x, weight, rstd = ctx.saved_tensors
        need = ctx.needs_input_grad
        gx = gw = None
        if grad_out is not None and (need[0] or need[2]):
            mask = [need[0], need[2]]
            gx, gw = ag.spread(ag.asked(mask, weight), torch.ops.boo.rms_norm_backward(
                grad_out, x, ctx.normalized_shape, rstd, weight, mask, ctx.eps, ctx.bundle))
        if grad_rstd is not None and need[0]:
            # rstd = (mean(x**2) + eps) ** -1/2, so d rstd / dx = -rstd**3 * x / N (float32, ATen's opmath)
            n = max(1, math.prod(ctx.normalized_shape))
            g = grad_rstd.float() * rstd.float().pow(3) * x.float() / -n
            gx = (g if gx is None else gx.float() + g).to(x.dtype)
        return gx, None, gw, None, None

    rms_norm.register_autograd(backward, setup_context=setup)

    @torch.library.custom_op("boo::rms_norm_backward", mutates_args=(), schema=(
        "(Tensor grad_out, Tensor input, SymInt[] normalized_shape, Tensor rstd, Tensor? weight,"
        " bool[] output_mask, float? eps, str bundle) -> Tensor[]"))
    def rms_norm_backward(grad_out, input, normalized_shape, rstd, weight, output_mask, eps, bundle):
        grads = fused_rms_norm_backward(by_token(bundle), grad_out, input, normalized_shape, rstd, weight,
                                        output_mask, eps=eps)
        return [g for g in grads if g is not None]

    @rms_norm_backward.register_fake
    def _(grad_out, input, normalized_shape, rstd, weight, output_mask, eps, bundle):
        return [ag.empty(t) for t, a in zip((input, weight), ag.asked(output_mask, weight)) if a]

    def backward_setup(ctx, inputs, output):
        grad_out, x, normalized_shape, rstd, weight, output_mask, _, _ = inputs
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(grad_out, x, rstd, weight)
        ctx.normalized_shape = loader_calls.norm_shape(normalized_shape)
        ctx.mask = sum(bit for bit, a in zip(op.grads, ag.asked(output_mask, weight)) if a)

    def backward_backward(ctx, grads):
        ns, mask = ctx.normalized_shape, ctx.mask

        def eager(gy, x, rstd, w):
            st = loader_calls.stats_shape(tuple(x.shape), ns)
            return op.eager_backward(ns, mask, gy, x, rstd.reshape(st), w)

        g = ag.second_order(ctx, eager, grads, (0, 1, 3, 4))
        return g[0], g[1], None, g[2], g[3], None, None, None

    rms_norm_backward.register_autograd(backward_backward, setup_context=backward_setup)
    ag.register_autocast(rms_norm, op.autocast_aten)
    return torch
