"""Drop-in ``torch.nn.LayerNorm`` / ``torch.nn.RMSNorm`` running a bundle's kernels.

Same constructor arguments as torch's modules (they are subclasses, so
``state_dict``, ``reset_parameters`` and ``isinstance`` checks carry over),
plus ``bundle``: a ``Bundle``, a bundle path, or None for the default bundle
(``set_default_bundle``, else the ``BOO_BUNDLE`` environment variable).

The forward runs the bundle's forward kernel and saves mean/rstd; the backward
runs ONE combined backward kernel for exactly the gradients autograd needs
(``ctx.needs_input_grad``): only the input gradient when the weights are
frozen, only the weight (and bias) gradients when the input needs none.
A kernel missing from the bundle raises ``KernelNotFound`` unless the bundle
was opened with ``fallback="eager"``.
"""

from __future__ import annotations

import os
import threading
from typing import Any

import torch

from .bundle import Bundle, open_bundle, rms_default_eps

BUNDLE_ENV = "BOO_BUNDLE"

_default: Bundle | None = None
_default_lock = threading.Lock()


def set_default_bundle(bundle: Bundle | str | os.PathLike | None) -> Bundle | None:
    """Bundle used by modules built without ``bundle=``; a path is opened (best device)."""
    global _default
    with _default_lock:
        _default = bundle if bundle is None or isinstance(bundle, Bundle) else open_bundle(bundle)
        return _default


def default_bundle() -> Bundle:
    global _default
    with _default_lock:
        if _default is None:
            path = os.environ.get(BUNDLE_ENV)
            if not path:
                raise RuntimeError(
                    "no bundle: pass bundle= to the module, call boo_build.loader.set_default_bundle(...), "
                    f"or set {BUNDLE_ENV} to a bundle path")
            _default = open_bundle(path)
        return _default


def _resolve(bundle: Any) -> Bundle | None:
    if bundle is None or isinstance(bundle, Bundle):
        return bundle
    return open_bundle(bundle)


class _LayerNormFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, bundle: Bundle, normalized_shape, eps):
        y, mean, rstd = bundle.native_layer_norm(x, normalized_shape, weight, bias, eps)
        ctx.bundle, ctx.normalized_shape, ctx.eps = bundle, normalized_shape, eps
        ctx.has_weight, ctx.has_bias = weight is not None, bias is not None
        ctx.save_for_backward(x, weight, bias, mean, rstd)
        return y

    @staticmethod
    def backward(ctx, grad_y):
        x, weight, bias, mean, rstd = ctx.saved_tensors
        need = ctx.needs_input_grad
        mask = (need[0], need[1] and ctx.has_weight, need[2] and ctx.has_bias)
        gx = gw = gb = None
        if any(mask):
            gx, gw, gb = ctx.bundle.native_layer_norm_backward(
                grad_y, x, ctx.normalized_shape, mean, rstd, weight, bias, mask, eps=ctx.eps)
        return gx, gw, gb, None, None, None


class _RMSNormFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bundle: Bundle, normalized_shape, eps):
        y, rstd = bundle.fused_rms_norm(x, normalized_shape, weight, eps)
        ctx.bundle, ctx.normalized_shape, ctx.eps = bundle, normalized_shape, eps
        ctx.has_weight = weight is not None
        ctx.save_for_backward(x, weight, rstd)
        return y

    @staticmethod
    def backward(ctx, grad_y):
        x, weight, rstd = ctx.saved_tensors
        need = ctx.needs_input_grad
        mask = (need[0], need[1] and ctx.has_weight)
        gx = gw = None
        if any(mask):
            gx, gw = ctx.bundle.fused_rms_norm_backward(
                grad_y, x, ctx.normalized_shape, rstd, weight, mask, eps=ctx.eps)
        return gx, gw, None, None, None


class LayerNorm(torch.nn.LayerNorm):
    """``torch.nn.LayerNorm`` whose forward and backward run bundle kernels."""

    def __init__(self, normalized_shape, eps: float = 1e-5, elementwise_affine: bool = True, bias: bool = True,
                 device=None, dtype=None, *, bundle: Bundle | str | os.PathLike | None = None):
        super().__init__(normalized_shape, eps=eps, elementwise_affine=elementwise_affine, bias=bias,
                         device=device, dtype=dtype)
        self.bundle = _resolve(bundle)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        bundle = self.bundle if self.bundle is not None else default_bundle()
        return _LayerNormFn.apply(input, self.weight, self.bias, bundle, tuple(self.normalized_shape), self.eps)

    def extra_repr(self) -> str:
        b = self.bundle
        return super().extra_repr() + (f", bundle={b.name}-{b.version}" if b is not None else ", bundle=default")


class RMSNorm(torch.nn.RMSNorm):
    """``torch.nn.RMSNorm`` whose forward and backward run bundle kernels."""

    def __init__(self, normalized_shape, eps: float | None = None, elementwise_affine: bool = True,
                 device=None, dtype=None, *, bundle: Bundle | str | os.PathLike | None = None):
        super().__init__(normalized_shape, eps=eps, elementwise_affine=elementwise_affine,
                         device=device, dtype=dtype)
        self.bundle = _resolve(bundle)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        bundle = self.bundle if self.bundle is not None else default_bundle()
        eps = rms_default_eps() if self.eps is None else self.eps
        return _RMSNormFn.apply(x, self.weight, bundle, tuple(self.normalized_shape), eps)

    def extra_repr(self) -> str:
        b = self.bundle
        return super().extra_repr() + (f", bundle={b.name}-{b.version}" if b is not None else ", bundle=default")


__all__ = ["LayerNorm", "RMSNorm", "set_default_bundle", "default_bundle", "BUNDLE_ENV"]
