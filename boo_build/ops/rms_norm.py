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
``fused_rms_norm_backward`` (``loader/entries/rms_norm.py``).

Pure Python at import; torch only inside functions.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Callable

from .base import FUSED, INPUT_GRAD, LANES, WEIGHT_GRAD, Op, stats_as

FLOAT32_EPS = 1.1920928955078125e-07  # torch's eps for rms_norm(eps=None): the opmath type's epsilon


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
    weight_offsets: bool = True
    residuals: bool = True
    residual_commands: tuple[tuple[str, str], ...] = (
        ("addrmsnorm", "float32"), ("addrmsnormfp16", "float16"), ("addrmsnormbfp16", "bfloat16"))

    def implementation(self, impl: str) -> Callable:
        return _implementations()[impl]

    def forward64(self, sig, x, dims):
        import torch

        rstd = 1.0 / torch.sqrt((x * x).mean(dim=dims, keepdim=True) + sig.eps)
        return x * rstd, (rstd,)

    def eager_forward(self, sig, x, w, b=None):
        import torch

        off = sig.weight_offset
        if off and w is not None:  # Gemma's: in float32, scaled by offset + weight, then cast
            y, rstd = torch.ops.aten._fused_rms_norm(x.float(), list(sig.normalized_shape), w.float() + off, sig.eps)
            return y.to(x.dtype), stats_as(torch, rstd, sig)
        y, rstd = torch.ops.aten._fused_rms_norm(x, list(sig.normalized_shape), w, sig.eps)
        return y, stats_as(torch, rstd, sig)

    # the base takes ``*rest``: each op names its own statistics, weight and bias
    def eager_backward(self, ns, mask, gy, x, rstd, w, b=None):  # type: ignore[override]
        want = [bool(mask & bit) for bit in self.grads]
        off = getattr(ns, "weight_offset", 0.0)  # ``with_offset``'s normalized shape
        if off:  # as the forward: in float32, the weight scaling as offset + weight
            if w is None:  # a weight gradient alone: the weight does not enter it
                w = x.new_ones(tuple(ns), dtype=x.dtype)
            outs = _fused_rms_norm_backward(gy.float(), x.float(), list(ns), rstd.float(), w.float() + off, want,
                                            also=RuntimeError, learn=True)
        else:
            outs = _fused_rms_norm_backward(gy, x, list(ns), rstd, w, want, also=RuntimeError, learn=True)
        return tuple(o.to(x.dtype) for o, wanted in zip(outs, want) if wanted)

    def with_offset(self, param, offset: float):
        return OffsetShape(param, offset) if offset else param

    def eager_param(self, sig):
        return self.with_offset(sig.normalized_shape, sig.weight_offset)

    def eager_call(self, sig, x, w, b, grad_out, compiled):
        """forward: ``aten._fused_rms_norm``. backward: torch 2.13 has no CPU
        kernel for ``_fused_rms_norm_backward``; eager's real path is autograd
        through the composite ``F.rms_norm``: its graph is built once and only
        ``torch.autograd.grad(..., retain_graph=True)`` is timed. Compiled, the
        backward op itself (Inductor decomposes it)."""
        import torch

        aten, ns = torch.ops.aten, list(sig.normalized_shape)
        if sig.weight_offset:  # Gemma's form: what the loader's torch route runs (``eager_forward``)
            return self._offset_eager_call(sig, x, w, grad_out, compiled)
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

    def _offset_eager_call(self, sig, x, w, grad_out, compiled):
        """``eager_call`` of a weight offset: the float32 forward on ``offset + weight``
        and its cast (``eager_forward``); its backward as without one (autograd
        through the forward; compiled, the backward op, in float32)."""
        import torch

        aten, ns, off, dt = torch.ops.aten, list(sig.normalized_shape), sig.weight_offset, x.dtype

        def forward(x, w):
            y, rstd = aten._fused_rms_norm(x.float(), ns, w.float() + off, sig.eps)
            return y.to(dt), rstd
        if sig.is_forward:
            return forward, (x, w)
        gy = grad_out()
        if compiled:
            _, rstd = forward(x, w)
            mask = [bool(sig.mask & bit) for bit in self.grads]

            def backward(gy, x, rstd, w):
                outs = aten._fused_rms_norm_backward(gy.float(), x.float(), ns, rstd, w.float() + off, mask)
                return tuple(o.to(dt) for o, wanted in zip(outs, mask) if wanted)
            return backward, (gy, x, rstd, w)
        xr = x.clone().requires_grad_(bool(sig.mask & INPUT_GRAD))
        wr = w.clone().requires_grad_(bool(sig.mask & WEIGHT_GRAD))
        y = forward(xr, wr)[0]
        wanted = [t for bit, t in ((INPUT_GRAD, xr), (WEIGHT_GRAD, wr)) if sig.mask & bit]
        return (lambda: torch.autograd.grad(y, wanted, gy, retain_graph=True)), ()

    def eager_needs_autograd(self, sig, compiled: bool) -> bool:
        return not compiled and not sig.is_forward

    def decompositions(self) -> tuple:
        import torch

        return (torch.ops.aten._fused_rms_norm.default, torch.ops.aten._fused_rms_norm_backward.default)


RMS_NORM = RMSNorm()


class OffsetShape(tuple):
    """A normalized shape that also carries the weight offset (``RMSNorm.with_offset``):
    ``eager_backward``'s first argument, which every op's loader paths hand on as given."""

    weight_offset: float

    def __new__(cls, shape, offset: float):
        self = super().__new__(cls, shape)
        self.weight_offset = float(offset)
        return self


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


# ------------------------------------------------------ torch implementations
@functools.cache
def _implementations() -> dict[str, Callable]:
    """As layer norm's (``layer_norm._implementations``)."""
    import torch

    from .norm_math import col_sum_for, fused_backward, lanes_forward, offset, row_dot, split_affine

    def aten(m, *args):
        s = m.sig
        if s.is_forward:
            x, w, _ = split_affine(args, s)
            if s.weight_offset:  # Gemma's: ATen's op in float32 on offset + weight, then cast
                x, w = x.to(m.compute), offset(s, w.to(m.compute))
            y, rstd = torch.ops.aten._fused_rms_norm(x, list(s.normalized_shape), w, s.eps)
            return (y.to(m.dtype) if s.weight_offset else y), rstd.to(m.stats_dtype)
        gy, x, rstd, *rest = args
        w = rest[0] if rest else None
        if w is None and s.affine:
            w = torch.ones(s.normalized_shape, dtype=m.dtype)
        if s.weight_offset:  # as the forward
            gy, x, rstd, w = gy.to(m.compute), x.to(m.compute), rstd.to(m.compute), offset(s, w.to(m.compute))
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
                y = y * offset(s, w.to(c))
            return y.to(m.dtype), rstd.to(m.stats_dtype)
        gy, x, rstd, *rest = args
        w = rest[0] if rest else None
        if m.variant == FUSED:
            return m.grad_outputs(*fused_backward(m, gy, x, None, rstd, w))
        n, width = float(s.width), s.width
        gyc = gy.reshape(-1, width).to(c)
        xc = x.reshape(-1, width).to(c)
        rs = rstd.reshape(-1, 1).to(c)
        wc = offset(s, w.reshape(-1).to(c)) if w is not None else None
        dx = dw = None
        if s.mask & INPUT_GRAD:
            g = gyc * wc if wc is not None else gyc
            sum_gx = row_dot(gyc * xc, wc)  # sum(g * xhat) / rstd
            dx = ((g - xc * (sum_gx * (rs * rs) / n)) * rs).reshape(x.shape)
        if s.mask & WEIGHT_GRAD:
            dw = col_sum_for(s)((gyc * rs) * xc).reshape(s.normalized_shape)
        return m.grad_outputs(dx, dw, None)

    return {"aten": aten, "manual": manual}
