"""Float64 reference: torch autograd of a plain forward.

Deliberately independent of ``modules`` (no shared math): the reference
differentiates a textbook forward, so a mistake in a hand-written backward
cannot hide in both.
"""

from __future__ import annotations

import torch

from .signature import BIAS_GRAD, INPUT_GRAD, WEIGHT_GRAD, KernelSignature


def _forward64(sig: KernelSignature, x, w, b):
    dims = tuple(range(x.dim() - len(sig.normalized_shape), x.dim()))
    if sig.op == "layer_norm":
        mean = x.mean(dim=dims, keepdim=True)
        var = ((x - mean) ** 2).mean(dim=dims, keepdim=True)
        rstd = 1.0 / torch.sqrt(var + sig.eps)
        y = (x - mean) * rstd
        stats = (mean, rstd)
    else:
        rstd = 1.0 / torch.sqrt((x * x).mean(dim=dims, keepdim=True) + sig.eps)
        y = x * rstd
        stats = (rstd,)
    if w is not None:
        y = y * w
    if b is not None:
        y = y + b
    return y, stats


def statistics(sig: KernelSignature, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """(mean, rstd) or (rstd,) of ``x`` in float64, in ATen's stats layout."""
    _, stats = _forward64(sig, x.to(torch.float64), None, None)
    return stats


def reference(sig: KernelSignature, args: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
    """Expected outputs of the kernel for ``args`` (its calling convention), in float64.

    Backward kernels are given the saved statistics, but the reference
    recomputes them from the input in float64: it checks the whole chain.
    """
    a = [t.to(torch.float64) for t in args]
    if sig.is_forward:
        x, rest = a[0], a[1:]
        w = rest[0] if sig.affine else None
        b = rest[1] if sig.bias else None
        y, stats = _forward64(sig, x, w, b)
        return (y,) + stats
    n_stats = 1 if sig.op == "rms_norm" else 2
    gy, x = a[0], a[1]
    w_given = a[2 + n_stats] if sig.takes_weight else None
    x = x.clone().requires_grad_(True)
    w = b = None
    if sig.affine:
        w = (w_given if w_given is not None
             else torch.ones(sig.normalized_shape, dtype=torch.float64, device=x.device))
        w = w.clone().requires_grad_(True)
    if sig.bias:
        b = torch.zeros(sig.normalized_shape, dtype=torch.float64, device=x.device, requires_grad=True)
    y, _ = _forward64(sig, x, w, b)
    wanted = [(INPUT_GRAD, x), (WEIGHT_GRAD, w), (BIAS_GRAD, b)]
    tensors = [t for bit, t in wanted if sig.mask & bit]
    return tuple(torch.autograd.grad(y, tensors, grad_outputs=gy))
